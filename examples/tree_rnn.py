"""A recursive network over arithmetic expression trees: a different graph for every example.

The case DyNet was built for. Each example is a random binary tree of + and * over the digits
0..9, e.g. ((3 + 4) * (2 * 7)); the label is its value mod 10. The model follows the tree:
a digit is an embedding, an operator node composes its two children's vectors with that
operator's small network (shared by every node of every tree) applied to their concatenation,
and a Linear layer classifies the root vector. The Python recursion is the model; the tape
records whatever shape the tree has and is reset for every mini-batch of trees (processed one
by one). It prints the loss falling and the accuracy on held-out expressions against the
majority-class baseline, and on trees larger than any seen in training.

With ``--lazy`` each training step runs in lazy mode, where the scheduler autobatches: the
trees are still written one at a time, but the calls of all trees of a mini-batch that do not
depend on each other (every leaf's embedding, the compositions at one depth, and their
gradients) run as one batched call (DyNet's on-the-fly batching). The leaf and the composition
are ``tape.traced`` functions, so each call is one row of the step's region, not the five ops
of its layers: the recording, which costs more than the arithmetic on vectors this small,
shrinks with them. It first times a few steps each way and prints both speeds (measured here:
lazy 3.4x faster than eager at 16 trees per step; the 64-tree ``tree_rnn`` benchmark: ~8x).

Run (about 50 s on 2 cores):
    pip install -e ".[examples]" && python examples/tree_rnn.py
    python examples/tree_rnn.py --lazy           # lazy training, both speeds printed
    python examples/tree_rnn.py --quick          # a few steps, what the smoke test runs
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from tqdm import tqdm

import layers
import ops
import optim
import tape

OPERATORS = ("+", "*")


def random_tree(rng, n_ops):
    """A digit (int) or (operator, left, right) with ``n_ops`` operators split at random."""
    if n_ops == 0:
        return int(rng.integers(10))
    left = int(rng.integers(n_ops))
    operator = OPERATORS[int(rng.integers(len(OPERATORS)))]
    return (operator, random_tree(rng, left), random_tree(rng, n_ops - 1 - left))


def value(tree):
    if isinstance(tree, int):
        return tree
    operator, left, right = tree
    return value(left) + value(right) if operator == "+" else value(left) * value(right)


def to_text(tree):
    if isinstance(tree, int):
        return str(tree)
    operator, left, right = tree
    return f"({to_text(left)} {operator} {to_text(right)})"


def label(tree):
    return value(tree) % 10


def make_trees(rng, count, min_ops, max_ops, exclude=frozenset()):
    """``count`` distinct trees with min_ops..max_ops operators, none written as in ``exclude``."""
    trees, seen = [], set(exclude)
    while len(trees) < count:
        tree = random_tree(rng, int(rng.integers(min_ops, max_ops + 1)))
        if to_text(tree) not in seen:
            seen.add(to_text(tree))
            trees.append(tree)
    return trees


class TreeRNN(layers.Function):
    """Root-vector classifier: leaves are embeddings, each operator has one shared composer."""

    def __init__(self, dim=64, classes=10):
        super().__init__()
        self.leaf = layers.Embedding(10, dim)
        self.add = self._composer(dim)
        self.mul = self._composer(dim)
        self.classify = layers.Linear(dim, classes)
        self.loss_fn = layers.CrossEntropyLoss()

    @staticmethod
    def _composer(dim):
        # [left; right] (2 dim) -> ReLU hidden layer -> tanh vector of the parent (dim)
        return layers.Sequential(
            layers.Linear(2 * dim, 2 * dim, act="relu"), layers.Linear(2 * dim, dim, act="tanh")
        )

    def encode(self, tree):
        """The tree's vector, built bottom-up by recursion (one graph per tree shape)."""
        if isinstance(tree, int):
            return self.embed(np.array(tree))
        operator, left, right = tree
        return self.compose(operator, self.encode(left), self.encode(right))

    # The two functions every tree calls, traced (tape.traced): eagerly they simply run; in
    # lazy mode each call is one op, and the calls ready at once (every leaf, the nodes of one
    # depth, across the mini-batch) run as one batched call of the function.
    @tape.traced
    def embed(self, digit):
        return self.leaf(digit)

    @tape.traced
    def compose(self, operator, left, right):
        children = ops.concat([left, right], axis=0)
        return (self.add if operator == "+" else self.mul)(children)

    def forward(self, tree):
        return self.classify(self.encode(tree))

    @tape.traced
    def loss(self, root, label):
        """The cross-entropy of the class scores of a tree's vector ``root``."""
        return self.loss_fn(self.classify(root), label)


def train_step(model, optimizer, trees, lazy=False):
    """One update from a mini-batch of trees, each its own recursion on a fresh tape;
    ``lazy``: recorded lazily and run (autobatched where that is faster) when the loss is read."""
    with tape.lazy(enabled=lazy):
        tape.reset_global_tape()
        losses = [model.loss(model.encode(tree), np.array(label(tree))) for tree in trees]
        loss = ops.stack(losses).mean()
        tape.backward(loss)
        optimizer(model.params())
        return float(loss.value())


