"""What a call region (``tape.call_region``) is made of once sealed: its groups (the rows of
one program at one level, run as the program vectorised), how many rows read each row's
result, the results someone else holds, the groups moved last (results no row reads), what
``tape.explain`` says of it, and which of its results ``tape.grad`` wants whole."""

from __future__ import annotations

import itertools
import sys

import numpy as np

# Results a region exported that its own calls read too: the gradient with respect to one
# is not what reaches it from outside, so ``tape.grad`` asks the region for it (``want``).
# id -> (weak Variable, weak region, its number among the region's outputs).
READ_INSIDE = {}


class Group:
    """The rows of one program at one level, needing a gradient or not, with the same shared
    arguments: run as the program vectorised over them (``ops/regions.py``)."""

    __slots__ = (
        "program",
        "level",
        "each",
        "shared",
        "rows",
        "refs",
        "bits",
        "grad",
        "location",
        "kind",
        "base",
        "saved",
    )

    def __init__(self, program, level, each, shared, grad, location):
        self.program, self.level, self.each, self.shared = program, level, each, shared
        self.rows, self.refs = [], []  # (refs: every member's input refs, flat)
        self.bits = 0  # (bit k: some member's input k needs a gradient)
        # (whether its members' results need a gradient: recorded with gradients enabled and
        # reading something that needs one; never mixed in a group, so that no gradient flows
        # through a call recorded under no_grad)
        self.grad = grad
        self.location = location  # (its first call's line: errors in the group name it)
        self.kind = self.base = self.saved = None  # (set by the region's forward)

    def mask(self):
        """The inputs of the program (its arguments, then its parameters) whose gradient
        some member needs."""
        if not self.grad:
            return ()
        program, bits = self.program, self.bits
        width = len(program.in_descs) - len(program.captured)
        mask = [j for j in range(width) if bits >> j & 1 and program.in_descs[j][1].kind in "fc"]
        mask += [width + i for i, p in enumerate(program.captured) if p.requires_grad]
        return tuple(mask)


def counts(variables, size):
    """``sys.getrefcount`` of each of ``variables`` (an iterable of ``size``), in one pass
    in C."""
    return np.fromiter(map(sys.getrefcount, variables), np.intp, size)


def _unheld_counts():
    """What ``_counts`` gives a row's tuple of results and one of its results that nothing
    but the region holds (the tuple: the region's list; a result: its tuple), measured, not
    assumed (as ``ops.call._UNHELD``)."""
    results = [(object(),)]
    row = counts(results, 1)[0]
    return int(row), int(counts(itertools.chain.from_iterable(results), 1)[0])


ROW_UNHELD, RESULT_UNHELD = _unheld_counts()


def summary(region):
    """What ``tape.explain`` says of a sealed region: per function its calls, groups and
    largest group; the results held outside; the inputs read from outside."""
    per = {}
    for group in region.groups.values():
        calls, groups, largest = per.get(group.program.name, (0, 0, 0))
        n = len(group.rows)
        per[group.program.name] = (calls + n, groups + 1, max(largest, n))
    return len(region.levels), per, len(region.exported), len(region.live), len(region.consts)


def explain(summary):
    """The lines ``tape.explain`` shows for the last region sealed on a tape."""
    calls, per, held, live, consts = summary
    groups = sum(g for _, g, _ in per.values())
    lines = [
        f"traced calls recorded as one region (tape.call_region): {calls} calls in {groups} "
        f"groups by level, each group its function vectorised; {held} results held outside, "
        f"{live} inputs read from outside and {consts} constants"
    ]
    lines += [
        f"  {name}: {n} calls in {g} group{'s' if g > 1 else ''} (largest {largest})"
        for name, (n, g, largest) in sorted(per.items(), key=lambda item: -item[1][0])
    ]
    return lines


