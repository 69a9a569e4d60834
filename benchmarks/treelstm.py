"""Workload 'treelstm': a binary Tree-LSTM (Tai et al. 2015) written one tree at a time.

64 random binary trees of 10-40 leaves per step (vocabulary 1000, embedding 64, hidden 64), root
classification into 5 classes, mean cross-entropy, forward + backward. A leaf reads its word's
embedding: ``i, o, u = split(x @ W + b)``, ``c = i*u``; an internal node reads its children:
``i, f_l, f_r, o, u = split(h_l @ U_l + h_r @ U_r + b)``, ``c = i*u + f_l*c_l + f_r*c_r``;
``h = o * tanh(c)`` (sigmoid gates, tanh ``u``). Each step draws its 64 trees at random from
a pool of 256 (``per_example.sampling``), so every tape has a new structure.

``fluidtape`` (eager), ``fluidtape-lazy`` (lazy, no autobatching), ``fluidtape-autobatch`` and
``torch`` are written per tree the way a DyNet user writes them; ``fluidtape-traced`` is the same
code with its leaf, node and tree loss decorated with ``tape.traced`` (one op a call, calls
batched as the function vectorised); the floor, ``numpy``, is the same model hand-batched by
node height with a hand-written backward.
"""

from __future__ import annotations

import numpy as np

from benchmarks import common, per_example

NAME = "treelstm"
TITLE = "binary Tree-LSTM, 64 trees of 10-40 leaves, emb 64, hidden 64, forward + backward"
UNIT = "ms/step"
DEFAULT = {"trees": 64, "leaves": (10, 40), "vocab": 1000, "emb": 64, "hidden": 64, "batches": 4}
TINY = {"trees": 3, "leaves": (2, 5), "vocab": 11, "emb": 3, "hidden": 4, "batches": 2}
TARGET = None
# Issue 11's target for the autobatched per-example model: 10x faster than eager per example
# (its other, <= 1.3-1.5x the hand-batched floor, is in the README's results).
TARGETS = {"fluidtape-traced": ("fluidtape", 0.1)}
TRAINING = False
CLASSES = 5


def scale(config):
    return 1e3


def random_tree(rng, leaves, vocab):
    """A word id (int) or (left, right) with ``leaves`` leaves split at random."""
    if leaves == 1:
        return int(rng.integers(vocab))
    left = int(rng.integers(1, leaves))
    return (random_tree(rng, left, vocab), random_tree(rng, leaves - left, vocab))


def make_data(config, seed=0):
    rng = np.random.default_rng(seed)
    (lo, hi), vocab = config["leaves"], config["vocab"]
    emb, hidden = config["emb"], config["hidden"]
    batches = [
        [random_tree(rng, int(rng.integers(lo, hi + 1)), vocab) for _ in range(config["trees"])]
        for _ in range(config["batches"])
    ]
    labels = [[int(rng.integers(CLASSES)) for _ in batch] for batch in batches]
    params = [
        rng.standard_normal((vocab, emb)).astype(np.float32) * 0.5,
        common.uniform(rng, (emb, 3 * hidden), emb),
        common.uniform(rng, (3 * hidden,), emb),
        common.uniform(rng, (hidden, 5 * hidden), hidden),
        common.uniform(rng, (hidden, 5 * hidden), hidden),
        common.uniform(rng, (5 * hidden,), hidden),
        common.uniform(rng, (hidden, CLASSES), hidden),
        common.uniform(rng, (CLASSES,), hidden),
    ]
    return {"batches": batches, "labels": labels, "params": params}


