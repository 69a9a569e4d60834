"""Workload 'chain': an elementwise chain on 4M float32, forward and backward (issue 9).

``y = tanh(x * a + b) * sigmoid(x) - 0.5 * x * x`` on x of 4096x1024 float32 with ``a`` and ``b``
vectors broadcast over the rows; loss = sum(y); backward to x, a and b. Every op is elementwise
(or a sum), so memory traffic is the cost: unfused, each op reads and writes 16 MiB; fused, the
chain streams x once. ``chain_forward`` is the same chain without backward.

Peers: numpy unfused (``numpy``), numpy evaluated in cache-sized row blocks with ``out=`` scratch
(``numpy-blocked``, the floor of blocked evaluation), PyTorch eager and ``torch.compile``
(``torch-compile``: Inductor's generated C++, skipped with a note where it cannot compile, and at
the tiny size, where compiling would cost the smoke test ~20 s).
"""

from __future__ import annotations

import numpy as np

from benchmarks import common

NAME = "chain"
TITLE = "tanh(x*a+b)*sigmoid(x)-0.5*x*x, 4096x1024 float32, a/b broadcast, sum, backward"
UNIT = "ms/step"
DEFAULT = {"rows": 4096, "cols": 1024, "backward": True, "block_rows": 64}
TINY = {"rows": 8, "cols": 4, "backward": True, "block_rows": 3, "tiny": True}
TARGET = ("torch", 1.0)  # issue 9: eager <= PyTorch eager
LAZY_TARGET = ("torch-compile", 1.0)  # issue 9: lazy (fused) <= torch.compile
TRAINING = False
# Seconds of warm-up at least (the runner's --warmup if longer): with numba installed a fused
# kernel moves to its compiled backend once it has run 0.5 s in numpy, and compiles for 1-3 s
# (ops/fused.py), as in a training loop's first seconds; torch.compile compiles in its setup. A
# worker process timing lazy mode alone reached the move within 0.5 s of warm-up only sometimes.
WARMUP = 5.0


def scale(config):
    return 1e3


def make_data(config, seed=0):
    rng = np.random.default_rng(seed)
    rows, cols = config["rows"], config["cols"]
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    a = rng.uniform(0.5, 1.5, cols).astype(np.float32)
    b = rng.uniform(-0.5, 0.5, cols).astype(np.float32)
    params = [x, a, b] if config["backward"] else []
    return {"x": x, "a": a, "b": b, "params": params}


def setup_numpy(config, data):
    """Unfused numpy: each op a pass over 16 MiB; backward written by hand."""
    x, a, b = data["x"], data["a"], data["b"]

    def step():
        t = np.tanh(x * a + b)
        s = 1.0 / (1.0 + np.exp(-x))
        loss = (t * s - 0.5 * x * x).sum()
        if not config["backward"]:
            return loss, []
        gu = (1.0 - t * t) * s
        gx = gu * a + t * s * (1.0 - s) - x
        return loss, [gx, (gu * x).sum(axis=0), gu.sum(axis=0)]

    return step


def setup_numpy_blocked(config, data):
    """The chain (and its backward) per block of rows, with out= into reused scratch."""
    x, a, b = data["x"], data["a"], data["b"]
    rows, cols, size = x.shape[0], x.shape[1], config["block_rows"]
    u, s, w = (np.empty((size, cols), np.float32) for _ in range(3))
    gx = np.empty_like(x) if config["backward"] else None
    ga, gb = np.empty(cols, np.float32), np.empty(cols, np.float32)

    def step():
        loss = np.float32(0)
        ga[...] = gb[...] = 0
        for start in range(0, rows, size):
            n = min(size, rows - start)
            loss += _forward_block(x[start : start + n], a, b, u[:n], s[:n], w[:n])
            if config["backward"]:
                _backward_block(x[start : start + n], a, u[:n], s[:n], w[:n], gx[start:], ga, gb)
        return loss, ([gx, ga, gb] if config["backward"] else [])

    return step


def _forward_block(x, a, b, t, s, w):
    """t = tanh(x a + b), s = sigmoid(x); returns the block's sum of y (w is scratch)."""
    np.multiply(x, a, out=t)
    t += b
    np.tanh(t, out=t)
    np.negative(x, out=s)
    np.exp(s, out=s)
    s += 1.0
    np.reciprocal(s, out=s)
    np.multiply(t, s, out=w)
    total = w.sum()
    np.multiply(x, x, out=w)
    return total - 0.5 * w.sum()


def _backward_block(x, a, t, s, w, gx, ga, gb):
    """dx = (1 - t^2) s a + t s (1 - s) - x; da += sum((1 - t^2) s x); db += sum((1 - t^2) s)."""
    n = x.shape[0]
    np.subtract(1.0, s, out=w)
    w *= s
    w *= t  # t s (1 - s)
    np.multiply(t, t, out=t)
    np.subtract(1.0, t, out=t)
    t *= s  # gu = (1 - t^2) s
    gb += t.sum(axis=0)
    np.multiply(t, x, out=s)
    ga += s.sum(axis=0)
    np.multiply(t, a, out=gx[:n])
    gx[:n] += w
    gx[:n] -= x


def setup_fluidtape(config, data):
    """What a user writes: Python operators and ops.tanh / ops.sigmoid on Variables."""
    tape, ops, _, _ = common.fluidtape(["tanh", "sigmoid"])
    backward = config["backward"]
    x, a, b = (tape.Variable(data[k].copy(), requires_grad=backward) for k in "xab")

    def step():
        tape.reset_global_tape()
        loss = (ops.tanh(x * a + b) * ops.sigmoid(x) - 0.5 * x * x).sum()
        if not backward:
            return loss, []
        for v in (x, a, b):
            v.clear_grad()
        tape.backward(loss)
        return loss, [x.grad(), a.grad(), b.grad()]

    return step


def _torch_chain(torch):
    def chain(x, a, b):
        return (torch.tanh(x * a + b) * torch.sigmoid(x) - 0.5 * x * x).sum()

    return chain


def _torch_step(torch, chain, config, data):
    backward = config["backward"]
    x, a, b = (torch.tensor(data[k], requires_grad=backward) for k in "xab")

    def step():
        if not backward:
            with torch.no_grad():
                return chain(x, a, b), []
        for v in (x, a, b):
            v.grad = None
        loss = chain(x, a, b)
        loss.backward()
        return loss, [x.grad, a.grad, b.grad]

    return step


def setup_torch(config, data):
    torch = common.torch()
    return _torch_step(torch, _torch_chain(torch), config, data)


def setup_torch_compile(config, data):
    """torch.compile (Inductor) of the chain; its backward is compiled too (AOTAutograd)."""
    torch = common.torch()
    if config.get("tiny"):
        raise common.Unavailable("not compiled at the tiny size (compiling takes ~20 s)")
    step = _torch_step(torch, torch.compile(_torch_chain(torch)), config, data)
    try:
        step()  # compiles here, not in the timed loop
    except Exception as err:  # no C++ compiler, an unsupported platform, ...
        raise common.Unavailable(f"torch.compile cannot compile here: {err}") from None
    return step


IMPLEMENTATIONS = {
    "numpy": setup_numpy,
    "numpy-blocked": setup_numpy_blocked,
    "fluidtape": setup_fluidtape,
    "torch": setup_torch,
    "torch-compile": setup_torch_compile,
}
