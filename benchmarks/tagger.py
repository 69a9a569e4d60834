"""Workload 'tagger': a BiLSTM tagger written one sentence at a time, forward + backward.

32 sentences of random lengths 5-40 per step (vocabulary 1000, embedding 64, hidden 64 per
direction, 20 tags): a forward and a backward LSTM over each sentence's embeddings, each token's
tag scores ``h_fwd @ Wo_f + h_bwd @ Wo_b + bo``, and the mean cross-entropy over all tokens.
The LSTM step is ``z = x @ Wx + h @ Wh + b``, gates i, f, g, o sliced from z (sigmoid, tanh for
g), ``c = f*c + i*g``, ``h = o * tanh(c)``. Each step draws its 32 sentences at random from a pool
of 128 (``per_example.sampling``), so every tape has a new structure.

``fluidtape`` (eager), ``fluidtape-lazy`` (lazy, no autobatching), ``fluidtape-autobatch`` and
``torch`` loop over sentences and tokens the way a DyNet user writes them (``fluidtape-traced``:
the LSTM step and a token's loss under ``tape.traced``); the floor, ``numpy``,
runs all sentences padded as one batch per time step with a hand-written backward through time
(each backward LSTM reads its sentence reversed, so padding never reaches a real token).
"""

from __future__ import annotations

import numpy as np

from benchmarks import common, per_example

NAME = "tagger"
TITLE = "BiLSTM tagger, 32 sentences of 5-40 words, emb 64, hidden 64, forward + backward"
UNIT = "ms/step"
DEFAULT = {
    "sentences": 32,
    "length": (5, 40),
    "vocab": 1000,
    "emb": 64,
    "hidden": 64,
    "tags": 20,
    "batches": 4,
}
TINY = {
    "sentences": 3,
    "length": (2, 5),
    "vocab": 11,
    "emb": 3,
    "hidden": 4,
    "tags": 5,
    "batches": 2,
}
TARGET = None
# Issue 11's target for the autobatched per-example model: 5x faster than eager per example
# (its other, <= 1.3-1.5x the hand-batched floor, is in the README's results).
TARGETS = {"fluidtape-traced": ("fluidtape", 0.2)}
TRAINING = False


def scale(config):
    return 1e3


def make_data(config, seed=0):
    rng = np.random.default_rng(seed)
    (lo, hi), vocab, tags = config["length"], config["vocab"], config["tags"]
    emb, hidden = config["emb"], config["hidden"]
    batches, labels = [], []
    for _ in range(config["batches"]):
        lengths = rng.integers(lo, hi + 1, size=config["sentences"])
        batches.append([rng.integers(vocab, size=n).tolist() for n in lengths])
        labels.append([rng.integers(tags, size=n).tolist() for n in lengths])
    params = [rng.standard_normal((vocab, emb)).astype(np.float32) * 0.5]
    for _ in range(2):  # forward, backward LSTM
        params += [
            common.uniform(rng, (emb, 4 * hidden), hidden),
            common.uniform(rng, (hidden, 4 * hidden), hidden),
            common.uniform(rng, (4 * hidden,), hidden),
        ]
    params += [
        common.uniform(rng, (hidden, tags), 2 * hidden),
        common.uniform(rng, (hidden, tags), 2 * hidden),
        common.uniform(rng, (tags,), 2 * hidden),
    ]
    return {"batches": batches, "labels": labels, "params": params}


# ---- the floor: padded batches in numpy -------------------------------------------------------


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def lstm_forward(xs, wx, wh, b):
    """xs (L, B, E) -> hs (L, B, H) and what lstm_backward needs."""
    steps, batch, hidden = xs.shape[0], xs.shape[1], wh.shape[0]
    h = c = np.zeros((batch, hidden), np.float32)
    proj = (xs.reshape(steps * batch, -1) @ wx).reshape(steps, batch, -1) + b
    hs, saved = [], []
    for t in range(steps):
        z = proj[t] + h @ wh
        i, f, o = (_sigmoid(z[:, k * hidden : (k + 1) * hidden]) for k in (0, 1, 3))
        g = np.tanh(z[:, 2 * hidden : 3 * hidden])
        c_prev, h_prev = c, h
        c = f * c + i * g
        tc = np.tanh(c)
        h = o * tc
        hs.append(h)
        saved.append((h_prev, c_prev, i, f, g, o, tc))
    return np.stack(hs), (xs, wx, wh, saved)


