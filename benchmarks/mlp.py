"""Workload 'mlp': one SGD training step of a 784-1024-1024-10 ReLU MLP, where BLAS dominates.

Batch 128, float32, softmax cross-entropy averaged over the batch. With large matrices the
framework's overhead should vanish against the matmuls: the target is the hand-written numpy
step within 10%. Weights use the seed's layout, W of shape (in_dim, out_dim).
"""

from __future__ import annotations

import numpy as np

from benchmarks import common

NAME = "mlp"
TITLE = "training step 784-1024-1024-10, batch 128, float32, relu, softmax CE, SGD"
UNIT = "ms/step"
DEFAULT = {"batch": 128, "sizes": (784, 1024, 1024, 10), "lr": 0.01}
TINY = {"batch": 4, "sizes": (6, 5, 4, 3), "lr": 0.5}
TARGET = ("numpy", 1.05)  # issue 9 (was 1.10x)
LAZY_TARGET = ("numpy", 1.0)  # issue 9
TRAINING = True


def scale(config):
    return 1e3


def make_data(config, seed=0):
    rng = np.random.default_rng(seed)
    sizes, batch = config["sizes"], config["batch"]
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        params += [
            common.uniform(rng, (fan_in, fan_out), fan_in),
            common.uniform(rng, (fan_out,), fan_in),
        ]
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    labels = rng.integers(0, sizes[-1], batch).astype(np.int64)
    return {"x": x, "labels": labels, "params": params}


def setup_numpy(config, data):
    """The floor: forward, hand-written backward and the update, in place where natural."""
    x, labels, lr = data["x"], data["labels"], config["lr"]
    params = common.copies(data["params"])
    w1, b1, w2, b2, w3, b3 = params
    rows = np.arange(len(labels))

    def step():
        h1 = x @ w1
        h1 += b1
        np.maximum(h1, 0, out=h1)
        h2 = h1 @ w2
        h2 += b2
        np.maximum(h2, 0, out=h2)
        logits = h2 @ w3
        logits += b3
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        total = probs.sum(axis=1, keepdims=True)
        loss = (np.log(total[:, 0]) - logits[rows, labels]).mean()
        probs /= total
        probs[rows, labels] -= 1.0
        glogits = probs
        glogits /= len(labels)
        gh2 = glogits @ w3.T
        gh2 *= h2 > 0
        gh1 = gh2 @ w2.T
        gh1 *= h1 > 0
        grads = (x.T @ gh1, gh1.sum(0), h1.T @ gh2, gh2.sum(0), h2.T @ glogits, glogits.sum(0))
        for param, grad in zip(params, grads, strict=True):
            grad *= lr
            param -= grad
        return loss, params

    return step


def setup_fluidtape(config, data):
    tape, ops, layers, optim = common.fluidtape(["softmax_with_cross_entropy"])
    sizes = config["sizes"]
    acts = ["relu"] * (len(sizes) - 2) + [None]
    shapes = zip(sizes[:-1], sizes[1:], acts, strict=True)
    stack = [layers.Linear(fan_in, fan_out, act=act) for fan_in, fan_out, act in shapes]
    params = [p for layer in stack for p in layer.params()]
    for param, value in zip(params, common.copies(data["params"]), strict=True):
        param.set_value(value)
    x = tape.Variable(data["x"].copy())
    label = tape.Variable(data["labels"].reshape(-1, 1).copy())
    sgd = optim.SGD(lr=config["lr"])

    def step():
        tape.reset_global_tape()
        h = x
        for layer in stack:
            h = layer(h)
        _, loss = ops.softmax_with_cross_entropy(h, label)
        loss = ops.mean(loss)
        tape.backward(loss)
        sgd(params)
        return loss, params

    return step


def setup_torch(config, data):
    torch = common.torch()
    sizes = config["sizes"]
    modules = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        modules += [torch.nn.Linear(fan_in, fan_out), torch.nn.ReLU()]
    model = torch.nn.Sequential(*modules[:-1])
    linears = modules[::2]
    with torch.no_grad():
        values = common.copies(data["params"])
        for layer, w, b in zip(linears, values[::2], values[1::2], strict=True):
            layer.weight.copy_(torch.from_numpy(w.T))
            layer.bias.copy_(torch.from_numpy(b))
    x, labels = torch.tensor(data["x"]), torch.tensor(data["labels"])
    sgd = torch.optim.SGD(model.parameters(), lr=config["lr"])
    results = [r for layer in linears for r in (common.Transposed(layer.weight), layer.bias)]

    def step():
        sgd.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        loss.backward()
        sgd.step()
        return loss, results

    return step


def setup_autograd(config, data):
    autograd, anp = common.autograd()
    from autograd.scipy.special import logsumexp

    x, labels, lr = data["x"], data["labels"], config["lr"]
    params = common.copies(data["params"])
    rows = np.arange(len(labels))

    def loss_of(params):
        h = x
        for i in range(0, len(params), 2):
            h = anp.dot(h, params[i]) + params[i + 1]
            if i + 2 < len(params):
                h = anp.maximum(h, 0.0)
        return anp.mean(logsumexp(h, axis=1) - h[rows, labels])

    value_and_grad = autograd.value_and_grad(loss_of)

    def step():
        loss, grads = value_and_grad(params)
        for param, grad in zip(params, grads, strict=True):
            param -= lr * grad
        return loss, params

    return step


IMPLEMENTATIONS = {
    "numpy": setup_numpy,
    "fluidtape": setup_fluidtape,
    "torch": setup_torch,
    "autograd": setup_autograd,
}
