"""Workload 'cnn': one SGD training step of a small convolutional classifier on 28x28 images.

conv 3x3 (1->16, pad 1) -> relu -> maxpool 2 -> conv 3x3 (16->32, pad 1) -> relu -> maxpool 2
-> linear (32*7*7 -> 10) -> softmax cross-entropy (mean) -> SGD, batch 64, float32. Convolutions
run as im2col + a batched matmul in every implementation here except PyTorch's (oneDNN).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from benchmarks import common

NAME = "cnn"
TITLE = "training step conv3x3(16)-pool-conv3x3(32)-pool-linear, 28x28, batch 64, SGD"
UNIT = "ms/step"
DEFAULT = {"batch": 64, "image": 28, "channels": (1, 16, 32), "classes": 10, "lr": 0.01}
TINY = {"batch": 2, "image": 8, "channels": (1, 2, 3), "classes": 3, "lr": 0.5}
TARGET = ("numpy", 1.05)  # issue 9
LAZY_TARGET = ("numpy", 1.0)  # issue 9
TRAINING = True


def scale(config):
    return 1e3


def make_data(config, seed=0):
    rng = np.random.default_rng(seed)
    c0, c1, c2 = config["channels"]
    flat = c2 * (config["image"] // 4) ** 2
    params = [
        common.uniform(rng, (c1, c0, 3, 3), c0 * 9),
        common.uniform(rng, (c1,), c0 * 9),
        common.uniform(rng, (c2, c1, 3, 3), c1 * 9),
        common.uniform(rng, (c2,), c1 * 9),
        common.uniform(rng, (flat, config["classes"]), flat),
        common.uniform(rng, (config["classes"],), flat),
    ]
    x = rng.standard_normal((config["batch"], c0, config["image"], config["image"]))
    labels = rng.integers(0, config["classes"], config["batch"]).astype(np.int64)
    return {"x": x.astype(np.float32), "labels": labels, "params": params}


def _conv(x, w, b):
    """3x3 convolution, padding 1, by im2col and one batched matmul; returns (output NCHW, the
    columns (N, C*9, H*W) for backward)."""
    n, c, h, width = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = sliding_window_view(padded, (3, 3), axis=(2, 3))  # (N, C, H, W, 3, 3)
    cols = windows.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * 9, h * width)
    out = np.matmul(w.reshape(len(w), -1), cols)
    out += b[:, None]
    return out.reshape(n, len(w), h, width), cols


def _conv_backward(gout, cols, w, need_input):
    """(dInput or None, dFilter, dBias) of ``_conv``; dInput scatters the columns back (col2im)."""
    n, o, h, width = gout.shape
    g3 = gout.reshape(n, o, h * width)
    gw = np.matmul(g3, cols.transpose(0, 2, 1)).sum(0).reshape(w.shape)
    gb = g3.sum(axis=(0, 2))
    if not need_input:
        return None, gw, gb
    gcols = np.matmul(w.reshape(o, -1).T, g3).reshape(n, w.shape[1], 3, 3, h, width)
    gpad = np.zeros((n, w.shape[1], h + 2, width + 2), np.float32)
    for i in range(3):
        for j in range(3):
            gpad[:, :, i : i + h, j : j + width] += gcols[:, :, i, j]
    return gpad[:, :, 1:-1, 1:-1], gw, gb


_OFFSETS = ((0, 0), (0, 1), (1, 0), (1, 1))


def _pool(x):
    """2x2 max pooling, stride 2, as the maximum of the window's four strided slices."""
    quarters = [x[:, :, i::2, j::2] for i, j in _OFFSETS]
    return np.maximum(np.maximum(quarters[0], quarters[1]), np.maximum(quarters[2], quarters[3]))


def _pool_backward(gout, x, out):
    """Routes dOut to the window maxima (after a relu, ties only occur at 0, where relu's own
    gradient is 0, so splitting a tie differently from PyTorch changes nothing)."""
    gx = np.empty_like(x)
    for i, j in _OFFSETS:
        np.multiply(gout, x[:, :, i::2, j::2] == out, out=gx[:, :, i::2, j::2])
    return gx