def lstm_backward(ghs, cache):
    """Gradients (gxs, gwx, gwh, gb) from the gradients of every h (L, B, H)."""
    xs, wx, wh, saved = cache
    hidden = wh.shape[0]
    gh_next = gc_next = np.zeros_like(ghs[0])
    gzs = np.empty((len(saved), ghs.shape[1], 4 * hidden), np.float32)
    gwh = np.zeros_like(wh)
    for t in range(len(saved) - 1, -1, -1):
        h_prev, c_prev, i, f, g, o, tc = saved[t]
        gh = ghs[t] + gh_next
        gc = gc_next + gh * o * (1 - tc * tc)
        gz = gzs[t]
        gz[:, :hidden] = gc * g * i * (1 - i)
        gz[:, hidden : 2 * hidden] = gc * c_prev * f * (1 - f)
        gz[:, 2 * hidden : 3 * hidden] = gc * i * (1 - g * g)
        gz[:, 3 * hidden :] = gh * tc * o * (1 - o)
        gwh += h_prev.T @ gz
        gh_next, gc_next = gz @ wh.T, gc * f
    flat = gzs.reshape(-1, 4 * hidden)
    gxs = (flat @ wx.T).reshape(xs.shape)
    return gxs, xs.reshape(flat.shape[0], -1).T @ flat, gwh, flat.sum(axis=0)


def setup_numpy(config, data):
    params = common.copies(data["params"])
    next_batch = per_example.sampling(data)

    def step():
        sentences, tags = next_batch()
        emb, wo_f, wo_b, bo = params[0], params[7], params[8], params[9]
        lengths = np.array([len(s) for s in sentences])
        steps, batch = int(lengths.max()), len(sentences)
        valid = np.arange(steps)[:, None] < lengths[None, :]  # (L, B)
        words = np.zeros((steps, batch), np.int64)
        reverse = np.zeros((steps, batch), np.int64)  # time index of the reversed position
        labels = np.zeros((steps, batch), np.int64)
        for k, (sentence, tag) in enumerate(zip(sentences, tags, strict=True)):
            n = len(sentence)
            words[:n, k], labels[:n, k] = sentence, tag
            reverse[:n, k] = np.arange(n - 1, -1, -1)
        cols = np.broadcast_to(np.arange(batch), (steps, batch))
        hf, cache_f = lstm_forward(emb[words], *params[1:4])
        hb_rev, cache_b = lstm_forward(emb[words[reverse, cols]], *params[4:7])
        hb = hb_rev[reverse, cols]  # back in sentence order (valid positions)
        logits = hf @ wo_f + hb @ wo_b + bo
        probs = np.exp(logits - logits.max(axis=2, keepdims=True))
        probs /= probs.sum(axis=2, keepdims=True)
        count = int(valid.sum())
        picked = np.take_along_axis(probs, labels[..., None], axis=2)[..., 0]
        loss = -np.log(picked[valid]).sum() / count
        glogits = probs
        np.put_along_axis(glogits, labels[..., None], picked[..., None] - 1, axis=2)
        glogits *= valid[..., None] / count
        grads = [np.zeros_like(p) for p in params]
        flat_g = glogits.reshape(-1, glogits.shape[2])
        grads[7] = hf.reshape(flat_g.shape[0], -1).T @ flat_g
        grads[8] = hb.reshape(flat_g.shape[0], -1).T @ flat_g
        grads[9] = flat_g.sum(axis=0)
        ghf = glogits @ wo_f.T
        ghb = np.zeros_like(ghf)
        ghb[reverse[valid], cols[valid]] = (glogits @ wo_b.T)[valid]
        gx_f, *grads[1:4] = lstm_backward(ghf, cache_f)
        gx_b, *grads[4:7] = lstm_backward(ghb, cache_b)
        np.add.at(grads[0], words[valid], gx_f[valid])
        np.add.at(grads[0], words[reverse, cols][valid], gx_b[valid])
        return loss, grads

    return step


# ---- fluidtape, one sentence at a time ----------------------------------------------------


