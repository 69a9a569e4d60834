"""The profiler: per-op wall time of eager ops, backward ops and lazy runs, as a table or a trace.

``with tape.profile() as prof:`` observes every op that runs in the block (``tape.instrument``):
an eager op is timed around its recording (inference and kernel), a lazy run's ops around each
kernel call (both tiers; a fused group is one entry). Then ``print(prof.table())`` groups the
times by op type or by the user's line, and ``prof.export_chrome_trace(path)`` writes a trace for
Perfetto or chrome://tracing in which each gradient op is linked (a flow arrow and its ``args``)
to the forward op it belongs to. Outside a profile block nothing is timed (one test per op).

>>> import numpy as np, tape, ops
>>> x = tape.Variable(np.ones((2, 2), np.float32), requires_grad=True)
>>> with tape.profile() as prof:
...     tape.backward(ops.tanh(x).sum())
>>> [row.key for row in prof.table(sort_by="key").rows]
['broadcast_to (backward)', 'fill_ones_like (backward)', 'reduce_sum', 'reshape (backward)',
 'tanh', 'tanh_grad (backward)']
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading

from tape import instrument

SORT_KEYS = ("total", "count", "mean", "bytes", "key")
GROUPS = ("op", "line")


class Event:
    """One op run: what ran (``info``: a ``tape.instrument.OpInfo``), when (ns, perf_counter),
    the bytes of its outputs, and the thread that ran it."""

    __slots__ = ("info", "start", "end", "bytes", "thread")

    def __init__(self, info, start, end, size, thread):
        self.info, self.start, self.end, self.bytes, self.thread = info, start, end, size, thread

    @property
    def seconds(self):
        return (self.end - self.start) * 1e-9


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of a profile table: the group's key and its totals."""

    key: str
    count: int
    total: float  # seconds
    mean: float  # seconds
    percent: float  # of the time of every op in the profile
    bytes: int  # allocated for outputs


class Table:
    """A profile table: ``rows`` (``Row``s, sorted; the first ``limit``), the ``total`` seconds
    and ``count`` of all ops profiled, and its text (``str(table)``)."""

    def __init__(self, rows, group_by, total, count, groups):
        self.rows, self.group_by, self.total = rows, group_by, total
        self.count, self.groups = count, groups

    def __str__(self):
        head = "op" if self.group_by == "op" else "line"
        width = max([len(head)] + [len(row.key) for row in self.rows])
        lines = [
            f"{head:<{width}}  {'count':>7}  {'total ms':>10}  {'mean us':>10}  "
            f"{'% time':>6}  {'bytes':>10}"
        ]
        lines.append("-" * len(lines[0]))
        for row in self.rows:
            lines.append(
                f"{row.key:<{width}}  {row.count:>7}  {row.total * 1e3:>10.3f}  "
                f"{row.mean * 1e6:>10.1f}  {row.percent:>6.1f}  {_size(row.bytes):>10}"
            )
        shown = (
            "" if len(self.rows) == self.groups else f" ({len(self.rows)} of {self.groups} rows)"
        )
        lines.append(f"total: {self.total * 1e3:.3f} ms in {self.count} ops{shown}")
        return "\n".join(lines)

    __repr__ = __str__


