"""Workload 'overhead': a long chain of tiny ops, so the time is the per-op cost of the framework.

The chain cycles ``h = h + w``, ``h = h * w``, ``h = tanh(h)`` on 8x8 float32 arrays with one
parameter ``w``, then ``loss = sum(h)`` and backward. The kernels are nearly free at this size:
what is measured is recording, dispatch and backward bookkeeping, reported per forward op.
"""

from __future__ import annotations

import numpy as np

from benchmarks import common

NAME = "overhead"
TITLE = "chain of 200 ops (8x8 float32: add, mul, tanh with a parameter), sum, backward"
UNIT = "us/op"
DEFAULT = {"n_ops": 200, "size": 8}
TINY = {"n_ops": 12, "size": 4}
TARGET = ("torch", 1.3)  # issue 9 (was 2.5x)
LAZY_TARGET = ("torch", 1.0)  # issue 9; and lazy <= eager
TRAINING = False

ADD, MUL, TANH = 0, 1, 2


def scale(config):
    """Seconds per step -> microseconds per forward op."""
    return 1e6 / config["n_ops"]


def make_data(config, seed=0):
    rng = np.random.default_rng(seed)
    size = config["size"]
    x = rng.standard_normal((size, size)).astype(np.float32)
    # w in [0.5, 1] keeps the chain away from both saturation and vanishing values.
    w = rng.uniform(0.5, 1.0, (size, size)).astype(np.float32)
    return {"x": x, "params": [w]}


def _kinds(config):
    return [(ADD, MUL, TANH)[i % 3] for i in range(config["n_ops"])]


def setup_numpy(config, data):
    """The floor: the same chain with a hand-written backward."""
    x, (w,) = data["x"], common.copies(data["params"])
    kinds = _kinds(config)

    def step():
        saved, h = [], x
        for kind in kinds:
            if kind == ADD:
                h = h + w
            elif kind == MUL:
                saved.append(h)
                h = h * w
            else:
                h = np.tanh(h)
                saved.append(h)
        loss = h.sum()
        gh, gw = np.ones_like(h), np.zeros_like(w)
        for kind in reversed(kinds):
            if kind == ADD:
                gw += gh
            elif kind == MUL:
                gw += gh * saved.pop()
                gh = gh * w
            else:
                out = saved.pop()
                gh = gh * (1.0 - out * out)
        return loss, [gw]

    return step


def setup_fluidtape(config, data):
    tape, ops, _, _ = common.fluidtape(["tanh"])
    x = tape.Variable(data["x"].copy())
    w = tape.Variable(data["params"][0].copy(), requires_grad=True)
    kinds = _kinds(config)

    def step():
        tape.reset_global_tape()
        h = x
        for kind in kinds:
            if kind == ADD:
                h = h + w
            elif kind == MUL:
                h = h * w
            else:
                h = ops.tanh(h)
        loss = h.sum()
        w.clear_grad()
        tape.backward(loss)
        return loss, [w.grad]

    return step


def setup_torch(config, data):
    torch = common.torch()
    x = torch.tensor(data["x"])
    w = torch.tensor(data["params"][0], requires_grad=True)
    kinds = _kinds(config)

    def step():
        h = x
        for kind in kinds:
            if kind == ADD:
                h = h + w
            elif kind == MUL:
                h = h * w
            else:
                h = torch.tanh(h)
        loss = h.sum()
        w.grad = None
        loss.backward()
        return loss, [w.grad]

    return step


def setup_autograd(config, data):
    autograd, anp = common.autograd()
    x, (w,) = data["x"], common.copies(data["params"])
    kinds = _kinds(config)

    def chain(w):
        h = x
        for kind in kinds:
            if kind == ADD:
                h = h + w
            elif kind == MUL:
                h = h * w
            else:
                h = anp.tanh(h)
        return anp.sum(h)

    value_and_grad = autograd.value_and_grad(chain)

    def step():
        loss, gw = value_and_grad(w)
        return loss, [gw]

    return step


IMPLEMENTATIONS = {
    "numpy": setup_numpy,
    "fluidtape": setup_fluidtape,
    "torch": setup_torch,
    "autograd": setup_autograd,
}