# ---- the floor: hand-batched numpy ----------------------------------------------------------


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _schedule(trees):
    """(node count, leaf ids, words, [(ids, lefts, rights)] by height, root ids)."""
    leaves, words, levels, roots = [], [], {}, []
    count = 0

    def visit(tree):
        nonlocal count
        node = count
        count += 1
        if isinstance(tree, int):
            leaves.append(node)
            words.append(tree)
            return node, 0
        (left, lh), (right, rh) = visit(tree[0]), visit(tree[1])
        ids, lefts, rights = levels.setdefault(1 + max(lh, rh), ([], [], []))
        ids.append(node)
        lefts.append(left)
        rights.append(right)
        return node, 1 + max(lh, rh)

    for tree in trees:
        roots.append(visit(tree)[0])
    order = [tuple(np.array(x) for x in levels[h]) for h in sorted(levels)]
    return count, np.array(leaves), np.array(words), order, np.array(roots)


def setup_numpy(config, data):
    params = common.copies(data["params"])
    next_batch, hidden = per_example.sampling(data), config["hidden"]

    def step():
        trees, labels = next_batch()
        emb, wx, bx, ul, ur, b, wc, bc = params
        count, leaves, words, order, roots = _schedule(trees)
        hs = np.zeros((count, hidden), np.float32)
        cs = np.zeros_like(hs)
        x = emb[words]
        z = x @ wx + bx
        i, o, u = _sigmoid(z[:, :hidden]), _sigmoid(z[:, hidden:-hidden]), np.tanh(z[:, -hidden:])
        cs[leaves] = c = i * u
        hs[leaves] = o * np.tanh(c)
        leaf_saved, saved = (x, i, o, u, np.tanh(c)), []
        for ids, lefts, rights in order:
            z = hs[lefts] @ ul + hs[rights] @ ur + b
            gates = _sigmoid(z[:, : 4 * hidden])
            u = np.tanh(z[:, 4 * hidden :])
            i, fl, fr, o = np.split(gates, 4, axis=1)
            cs[ids] = c = i * u + fl * cs[lefts] + fr * cs[rights]
            tc = np.tanh(c)
            hs[ids] = o * tc
            saved.append((ids, lefts, rights, gates, u, tc))
        top = hs[roots]
        logits = top @ wc + bc
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        rows = np.arange(len(trees))
        loss = -np.log(probs[rows, labels]).mean()
        glogits = probs
        glogits[rows, labels] -= 1
        glogits /= len(trees)
        grads = [np.zeros_like(p) for p in params]
        grads[6], grads[7] = top.T @ glogits, glogits.sum(axis=0)
        gh, gc = np.zeros_like(hs), np.zeros_like(cs)
        gh[roots] = glogits @ wc.T
        for ids, lefts, rights, gates, u, tc in reversed(saved):
            i, fl, fr, o = np.split(gates, 4, axis=1)
            ghere = gh[ids]
            gcell = gc[ids] + ghere * o * (1 - tc * tc)
            gfl, gfr = gcell * cs[lefts], gcell * cs[rights]
            ggates = np.concatenate([gcell * u, gfl, gfr, ghere * tc], axis=1)
            gz = np.concatenate([ggates * gates * (1 - gates), gcell * i * (1 - u * u)], axis=1)
            grads[3] += hs[lefts].T @ gz
            grads[4] += hs[rights].T @ gz
            grads[5] += gz.sum(axis=0)
            gc[lefts] += gcell * fl  # (each node has one parent: no repeated ids)
            gc[rights] += gcell * fr
            gh[lefts] += gz @ ul.T
            gh[rights] += gz @ ur.T
        x, i, o, u, tc = leaf_saved
        ghere = gh[leaves]
        gcell = gc[leaves] + ghere * o * (1 - tc * tc)
        gz = np.concatenate(
            [gcell * u * i * (1 - i), ghere * tc * o * (1 - o), gcell * i * (1 - u * u)], axis=1
        )
        grads[1] += x.T @ gz
        grads[2] += gz.sum(axis=0)
        np.add.at(grads[0], words, gz @ wx.T)
        return loss, grads

    return step


# ---- fluidtape, one tree at a time --------------------------------------------------------


