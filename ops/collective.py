"""Collective and point-to-point ops (``c_allreduce_sum``, ``c_broadcast``, ``c_allgather``,
``send``, ``recv``): communication as ordinary registered ops.

Each names its process group by ``ring_id`` (``ops.communicator``: 0 is the world) and is flagged
``side_effect``: the dependency pass keeps all of them in program order, so every rank issues
its collectives in the same order whichever thread runs them, and lazy runs never prune one away
(a rank that skipped a collective would leave the others waiting). The kernels call MPI on host
arrays; GPU arrays go through ``Communicator``'s CUDA-aware or host-staged path. The gradients
follow the SPMD reading (every rank runs the same program and the total loss is the sum of the
ranks' losses): the gradient of an all-reduce is an all-reduce, that of an all-gather the
all-reduced gradient's own rows, that of a broadcast the all-reduced gradient at the root.

    >>> import numpy as np, tape, ops
    >>> x = tape.Variable(np.array([1.0, 2.0], np.float32))
    >>> (total,) = ops.c_allreduce_sum([x])  # one process: the sum over the group is x itself
    >>> total.numpy()
    array([1., 2.], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from ops import communicator
from ops.registry import Attr, register
from tape.errors import DTypeError, ShapeError
from tape.tape import apply

_RING = {"ring_id": Attr("int", 0, check=lambda v: v >= 0, rule=">= 0")}
_COMM = dict(side_effect=True)


def _numeric(x, slot="X"):
    if x.dtype.kind not in "biuf":
        raise DTypeError(None, f"input {slot} must be numeric", actual=str(x.dtype))


# ---- all-reduce ---------------------------------------------------------------------------------


def _infer_allreduce(attrs, xs):
    for x in xs:
        _numeric(x)
    return ([(x.shape, x.dtype) for x in xs],)


@register(
    "c_allreduce_sum",
    inputs=("X*",),
    outputs=("Out*",),
    attrs=_RING,
    infer=_infer_allreduce,
    no_need_buffer=("X",),
    returns=lambda results: results[0],
    **_COMM,
)
def c_allreduce_sum(xp, attrs, xs):
    """Out[i] = sum over the ranks of X[i]; the arrays of one dtype travel as one message (a
    gradient bucket). dX[i] = c_allreduce_sum(dOut[i]) (every rank's loss reads every Out)."""
    ring = communicator.get(attrs["ring_id"])
    return (ring.allreduce_sum(xp, xs),)


@c_allreduce_sum.gradient
def _(g):
    gouts = [
        gout if gout is not None else _zeros(out)
        for gout, out in zip(g.gouts[0], g.outputs[0], strict=True)
    ]
    return (apply(c_allreduce_sum, (gouts,), g.attrs),)


def _zeros(like):
    from ops.fill import fill_zeros_like

    return apply(fill_zeros_like, (like,), {})


# ---- broadcast ----------------------------------------------------------------------------------


def _infer_broadcast(attrs, x):
    _numeric(x)
    return x.shape, x.dtype


@register(
    "c_broadcast",
    inputs=("X",),
    attrs={**_RING, "root": Attr("int", 0, check=lambda v: v >= 0, rule=">= 0")},
    infer=_infer_broadcast,
    no_need_buffer=("X",),
    **_COMM,
)
def c_broadcast(xp, attrs, x):
    """Out = X of rank ``root`` on every rank (initial parameters). dX = the sum over the ranks
    of dOut on the root, zeros elsewhere (only the root's X reaches any Out)."""
    ring = communicator.get(attrs["ring_id"])
    return ring.broadcast(xp, x, attrs["root"])


@c_broadcast.gradient
def _(g):
    from ops.unary import scale

    (total,) = apply(c_allreduce_sum, ([g.gouts[0]],), {"ring_id": g.attrs["ring_id"]})
    if communicator.get(g.attrs["ring_id"]).rank == g.attrs["root"]:
        return (total,)
    return (apply(scale, (total,), scale.check_attrs({"scale": 0.0})),)


# ---- all-gather ---------------------------------------------------------------------------------


def _infer_allgather(attrs, x):
    _numeric(x)
    if x.ndim == 0:
        raise ShapeError(None, "input X must have an axis to gather along", actual="a 0-d input")
    size = communicator.get(attrs["ring_id"]).size
    if attrs["nranks"] not in (0, size):
        raise communicator.DistributedError(
            None,
            "attribute 'nranks' differs from the ring's size",
            expected=str(size),
            actual=str(attrs["nranks"]),
        )
    return (size * x.shape[0],) + tuple(x.shape[1:]), x.dtype


@register(
    "c_allgather",
    inputs=("X",),
    attrs={**_RING, "nranks": Attr("int", 0, check=lambda v: v >= 0, rule=">= 0")},
    infer=_infer_allgather,
    no_need_buffer=("X",),
    **_COMM,
)
def c_allgather(xp, attrs, x):
    """Out = concat(X of rank 0, X of rank 1, ...) along axis 0 (``nranks``: the group's size, 0
    meaning the ring's). dX = rows [rank * n, (rank + 1) * n) of c_allreduce_sum(dOut)."""
    return communicator.get(attrs["ring_id"]).allgather(xp, x)


@c_allgather.gradient
def _(g):
    from ops.select import slice as slice_op

    ring_id = g.attrs["ring_id"]
    (total,) = apply(c_allreduce_sum, ([g.gout_or_zeros(0)],), {"ring_id": ring_id})
    rows = g.inputs[0].shape[0]
    start = communicator.get(ring_id).rank * rows
    cut = {"axes": (0,), "starts": (start,), "ends": (start + rows,)}
    return (apply(slice_op, (total,), slice_op.check_attrs(cut)),)


# ---- point to point (the pserver split) ---------------------------------------------------------

_PEER = {
    **_RING,
    "peer": Attr("int", required=True, check=lambda v: v >= 0, rule=">= 0"),
    "tag": Attr("int", 0, check=lambda v: v >= 0, rule=">= 0"),
}


def _infer_send(attrs, x):
    _numeric(x)
    return ()


@register(
    "send", inputs=("X",), outputs=(), attrs=_PEER, infer=_infer_send, differentiable=False, **_COMM
)
def send(xp, attrs, x):
    """Sends X to rank ``peer`` (message ``tag``); returns once MPI holds the data. Messages
    between two ranks with one tag arrive in the order sent. No outputs, no gradient."""
    ring = communicator.get(attrs["ring_id"])
    ring.send(xp, x, attrs["peer"], attrs["tag"])
    return ()


def _infer_recv(attrs):
    return tuple(attrs["shape"]), np.dtype(attrs["dtype"])


@register(
    "recv",
    attrs={
        **_PEER,
        "shape": Attr("ints", required=True, check=lambda v: min(v, default=0) >= 0, rule=">= 0"),
        "dtype": Attr("dtype", "float32"),
    },
    infer=_infer_recv,
    differentiable=False,
    **_COMM,
)
def recv(xp, attrs):
    """Out = the next array of ``shape`` and ``dtype`` that rank ``peer`` sends with ``tag``.
    No gradient."""
    ring = communicator.get(attrs["ring_id"])
    return ring.recv(xp, attrs["shape"], np.dtype(attrs["dtype"]), attrs["peer"], attrs["tag"])
