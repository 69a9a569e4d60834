"""The op table and the functional API: ``ops.<type>(...)`` records op ``<type>`` on the tape.

Every registered op is exported here under its type name (``ops.relu``, ``ops.matmul``,
``ops.elementwise_add``, the seed's ``ops.mul``); ``ops.aliases`` adds the short names users
expect (``ops.add``, ``ops.multiply``, ...). Positional arguments fill input slots in order and
keyword arguments are attributes::

    >>> import numpy as np, tape, ops
    >>> x = tape.Variable(np.array([[1.0, -2.0]], np.float32))
    >>> ops.relu(x).numpy()
    array([[1., 0.]], dtype=float32)
    >>> ops.reduce_sum(x, axis=1, keepdim=True).numpy()
    array([[-1.]], dtype=float32)
"""

import tape  # noqa: F401, I001  (the engine loads first, whichever package is imported first)
from ops import registry
from ops.registry import REGISTRY, OpDef, lookup, register
from ops import elementwise, unary, special, activation, compare, reduce, matmul  # noqa: F401
from ops import shape, select, nn, loss, fill, random  # noqa: F401
from ops import conv, pool, pool_grad, norm, embedding, optimizer, io, rnn, gru  # noqa: F401
from ops import stats, along, order, scan, scan_grad, truth, pnorm  # noqa: F401
from ops import arithmetic, trig, exp_log, rounding, logical, nonfinite  # noqa: F401
from ops import activation_smooth, activation_hard  # noqa: F401
from ops import conv_transpose, pool_index, interpolate, pool_adaptive  # noqa: F401
from ops import nll, loss_more, distance  # noqa: F401
from ops import movement, padding, triangular, contraction, along_axis, scattering  # noqa: F401
from ops import linalg, determinant, decompositions  # noqa: F401
from ops import advanced_indexing, masking, creation  # noqa: F401
from ops import collective  # noqa: F401
from ops import fused  # noqa: F401  (fused_elementwise: the fusion pass's kernels)
from ops import batched_call  # noqa: F401  (batched_call: autobatched groups in plans)
from ops import call  # noqa: F401  (call: tape.traced functions)
from ops import regions  # noqa: F401  (call_region: a lazy step's traced calls as one op)
from tape import operators as _operators
from tape import tape as _engine

registry._dispatch = _engine.dispatch
_operators.install()
globals().update(REGISTRY)
from ops.aliases import *  # noqa: E402,F401,F403
from ops.attention import scaled_dot_product_attention  # noqa: E402,F401
from ops.decompositions import matrix_power  # noqa: E402,F401  (a function of matmul, inverse)
from ops.factories import *  # noqa: E402,F401,F403  (PyTorch's signatures over the creation ops)
from ops.masking import *  # noqa: E402,F401,F403
from ops.rearrange import *  # noqa: E402,F401,F403

_FUNCTIONS = factories.__all__ + masking.__all__ + rearrange.__all__  # noqa: F405
_FUNCTIONS += ["scaled_dot_product_attention", "matrix_power"]
__all__ = sorted(set(REGISTRY) | set(_FUNCTIONS)) + ["REGISTRY", "OpDef", "lookup", "register"]