def read_counts(region):
    """Per row, how many inputs of the region's calls read its result; the groups' input
    refs become arrays (members by inputs), as the forward reads them: views of one array
    made of every group's refs at once (a step's ~120 groups: ~1 ms made one by one)."""
    rows = len(region.levels)
    groups = list(region.groups.values())
    sizes = np.fromiter(map(len, (group.rows for group in groups)), np.intp, len(groups))
    widths = np.fromiter(
        (len(group.program.in_descs) - len(group.program.captured) for group in groups),
        np.intp,
        len(groups),
    )
    all_rows = np.fromiter(itertools.chain.from_iterable(g.rows for g in groups), np.intp)
    all_refs = np.fromiter(itertools.chain.from_iterable(g.refs for g in groups), np.intp)
    row_ends = np.cumsum(sizes).tolist()
    ref_ends = np.cumsum(sizes * widths).tolist()
    row_start = ref_start = 0
    for group, n, width, row_end, ref_end in zip(
        groups, sizes.tolist(), widths.tolist(), row_ends, ref_ends
    ):
        group.rows = all_rows[row_start:row_end]
        group.refs = all_refs[ref_start:ref_end].reshape(n, width)
        row_start, ref_start = row_end, ref_end
    read = np.bincount(all_refs[all_refs >= 0], minlength=rows)
    region.repeated = bool(rows) and int(read.max(initial=0)) > 1
    region.read = read
    _defer_sinks(region, groups, read[all_rows] == 0, row_ends)
    return read


def _defer_sinks(region, groups, sinks, ends):
    """Calls whose results no call of the region reads (a tree's loss, a token's) run last,
    one group per function (and shared arguments) instead of one per level they are ready
    at: DyNet's agenda heuristic postpones them so. By level alone, a tagger's token losses,
    ready as soon as both directions reached the token, made ~40 groups of a step's ~110.
    ``sinks``: per row of ``groups`` (group after group, each ending at its ``ends``),
    whether no call reads it."""
    before = np.concatenate(([0], np.cumsum(sinks)))[[0, *ends]]  # (sinks before each end)
    spread_of = {}  # (program, grad, each, shared) -> [(group, which of its rows are sinks)]
    start = 0
    for group, end, count in zip(groups, ends, np.diff(before).tolist()):
        if count:
            key = (group.program, group.grad, group.each, group.shared)
            spread_of.setdefault(key, []).append((group, sinks[start:end]))
        start = end
    spread = [entries for entries in spread_of.values() if len(entries) > 1]
    if not spread:
        return
    last = 1 + max(group.level for group in groups)
    merged_groups = dict(region.groups)
    for entries in spread:
        first = entries[0][0]
        merged = Group(first.program, last, first.each, first.shared, first.grad, first.location)
        rows, refs = [], []
        for group, sink in entries:
            rows.append(group.rows[sink])
            refs.append(group.refs[sink])
            merged.bits |= group.bits
            if sink.all():
                del merged_groups[_key(group)]
            else:
                group.rows, group.refs = group.rows[~sink], group.refs[~sink]
        merged.rows, merged.refs = np.concatenate(rows), np.concatenate(refs)
        merged_groups[_key(merged)] = merged
        row_groups = region.row_groups
        for row in merged.rows.tolist():
            row_groups[row] = merged
    region.groups = merged_groups


def _key(group):
    """A group's key in ``Region.groups`` (``record``'s)."""
    if group.each is None:
        return (group.program, group.level, group.grad)
    return (group.program, group.level, group.grad, group.each, group.shared)


def want(inputs, wanted):
    """Before ``tape.grad`` with respect to ``inputs``: tells the regions that exported one
    that their own calls read too to compute its whole gradient (the region's backward
    fills ``wanted``, ``{id: gradient}``, for it: ``ops.regions``)."""
    for var in inputs:
        entry = READ_INSIDE.get(id(var))
        if entry is None or entry[0]() is not var:
            continue
        region = entry[1]()
        if region is not None:
            region.wanted[entry[2]] = (var, wanted)


def forget_dead():
    """Drops the entries of ``READ_INSIDE`` whose Variable or region died."""
    for key, (var, region, _) in list(READ_INSIDE.items()):  # (a snapshot: other threads)
        if var() is None or region() is None:
            READ_INSIDE.pop(key, None)


__all__ = ["Group", "explain", "want"]
