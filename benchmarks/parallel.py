"""Workload 'parallel': independent branches, the graph a thread pool should speed up (issue 15).

8 branches, each ``h = tanh(h @ W_b)`` 6 times with h 64x192 and its own W_b 192x192 float32,
each branch summed, the sums added, backward to every W_b. Lazy mode runs it as one plan of
independent chains joined only by the loss: on 2 cores, ``tape.lazy(threads=2)`` should beat
program order (``threads=0``) by 1.5x, and the default ``threads="auto"`` (the cost model of
``tape.passes.parallel``) should never lose to it.

Implementations: the numpy floor (hand-written backward, program order), its branches split
by hand over 2 threads (``numpy-threads2``: the ceiling of any pool), fluidtape eager,
lazy in program order (``fluidtape-lazy``), lazy on 2 threads and lazy with ``threads="auto"``,
PyTorch eager (its intra-op threads).
"""

from __future__ import annotations

import numpy as np

from benchmarks import common

NAME = "parallel"
TITLE = "8 independent branches of 6 x tanh(h @ W), h 64x192, W 192x192 float32, sum, backward"
UNIT = "ms/step"
DEFAULT = {"branches": 8, "layers": 6, "rows": 64, "width": 192}
TINY = {"branches": 3, "layers": 2, "rows": 4, "width": 5}
TARGET = None  # eager has no target here
# issue 15: threads=2 at least 1.5x faster than in order; the default never slower than in order
TARGETS = {
    "fluidtape-threads2": ("fluidtape-lazy", 1 / 1.5),
    "fluidtape-auto": ("fluidtape-lazy", 1.0),
}
TRAINING = False


def scale(config):
    return 1e3


def make_data(config, seed=0):
    rng = np.random.default_rng(seed)
    n, rows, width = config["branches"], config["rows"], config["width"]
    hs = [rng.standard_normal((rows, width)).astype(np.float32) for _ in range(n)]
    # 1/sqrt(width) keeps tanh out of saturation through the 6 layers.
    ws = [common.uniform(rng, (width, width), width / 3.0) for _ in range(n)]
    return {"hs": hs, "params": ws}


def _branch(h, w, layers):
    """One branch forward and backward by hand: (its sum, the gradient of its W)."""
    inputs, outputs = [], []
    for _ in range(layers):
        inputs.append(h)
        h = np.tanh(h @ w)
        outputs.append(h)
    g, gw = np.ones_like(h), np.zeros_like(w)
    for x, y in zip(reversed(inputs), reversed(outputs), strict=True):
        g = g * (1 - y * y)
        gw += x.T @ g
        g = g @ w.T
    return h.sum(), gw


def setup_numpy(config, data):
    """The floor: each branch forward and backward by hand, in program order."""
    hs, ws = data["hs"], common.copies(data["params"])
    layers = config["layers"]

    def step():
        loss, grads = np.float32(0), []
        for h, w in zip(hs, ws, strict=True):
            total, gw = _branch(h, w, layers)
            loss = loss + total
            grads.append(gw)
        return loss, grads

    return step


def setup_numpy_threads2(config, data):
    """The ceiling of any thread pool here: the floor's branches split by hand over 2 threads
    (the caller and one pooled helper, each taking every other branch), BLAS on one thread each,
    with no scheduling at all. A lazy pool can at best match it."""
    from ops import thread_pools
    from ops.blas import single_threaded

    hs, ws = data["hs"], common.copies(data["params"])
    layers, count = config["layers"], len(hs)
    results = [None] * count
    helper = thread_pools.pool("benchmark-floor", 1)  # (one per process, however many setups)

    def half(first):
        with single_threaded():
            for b in range(first, count, 2):
                results[b] = _branch(hs[b], ws[b], layers)

    def step():
        other = helper.submit(half, 1)
        half(0)
        other.result()
        loss = np.float32(0)
        for total, _ in results:
            loss = loss + total
        return loss, [gw for _, gw in results]

    return step


def _fluidtape(threads):
    def setup(config, data):
        tape, ops, _, _ = common.fluidtape(["tanh", "matmul"])
        hs = [tape.Variable(h) for h in data["hs"]]
        ws = [tape.Variable(w, requires_grad=True) for w in common.copies(data["params"])]
        layers = config["layers"]

        def record():
            tape.reset_global_tape()
            total = None
            for h, w in zip(hs, ws, strict=True):
                for _ in range(layers):
                    h = ops.tanh(h @ w)
                total = h.sum() if total is None else total + h.sum()
            for w in ws:
                w.clear_grad()
            tape.backward(total)
            return total, [w.grad() for w in ws]

        if threads is None:
            return record

        def step():
            with tape.lazy(threads=threads):
                return record()

        return step

    setup.__doc__ = "fluidtape eager" if threads is None else f"fluidtape lazy, threads={threads!r}"
    return setup


def setup_torch(config, data):
    torch = common.torch()
    hs = [torch.tensor(h) for h in data["hs"]]
    ws = [torch.tensor(w, requires_grad=True) for w in data["params"]]
    layers = config["layers"]

    def step():
        total = None
        for h, w in zip(hs, ws, strict=True):
            for _ in range(layers):
                h = torch.tanh(h @ w)
            total = h.sum() if total is None else total + h.sum()
        for w in ws:
            w.grad = None
        total.backward()
        return total, [w.grad for w in ws]

    return step


IMPLEMENTATIONS = {
    "numpy": setup_numpy,
    "numpy-threads2": setup_numpy_threads2,
    "fluidtape": _fluidtape(None),
    "fluidtape-lazy": _fluidtape(0),
    "fluidtape-threads2": _fluidtape(2),
    "fluidtape-auto": _fluidtape("auto"),
    "torch": setup_torch,
}