def _softmax_ce(logits, labels):
    """(mean cross-entropy, dLogits)."""
    rows = np.arange(len(labels))
    logits = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    total = probs.sum(axis=1, keepdims=True)
    loss = (np.log(total[:, 0]) - logits[rows, labels]).mean()
    probs /= total
    probs[rows, labels] -= 1.0
    probs /= len(labels)
    return loss, probs


def setup_numpy(config, data):
    """The floor: im2col convolutions and reshape pooling with a hand-written backward."""
    x, labels, lr = data["x"], data["labels"], config["lr"]
    params = common.copies(data["params"])
    w1, b1, w2, b2, w3, b3 = params

    def step():
        a1, cols1 = _conv(x, w1, b1)
        r1 = np.maximum(a1, 0, out=a1)
        p1 = _pool(r1)
        a2, cols2 = _conv(p1, w2, b2)
        r2 = np.maximum(a2, 0, out=a2)
        p2 = _pool(r2)
        flat = p2.reshape(len(x), -1)
        loss, glogits = _softmax_ce(flat @ w3 + b3, labels)
        gflat = glogits @ w3.T
        gr2 = _pool_backward(gflat.reshape(p2.shape), r2, p2)
        gr2 *= r2 > 0
        gp1, gw2, gb2 = _conv_backward(gr2, cols2, w2, need_input=True)
        gr1 = _pool_backward(gp1, r1, p1)
        gr1 *= r1 > 0
        _, gw1, gb1 = _conv_backward(gr1, cols1, w1, need_input=False)
        grads = (gw1, gb1, gw2, gb2, flat.T @ glogits, glogits.sum(0))
        for param, grad in zip(params, grads, strict=True):
            grad *= lr
            param -= grad
        return loss, params

    return step


def setup_fluidtape(config, data):
    tape, ops, layers, optim = common.fluidtape(
        ["softmax_with_cross_entropy"], ["Conv2D", "MaxPool2D"]
    )
    c0, c1, c2 = config["channels"]
    conv1, conv2 = layers.Conv2D(c0, c1, 3, padding=1), layers.Conv2D(c1, c2, 3, padding=1)
    pool = layers.MaxPool2D(2)
    linear = layers.Linear(c2 * (config["image"] // 4) ** 2, config["classes"])
    params = conv1.params() + conv2.params() + linear.params()
    for param, value in zip(params, common.copies(data["params"]), strict=True):
        param.set_value(value)
    x = tape.Variable(data["x"].copy())
    label = tape.Variable(data["labels"].reshape(-1, 1).copy())
    sgd = optim.SGD(lr=config["lr"])

    def step():
        tape.reset_global_tape()
        h = pool(ops.relu(conv1(x)))
        h = pool(ops.relu(conv2(h)))
        logits = linear(h.reshape(h.shape[0], -1))
        _, loss = ops.softmax_with_cross_entropy(logits, label)
        loss = ops.mean(loss)
        tape.backward(loss)
        sgd(params)
        return loss, params

    return step


def setup_torch(config, data):
    torch = common.torch()
    nn = torch.nn
    c0, c1, c2 = config["channels"]
    flat = c2 * (config["image"] // 4) ** 2
    conv1, conv2 = nn.Conv2d(c0, c1, 3, padding=1), nn.Conv2d(c1, c2, 3, padding=1)
    linear = nn.Linear(flat, config["classes"])
    model = nn.Sequential(
        conv1, nn.ReLU(), nn.MaxPool2d(2), conv2, nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), linear
    )
    w1, b1, w2, b2, w3, b3 = (torch.from_numpy(v) for v in common.copies(data["params"]))
    with torch.no_grad():
        for param, value in (
            (conv1.weight, w1),
            (conv1.bias, b1),
            (conv2.weight, w2),
            (conv2.bias, b2),
            (linear.weight, w3.T),
            (linear.bias, b3),
        ):
            param.copy_(value)
    x, labels = torch.tensor(data["x"]), torch.tensor(data["labels"])
    sgd = torch.optim.SGD(model.parameters(), lr=config["lr"])
    results = [
        conv1.weight,
        conv1.bias,
        conv2.weight,
        conv2.bias,
        common.Transposed(linear.weight),
        linear.bias,
    ]

    def step():
        sgd.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        loss.backward()
        sgd.step()
        return loss, results

    return step


IMPLEMENTATIONS = {
    "numpy": setup_numpy,
    "fluidtape": setup_fluidtape,
    "torch": setup_torch,
}
