"""Eager data parallel: PyTorch's DistributedDataParallel over the collective ops.

``DistributedDataParallel(model)`` broadcasts rank 0's parameters (and buffers) to every rank,
then, whenever the wrapped model runs, asks the tape to report each parameter's gradient as soon
as backward has made it final (``Tape.on_grad_ready``). Gradients are packed into buckets of at
most ``bucket_cap_mb`` (parameters in reverse order at first, then in the order the first
backward finished them) and each bucket is all-reduced, on a communication thread, while
backward computes the rest. Buckets start strictly in order, so every rank issues the same
collectives in the same order. When the scan ends, backward waits for the buckets and
accumulates the averaged gradients: any optimizer, clipping included, then sees the gradient of
the mean loss over all ranks' samples. On a lazy tape (or under ``create_graph``) the buckets are
recorded as ``c_allreduce_sum`` ops instead, and the scheduler overlaps them with the rest of
backward.

Each bucket also sums, per parameter, whether the rank produced a gradient for it: a parameter
that received one on some ranks and not on others is an error on every rank (their copies would
drift apart), rather than a silent divergence or a hang.

    >>> import numpy as np, tape, layers, optim
    >>> model = optim.DistributedDataParallel(layers.Linear(3, 2))  # one process: a world of 1
    >>> tape.backward(model(tape.Variable(np.ones((4, 3), np.float32))).sum())
    >>> optim.SGD(lr=0.1)(model.params())
    >>> model.world.size, [p.grad() for p in model.params()]
    (1, [None, None])
"""

from __future__ import annotations

import concurrent.futures
import weakref

from layers.function import Function
from ops import communicator
from ops.registry import REGISTRY
from ops.xp import array_module
from tape.tape import apply, get_global_tape, state
from tape.variable import Variable


class DistributedDataParallel(Function):
    """Wraps ``module`` (a ``layers.Function``) for data-parallel training on ``ring_id``.

    Args:
        module: the model; every rank builds it the same way.
        ring_id: the process group (``ops.communicator``; 0 is every process of the job).
        bucket_cap_mb: the size cap of a gradient bucket, in MiB.

    ``params()`` and ``named_params()`` are the module's own (no ``module.`` prefix), so a
    checkpoint of the wrapper loads into the bare model and the other way round.
    """

    def __init__(self, module, ring_id=0, bucket_cap_mb=1.0):
        super().__init__()
        self.module = module
        object.__setattr__(self, "world", communicator.get(ring_id))
        object.__setattr__(self, "ring_id", int(ring_id))
        object.__setattr__(self, "_attached", None)
        self._broadcast_state()
        named = list(module.named_params())
        reducer = _Reducer(named, self.world, self.ring_id, bucket_cap_mb * 2**20)
        object.__setattr__(self, "reducer", reducer)

    def _broadcast_state(self):
        if self.world.size == 1:
            return
        for _, var in list(self.module.named_params()) + list(self.module.buffers()):
            value = var._array()
            var.set_value(self.world.broadcast(array_module(value), value, 0))

    def forward(self, *args, **kwargs):
        tape = get_global_tape()
        if self._attached is None or self._attached() is not tape:
            tape.on_grad_ready(self.reducer.hook)
            object.__setattr__(self, "_attached", weakref.ref(tape))
        self.reducer.reset()  # a forward starts what the next backward reduces
        return self.module(*args, **kwargs)

    def named_params(self, prefix=""):
        return self.module.named_params(prefix)

    def buffers(self, prefix=""):
        return self.module.buffers(prefix)


class _Bucket:
    """Parameters (one dtype) all-reduced as one message, and this backward's state of it."""

    def __init__(self, named):
        self.names = [name for name, _ in named]
        self.params = [param for _, param in named]
        params = self.params
        self.slot = {id(p): i for i, p in enumerate(params)}
        self.grads = [None] * len(params)
        self.arrived, self.result = 0, None


