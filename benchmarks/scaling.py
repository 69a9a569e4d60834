"""Workload 'scaling': lazy mode's cost per op as tapes grow and change every step (issue 15).

Two models, each timed eager and lazily on a cache miss and a cache hit, reported in
microseconds per forward op (the time of the whole step, backward included, divided by the
forward ops recorded):

- ``chain``: ``h + p``, ``h * p``, ``tanh(h)`` repeated on 4x4 float32 with one parameter ``p``,
  then ``sum`` and backward, at 10^3, 10^4 and 10^5 ops (``CONFIGS``);
- ``trees``: a per-example tree RNN, 64 random binary trees of 10-30 leaves per step, a leaf
  ``tanh(x @ W_leaf)``, a node ``tanh(l @ W_l + r @ W_r + b)``, loss the sum of the roots; every
  step draws fresh trees (a DyNet-style model whose graph follows the data).

Implementations: ``numpy`` (the floor, backward by hand), ``fluidtape`` (eager),
``fluidtape-miss`` (lazy, each step a structure not seen lately: the chain turns a different
``+`` into ``-`` each step, cycling through more variants than lazy mode remembers, the trees are
fresh, so the first, interpreted tier runs), ``fluidtape-compile`` (the same, compiled into a
plan every step: ``compile=True``) and ``fluidtape-hit`` (lazy, the same structure every step:
the cached plan). Eager mode and numpy run the varying chain too. Issue 15's targets: a miss
costs at most an eager op, a hit at most half of one, both flat from 10^3 to 10^5 ops.

``python -m benchmarks --only scaling`` times every configuration; ``python -m
benchmarks.scaling --plot benchmarks/scaling.png`` also draws cost per op against tape length.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from benchmarks import common

NAME = "scaling"
TITLE = "cost per op against tape length: chain of 4x4 ops, per-example tree RNN"
UNIT = "us/op"
DEFAULT = {"model": "chain", "n_ops": 10_000, "size": 4}
_SLOW = ("fluidtape-compile",)
CONFIGS = (
    ("chain 1e3", {"model": "chain", "n_ops": 1_000, "size": 4}),
    ("chain 1e4", {"model": "chain", "n_ops": 10_000, "size": 4, "reps": 5, "skip": _SLOW}),
    # (compiling a plan from scratch takes seconds to minutes a step at these sizes: not timed)
    ("chain 1e5", {"model": "chain", "n_ops": 100_000, "size": 4, "reps": 3, "skip": _SLOW}),
    (
        "trees",
        {"model": "trees", "trees": 64, "leaves": (10, 30), "dim": 32, "reps": 5, "skip": _SLOW},
    ),
)
TINY = {"model": "chain", "n_ops": 12, "size": 4}
TINY_TREES = {"model": "trees", "trees": 3, "leaves": (2, 5), "dim": 4}
TARGET = None
TARGETS = {"fluidtape-miss": ("fluidtape", 1.0), "fluidtape-hit": ("fluidtape", 0.5)}
TRAINING = False
# The cached plan's warm-up: its fused groups move to numba (where installed) as a training
# loop's do: each structure that has run NUMBA_SUBMIT_CALLS times is compiled in the compile
# process (ops.fusion_backends.compile_process) and moves once its code is on disk. On a cold
# kernel cache the chain's ~12 structures are compiled there within 5-40 s, depending on how
# busy the machine is; later processes load them from the kernel cache in milliseconds.
WARMUPS = {"fluidtape-hit": 60.0}


def scale(config):
    """Seconds per step -> microseconds per forward op."""
    return 1e6 / forward_ops(config)


def forward_ops(config):
    """Forward ops a step records: the chain's length plus its sum; for the trees the expected
    count (2 per leaf, 5 per inner node, a sum and an add per tree)."""
    if config["model"] == "chain":
        return config["n_ops"] + 1
    low, high = config["leaves"]
    return config["trees"] * (7 * (low + high) / 2 - 3)


def make_data(config, seed=0):
    rng = np.random.default_rng(seed)
    if config["model"] == "chain":
        size = config["size"]
        x = rng.standard_normal((size, size)).astype(np.float32)
        p = rng.uniform(0.5, 1.0, (size, size)).astype(np.float32)
        return {"x": x, "params": [p]}
    dim = config["dim"]
    params = [common.uniform(rng, (dim, dim), dim) for _ in range(3)]
    params.append(common.uniform(rng, (1, dim), dim))
    return {"params": params, "seed": seed + 1}  # W_leaf, W_l, W_r, b


def random_trees(rng, config):
    """One step's trees: (leaf inputs (n, 1, dim) float32, merges [(a, b)] over node indices;
    leaves are nodes 0..n-1, merge k makes node n+k)."""
    low, high = config["leaves"]
    batch = []
    for _ in range(config["trees"]):
        n = int(rng.integers(low, high + 1))
        leaves = rng.standard_normal((n, 1, config["dim"])).astype(np.float32)
        frontier, merges = list(range(n)), []
        while len(frontier) > 1:
            i = int(rng.integers(len(frontier) - 1))
            merges.append((frontier[i], frontier[i + 1]))
            frontier[i : i + 2] = [n + len(merges) - 1]
        batch.append((leaves, merges))
    return batch


def _batches(config, data, fresh):
    """A callable giving each step's trees: fresh ones every call, or the same first batch."""
    rng = np.random.default_rng(data["seed"])
    if fresh:
        return lambda: random_trees(rng, config)
    first = random_trees(rng, config)
    return lambda: first


