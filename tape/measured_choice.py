"""A choice between two ways of doing the same work, made by timing both and probing again.

Lazy mode has two such choices where the faster side depends on the model and the machine:
whether an interpreted run autobatches (``tape.autobatch_choice``) and whether a repeated
structure runs its compiled plan or the eager way (``tape.tier_choice``). Both keep one
``Measured`` per model or structure.

The two ways are named False (the usual one) and True (the alternative). Each is tried once,
``first`` first (and ``patience`` more times before the other); from then on each call takes
the way whose cost per op is lower, the alternative only where it costs at most ``margin`` of
the usual way (``MARGIN`` unless said otherwise): where the two are close, a step's noise
(+-30% here) would flip the choice back and forth. A way's cost is the lowest of its last
``WINDOW`` runs: noise here only ever adds time (another process, the garbage collector, a page
fault), and an average would let one slow run make its way lose for a long time. Nor are costs
measured far apart compared as equals: a shared machine's load changes over minutes, so a way
last measured more than ``WINDOW`` runs ago starts a new window when it runs next, as a probe
or because the other way's recent runs made it the choice. A way that won on a cost from a
quieter phase is taken once, measured afresh and kept only if it still wins (measured here: the
``parallel`` workload's plan, slowed for four steps by another process, lost to an eager-way
cost measured a hundred steps before, and the eager way then ran four steps at up to 12x that
cost before it left the window). The other way is probed again after ``PROBE`` runs (its old
runs forgotten: they are stale); each probe it loses doubles that interval (up to
``MAX_INTERVAL``), so a settled choice costs at most one run in ``MAX_INTERVAL`` the slower way,
and a probe that wins switches the choice and resets the interval. The interval is also at least
what keeps the probes' extra cost (the slower way's cost above the faster one's) under
``PROBE_SHARE`` of the time, as measured when both ways have run and after each lost probe: a
way three times slower (the eager way beside a cached plan on a chain of small ops) is probed
after 40 runs, not 8, 16 and 32.

A way taken ``UNMEASURED`` times in a row without ever being measured (its runs all did work a
warm run does not, say) is set aside for the measured one until the next probe, at intervals
that double as after a lost probe: a way that cannot be timed is never taken for good.
"""

from __future__ import annotations

import math
import time

PROBE = 8
MARGIN = 0.9
MAX_INTERVAL = 128
WINDOW = 4
PROBE_SHARE = 0.05
UNMEASURED = 4

clock = time.perf_counter


class Measured:
    """One model's (or structure's) recent costs per op of the usual way and the alternative,
    and when the way not taken is probed next."""

    __slots__ = (
        "runs_of",
        "first",
        "patience",
        "margin",
        "runs",
        "next_probe",
        "interval",
        "probing",
        "untimed",
        "measured_at",
    )

    def __init__(self, first=False, patience=0, margin=MARGIN):
        self.runs_of = ([], [])  # the last WINDOW costs per op: usual way, alternative
        self.first, self.patience, self.margin = first, patience, margin
        self.runs, self.next_probe, self.interval, self.probing = 0, PROBE, PROBE, False
        self.untimed = 0  # times the alternative was taken without being measured
        self.measured_at = [0, 0]  # ``runs`` when each way was last measured

    @property
    def usual(self):
        """The usual way's cost per op (seconds), None until measured."""
        return min(self.runs_of[0], default=None)

    @property
    def other(self):
        """The alternative's cost per op (seconds), None until measured."""
        return min(self.runs_of[1], default=None)

    def prefers_other(self):
        """Whether the alternative is taken now (the first way until both are measured)."""
        usual, other = self.usual, self.other
        if usual is None or other is None:
            return self.first
        return other <= self.margin * usual

    def choose(self):
        """The way the next run takes (True: the alternative); counts the run."""
        if not self.runs_of[self.first] or self.patience > 0:
            return self.first
        if not self.runs_of[not self.first]:
            if self.untimed < UNMEASURED:
                self.untimed += 1
                return not self.first
            self.runs += 1  # (never measured: the measured way, until the next probe)
            if self.runs >= self.next_probe:
                self.untimed = 0
                self.interval = min(2 * self.interval, MAX_INTERVAL)
                self.next_probe = self.runs + self.interval
            return self.first
        self.runs += 1
        best = self.prefers_other()
        self.probing = self.runs >= self.next_probe
        return best != self.probing

    def probe(self):
        """The way a probe asked for now takes (the one not preferred, once both are measured;
        until then as ``choose``); counts the run."""
        if not self.runs_of[self.first] or not self.runs_of[not self.first]:
            return self.choose()
        self.runs += 1
        self.probing = True
        return not self.prefers_other()

    def measured(self, other, per_op):
        """Records a run of the alternative (``other``) or the usual way costing ``per_op``
        seconds per op; after a probe, sets when the next one comes."""
        if other == self.first and self.patience > 0:
            self.patience -= 1
        way = bool(other)
        runs = self.runs_of[way]
        first_of_both = not runs and bool(self.runs_of[not way])
        if self.probing or self.runs - self.measured_at[way] > WINDOW:
            runs.clear()  # (costs from a probe ago, or another phase of the machine)
        self.measured_at[way] = self.runs
        runs.append(per_op)
        del runs[:-WINDOW]
        if self.probing:
            self.probing = False
            won = self.prefers_other() == other
            self.interval = self._spaced(PROBE if won else 2 * self.interval)
            self.next_probe = self.runs + self.interval
        elif first_of_both:  # (the two ways measured: the first probe as their gap allows)
            self.interval = self._spaced(PROBE)
            self.next_probe = self.runs + self.interval

    def _spaced(self, interval):
        """``interval``, raised to keep probes of the slower way under PROBE_SHARE of the
        time at the costs measured now, and at most MAX_INTERVAL."""
        fast, slow = sorted((self.usual, self.other))
        if fast > 0:
            interval = max(interval, math.ceil((slow / fast - 1) / PROBE_SHARE))
        return min(interval, MAX_INTERVAL)


__all__ = [
    "Measured",
    "clock",
    "PROBE",
    "MARGIN",
    "MAX_INTERVAL",
    "WINDOW",
    "PROBE_SHARE",
    "UNMEASURED",
]