def compare_speeds(model, args, rng, steps=10, settle=3):
    """Times ``steps`` training steps eagerly and ``steps`` lazily on the same fresh
    mini-batches, after ``settle`` untimed ones each (lazily, the functions are traced then);
    returns (eager, lazy) trees per second."""
    optimizer = optim.SGD(lr=0.0)  # (lr 0: timing only)
    count = steps + settle
    batches = [make_trees(rng, args.batch_size, 1, args.max_ops) for _ in range(count)]
    speeds = []
    for lazy in (False, True):
        for trees in batches[steps:]:
            train_step(model, optimizer, trees, lazy)
        start = time.perf_counter()
        for trees in batches[:steps]:
            train_step(model, optimizer, trees, lazy)
        speeds.append(steps * args.batch_size / (time.perf_counter() - start))
    print(
        f"speed: eager {speeds[0]:.0f} trees/s, lazy {speeds[1]:.0f} trees/s "
        f"({speeds[1] / speeds[0]:.1f}x)"
    )
    return tuple(speeds)


def accuracy(model, trees):
    """Fraction of trees whose label is the arg-max class (eval mode, tape reset per tree)."""
    model.eval()
    correct = 0
    with tape.no_grad():
        for tree in trees:
            tape.reset_global_tape()
            correct += int(model(tree).numpy().argmax() == label(tree))
    model.train()
    return correct / len(trees)


def majority_baseline(train_trees, test_trees):
    """Accuracy on ``test_trees`` of always answering the most frequent training label."""
    majority = np.bincount([label(t) for t in train_trees], minlength=10).argmax()
    return float(np.mean([label(t) == majority for t in test_trees]))


def train(model, args, rng, test_trees):
    """Streams fresh random trees (never a held-out expression); returns the log of
    (step, mean loss since the last report, held-out accuracy)."""
    exclude = frozenset(to_text(t) for t in test_trees)
    optimizer = optim.Adam(lr=args.lr)
    log, recent = [], []
    bar = tqdm(range(1, args.steps + 1), desc="tree-rnn", unit="step")
    for step in bar:
        trees = make_trees(rng, args.batch_size, 1, args.max_ops, exclude)
        recent.append(train_step(model, optimizer, trees, args.lazy))
        if step % args.report_every == 0 or step == args.steps:
            log.append((step, float(np.mean(recent)), accuracy(model, test_trees)))
            recent = []
            bar.set_postfix(loss=f"{log[-1][1]:.3f}", held_out_acc=f"{log[-1][2]:.3f}")
    return log


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1600)
    parser.add_argument("--batch-size", type=int, default=16, help="trees per update")
    parser.add_argument("--max-ops", type=int, default=4, help="operators per training tree")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--test-size", type=int, default=500)
    parser.add_argument("--report-every", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="BLAS threads (more only helps much larger matrices)",
    )
    parser.add_argument(
        "--lazy", action="store_true", help="train in lazy mode (prints both speeds)"
    )
    parser.add_argument("--quick", action="store_true", help="a few tiny steps (smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.batch_size, args.dim, args.test_size, args.report_every = 12, 8, 16, 40, 4
    return args


def main(argv=None):
    """Parses ``argv``, trains and reports; returns {"log" (step, loss, held-out accuracy),
    "accuracy", "baseline", "larger_accuracy", "seconds", "speeds" (with ``--lazy``: eager
    and lazy trees per second)}."""
    args = parse_args(argv)
    with tape.blas_threads(args.blas_threads):
        return run(args)


def run(args):
    tape.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    test_trees = make_trees(rng, args.test_size, 1, args.max_ops)
    larger = make_trees(rng, args.test_size, args.max_ops + 1, args.max_ops + 2)
    baseline = majority_baseline(make_trees(rng, 2000, 1, args.max_ops), test_trees)
    print(f"e.g. {to_text(test_trees[0])} = {value(test_trees[0])} -> label {label(test_trees[0])}")
    model = TreeRNN(args.dim)
    speeds = (
        compare_speeds(model, args, np.random.default_rng(args.seed + 1)) if args.lazy else None
    )
    start = time.perf_counter()
    log = train(model, args, rng, test_trees)
    seconds = time.perf_counter() - start
    for step, loss, acc in log:
        print(f"step {step:5d}  loss {loss:.4f}  held-out accuracy {acc:.3f}")
    larger_accuracy = accuracy(model, larger)
    print(
        f"held-out accuracy {log[-1][2]:.3f} vs majority baseline {baseline:.3f} "
        f"({args.steps * args.batch_size} training trees, {seconds:.1f} s)"
    )
    print(
        f"on larger trees ({args.max_ops + 1}-{args.max_ops + 2} operators, never trained "
        f"on): {larger_accuracy:.3f}"
    )
    return {
        "log": log,
        "accuracy": log[-1][2],
        "baseline": baseline,
        "larger_accuracy": larger_accuracy,
        "seconds": seconds,
        "speeds": speeds,
    }


if __name__ == "__main__":
    main()
