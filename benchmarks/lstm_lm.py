"""Workload 'lstm_lm': one SGD step of an LSTM language model, as a user writes it with a cell.

Embedding (vocab 2000, dim 64) -> LSTMCell (hidden 128) over 20 steps in a Python loop, batch 16
-> the hidden states stacked -> linear to the vocabulary -> softmax cross-entropy against the
next token (mean) -> backward -> SGD. Parameter layouts: embedding (V, E), the cell as PyTorch's,
output weight (H, V) (the seed's Linear layout).
"""

from __future__ import annotations

import numpy as np

from benchmarks import common, lstm

NAME = "lstm_lm"
TITLE = "LSTM LM step: embedding 2000x64, LSTMCell 128 x 20 steps, batch 16, linear, CE, SGD"
UNIT = "ms/step"
DEFAULT = {"vocab": 2000, "embed": 64, "hidden": 128, "batch": 16, "steps": 20, "lr": 0.1}
TINY = {"vocab": 7, "embed": 3, "hidden": 4, "batch": 2, "steps": 3, "lr": 0.5}
TARGET = ("torch", 1.1)  # issue 9
LAZY_TARGET = ("torch", 0.8)  # issue 9
TRAINING = True


def scale(config):
    return 1e3


def make_data(config, seed=0):
    rng = np.random.default_rng(seed)
    vocab, embed, hidden = config["vocab"], config["embed"], config["hidden"]
    params = [(0.1 * rng.standard_normal((vocab, embed))).astype(np.float32)]
    params += lstm.make_data({"steps": 0, "batch": 0, "input": embed, "hidden": hidden}, seed + 1)[
        "params"
    ]
    params += [common.uniform(rng, (hidden, vocab), hidden), common.uniform(rng, (vocab,), hidden)]
    tokens = rng.integers(0, vocab, (config["steps"] + 1, config["batch"])).astype(np.int64)
    return {"inputs": tokens[:-1], "targets": tokens[1:], "params": params}


def setup_numpy(config, data):
    """The floor: the numpy cell of the lstm workload, output layer and embedding by hand."""
    inputs, targets, lr = data["inputs"], data["targets"].reshape(-1), config["lr"]
    params = common.copies(data["params"])
    table, w_ih, w_hh, b_ih, b_hh, w_out, b_out = params
    zeros = np.zeros((config["batch"], config["hidden"]), np.float32)
    rows = np.arange(len(targets))

    def step():
        h, c, bias, saved, hs = zeros, zeros, b_ih + b_hh, [], []
        for x in table[inputs]:
            h, c, state = lstm.cell_forward(x, h, c, w_ih.T, w_hh.T, bias)
            saved.append(state)
            hs.append(h)
        flat = np.concatenate(hs)
        logits = flat @ w_out
        logits += b_out
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        total = probs.sum(axis=1, keepdims=True)
        loss = (np.log(total[:, 0]) - logits[rows, targets]).mean()
        probs /= total
        probs[rows, targets] -= 1.0
        probs /= len(targets)
        gh_steps = np.split(probs @ w_out.T, len(hs))
        cell_grads, gxs = lstm.backward_through_time(saved, w_hh, gh_steps, w_ih)
        gtable = np.zeros_like(table)
        np.add.at(gtable, inputs.reshape(-1), np.concatenate(gxs))
        grads = [gtable, *cell_grads, flat.T @ probs, probs.sum(0)]
        for param, grad in zip(params, grads, strict=True):
            grad *= lr
            param -= grad
        return loss, params

    return step


def setup_fluidtape(config, data):
    tape, ops, layers, optim = common.fluidtape(
        ["softmax_with_cross_entropy", "stack"], ["Embedding", "LSTMCell"]
    )
    embedding = layers.Embedding(config["vocab"], config["embed"])
    cell = layers.LSTMCell(config["embed"], config["hidden"])
    output = layers.Linear(config["hidden"], config["vocab"])
    params = [
        embedding.weight,
        cell.weight_ih,
        cell.weight_hh,
        cell.bias_ih,
        cell.bias_hh,
        output.weight,
        output.bias,
    ]
    for param, value in zip(params, common.copies(data["params"]), strict=True):
        param.set_value(value)
    inputs = tape.Variable(data["inputs"].copy())
    targets = tape.Variable(data["targets"].reshape(-1, 1).copy())
    zeros = tape.Variable(np.zeros((config["batch"], config["hidden"]), np.float32))
    sgd = optim.SGD(lr=config["lr"])

    def step():
        tape.reset_global_tape()
        embedded = embedding(inputs)
        h, c, hs = zeros, zeros, []
        for t in range(embedded.shape[0]):
            h, c = cell(embedded[t], (h, c))
            hs.append(h)
        logits = output(ops.stack(hs, axis=0).reshape(-1, config["hidden"]))
        _, loss = ops.softmax_with_cross_entropy(logits, targets)
        loss = ops.mean(loss)
        tape.backward(loss)
        sgd(params)
        return loss, params

    return step


def setup_torch(config, data):
    torch = common.torch()
    embedding = torch.nn.Embedding(config["vocab"], config["embed"])
    cell = torch.nn.LSTMCell(config["embed"], config["hidden"])
    output = torch.nn.Linear(config["hidden"], config["vocab"])
    params = [
        embedding.weight,
        cell.weight_ih,
        cell.weight_hh,
        cell.bias_ih,
        cell.bias_hh,
        output.weight,
        output.bias,
    ]
    values = common.copies(data["params"])
    values[5] = values[5].T
    with torch.no_grad():
        for param, value in zip(params, values, strict=True):
            param.copy_(torch.from_numpy(value))
    inputs = torch.tensor(data["inputs"])
    targets = torch.tensor(data["targets"].reshape(-1))
    zeros = torch.zeros(config["batch"], config["hidden"])
    sgd = torch.optim.SGD(params, lr=config["lr"])
    results = params[:5] + [common.Transposed(output.weight), output.bias]

    def step():
        sgd.zero_grad(set_to_none=True)
        embedded = embedding(inputs)
        h, c, hs = zeros, zeros, []
        for t in range(embedded.shape[0]):
            h, c = cell(embedded[t], (h, c))
            hs.append(h)
        logits = output(torch.stack(hs).reshape(-1, config["hidden"]))
        loss = torch.nn.functional.cross_entropy(logits, targets)
        loss.backward()
        sgd.step()
        return loss, results

    return step


IMPLEMENTATIONS = {
    "numpy": setup_numpy,
    "fluidtape": setup_fluidtape,
    "torch": setup_torch,
}
