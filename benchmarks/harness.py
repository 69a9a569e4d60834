"""Timing: the implementations of a workload measured round-robin, after warm-up.

Two traps measured on these machines shape the loop. An idle BLAS/OpenMP thread pool keeps
spinning for ~0.1 s after its library's last call and halves the speed of whatever runs next, so
each timed block is preceded by a pause and an untimed settle step of the same implementation.
A fresh process's first steps page-fault in every buffer, so each implementation warms up before
its first timed block. Where they run: ``measure`` times them all in this process,
``benchmarks.isolated`` each in its own (the default of ``python -m benchmarks``: in a shared
heap, one implementation's memory changes the allocator's page faults for the others).
"""

from __future__ import annotations

import dataclasses
import gc
import os
import statistics
import sys
import time


@dataclasses.dataclass
class Options:
    """How long to measure: ``reps`` timed blocks per implementation of ``block`` seconds each."""

    reps: int = 9
    block: float = 0.25
    warmup: float = 0.5
    pause: float = 0.2
    wait_idle: float = 0.0  # seconds this workload may wait for other processes to go idle
    # Warm-up seconds of particular implementations, where longer than ``warmup`` (a workload's
    # WARMUPS: the scaling chain's cached plan compiles its fused kernels as it runs)
    warmups: dict = dataclasses.field(default_factory=dict)

    def warmup_of(self, name):
        return max(self.warmup, self.warmups.get(name, 0.0))


@dataclasses.dataclass
class Measurement:
    """Per-step times (seconds) of one implementation, one entry per timed block; ``others``: the
    mean number of cores other processes kept busy during its blocks (None if unknown)."""

    name: str
    times: list
    steps_per_block: int
    others: float | None = None

    @property
    def median(self):
        return statistics.median(self.times)


def set_threads(threads):
    """The same thread count for every library: env vars (read at import), threadpoolctl, torch.

    Must run before numpy is imported for the env vars to reach OpenBLAS.
    """
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    try:
        import threadpoolctl

        threadpoolctl.threadpool_limits(threads)
    except ImportError:  # the env vars already did it for libraries loaded after this point
        pass
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        pass


# At most this many seconds more of warm-up while fluidtape's fused kernels may still move to
# numba (``ops.fused.unsettled``): a move imports numba and loads the kernel, 0.2-0.5 s once a
# process, and a lazy MLP step that met it in a timed block took 19-23 ms instead of ~8.5.
SETTLE_SECONDS = 30.0


def warm_up(step, seconds):
    """Runs ``step`` for at least ``seconds`` (and 3 times), then while fluidtape's fused
    kernels may still move (at most ``SETTLE_SECONDS`` more); returns the time of a step, the
    mean of the last half of its warm steps."""
    times = _steps(step, seconds, 3)
    fused = sys.modules.get("ops.fused")  # (a fluidtape step in this process)
    if fused is not None and fused.unsettled():
        deadline = time.perf_counter() + SETTLE_SECONDS
        while fused.unsettled() and time.perf_counter() < deadline:
            step()
        times = _steps(step, 0.0, 6)  # (a settled step's time)
    tail = times[len(times) // 2 :]
    return sum(tail) / len(tail)


def _steps(step, seconds, least):
    """The times of ``step`` run for at least ``seconds`` and ``least`` times."""
    started = last = time.perf_counter()
    times = []
    while len(times) < least or last - started < seconds:
        step()
        now = time.perf_counter()
        times.append(now - last)
        last = now
    return times


def timed_block(step, count, pause):
    """(per-step seconds over ``count`` steps, CPU snapshots around them), after a pause and an
    untimed settle step."""
    time.sleep(pause)  # lets the previous implementation's spinning thread pool go idle
    gc.collect()  # garbage left by the previous implementation is not charged to this one
    step()  # settle: wakes this library's own pool and caches
    before = cpu_snapshot()
    started = time.perf_counter()
    for _ in range(count):
        step()
    elapsed = time.perf_counter() - started
    return elapsed / count, (before, cpu_snapshot())


def measure(steps, options):
    """Round-robin over ``steps`` ({name: step}) in this process: A, B, C, A, B, C, ...
    ``options.reps`` times."""
    return round_robin(
        list(steps),
        lambda name, seconds: warm_up(steps[name], seconds),
        lambda name, count, pause: timed_block(steps[name], count, pause),
        options,
    )


def round_robin(names, warm, block, options):
    """Measurements of ``names`` timed in turn: ``warm(name, seconds)`` warms one up and returns
    its time per step, ``block(name, count, pause)`` is ``timed_block`` of it (wherever it
    runs: this process or its own, ``benchmarks.isolated``)."""
    counts = {}
    for name in names:
        estimate = warm(name, options.warmup_of(name))
        counts[name] = max(1, round(options.block / max(estimate, 1e-9)))
    times = {name: [] for name in names}
    spans = {name: [] for name in names}
    deadline = time.perf_counter() + options.wait_idle
    for _ in range(options.reps):
        for name in names:
            while True:
                per_step, span = block(name, counts[name], options.pause)
                load = others_load([span])
                # A block other processes disturbed is redone once they are idle, while the
                # workload's waiting budget lasts.
                if load is None or load < _IDLE or time.perf_counter() >= deadline:
                    break
                wait_until_idle(deadline - time.perf_counter())
            times[name].append(per_step)
            spans[name].append(span)
    return [
        Measurement(name, times[name], counts[name], others_load(spans[name])) for name in names
    ]


_IDLE = 0.25  # cores other processes may use while the machine still counts as idle


def cpu_snapshot():
    """(seconds of busy CPU on the machine, of this process, wall clock); None off Linux."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(v) for v in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    busy = sum(ticks) - ticks[3] - ticks[4]  # all but idle and iowait
    own = os.times()
    return busy / os.sysconf("SC_CLK_TCK"), own.user + own.system, time.perf_counter()


def others_load(spans):
    """Mean cores kept busy by other processes over ``spans`` [(before, after) snapshots]."""
    spans = [(a, b) for a, b in spans if a is not None and b is not None]
    wall = sum(b[2] - a[2] for a, b in spans)
    if not spans or wall <= 0:
        return None
    others = sum((b[0] - a[0]) - (b[1] - a[1]) for a, b in spans)
    return max(others, 0.0) / wall


def wait_until_idle(limit, threshold=_IDLE, window=3.0):
    """Waits (at most ``limit`` seconds) until other processes use < ``threshold`` cores over a
    ``window``; returns their last measured load (None if unknown)."""
    deadline = time.perf_counter() + limit
    while True:
        before = cpu_snapshot()
        time.sleep(window)
        load = others_load([(before, cpu_snapshot())])
        if load is None or load < threshold or time.perf_counter() >= deadline:
            return load


def profile(step, seconds, limit=25):
    """cProfile of ``step`` repeated for ``seconds`` (after one warm step); returns the report."""
    import cProfile
    import io
    import pstats

    step()
    profiler = cProfile.Profile()
    started, count = time.perf_counter(), 0
    profiler.enable()
    while count < 3 or time.perf_counter() - started < seconds:
        step()
        count += 1
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    out.write(f"{count} steps profiled\n")
    stats.sort_stats("tottime").print_stats(limit)
    stats.sort_stats("cumulative").print_stats(limit)
    return out.getvalue()
