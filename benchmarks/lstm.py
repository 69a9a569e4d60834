"""Workload 'lstm': one LSTM cell unrolled over a sequence in a Python loop, forward and backward.

Input 64, hidden 128, batch 16, 50 steps, ``loss = sum(h_T)``; medium-sized matmuls and many
small elementwise ops per step, so both kernels and per-op overhead count. Parameters use
PyTorch's LSTMCell layout and gate order (i, f, g, o): W_ih (4H, in), W_hh (4H, H), b_ih, b_hh.
"""

from __future__ import annotations

import numpy as np

from benchmarks import common

NAME = "lstm"
TITLE = "LSTM cell (in 64, hidden 128, batch 16) unrolled 50 steps, forward + backward"
UNIT = "ms/seq"
DEFAULT = {"steps": 50, "batch": 16, "input": 64, "hidden": 128}
TINY = {"steps": 3, "batch": 2, "input": 3, "hidden": 4}
TARGET = ("torch", 1.1)  # issue 9 (was 2.0x)
LAZY_TARGET = ("torch", 0.8)  # issue 9 (was 1.0x): lazy mode, plan cache warm
TRAINING = False


def scale(config):
    return 1e3


def make_data(config, seed=0):
    rng = np.random.default_rng(seed)
    steps, batch, n_in, hidden = (config[k] for k in ("steps", "batch", "input", "hidden"))
    params = [
        common.uniform(rng, (4 * hidden, n_in), hidden),
        common.uniform(rng, (4 * hidden, hidden), hidden),
        common.uniform(rng, (4 * hidden,), hidden),
        common.uniform(rng, (4 * hidden,), hidden),
    ]
    xs = rng.standard_normal((steps, batch, n_in)).astype(np.float32)
    return {"xs": xs, "params": params}


def _sigmoid(z):
    out = np.negative(z)
    np.exp(out, out=out)
    out += 1.0
    return np.reciprocal(out, out=out)


def setup_numpy(config, data):
    """The floor: the same cell per step with a hand-written backward through time."""
    w_ih, w_hh, b_ih, b_hh = common.copies(data["params"])
    xs, hidden, batch = list(data["xs"]), config["hidden"], config["batch"]
    zeros = np.zeros((batch, hidden), np.float32)
    gh_steps = [None] * (len(xs) - 1) + [np.ones((batch, hidden), np.float32)]

    def step():
        h, c, bias, saved = zeros, zeros, b_ih + b_hh, []
        for x in xs:
            h, c, state = cell_forward(x, h, c, w_ih.T, w_hh.T, bias)
            saved.append(state)
        grads, _ = backward_through_time(saved, w_hh, gh_steps)
        return h.sum(), grads

    return step


def cell_forward(x, h, c, w_ih_t, w_hh_t, bias):
    """One LSTM step in numpy; returns (h, c, what backward_through_time needs)."""
    hidden = h.shape[1]
    z = x @ w_ih_t
    z += h @ w_hh_t
    z += bias
    gates = np.empty_like(z)
    gates[:, : 2 * hidden] = _sigmoid(z[:, : 2 * hidden])
    gates[:, 3 * hidden :] = _sigmoid(z[:, 3 * hidden :])
    np.tanh(z[:, 2 * hidden : 3 * hidden], out=gates[:, 2 * hidden : 3 * hidden])
    i, f, g, o = np.split(gates, 4, axis=1)
    c_next = f * c + i * g
    tanh_c = np.tanh(c_next)
    return o * tanh_c, c_next, (x, h, c, gates, tanh_c)


