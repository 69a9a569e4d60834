"""Autobatching: independent ops of one signature in a lazy run become one batched kernel call.

DyNet's on-the-fly operation batching (Neubig, Goldberg and Dyer, NeurIPS 2017): the user
writes the computation for one example (a tree, a sentence) and loops over the mini-batch; the
lazy run groups ops that have the same *signature* and do not depend on each other, gathers
their inputs along a new leading axis, runs the op's kernel once (``ops.batching`` says how per
op) and scatters the rows back into the members' outputs. Gradient ops are ops on the tape, so
backward batches the same way.

Signature: the op type, its attributes, and per input either the per-example shape and dtype or,
for a *shared* input (a parameter: persistable, or a leaf requiring a gradient), the variable
itself. Random, side-effecting and in-place ops are never batched. Random ops keep their order
among themselves (each depends on the one before), so they draw what eager mode draws and
``tape.seed(n)`` stays reproducible; side-effecting and in-place ops act as barriers: the ops
recorded before one run before it, the ops after it after it.

Scheduling, on the run's dependency DAG (one linear scan: tape order is topological):

* ``agenda`` (default; DyNet's agenda-based heuristic): ops that cannot batch run as soon as
  they are ready (they are the glue that unblocks others); otherwise, of the signatures with
  ready ops, the one with the lowest average depth runs next, all its ready ops as one group;
* ``depth``: ops of one signature at the same depth (longest path from the run's inputs) form a
  group; depths run in order.

Cost model (measured here, numpy 2-core machine, float32, interpreter tier): one op costs ~4-6 us
of Python dispatch plus its kernel; a group of n costs one dispatch, a gather (``np.stack``,
~0.3 us per member; free when the members are consecutive rows of an earlier group's result)
and a scatter (~0.2 us per member). A group of two already wins for products with a shared
weight (n small products -> one) and breaks even for elementwise ops on 64-128 floats; from
three members on every rule wins, so groups smaller than ``MIN_GROUP`` run unbatched.

Results equal unbatched ones bit for bit for elementwise, view and lookup rules; products over
joined rows may round differently (BLAS blocks a larger product differently), so autobatching is
off with ``tape.lazy(exact=True)`` and ``tape.lazy(autobatch=False)``.
"""

from __future__ import annotations

import collections

from ops.batching import LIST, rule_of

MIN_GROUP = 3
HEURISTICS = ("agenda", "depth")


def shared(var):
    """Whether ``var`` is the same for every example (a parameter), so it is not gathered."""
    return var.persistable or (var._leaf and var.requires_grad)


class Schedule:
    """The order of a run: ``groups`` (tuples of positions into the run's ops; each group after
    every group it depends on) and per group its batch rule (None: run the op alone)."""

    __slots__ = ("groups", "rules")

    def __init__(self):
        self.groups, self.rules = [], []

    def batched(self):
        """(group, size) of every batched group, in run order."""
        return [(group, len(group)) for group, rule in zip(self.groups, self.rules) if rule]


def schedule(ops, barriers, heuristic="agenda", min_group=MIN_GROUP) -> Schedule:
    """Groups the run's ``ops`` (in tape order); ``barriers[i]``: op i must keep its place
    relative to every other op (side effects, in-place)."""
    if heuristic not in HEURISTICS:
        raise ValueError(f"unknown autobatch heuristic {heuristic!r}; valid: {HEURISTICS}")
    result, start = Schedule(), 0
    signatures = _Signatures()
    for index, barrier in enumerate(barriers):
        if barrier:
            _segment(ops, start, index, signatures, heuristic, min_group, result)
            result.groups.append((index,))
            result.rules.append(None)
            start = index + 1
    _segment(ops, start, len(ops), signatures, heuristic, min_group, result)
    return result


def _segment(ops, start, stop, signatures, heuristic, min_group, result):
    """Schedules ops[start:stop] (no barrier among them) into ``result``."""
    if stop - start <= 1:
        for index in range(start, stop):
            result.groups.append((index,))
            result.rules.append(None)
        return
    # The DAG as flat lists of ints (offsets from ``start``): few long-lived containers, so the
    # garbage collector has little to scan on a tape of thousands of ops.
    producer, depth, keys, waiting, sources, targets = {}, [], [], [], [], []
    get, of = producer.get, signatures.of
    last_random = -1
    for offset, op in enumerate(ops[start:stop]):
        fast = op.defn.fast
        level = count = 0
        first = -1
        if op.defn.random:  # after the random op before it: the same draws as eager mode
            if last_random >= 0:
                sources.append(last_random)
                targets.append(offset)
                count, level, first = 1, depth[last_random] + 1, last_random
            last_random = offset
        for var in op.args if fast else inputs(op):
            p = get(id(var))
            if p is not None and p != first:
                if count and p in sources[len(sources) - count :]:
                    continue  # (an input read twice: one edge)
                first = p
                sources.append(p)
                targets.append(offset)
                count += 1
                if depth[p] >= level:
                    level = depth[p] + 1
        waiting.append(count)
        depth.append(level)
        keys.append(of(op))
        if fast:
            producer[id(op.results[0])] = offset
        else:
            for var in op.output_vars():
                producer[id(var)] = offset
    if heuristic == "depth":
        order = _by_depth(depth, keys)
    else:
        order = _by_agenda(waiting, sources, targets, depth, keys)
    for key, members in order:
        if key is None or len(members) < min_group:
            for offset in members:
                result.groups.append((start + offset,))
                result.rules.append(None)
        else:
            result.groups.append(tuple(start + m for m in members))
            result.rules.append(key[0])


