"""Workload 'tree_rnn': examples/tree_rnn.py's model written one tree at a time, fwd + bwd.

64 random expression trees (1-8 operators) per step, embedding dim 64: a digit leaf is an
embedding, an operator node applies its operator's composer (Linear(128,128)+ReLU,
Linear(128,64)+tanh) to its children's concatenated vectors, a Linear classifies the root, and
the loss is the mean cross-entropy over the trees. Each step draws its 64 trees at random from
a pool of 512 (``per_example.sampling``), so every tape has a new structure, as in training on a
stream of trees.

The fluidtape and torch implementations are written per example, the way a DyNet user writes
them (Python recursion over each tree). ``fluidtape-lazy`` runs the same code in lazy mode
without autobatching, ``fluidtape-autobatch`` with lazy mode's default ``autobatch="auto"``
(DyNet's on-the-fly batching where it measures faster) and ``fluidtape-autobatch-always`` with
every run batched (all interpreted, as a new structure is); ``fluidtape-traced`` decorates
the leaf, the composition and a tree's loss with ``tape.traced``. The floor, ``numpy``, is the same
model hand-batched: all nodes of one height and operator in one product, with a hand-written
backward.
"""

from __future__ import annotations

import numpy as np

from benchmarks import common, per_example

NAME = "tree_rnn"
TITLE = "Tree RNN (examples/tree_rnn.py), 64 trees of 1-8 operators, dim 64, forward + backward"
UNIT = "ms/step"
DEFAULT = {"trees": 64, "dim": 64, "min_ops": 1, "max_ops": 8, "batches": 8}
TINY = {"trees": 3, "dim": 4, "min_ops": 1, "max_ops": 3, "batches": 2}
TARGET = None
# Issue 11's target for the autobatched per-example model: 5x faster than eager per example
# (its other, <= 1.3-1.5x the hand-batched floor, is in the README's results).
TARGETS = {"fluidtape-traced": ("fluidtape", 0.2)}
TRAINING = False
OPERATORS = ("+", "*")


def scale(config):
    return 1e3


def random_tree(rng, n_ops):
    """A digit (int) or (operator, left, right) with ``n_ops`` operators split at random."""
    if n_ops == 0:
        return int(rng.integers(10))
    left = int(rng.integers(n_ops))
    operator = OPERATORS[int(rng.integers(2))]
    return (operator, random_tree(rng, left), random_tree(rng, n_ops - 1 - left))


def value(tree):
    if isinstance(tree, int):
        return tree
    operator, left, right = tree
    return value(left) + value(right) if operator == "+" else value(left) * value(right)


def make_data(config, seed=0):
    rng = np.random.default_rng(seed)
    dim, (lo, hi) = config["dim"], (config["min_ops"], config["max_ops"])
    batches = [
        [random_tree(rng, int(rng.integers(lo, hi + 1))) for _ in range(config["trees"])]
        for _ in range(config["batches"])
    ]
    params = [rng.standard_normal((10, dim)).astype(np.float32)]
    for _ in OPERATORS:  # composer: W1 (2d, 2d), b1, W2 (2d, d), b2 in Linear's (in, out) layout
        params += [
            common.uniform(rng, (2 * dim, 2 * dim), 2 * dim),
            common.uniform(rng, (2 * dim,), 2 * dim),
            common.uniform(rng, (2 * dim, dim), 2 * dim),
            common.uniform(rng, (dim,), 2 * dim),
        ]
    params += [common.uniform(rng, (dim, 10), dim), common.uniform(rng, (10,), dim)]
    labels = [[value(t) % 10 for t in batch] for batch in batches]
    return {"batches": batches, "labels": labels, "params": params}


# ---- the floor: hand-batched numpy ----------------------------------------------------------


def _schedule(trees):
    """Nodes of all trees numbered; leaves (ids, digits); per (height, operator) the internal
    nodes (ids, left ids, right ids), lowest height first; the root ids."""
    leaves, leaf_digits, groups, roots = [], [], {}, []

    def visit(tree):
        node = visit.count
        visit.count += 1
        if isinstance(tree, int):
            leaves.append(node)
            leaf_digits.append(tree)
            return node, 0
        operator, left, right = tree
        (left_id, lh), (right_id, rh) = visit(left), visit(right)
        height = 1 + max(lh, rh)
        ids, lefts, rights = groups.setdefault((height, OPERATORS.index(operator)), ([], [], []))
        ids.append(node)
        lefts.append(left_id)
        rights.append(right_id)
        return node, height

    visit.count = 0
    for tree in trees:
        roots.append(visit(tree)[0])
    order = [(key[1], *(np.array(x) for x in groups[key])) for key in sorted(groups)]
    return visit.count, np.array(leaves), np.array(leaf_digits), order, np.array(roots)