def backward_through_time(saved, w_hh, gh_steps, w_ih=None):
    """Backward over the steps ``cell_forward`` saved, given dLoss/dh_t from outside the
    recurrence (``gh_steps[t]``, None for none). Returns the gradients of (W_ih, W_hh, b_ih,
    b_hh) and, when ``w_ih`` is given, the list of dLoss/dx_t (else None)."""
    hidden = w_hh.shape[1]
    gw_ih, gw_hh = np.zeros((4 * hidden, saved[0][0].shape[1]), np.float32), np.zeros_like(w_hh)
    gb, gxs = np.zeros(4 * hidden, np.float32), []
    gh, gc = np.zeros_like(saved[0][1]), np.zeros_like(saved[0][1])
    for (x, h_prev, c_prev, gates, tanh_c), gh_out in zip(
        reversed(saved), reversed(gh_steps), strict=True
    ):
        if gh_out is not None:
            gh = gh + gh_out
        i, f, g, o = np.split(gates, 4, axis=1)
        gc = gc + gh * o * (1.0 - tanh_c * tanh_c)
        gz = np.empty_like(gates)
        gz[:, :hidden] = gc * g * i * (1.0 - i)
        gz[:, hidden : 2 * hidden] = gc * c_prev * f * (1.0 - f)
        gz[:, 2 * hidden : 3 * hidden] = gc * i * (1.0 - g * g)
        gz[:, 3 * hidden :] = gh * tanh_c * o * (1.0 - o)
        gc = gc * f
        gw_ih += gz.T @ x
        gw_hh += gz.T @ h_prev
        gb += gz.sum(0)
        gh = gz @ w_hh
        if w_ih is not None:
            gxs.append(gz @ w_ih)
    return [gw_ih, gw_hh, gb, gb.copy()], (gxs[::-1] if w_ih is not None else None)


def setup_fluidtape(config, data):
    tape, _, layers, _ = common.fluidtape(layer_names=["LSTMCell"])
    cell = layers.LSTMCell(config["input"], config["hidden"])
    params = [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh]
    for param, value in zip(params, common.copies(data["params"]), strict=True):
        param.set_value(value)
    xs = [tape.Variable(x) for x in data["xs"].copy()]
    zeros = tape.Variable(np.zeros((config["batch"], config["hidden"]), np.float32))

    def step():
        tape.reset_global_tape()
        h, c = zeros, zeros
        for x in xs:
            h, c = cell(x, (h, c))
        loss = h.sum()
        for param in params:
            param.clear_grad()
        tape.backward(loss)
        return loss, [param.grad for param in params]

    return step


def setup_torch(config, data):
    """PyTorch's own nn.LSTMCell (what a PyTorch user writes)."""
    torch = common.torch()
    cell = torch.nn.LSTMCell(config["input"], config["hidden"])
    params = [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh]
    with torch.no_grad():
        for param, value in zip(params, common.copies(data["params"]), strict=True):
            param.copy_(torch.from_numpy(value))
    xs = list(torch.tensor(data["xs"]).unbind(0))
    zeros = torch.zeros(config["batch"], config["hidden"])

    def step():
        h, c = zeros, zeros
        for x in xs:
            h, c = cell(x, (h, c))
        loss = h.sum()
        for param in params:
            param.grad = None
        loss.backward()
        return loss, [param.grad for param in params]

    return step


def setup_autograd(config, data):
    autograd, anp = common.autograd()
    params = common.copies(data["params"])
    xs, hidden = list(data["xs"]), config["hidden"]
    zeros = np.zeros((config["batch"], hidden), np.float32)

    def sigmoid(z):
        return 1.0 / (1.0 + anp.exp(-z))

    def loss_of(params):
        w_ih, w_hh, b_ih, b_hh = params
        h = c = zeros
        for x in xs:
            z = anp.dot(x, w_ih.T) + anp.dot(h, w_hh.T) + b_ih + b_hh
            i, f = sigmoid(z[:, :hidden]), sigmoid(z[:, hidden : 2 * hidden])
            g, o = anp.tanh(z[:, 2 * hidden : 3 * hidden]), sigmoid(z[:, 3 * hidden :])
            c = f * c + i * g
            h = o * anp.tanh(c)
        return anp.sum(h)

    value_and_grad = autograd.value_and_grad(loss_of)

    def step():
        return value_and_grad(params)

    return step


IMPLEMENTATIONS = {
    "numpy": setup_numpy,
    "fluidtape": setup_fluidtape,
    "torch": setup_torch,
    "autograd": setup_autograd,
}
