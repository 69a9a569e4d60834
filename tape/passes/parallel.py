"""Whether a plan runs faster on the thread pool than in program order: the cost model behind
``threads="auto"``.

A threaded run pays for itself only when independent work is large next to what handing it out
costs. The model estimates, from the shapes the plan was compiled for (no timing, so the choice
is the same on every run of a plan):

- each instruction's kernel time: a product (``matmul``, ``mul``) ``MAC_SECONDS`` per
  multiply-add on one BLAS thread; any other op ``ELEMENT_SECONDS`` per element it reads and
  writes; plus ``DISPATCH_SECONDS`` of Python per instruction, which holds the GIL;
- in program order (``sequential``): the sum of these, a product of at least
  ``ops.matmul.SMALL_PRODUCT`` multiply-adds counted ``BLAS_SPEEDUP`` times faster, because there
  it runs on the process's BLAS threads (on the pool each worker's BLAS runs on one thread;
  smaller products run on one or all as ``ops.matmul.ThreadChoice`` measured: counted on one);
- on ``workers`` threads (``threaded``): ``START_SECONDS`` (waking the pool and joining it) plus
  the largest of three bounds: the critical path (the longest chain of dependent instructions;
  no schedule beats it), the total work divided by the workers, and the Python of every
  instruction with ``HANDOFF_SECONDS`` of bookkeeping each (one GIL: Python never overlaps).

The pool is a candidate when ``threaded < MARGIN * sequential``: only where the model says it
wins clearly. So a chain of any size runs in order (its critical path is all its work), as does
any tape of small ops (the hand-off dominates), while 8 independent branches of 64x192 @ 192x192
products are a candidate. A candidate plan's first runs are timed both ways (``TRIALS`` each,
after ``SETTLE`` runs in order; ``Choice`` says in which order and when) and the pool kept only
where its fastest run is below ``TRIAL_MARGIN`` times the fastest in order (noise only ever adds
time), the trials repeated after ``RETRY`` runs and less often while their verdict holds: on a
shared machine whose other processes keep the cores busy the pool loses, and then the plan runs
in order. The constants were measured
on the 2-core machine this was written on (numpy with OpenBLAS, float32): a 64x192 @ 192x192
product ~60 us on one thread, ``tanh`` ~1.5 ns per element, ~2 us of Python per instruction in
order and ~3 us more per instruction on the pool.

Cost: O(instructions + dependency edges), computed once per plan and cached on it; a trial is
one ``perf_counter`` pair around a run.
"""

from __future__ import annotations

import math
import os
import time

MAC_SECONDS = 2.5e-11
ELEMENT_SECONDS = 1.0e-9
DISPATCH_SECONDS = 2e-6
HANDOFF_SECONDS = 3e-6
START_SECONDS = 1e-4
BLAS_SPEEDUP = 1.6
MARGIN = 0.8
TRIALS = 3
# Runs in order before the trials (after each RETRY too): a plan's first runs pay for faulting in
# its buffers.
SETTLE = 4
# The pool must win its trials by this much: three runs each are noisy (+-10% here), and a
# close call taken for the pool measured slower than in order in the run after it.
TRIAL_MARGIN = 0.9
# Seconds a run in order leaves BLAS threads spinning (OpenBLAS's default wait, measured ~0.1 s):
# the pool's trials start only after.
QUIET_SECONDS = 0.12
RETRY = 500
RETRY_MAX = 16000
PRODUCTS = frozenset({"matmul", "mul"})


def cores():
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # (not Linux)
        return os.cpu_count() or 1


def estimate(plan, workers):
    """(sequential seconds, threaded seconds on ``workers`` threads) the model predicts."""
    from ops.matmul import SMALL_PRODUCT

    block = plan.analysis.block
    count = len(plan.instructions)
    seq = 0.0
    costs = []
    for op in block.ops:
        macs = _macs(op, block) if op.type in PRODUCTS else 0
        if macs:
            cost = macs * MAC_SECONDS
            seq += cost / BLAS_SPEEDUP if macs >= SMALL_PRODUCT else cost
        else:
            cost = _elements(op, block) * ELEMENT_SECONDS
            seq += cost
        costs.append(cost + DISPATCH_SECONDS)
    seq += count * DISPATCH_SECONDS
    longest = [0.0] * count  # the longest path ending with each instruction (program order
    for index in range(count):  # is a topological order: every edge points forward)
        finish = longest[index] + costs[index]
        longest[index] = finish
        for successor in plan.successors[index]:
            if longest[successor] < finish:
                longest[successor] = finish
    critical = max(longest, default=0.0)
    python = count * (DISPATCH_SECONDS + HANDOFF_SECONDS)
    threaded = START_SECONDS + max(critical, sum(costs) / workers, python)
    return seq, threaded