class _Reducer:
    """The gradient hook of DistributedDataParallel: buckets, their launches and their results."""

    def __init__(self, named, world, ring_id, cap_bytes):
        self.world, self.ring_id, self.named, self.cap = world, ring_id, named, cap_bytes
        self.position = {id(p): i for i, (_, p) in enumerate(named)}
        self.arrivals = []  # the first backward's order of final gradients; None once rebuilt
        self._bucket(named)
        self.launched = 0
        self.pool = concurrent.futures.ThreadPoolExecutor(1, "fluidtape-allreduce")

    def _bucket(self, named):
        self.buckets = _make_buckets(named, self.cap)
        self.bucket_of = {id(p): b for b in self.buckets for p in b.params}

    def hook(self, var, grad):
        bucket = self.bucket_of.get(id(var))
        if bucket is None:
            return None
        if self.arrivals is not None:
            self.arrivals.append(self.position[id(var)])
        if bucket.grads[bucket.slot[id(var)]] is not None or bucket.result is not None:
            self.reset()  # a new backward (or one after a backward that failed part-way)
            bucket = self.bucket_of[id(var)]
        bucket.grads[bucket.slot[id(var)]] = grad
        bucket.arrived += 1
        while self.launched < len(self.buckets):
            ready = self.buckets[self.launched]
            if ready.arrived < len(ready.params):
                break
            self._launch(ready)
        return lambda: self._averaged(bucket, var)

    def reset(self):
        for bucket in self.buckets:
            if bucket.result is not None and not isinstance(bucket.result, list):
                bucket.result.exception()  # let an earlier transfer finish before a new one
            bucket.grads, bucket.arrived, bucket.result = [None] * len(bucket.params), 0, None
        self.launched = 0
        if self.arrivals:
            self._rebuild()

    def _rebuild(self):
        """Buckets in the order the first backward finished the gradients (as PyTorch rebuilds
        them after its first iteration): a parameter read at every step of a loop is final only
        at the end, and must not hold back a bucket of gradients that were ready long before.
        Rank 0's order is used everywhere, so every rank forms the same buckets."""
        order = list(dict.fromkeys(self.world.broadcast_object(self.arrivals)))
        order += [i for i in range(len(self.named)) if i not in order]  # unused ones last
        self.arrivals = None
        self._bucket([self.named[i] for i in reversed(order)])  # (_make_buckets reverses)

    def _launch(self, bucket):
        self.launched += 1
        grads = [
            g if g is not None else REGISTRY["fill_zeros_like"](p)
            for p, g in zip(bucket.params, bucket.grads, strict=True)
        ]
        if state.tape.lazy or state.grad_enabled:  # record the reduction as ops
            outs = apply(REGISTRY["c_allreduce_sum"], (grads,), {"ring_id": self.ring_id})
            scale = REGISTRY["scale"].check_attrs({"scale": 1.0 / self.world.size})
            bucket.result = [apply(REGISTRY["scale"], (out,), scale) for out in outs]
            return
        arrays = [g._array() for g in grads]
        xp = array_module(arrays[0])
        flags = xp.asarray([g is not None for g in bucket.grads], dtype=arrays[0].dtype)
        flat = xp.concatenate([a.reshape(-1) for a in arrays] + [flags])
        bucket.result = self.pool.submit(self._reduce, xp, flat)

    def _reduce(self, xp, flat):
        (total,) = self.world.allreduce_sum(xp, [flat], "DistributedDataParallel all-reduce")
        return total

    def _averaged(self, bucket, var):
        """The averaged gradient of ``var``; the first call (the scan has ended) starts every
        bucket not yet started, zeros standing in for gradients this rank did not produce."""
        while self.launched < len(self.buckets):
            self._launch(self.buckets[self.launched])
        if isinstance(bucket.result, list):
            return bucket.result[bucket.slot[id(var)]]
        bucket.result = self._split(bucket, bucket.result.result())
        return bucket.result[bucket.slot[id(var)]]

    def _split(self, bucket, total):
        count = len(bucket.params)
        flags = total[-count:]
        _check_used(bucket, flags, self.world.size)
        total = total[:-count] * (1.0 / self.world.size)  # one new buffer the views share
        grads, start = [], 0
        for param in bucket.params:
            piece = total[start : start + param.size].reshape(param.shape)
            grads.append(Variable._make(piece, param.shape, param.dtype, False))
            start += param.size
        return grads


def _check_used(bucket, flags, size):
    counts = [int(round(float(c))) for c in flags.tolist()]
    partial = [(n, c) for n, c in zip(bucket.names, counts) if 0 < c < size]
    if partial:
        name, count = partial[0]
        raise communicator.DistributedError(
            "DistributedDataParallel",
            f"parameter '{name}' received a gradient on {count} of {size} ranks",
            hint="every rank must use the same parameters in a step (their copies would differ)",
        )


def _make_buckets(named, cap_bytes):
    """(name, parameter) pairs in reverse order (before the first backward: backward finishes
    the last layers first), one dtype per bucket, each bucket at most ``cap_bytes`` (a larger
    parameter: a bucket of its own)."""
    buckets, current, size = [], [], 0
    for name, param in reversed(named):
        nbytes = param.size * param.dtype.itemsize
        if current and (size + nbytes > cap_bytes or param.dtype != current[0][1].dtype):
            buckets.append(_Bucket(current))
            current, size = [], 0
        current.append((name, param))
        size += nbytes
    if current:
        buckets.append(_Bucket(current))
    return buckets


__all__ = ["DistributedDataParallel"]