# -- the chain --------------------------------------------------------------------------------


def _variant(config, steps, vary):
    """The index of the add that is a subtraction this step (``steps``: a one-item counter):
    a different one each step when ``vary``, so every step records a structure lazy mode has
    not seen lately (more variants than it remembers), else always the first."""
    index = 3 * (steps[0] % max(1, config["n_ops"] // 3)) if vary else 0
    steps[0] += 1
    return index


def _second_flip(flipped, n, own):
    """The other add an ``own`` chain subtracts at (-1: none; see ``_chain_fluidtape``)."""
    return (flipped + 3) % max(3, n - n % 3) if own else -1


def _chain_numpy(config, data, vary=True, own=False):
    x, (p,) = data["x"], common.copies(data["params"])
    n, steps = config["n_ops"], [0]

    def step():
        flipped = _variant(config, steps, vary)
        second = _second_flip(flipped, n, own)
        saved, h = [], x
        for i in range(n):
            kind = i % 3
            if kind == 0:
                h = h - p if i == flipped or i == second else h + p
            elif kind == 1:
                saved.append(h)
                h = h * p
            else:
                h = np.tanh(h)
                saved.append(h)
        loss = h.sum()
        g, gp = np.ones_like(h), np.zeros_like(p)
        for i in reversed(range(n)):
            kind = i % 3
            if kind == 2:
                y = saved.pop()
                g = g * (1 - y * y)
            elif kind == 1:
                before = saved.pop()
                gp += g * before
                g = g * p
            elif i == flipped or i == second:
                gp -= g
            else:
                gp += g
        return loss, [gp]

    return step


def _chain_fluidtape(config, data, vary=True, own=False):
    """``own``: each step subtracts at two adds, not one: structures no other variant in the
    process records (they share lazy mode's caches, and step k of each would otherwise be the
    same structure: a second sighting, not a miss)."""
    tape, ops, _, _ = common.fluidtape(["tanh"])
    x = tape.Variable(data["x"])
    (p,) = (tape.Variable(a, requires_grad=True) for a in common.copies(data["params"]))
    n, steps = config["n_ops"], [0]

    def step():
        flipped = _variant(config, steps, vary)
        second = _second_flip(flipped, n, own)
        tape.reset_global_tape()
        h = x
        for i in range(n):
            kind = i % 3
            if kind == 0:
                h = h - p if i == flipped or i == second else h + p
            else:
                h = h * p if kind == 1 else ops.tanh(h)
        loss = h.sum()
        p.clear_grad()
        tape.backward(loss)
        return loss, [p.grad()]

    return step


# -- the trees --------------------------------------------------------------------------------


def _trees_numpy(config, data):
    w_leaf, w_l, w_r, b = common.copies(data["params"])
    batches = _batches(config, data, config.get("fresh", True))

    def step():
        loss = np.float32(0)
        grads = [np.zeros_like(a) for a in (w_leaf, w_l, w_r, b)]
        for leaves, merges in batches():
            nodes = [np.tanh(x @ w_leaf) for x in leaves]
            for a, c in merges:
                nodes.append(np.tanh(nodes[a] @ w_l + nodes[c] @ w_r + b))
            loss = loss + nodes[-1].sum()
            g = [None] * len(nodes)
            g[-1] = np.ones_like(nodes[-1])
            n = len(leaves)
            for k in reversed(range(len(merges))):
                a, c = merges[k]
                gz = g[n + k] * (1 - nodes[n + k] ** 2)
                grads[1] += nodes[a].T @ gz
                grads[2] += nodes[c].T @ gz
                grads[3] += gz
                for child, w in ((a, w_l), (c, w_r)):
                    contribution = gz @ w.T
                    g[child] = contribution if g[child] is None else g[child] + contribution
            for i, x in enumerate(leaves):
                grads[0] += x.T @ (g[i] * (1 - nodes[i] ** 2))
        return loss, grads

    return step


def _trees_fluidtape(config, data, fresh=True):
    tape, ops, _, _ = common.fluidtape(["tanh", "matmul"])
    params = [tape.Variable(a, requires_grad=True) for a in common.copies(data["params"])]
    w_leaf, w_l, w_r, b = params
    batches = _batches(config, data, fresh)

    def record():
        tape.reset_global_tape()
        total = None
        for leaves, merges in batches():
            nodes = [ops.tanh(tape.Variable(x) @ w_leaf) for x in leaves]
            for a, c in merges:
                nodes.append(ops.tanh(nodes[a] @ w_l + nodes[c] @ w_r + b))
            root = nodes[-1].sum()
            total = root if total is None else total + root
        for p in params:
            p.clear_grad()
        tape.backward(total)
        return total, [p.grad() for p in params]

    return record


# -- the implementations ----------------------------------------------------------------------
# Each lazy variant runs its steps in a ``tape.lazy()`` block of its own, as a program's loops
# are: lazy mode speculates per block (tape.eager_speculation), so the variants, timed in turn
# in one process, do not make each other's steps eager.


def setup_numpy(config, data):
    """The floor: forward and backward by hand."""
    return (_chain_numpy if config["model"] == "chain" else _trees_numpy)(config, data)


def setup_fluidtape(config, data):
    """Eager mode."""
    if config["model"] == "chain":
        return _chain_fluidtape(config, data)
    return _trees_fluidtape(config, data)


def _model_step(config, data, fresh, own=False):
    """The model's step, recording on the global tape (in the caller's lazy block); ``own``:
    structures of its own (other trees; chains subtracting twice), not those every variant of
    the process meets at its k-th step."""
    if config["model"] == "trees":
        return _trees_fluidtape(config, dict(data, seed=data["seed"] + 2) if own else data, fresh)
    return _chain_fluidtape(config, data, vary=fresh, own=own)


def setup_miss(config, data):
    """Lazy mode, a structure not seen lately every step: the first steps run here, untimed,
    the lazy way (interpreted), and the next ones eagerly, as lazy mode speculates for a model
    whose every recent step was new (tape.eager_speculation): a training loop's steady state."""
    import tape
    from tape import eager_speculation

    if config["model"] == "chain":  # (warmed on other structures: the timed steps' stay new)
        warm = _model_step(dict(config, n_ops=config["n_ops"] - 3), data, fresh=True)
    else:
        warm = _model_step(config, dict(data, seed=data["seed"] + 1), fresh=True)
    # (and the timed steps' structures are the miss variant's own: see _model_step)
    current = [warm]

    def miss_step():
        with tape.lazy():
            return current[0]()

    for _ in range(eager_speculation.STREAK):
        miss_step()
    current[0] = _model_step(config, data, fresh=True, own=True)
    return miss_step


def setup_compile(config, data):
    """Lazy mode, a structure not seen lately compiled into a plan every step."""
    import tape
    from tape.passes.plan import CACHE

    step = _model_step(config, data, fresh=True)

    def compile_step():
        with tape.lazy(compile=True):
            result = step()
        CACHE._entries.popitem()  # (the plan just made: it would only push others out)
        return result

    return compile_step


def setup_hit(config, data):
    """Lazy mode, the same structure every step (the cached plan): the steps before the plan is
    cached run here, untimed: the first two sightings run the eager backward, the third
    records its gradient ops and is interpreted, the fourth compiles (tape.replay), and the
    next steps time the plan against the eager way to run the faster (tape.tier_choice)."""
    import tape
    from tape import tier_choice

    step = _model_step(config, data, fresh=False)

    def hit_step():
        with tape.lazy():
            return step()

    for _ in range(4 + tier_choice.PATIENCE + 2):
        hit_step()
    return hit_step


def setup_numpy_own(config, data):
    """The floor of the miss variant's own structures (``_model_step``), for the tests."""
    if config["model"] == "trees":
        return _trees_numpy(config, dict(data, seed=data["seed"] + 2))
    return _chain_numpy(config, data, own=True)


# The floor each variant's results are checked against, where it is not "numpy".
FLOORS = {"fluidtape-miss": setup_numpy_own}

IMPLEMENTATIONS = {
    "numpy": setup_numpy,
    "fluidtape": setup_fluidtape,
    "fluidtape-miss": setup_miss,
    "fluidtape-compile": setup_compile,
    "fluidtape-hit": setup_hit,
}


def plot(results, path):
    """Cost per op against chain length (log x axis), one line per implementation, the trees
    as points at their ops per step; ``results``: {label: {impl: us/op}}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chains = [(c["n_ops"], label) for label, c in CONFIGS if c["model"] == "chain"]
    trees = [(forward_ops(c), label) for label, c in CONFIGS if c["model"] == "trees"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    impls = [i for i in IMPLEMENTATIONS if any(i in r for r in results.values())]
    for index, impl in enumerate(impls):
        color = f"C{index}"
        xs = [n for n, label in chains if impl in results.get(label, {})]
        ys = [results[label][impl] for n, label in chains if impl in results.get(label, {})]
        ax.plot(xs, ys, "o-", color=color, label=impl)
        for n, label in trees:
            if impl in results.get(label, {}):
                ax.plot([n], [results[label][impl]], "s", color=color, markersize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("forward ops on the tape (circles: chain of 4x4 ops; squares: tree RNN)")
    ax.set_ylabel("microseconds per op (forward + backward)")
    ax.set_title("fluidtape: cost per op against tape length")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(label for label, _ in CONFIGS))
    parser.add_argument("--impls", default=None)
    parser.add_argument("--reps", type=int, default=None, help="(default: per configuration)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--wait-idle", type=float, default=0.0)
    parser.add_argument("--plot", default=None, metavar="PNG")
    args = parser.parse_args(argv)
    from benchmarks import harness, isolated, report

    harness.set_threads(args.threads)
    wanted = set(args.impls.split(",")) if args.impls else None
    table, results = [], {}
    for label, config in CONFIGS:
        if label not in args.only.split(","):
            continue
        names = [
            name
            for name in IMPLEMENTATIONS
            if (wanted is None or name in wanted or name == "fluidtape")
            and name not in config.get("skip", ())
        ]
        options = harness.Options(reps=args.reps or config.get("reps", 9), wait_idle=args.wait_idle)
        print(f"measuring scaling {label} ...", file=sys.stderr, flush=True)
        measured, _ = isolated.measure(NAME, config, names, False, options, args.threads)
        results[label] = {m.name: m.median * scale(config) for m in measured}
        table += report.rows(sys.modules[__name__], config, measured, name=f"{NAME} {label}")
    print(report.format_table(table, markdown=True))
    if args.plot:
        plot(results, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