class profile:
    """Context manager recording the wall time of every op run inside it (see the module
    docstring). ``events`` lists what ran, in order. Profiling is process-wide: ops other
    threads run meanwhile are recorded too, each event with its thread."""

    def __init__(self):
        self.events = []

    def __enter__(self):
        instrument.attach(profiler=self)
        return self

    def __exit__(self, *exc):
        instrument.detach(profiler=self)

    def add(self, info, start, end, outputs):
        """Called by the observer for each op run (list.append: safe from executor threads)."""
        size = 0
        for value in outputs:
            size += value.nbytes
        self.events.append(Event(info, start, end, int(size), threading.get_ident()))

    def table(self, sort_by="total", group_by="op", limit=None) -> Table:
        """Per-group count, total and mean time, share of all op time and bytes allocated.

        Args:
            sort_by: "total" (default), "count", "mean", "bytes" (descending) or "key".
            group_by: "op" (op type; gradient ops as "<type> (backward)") or "line" (the
                user's line that recorded the op; a gradient op counts under its forward op's
                line, as "<line> (backward)").
            limit: keep the first ``limit`` rows.
        """
        if sort_by not in SORT_KEYS:
            raise ValueError(f"profile.table: sort_by must be one of {SORT_KEYS}, not {sort_by!r}")
        if group_by not in GROUPS:
            raise ValueError(f"profile.table: group_by must be one of {GROUPS}, not {group_by!r}")
        groups = {}
        for event in self.events:
            key = _key(event.info, group_by)
            count, total, size = groups.get(key, (0, 0, 0))
            groups[key] = (count + 1, total + event.end - event.start, size + event.bytes)
        everything = sum(total for _, total, _ in groups.values()) or 1
        rows = [
            Row(key, count, total * 1e-9, total * 1e-9 / count, 100.0 * total / everything, size)
            for key, (count, total, size) in groups.items()
        ]
        if sort_by == "key":
            rows.sort(key=lambda row: row.key)
        else:
            rows.sort(key=lambda row: (-getattr(row, sort_by), row.key))
        total = sum(row.total for row in rows)
        return Table(rows[:limit], group_by, total, len(self.events), len(rows))

    def export_chrome_trace(self, path):
        """Writes the events as Chrome trace JSON (Perfetto, chrome://tracing): one complete
        event per op, with its name, line and output bytes in ``args``; a gradient op also
        names its forward op and line, and a flow arrow leads from that forward op to it."""
        with open(path, "w", encoding="utf-8") as file:
            json.dump(chrome_trace(self.events), file)


def chrome_trace(events):
    """The Chrome trace object (a dict) of ``events``."""
    pid = os.getpid()
    origin = min((e.start for e in events), default=0)
    threads = {}
    trace, last_forward, flows = [], {}, 0
    for event in events:
        info = event.info
        tid = threads.setdefault(event.thread, len(threads))
        args = {"name": info.name, "line": info.location, "bytes": event.bytes}
        if info.forward is not None:
            args["forward_op"], args["forward_line"] = info.forward[1], info.forward[2]
        record = {
            "name": info.type,
            "cat": "backward" if info.backward else "forward",
            "ph": "X",
            "ts": (event.start - origin) / 1e3,
            "dur": (event.end - event.start) / 1e3,
            "pid": pid,
            "tid": tid,
            "args": args,
        }
        trace.append(record)
        if not info.backward:
            last_forward[info.name] = record
            continue
        source = last_forward.get(info.forward[1]) if info.forward is not None else None
        if source is not None:  # the arrow from the forward op to its gradient op
            flows += 1
            common = {"name": "gradient", "cat": "gradient", "id": flows, "pid": pid}
            trace.append({**common, "ph": "s", "ts": source["ts"], "tid": source["tid"]})
            trace.append({**common, "ph": "f", "bp": "e", "ts": record["ts"], "tid": tid})
    return {"traceEvents": trace, "displayTimeUnit": "ms"}


def _key(info, group_by):
    if group_by == "op":
        kind = info.type
        if kind == "fused_elementwise" and "/" in info.name:
            kind = info.name.rsplit("/", 1)[1]  # fused[tanh+mul]: the ops it fused
        return f"{kind} (backward)" if info.backward else kind
    if not info.backward:
        return info.location or "<unknown line>"
    line = info.forward[2] if info.forward is not None else None
    return f"{line or info.location or '<unknown line>'} (backward)"


def _size(count):
    for unit in ("B", "KiB", "MiB"):
        if count < 1024:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


__all__ = ["profile", "Event", "Row", "Table", "chrome_trace"]
