"""Execute a Plan over a list of value slots: in program order, or on a thread pool.

The thread pool follows the seed's standalone executor: an op is ready when its count of
unfinished predecessors reaches zero; when one finishes, its successors' counts drop and the
reference counts of the variables it last used drop, freeing each at zero. numpy releases the GIL
inside its kernels, so independent large ops overlap. All bookkeeping happens on the calling
thread (workers only run kernels), so no count is ever updated concurrently. Both ways compute
the same values: each op reads exactly the buffers program order would give it.

A failing op stops the run: no new op starts, running ones finish, and an ExecutionError names
the op and where it was recorded; its ``completed`` attribute lists the instructions that ran.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import threading
import time

import numpy as np

from ops import thread_pools
from ops.blas import single_threaded
from ops.registry import REGISTRY
from tape import instrument, tier_choice
from tape.errors import ExecutionError, FluidError
from tape.passes import parallel
from tape.passes.plan import FAST, SINGLE

_NDARRAY = np.ndarray


def run(plan, vals, threads=0):
    """Runs ``plan`` on ``vals`` (a list with one entry per slot, inputs filled in) on
    ``threads`` threads (0 or 1: in program order; "auto": as ``passes.parallel`` chooses)."""
    if threads == "auto":
        choice = parallel.choose(plan)
        threads, trial = choice.next()
        if threads != choice.chosen:
            # A trial of the way not chosen: not what a warm step of this plan costs, so the
            # step is not timed for the plan's tier (measured: pool trials that lost made the
            # plan look dearer than the eager way, and 400 steps of the `parallel` benchmark
            # ran eagerly at 10 ms instead of their plan's 7).
            tier_choice.cold()
        if trial:
            started = time.perf_counter()
            run(plan, vals, threads)
            choice.record(threads, time.perf_counter() - started)
            return
    if instrument.ACTIVE is not None:  # a profiler or anomaly block is open
        plan = instrument.observed_plan(plan)
    if threads > 1 and len(plan.instructions) > 1:
        run_threaded(plan, vals, threads)
    else:
        run_sequential(plan, vals)


def run_sequential(plan, vals):
    """Runs the instructions in program order, freeing each variable after its last user."""
    xp, get = plan.xp, vals.__getitem__
    index = 0
    try:
        for kind, kernel, attrs, ins, out, free in plan.instructions:
            if kind == FAST:
                result = kernel(xp, attrs, *map(get, ins))  # (no list, no comprehension frame)
                vals[out] = (
                    result if result.__class__ is _NDARRAY or xp is not np else np.asarray(result)
                )
            else:
                _general(xp, kind, kernel, attrs, ins, out, vals)
            for s in free:
                vals[s] = None
            index += 1
    except Exception as err:
        raise _failure(plan, index, err, range(index)) from err


def _general(xp, kind, kernel, attrs, ins, out, vals):
    args = [
        None if s is None else vals[s] if s.__class__ is int else [vals[i] for i in s] for s in ins
    ]
    results = kernel(xp, attrs, *args)
    if kind == SINGLE:
        results = (results,)
    for spec, result in zip(out, results, strict=True):
        if spec is None:
            continue
        if spec.__class__ is int:
            vals[spec] = _array(xp, result)
        else:
            for s, r in zip(spec, result, strict=True):
                if s is not None:  # (None: a result nothing reads)
                    vals[s] = _array(xp, r)


def _array(xp, value):
    return value if value.__class__ is _NDARRAY or xp is not np else np.asarray(value)


def _run_one(plan, index, vals):
    kind, kernel, attrs, ins, out, _ = plan.instructions[index]
    if kind == FAST:
        vals[out] = _array(plan.xp, kernel(plan.xp, attrs, *[vals[s] for s in ins]))
    else:
        _general(plan.xp, kind, kernel, attrs, ins, out, vals)


class _Run:
    """The shared state of one threaded run; every field changes under ``lock`` only.

    ``ready`` is a stack of instructions whose predecessors have all finished; a worker that
    finishes an instruction keeps the first successor it made ready (its chain) and pushes the
    others, waking an idle worker only then.
    """

    def __init__(self, plan, vals):
        self.plan, self.vals = plan, vals
        self.counts, self.refs = list(plan.dependency_count), list(plan.refcount)
        self.ready = [i for i, c in enumerate(self.counts) if c == 0]
        self.ready.reverse()  # (a stack: program order first)
        self.lock = threading.Condition(threading.Lock())
        self.remaining, self.idle, self.stop = len(plan.instructions), 0, False
        self.failed, self.finished = None, []

    def work(self):
        """Runs ready instructions until none remain (or the run failed), BLAS on one thread."""
        with single_threaded():
            self._work()

    def _work(self):
        plan, vals, lock, ready = self.plan, self.vals, self.lock, self.ready
        successors, gc_after, counts, refs = (
            plan.successors,
            plan.gc_after,
            self.counts,
            self.refs,
        )
        finished = self.finished
        index = None
        while True:
            if index is None:
                with lock:
                    while not ready and not self.stop and self.remaining:
                        self.idle += 1
                        lock.wait()
                        self.idle -= 1
                    if self.stop or not self.remaining:
                        return
                    index = ready.pop()
            try:
                _run_one(plan, index, vals)
            except BaseException as err:  # reported by the calling thread, which re-raises
                with lock:
                    if self.failed is None:
                        self.failed = (index, err)
                    self.stop = True
                    lock.notify_all()
                return
            done, index = index, None
            with lock:
                finished.append(done)
                self.remaining -= 1
                for s in gc_after[done]:
                    refs[s] -= 1
                    if refs[s] == 0:
                        vals[s] = None
                for successor in successors[done]:
                    counts[successor] -= 1
                    if counts[successor] == 0:
                        if index is None:
                            index = successor  # this worker's next: the chain goes on here
                        else:
                            ready.append(successor)
                if self.stop:
                    return
                if not self.remaining:
                    lock.notify_all()
                    return
                if ready and self.idle:
                    lock.notify(len(ready))


def run_threaded(plan, vals, workers):
    """Runs ``plan`` on the calling thread and ``workers - 1`` pool threads (see ``_Run``)."""
    state = _Run(plan, vals)
    # (each helper in a copy of the caller's context: numpy's error state lives there)
    pool = thread_pools.pool("executor", workers - 1)
    helpers = [pool.submit(contextvars.copy_context().run, state.work) for _ in range(workers - 1)]
    try:
        state.work()
    finally:
        if helpers:
            with state.lock:  # (an interrupt of the calling thread stops the helpers too)
                if state.remaining and state.failed is None:
                    state.stop = True
                state.lock.notify_all()
            concurrent.futures.wait(helpers)
    if state.failed is not None:
        index, err = state.failed
        if not isinstance(err, Exception):  # KeyboardInterrupt, SystemExit: as program order
            raise err
        raise _failure(plan, index, err, state.finished) from err


def _failure(plan, index, err, completed):
    op_type, name, location = plan.meta[index]
    if isinstance(err, FluidError) and err.op is not None and err.op != op_type:
        failure = err  # already names the op it came from (a step of a fused kernel)
    elif isinstance(err, FluidError):
        failure = err.with_context(name=name, location=location, op=op_type)
    else:
        failure = ExecutionError(
            op_type, f"kernel failed: {type(err).__name__}: {err}", name=name, location=location
        )
    failure.completed = tuple(completed)
    return failure


def run_reference(block, values):
    """Runs ``block``'s ops in program order the way eager mode would, with no freeing and no
    plan: the oracle the validation flag and the tests compare against. ``values`` maps names to
    arrays and receives every output."""
    from tape.tape import run_kernel

    for op in block.ops:
        defn = REGISTRY[op.type]
        args = [
            None
            if s not in op.inputs
            else (
                [values[n] for n in op.inputs[s]]
                if s in defn.duplicable_inputs
                else values[op.inputs[s][0]]
            )
            for s in defn.input_slots
        ]
        for slot, result in zip(defn.output_slots, run_kernel(defn, op.attrs, args), strict=True):
            names = op.outputs.get(slot, ())
            for name, value in zip(
                names, result if isinstance(result, list) else [result], strict=False
            ):
                values[name] = value
    return values


__all__ = ["run", "run_sequential", "run_threaded", "run_reference"]