def setup_fluidtape(config, data, lazy=None, traced=False):
    """Eager per tree; ``lazy``: the keyword arguments of tape.lazy for the lazy variants;
    ``traced``: the leaf and node functions decorated with ``tape.traced`` (one op a call)."""
    tape, ops, layers, _ = common.fluidtape(("lookup_table", "slice"), ("Embedding",))
    hidden, next_batch = config["hidden"], per_example.sampling(data)
    embed, params = per_example.embedding_and_params(config, data)
    _, wx, bx, ul, ur, b, wc, bc = params
    loss_fn = layers.CrossEntropyLoss()

    def leaf(word):
        z = ops.matmul(embed(word), wx) + bx
        i, o = ops.sigmoid(z[:hidden]), ops.sigmoid(z[hidden : 2 * hidden])
        c = i * ops.tanh(z[2 * hidden :])
        return o * ops.tanh(c), c

    def node(hl, cl, hr, cr):
        z = ops.matmul(hl, ul) + ops.matmul(hr, ur) + b
        i, fl = ops.sigmoid(z[:hidden]), ops.sigmoid(z[hidden : 2 * hidden])
        fr, o = ops.sigmoid(z[2 * hidden : 3 * hidden]), ops.sigmoid(z[3 * hidden : 4 * hidden])
        c = i * ops.tanh(z[4 * hidden :]) + fl * cl + fr * cr
        return o * ops.tanh(c), c

    if traced:
        leaf, node = tape.traced(leaf), tape.traced(node)

    def encode(tree):
        """(h, c) of ``tree``'s root, by recursion."""
        if isinstance(tree, int):
            return leaf(np.array(tree))
        return node(*encode(tree[0]), *encode(tree[1]))

    def tree_loss(h, label):
        return loss_fn(ops.matmul(h, wc) + bc, label)

    if traced:
        tree_loss = tape.traced(tree_loss)

    def example_losses():
        trees, labels = next_batch()
        return [
            tree_loss(encode(tree)[0], np.array(label))
            for tree, label in zip(trees, labels, strict=True)
        ]

    return per_example.training_step(params, example_losses, lazy)


def setup_fluidtape_lazy(config, data):
    return setup_fluidtape(config, data, per_example.LAZY)


def setup_fluidtape_autobatch(config, data):
    return setup_fluidtape(config, data, per_example.AUTOBATCH)


def setup_fluidtape_autobatch_always(config, data):
    return setup_fluidtape(config, data, per_example.AUTOBATCH_ALWAYS)


def setup_fluidtape_traced(config, data):
    return setup_fluidtape(config, data, per_example.AUTOBATCH, traced=True)


# ---- PyTorch, one tree at a time ----------------------------------------------------------


def setup_torch(config, data):
    torch = common.torch()
    hidden, next_batch = config["hidden"], per_example.sampling(data)
    params = [torch.tensor(v, requires_grad=True) for v in common.copies(data["params"])]
    emb, wx, bx, ul, ur, b, wc, bc = params
    sigmoid, tanh = torch.sigmoid, torch.tanh

    def encode(tree):
        if isinstance(tree, int):
            z = emb[tree] @ wx + bx
            i, o = sigmoid(z[:hidden]), sigmoid(z[hidden : 2 * hidden])
            c = i * tanh(z[2 * hidden :])
            return o * tanh(c), c
        (hl, cl), (hr, cr) = encode(tree[0]), encode(tree[1])
        z = hl @ ul + hr @ ur + b
        i, fl = sigmoid(z[:hidden]), sigmoid(z[hidden : 2 * hidden])
        fr, o = sigmoid(z[2 * hidden : 3 * hidden]), sigmoid(z[3 * hidden : 4 * hidden])
        c = i * tanh(z[4 * hidden :]) + fl * cl + fr * cr
        return o * tanh(c), c

    def step():
        trees, labels = next_batch()
        for param in params:
            param.grad = None
        losses = [
            torch.nn.functional.cross_entropy(encode(tree)[0] @ wc + bc, torch.tensor(label))
            for tree, label in zip(trees, labels, strict=True)
        ]
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