def setup_fluidtape(config, data, lazy=None, traced=False):
    """Eager per sentence; ``lazy``: the keyword arguments of tape.lazy for the lazy variants;
    ``traced``: the LSTM step and a token's loss decorated with ``tape.traced`` (one op a call
    in lazy mode)."""
    tape, ops, layers, _ = common.fluidtape(("lookup_table", "slice"), ("Embedding",))
    hidden, next_batch = config["hidden"], per_example.sampling(data)
    embed, params = per_example.embedding_and_params(config, data)
    lstms, (wo_f, wo_b, bo) = (params[1:4], params[4:7]), params[7:]
    loss_fn = layers.CrossEntropyLoss()
    zeros = tape.Variable(np.zeros(hidden, np.float32))

    def lstm_step(direction, x, h, c):
        wx, wh, b = lstms[direction]
        z = ops.matmul(x, wx) + ops.matmul(h, wh) + b
        i, f = ops.sigmoid(z[:hidden]), ops.sigmoid(z[hidden : 2 * hidden])
        g, o = ops.tanh(z[2 * hidden : 3 * hidden]), ops.sigmoid(z[3 * hidden :])
        c = f * c + i * g
        return o * ops.tanh(c), c

    def token_loss(h_f, h_b, label):
        scores = ops.matmul(h_f, wo_f) + ops.matmul(h_b, wo_b) + bo
        return loss_fn(scores, label)

    if traced:
        lstm_step, token_loss = tape.traced(lstm_step), tape.traced(token_loss)

    def run_lstm(xs, direction):
        h = c = zeros
        hs = []
        for x in xs:
            h, c = lstm_step(direction, x, h, c)
            hs.append(h)
        return hs

    def example_losses():
        sentences, tags = next_batch()
        losses = []
        for sentence, labels in zip(sentences, tags, strict=True):
            xs = [embed(np.array(word)) for word in sentence]
            hf = run_lstm(xs, 0)
            hb = run_lstm(xs[::-1], 1)[::-1]
            for h_f, h_b, label in zip(hf, hb, labels, strict=True):
                losses.append(token_loss(h_f, h_b, np.array(label)))
        return losses

    return per_example.training_step(params, example_losses, lazy)


def setup_fluidtape_lazy(config, data):
    return setup_fluidtape(config, data, per_example.LAZY)


def setup_fluidtape_autobatch(config, data):
    return setup_fluidtape(config, data, per_example.AUTOBATCH)


def setup_fluidtape_autobatch_always(config, data):
    return setup_fluidtape(config, data, per_example.AUTOBATCH_ALWAYS)


def setup_fluidtape_traced(config, data):
    return setup_fluidtape(config, data, per_example.AUTOBATCH, traced=True)


# ---- PyTorch, one sentence at a time ------------------------------------------------------


def setup_torch(config, data):
    torch = common.torch()
    hidden, next_batch = config["hidden"], per_example.sampling(data)
    params = [torch.tensor(v, requires_grad=True) for v in common.copies(data["params"])]
    emb, forward_lstm, backward_lstm, (wo_f, wo_b, bo) = (
        params[0],
        params[1:4],
        params[4:7],
        params[7:],
    )
    zeros = torch.zeros(hidden)

    def run_lstm(xs, weights):
        wx, wh, b = weights
        h = c = zeros
        hs = []
        for x in xs:
            z = x @ wx + h @ wh + b
            i, f = torch.sigmoid(z[:hidden]), torch.sigmoid(z[hidden : 2 * hidden])
            g, o = torch.tanh(z[2 * hidden : 3 * hidden]), torch.sigmoid(z[3 * hidden :])
            c = f * c + i * g
            h = o * torch.tanh(c)
            hs.append(h)
        return hs

    def step():
        sentences, tags = next_batch()
        for param in params:
            param.grad = None
        losses = []
        for sentence, labels in zip(sentences, tags, strict=True):
            xs = [emb[word] for word in sentence]
            hf = run_lstm(xs, forward_lstm)
            hb = run_lstm(xs[::-1], backward_lstm)[::-1]
            for h_f, h_b, label in zip(hf, hb, labels, strict=True):
                scores = h_f @ wo_f + h_b @ wo_b + bo
                losses.append(torch.nn.functional.cross_entropy(scores, torch.tensor(label)))
        loss = torch.stack(losses).mean()
        loss.backward()
        return loss, [p.grad for p in params]

    return step


IMPLEMENTATIONS = {
    "numpy": setup_numpy,
    "fluidtape": setup_fluidtape,
    "fluidtape-lazy": setup_fluidtape_lazy,
    "fluidtape-autobatch": setup_fluidtape_autobatch,
    "fluidtape-autobatch-always": setup_fluidtape_autobatch_always,
    "fluidtape-traced": setup_fluidtape_traced,
    "torch": setup_torch,
}
