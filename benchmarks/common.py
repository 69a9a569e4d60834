"""Shared pieces of the workloads: unavailable implementations, peer imports, array conversion.

A workload's implementation is a setup function ``setup(config, data) -> step``; ``step()`` runs
one iteration and returns ``(loss, arrays)`` -- the gradients (or, for a training step, the
updated parameters) in the order and layout of ``data["params"]``, as native objects that
``to_numpy`` converts only when a check asks for them (the timed loop never converts).
"""

from __future__ import annotations

import numpy as np


class Unavailable(Exception):
    """An implementation that cannot run here: a peer is not installed, an op not written yet."""


def fluidtape(op_names=(), layer_names=()):
    """fluidtape's (tape, ops, layers, optim), or Unavailable naming the missing ops/layers."""
    import tape  # noqa: I001  (the engine loads first; it wires the op table in)
    import layers
    import ops
    import optim

    missing = [f"ops.{name}" for name in op_names if name not in ops.REGISTRY]
    missing += [f"layers.{name}" for name in layer_names if not hasattr(layers, name)]
    if missing:
        raise Unavailable(f"fluidtape lacks {', '.join(missing)}")
    return tape, ops, layers, optim


def torch():
    """The torch module, or Unavailable."""
    try:
        import torch as module
    except ImportError:
        raise Unavailable("torch is not installed (pip install torch==2.13.0)") from None
    return module


def autograd():
    """HIPS autograd's (autograd, autograd.numpy), or Unavailable."""
    try:
        import autograd as module
        import autograd.numpy as anp
    except ImportError:
        raise Unavailable("autograd is not installed (pip install autograd)") from None
    return module, anp


class Transposed:
    """Marks a result held in the transposed layout, converted back only when checked."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def to_numpy(value):
    """A numpy copy of a fluidtape Variable, torch tensor, numpy array or scalar."""
    if isinstance(value, Transposed):
        return to_numpy(value.value).T.copy()
    if type(value).__module__.startswith("torch"):
        return value.detach().cpu().numpy().copy()
    if hasattr(value, "numpy"):  # a fluidtape Variable
        return np.array(value.numpy(), copy=True)
    return np.array(value, copy=True)


def copies(arrays):
    """Fresh copies of the shared initial arrays (implementations update parameters in place)."""
    return [np.array(a, copy=True) for a in arrays]


def uniform(rng, shape, fan_in):
    """float32 U(-1/sqrt(fan_in), 1/sqrt(fan_in)), PyTorch's default for Linear and LSTM."""
    bound = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, shape).astype(np.float32)
