"""Where a fluidtape step's time goes: per-op-type kernel time, and the engine's share (the rest).

Every registered op's kernels are wrapped with a timer for the duration of the measurement, so
the table says which kernels dominate and how much of a step is recording, inference and
backward bookkeeping rather than array work -- what cProfile shows only indirectly.
"""

from __future__ import annotations

import collections
import contextlib
import time


@contextlib.contextmanager
def timed_kernels(totals, counts):
    """Wraps every registered op's kernels to add their time and calls to ``totals``/``counts``."""
    from ops.registry import REGISTRY

    saved = {}
    for op_type, defn in REGISTRY.items():
        saved[op_type] = (defn.kernel, defn.kernels)
        defn.kernel = _timed(op_type, defn.kernel, totals, counts)
        defn.kernels = {
            place: _timed(op_type, fn, totals, counts) for place, fn in defn.kernels.items()
        }
    try:
        yield
    finally:
        for op_type, (kernel, kernels) in saved.items():
            REGISTRY[op_type].kernel, REGISTRY[op_type].kernels = kernel, kernels


def _timed(op_type, kernel, totals, counts):
    def timed(*args):
        started = time.perf_counter()
        try:
            return kernel(*args)
        finally:
            totals[op_type] += time.perf_counter() - started
            counts[op_type] += 1

    return timed


def kernel_profile(step, seconds, limit=15):
    """Runs ``step`` for ``seconds`` with timed kernels; returns a report (ms per step)."""
    totals, counts = collections.defaultdict(float), collections.defaultdict(int)
    step()
    with timed_kernels(totals, counts):
        started, steps = time.perf_counter(), 0
        while steps < 3 or time.perf_counter() - started < seconds:
            step()
            steps += 1
        elapsed = time.perf_counter() - started
    per_step = elapsed / steps * 1e3
    in_kernels = sum(totals.values()) / steps * 1e3
    lines = [
        f"{steps} steps, {per_step:.3f} ms/step: kernels {in_kernels:.3f} ms, "
        f"engine and Python {per_step - in_kernels:.3f} ms "
        f"({(per_step - in_kernels) / per_step:.0%})",
        f"{'op':<36}{'calls/step':>11}{'ms/step':>10}{'share':>8}",
    ]
    ranked = sorted(totals, key=totals.get, reverse=True)
    for op_type in ranked[:limit]:
        ms = totals[op_type] / steps * 1e3
        lines.append(
            f"{op_type:<36}{counts[op_type] / steps:>11.1f}{ms:>10.3f}{ms / per_step:>8.1%}"
        )
    return "\n".join(lines)