class Choice:
    """``threads="auto"``'s state for one plan: the model's verdict and, where it nominates the
    pool, timed trials of both ways that decide; the trials come back after ``retry`` runs,
    since the load of a shared machine changes.

    A round of trials: ``SETTLE`` runs in order, ``TRIALS`` timed runs in order, untimed runs on
    the pool until ``QUIET_SECONDS`` have passed since the last run in order (at least one), then
    ``TRIALS`` timed runs on the pool. Not interleaved, and the quiet runs: a run in order leaves
    the BLAS threads of its products spinning for ~0.1 s, and pool runs in that time competed
    with them for the 2 cores (measured: pool trials of the ``parallel`` workload at 17-23 ms
    right after runs in order, ~9 ms with nothing spinning). A round whose verdict repeats the
    last one doubles the wait for the next (up to ``RETRY_MAX`` runs): a settled choice costs
    ever fewer trials, while a changed verdict brings the wait back to ``RETRY``."""

    __slots__ = (
        "workers",
        "candidate",
        "clock",
        "times",
        "verdict",
        "runs",
        "retry",
        "quiet",
        "warmed",
    )

    def __init__(self, workers, candidate, clock=time.perf_counter):
        self.workers, self.candidate, self.clock = workers, candidate, clock
        self.verdict = None  # what the last round of trials chose (None: no round yet)
        self.retry = RETRY
        self._start_round()

    @property
    def chosen(self):
        """The way the plan runs outside trials: the last verdict, program order before one."""
        return self.verdict or 0

    def _start_round(self):
        self.times = {0: [], self.workers: []}
        self.runs = 0  # runs of this round so far
        self.quiet = 0.0  # when the pool's trials may start (set by the last timed run in order)
        self.warmed = False  # whether the pool ran untimed this round

    def next(self):
        """(workers for the next run, whether to time it for a trial)."""
        if not self.candidate:
            return 0, False
        self.runs += 1
        if len(self.times[self.workers]) == TRIALS:  # decided: the chosen way until the next round
            if self.runs <= self.retry:
                return self.chosen, False
            self._start_round()
            self.runs = 1
        if self.runs <= SETTLE:  # (a plan's first runs fault in its buffers: not timed)
            return 0, False
        if len(self.times[0]) < TRIALS:
            return 0, True
        if not self.warmed or self.clock() < self.quiet:
            self.warmed = True
            return self.workers, False  # (BLAS threads of the runs in order still spin)
        return self.workers, True

    def record(self, workers, seconds):
        times = self.times[workers]
        times.append(seconds)
        sequential, threaded = self.times[0], self.times[self.workers]
        if workers == 0 and len(sequential) == TRIALS:
            self.quiet = self.clock() + QUIET_SECONDS
        if len(threaded) == TRIALS:
            faster = min(threaded) < TRIAL_MARGIN * min(sequential)
            chosen = self.workers if faster else 0
            self.retry = min(2 * self.retry, RETRY_MAX) if chosen == self.verdict else RETRY
            self.verdict = chosen
            self.runs = 0


def choose(plan, workers=None):
    """The plan's Choice (cached on it) for ``workers`` threads (default: the cores): a
    candidate for the pool when the model predicts ``threaded < MARGIN * sequential``."""
    workers = cores() if workers is None else workers
    cached = plan.parallel
    if cached is not None and cached.workers == workers:
        return cached
    candidate = workers > 1 and len(plan.instructions) > 1 and plan.analysis is not None
    if candidate:
        seq, threaded = estimate(plan, workers)
        candidate = threaded < MARGIN * seq
    plan.parallel = Choice(workers, candidate)
    return plan.parallel


def _size(block, name):
    var = block.vars.get(name)
    return 0 if var is None else math.prod(var.shape)


def _elements(op, block):
    names = [n for ns in op.inputs.values() for n in ns] + [
        n for ns in op.outputs.values() for n in ns
    ]
    return sum(_size(block, n) for n in names)


def _macs(op, block):
    """Multiply-adds of a product: output elements times the contracted length."""
    (x,), (out,) = op.inputs.get("X", (None,)), op.outputs.get("Out", (None,))
    if x is None or out is None or x not in block.vars:
        return 0
    shape = block.vars[x].shape
    if op.type == "mul":
        inner = math.prod(shape[op.attrs.get("x_num_col_dims", 1) :])
    elif len(shape) >= 2 and op.attrs.get("transpose_x"):
        inner = shape[-2]
    else:
        inner = shape[-1] if shape else 1
    return _size(block, out) * int(inner)


__all__ = ["choose", "estimate", "cores", "Choice"]