def setup_numpy(config, data):
    params = common.copies(data["params"])
    next_batch, dim = per_example.sampling(data), config["dim"]

    def step():
        trees, labels = next_batch()
        emb, composers, (wc, bc) = params[0], [params[1:5], params[5:9]], params[9:]
        count, leaves, digits, order, roots = _schedule(trees)
        states = np.zeros((count, dim), np.float32)
        states[leaves] = emb[digits]
        saved = []
        for op, ids, lefts, rights in order:
            w1, b1, w2, b2 = composers[op]
            children = np.concatenate([states[lefts], states[rights]], axis=1)
            hidden = np.maximum(children @ w1 + b1, 0)
            out = np.tanh(hidden @ w2 + b2)
            states[ids] = out
            saved.append((op, ids, lefts, rights, children, hidden, out))
        top = states[roots]
        logits = top @ wc + bc
        shifted = logits - logits.max(axis=1, keepdims=True)
        probs = np.exp(shifted)
        probs /= probs.sum(axis=1, keepdims=True)
        rows = np.arange(len(trees))
        loss = -np.log(probs[rows, labels]).mean()
        glogits = probs
        glogits[rows, labels] -= 1
        glogits /= len(trees)
        grads = [np.zeros_like(p) for p in params]
        grads[9], grads[10] = top.T @ glogits, glogits.sum(axis=0)
        gstates = np.zeros_like(states)
        gstates[roots] = glogits @ wc.T
        for op, ids, lefts, rights, children, hidden, out in reversed(saved):
            w1, _, w2, _ = composers[op]
            g1, gb1, g2, gb2 = grads[1 + 4 * op : 5 + 4 * op]
            gz2 = gstates[ids] * (1 - out * out)
            g2 += hidden.T @ gz2
            gb2 += gz2.sum(axis=0)
            gz1 = (gz2 @ w2.T) * (hidden > 0)
            g1 += children.T @ gz1
            gb1 += gz1.sum(axis=0)
            gchildren = gz1 @ w1.T
            gstates[lefts] += gchildren[:, :dim]  # (each node has one parent: no repeats)
            gstates[rights] += gchildren[:, dim:]
        np.add.at(grads[0], digits, gstates[leaves])
        return loss, grads

    return step


# ---- fluidtape, one tree at a time --------------------------------------------------------


def _fluidtape_model(config, data, traced=False):
    """``traced``: the leaf and the composition decorated with ``tape.traced`` (one op a call
    in lazy mode)."""
    tape, ops, layers, _ = common.fluidtape(("lookup_table", "concat"), ("Embedding", "Linear"))
    dim = config["dim"]
    leaf = layers.Embedding(10, dim)
    composers = [
        layers.Sequential(
            layers.Linear(2 * dim, 2 * dim, act="relu"), layers.Linear(2 * dim, dim, act="tanh")
        )
        for _ in OPERATORS
    ]
    classify = layers.Linear(dim, 10)
    params = leaf.params() + [p for c in composers for p in c.params()] + classify.params()
    for param, array in zip(params, common.copies(data["params"]), strict=True):
        param.set_value(array)

    def embed(word):
        return leaf(word)

    def compose(operator, left, right):
        return composers[operator](ops.concat([left, right], axis=0))

    if traced:
        embed, compose = tape.traced(embed), tape.traced(compose)

    def encode(tree):
        if isinstance(tree, int):
            return embed(np.array(tree))
        operator, left, right = tree
        return compose(OPERATORS.index(operator), encode(left), encode(right))

    return tape, ops, layers, encode, classify, params


def setup_fluidtape(config, data, lazy=None, traced=False):
    """Eager per example; ``lazy``: the keyword arguments of tape.lazy for the lazy variants;
    ``traced``: see ``_fluidtape_model``."""
    tape, ops, layers, encode, classify, params = _fluidtape_model(config, data, traced)
    loss_fn, next_batch = layers.CrossEntropyLoss(), per_example.sampling(data)

    def tree_loss(root, label):
        return loss_fn(classify(root), label)

    if traced:
        tree_loss = tape.traced(tree_loss)

    def example_losses():
        trees, labels = next_batch()
        return [
            tree_loss(encode(tree), np.array(label))
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
    dim, values = config["dim"], common.copies(data["params"])
    leaf = torch.nn.Embedding(10, dim)
    composers = [
        torch.nn.Sequential(
            torch.nn.Linear(2 * dim, 2 * dim),
            torch.nn.ReLU(),
            torch.nn.Linear(2 * dim, dim),
            torch.nn.Tanh(),
        )
        for _ in OPERATORS
    ]
    classify = torch.nn.Linear(dim, 10)
    linears = [m for c in composers for m in (c[0], c[2])] + [classify]
    with torch.no_grad():
        leaf.weight.copy_(torch.from_numpy(values[0]))
        for layer, w, b in zip(linears, values[1::2], values[2::2], strict=True):
            layer.weight.copy_(torch.from_numpy(w.T))
            layer.bias.copy_(torch.from_numpy(b))
    params = [leaf.weight] + [p for layer in linears for p in (layer.weight, layer.bias)]
    next_batch = per_example.sampling(data)

    def encode(tree):
        if isinstance(tree, int):
            return leaf(torch.tensor(tree))
        operator, left, right = tree
        return composers[OPERATORS.index(operator)](torch.cat([encode(left), encode(right)]))

    def step():
        trees, labels = next_batch()
        for param in params:
            param.grad = None
        losses = [
            torch.nn.functional.cross_entropy(classify(encode(tree)), torch.tensor(label))
            for tree, label in zip(trees, labels, strict=True)
        ]
        loss = torch.stack(losses).mean()
        loss.backward()
        grads = [params[0].grad] + [
            common.Transposed(p.grad) if p.dim() == 2 else p.grad for p in params[1:]
        ]
        return loss, grads

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