def _by_depth(depth, keys):
    groups = {}
    for offset, key in enumerate(keys):
        group = (depth[offset], key if key is not None else offset)
        groups.setdefault(group, (key, []))[1].append(offset)
    return [groups[g] for g in sorted(groups, key=lambda g: (g[0], groups[g][1][0]))]


def _by_agenda(waiting, sources, targets, depth, keys):
    count = len(keys)
    # successors of op i: targets[begin[i]:begin[i + 1]] after a counting sort by source
    begin = [0] * (count + 1)
    for p in sources:
        begin[p + 1] += 1
    for i in range(count):
        begin[i + 1] += begin[i]
    fill, successors = begin[:], [0] * len(sources)
    for p, t in zip(sources, targets):
        successors[fill[p]] = t
        fill[p] += 1
    total = {}
    for offset, key in enumerate(keys):
        if key is not None:
            sums = total.get(key)
            if sums is None:
                total[key] = [depth[offset], 1]
            else:
                sums[0] += depth[offset]
                sums[1] += 1
    average = {key: s / n for key, (s, n) in total.items()}
    singles, ready, order = collections.deque(), {}, []
    for offset in range(count):
        if not waiting[offset]:
            if keys[offset] is None:
                singles.append(offset)
            else:
                ready.setdefault(keys[offset], []).append(offset)
    while singles or ready:
        if singles:
            key, members = None, (singles.popleft(),)
        else:
            key = min(ready, key=average.__getitem__)
            members = ready.pop(key)
        order.append((key, members))
        for m in members:
            for s in successors[begin[m] : begin[m + 1]]:
                waiting[s] -= 1
                if not waiting[s]:
                    if keys[s] is None:
                        singles.append(s)
                    else:
                        ready.setdefault(keys[s], []).append(s)
    return order


def inputs(op):
    if op.defn.simple_inputs:
        return op.args
    return op.input_vars()


class _Signatures:
    """Signatures of ops, caching attribute keys and rule verdicts."""

    def __init__(self):
        self.verdicts, self.interned = {}, {}

    def of(self, op):
        """(rule, defn, attributes, inputs) or None when the op does not batch."""
        defn = op.defn
        if defn.random or defn.side_effect or defn.inplace:
            return None
        rule = rule_of(defn)
        if rule is None:
            return None
        args = op.args
        if not defn.fast:  # only the list rule: one output, one list slot
            if rule is not LIST or not defn.single_output or len(args) != 1:
                return None
            args = args[0]
        attrs = op.attrs
        # An op's attribute dicts list their keys in the schema's order (check_attrs), so the
        # values alone identify them.
        akey = tuple(attrs.values())
        try:
            hash(akey)
        except TypeError:
            return None
        parts, shapes, each = [], [], []
        for var in args:
            shape = var.shape if var.shape.__class__ is tuple else tuple(var.shape)
            shapes.append(shape)
            if shared(var):
                parts.append(id(var))
                each.append(False)
            else:
                parts.append((shape, var.dtype))
                each.append(True)
        parts = tuple(parts)
        verdict_key = (defn, akey, tuple(shapes), tuple(each))
        verdict = self.verdicts.get(verdict_key)
        if verdict is None:
            verdict = self.verdicts[verdict_key] = bool(rule.accepts(attrs, shapes, each))
        if not verdict:
            return None
        key = (rule, defn, akey, parts)
        return self.interned.setdefault(key, key)  # (one long-lived tuple per signature)


def gather(values, rows, xp):
    """``values`` stacked along a new leading axis: a view when they are consecutive rows of
    one earlier batched result (``rows``: id(row) -> (result, index, row)), else one copy."""
    found = rows.get(id(values[0]))
    if found is not None:
        base, first, _ = found
        index = first
        for value in values:
            entry = rows.get(id(value))
            if entry is None or entry[0] is not base or entry[1] != index:
                break
            index += 1
        else:
            return base[first:index]
    return xp.stack(values)


def scatter(out, count, rows):
    """The rows of a batched result, recorded in ``rows`` for later gathers (holding each row,
    so that its id stays unique; the executor drops the entry when it frees the row)."""
    if out.ndim == 1:
        parts = [out[i, ...] for i in range(count)]  # 0-d arrays, not numpy scalars
    else:
        parts = list(out)
    for i, part in enumerate(parts):
        rows[id(part)] = (out, i, part)
    return parts


__all__ = [
    "schedule",
    "inputs",
    "Schedule",
    "gather",
    "scatter",
    "shared",
    "MIN_GROUP",
    "HEURISTICS",
]
