"""Autobatching: independent ops of one signature in a lazy run become one batched kernel call.

DyNet's on-the-fly operation batching (Neubig, Goldberg and Dyer, NeurIPS 2017): the user
writes the computation for one example (a tree, a sentence) and loops over the mini-batch; the
lazy run groups ops that have the same *signature* and do not depend on each other, gathers
their inputs along a new leading axis, runs the op's kernel once (``ops.batching`` says how per
op) and scatters the rows back into the members' outputs. Gradient ops are ops on the tape, so
backward batches the same way.

Signature: the op type, its attributes, and per input either the per-example shape and dtype or,
for a *shared* input (a parameter: persistable, or a leaf requiring a gradient), the variable
itself (a traced call: its program, which fixes its inputs' shapes, and which of its
arguments are shared; not the parameters the program passes after them, the same in every
call: ``Rule.fixed_inputs``). Random, side-effecting and in-place ops are never batched.
Random ops keep their order among themselves (each depends on the one before), so they draw
what eager mode draws and ``tape.seed(n)`` stays reproducible; side-effecting and in-place ops
act as barriers: the ops recorded before one run before it, the ops after it after it.

Scheduling, per segment between barriers, in linear scans (tape order is topological):

1. signatures: one small int per op (-1: does not batch), one dictionary look-up per op; the
   rule's ``accepts`` is asked once per distinct signature, attribute keys once per attribute
   dict; a traced call passed no shared argument is looked up by its program
   (``CallHandle.watched``), its inputs not scanned. If no signature has ``MIN_GROUP``
   ops in the segment, it runs in tape order with no further work (``Schedule.bailed``
   counts those ops);
2. the dependency DAG (flat int lists), then one of the heuristics below. A run whose schedule
   has no batched group at all (a chain: its ops of one signature all depend on each other)
   is executed exactly as without autobatching, in tape order.

Heuristics:

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
three members on every rule wins, so groups smaller than ``MIN_GROUP`` run unbatched (a rule
may ask for fewer, ``Rule.min_group``: a traced call's program runs faster vectorised over one
member than interpreted op by op).

Results equal unbatched ones bit for bit for elementwise, view and lookup rules; products over
joined rows may round differently (BLAS blocks a larger product differently), so autobatching is
off with ``tape.lazy(exact=True)`` and ``tape.lazy(autobatch=False)``.
"""

from __future__ import annotations

import collections

import numpy as np

from ops.batching import rule_of
from tape.op_handle import CallHandle

MIN_GROUP = 3
HEURISTICS = ("agenda", "depth")


def shared(var):
    """Whether ``var`` is the same for every example (a parameter), so it is not gathered."""
    return var.persistable or (var._leaf and var.requires_grad)


class Schedule:
    """The order of a run: ``groups`` (tuples of positions into the run's ops; each group after
    every group it depends on) and per group its batch rule (None: run the op alone);
    ``bailed``: ops left in tape order without grouping work, as no signature among their
    segment's ops had enough members to fill a group; ``parts_read``: whether an op reads a
    ``Parts`` output of another (a traced call's result read unpacked: its gradient comes
    back to the part, which the batched backward then collects; True where not looked at)."""

    __slots__ = ("groups", "rules", "bailed", "parts_read")

    def __init__(self):
        self.groups, self.rules, self.bailed, self.parts_read = [], [], 0, False

    def batched(self):
        """(group, size) of every batched group, in run order."""
        return [(group, len(group)) for group, rule in zip(self.groups, self.rules) if rule]


def schedule(ops, barriers, heuristic="agenda", min_group=MIN_GROUP, parts=False) -> Schedule:
    """Groups the run's ``ops`` (in tape order); ``barriers[i]``: op i must keep its place
    relative to every other op (side effects, in-place; None: no op does). ``parts``: the
    caller fills the ``Parts`` outputs of ops whose rule says so (``ops.call``: the
    interpreter does, a compiled plan's groups do not), so those batch too."""
    if heuristic not in HEURISTICS:
        raise ValueError(f"unknown autobatch heuristic {heuristic!r}; valid: {HEURISTICS}")
    result, start = Schedule(), 0
    signatures = _Signatures(parts)
    for index, barrier in enumerate(barriers or ()):
        if barrier:
            _segment(ops, start, index, signatures, heuristic, min_group, result)
            result.groups.append((index,))
            result.rules.append(None)
            start = index + 1
    _segment(ops, start, len(ops), signatures, heuristic, min_group, result)
    result.bailed = signatures.bailed
    return result


def _alone(start, stop, result):
    """ops[start:stop] one at a time, in tape order."""
    result.groups.extend((index,) for index in range(start, stop))
    result.rules.extend([None] * (stop - start))


def _segment(ops, start, stop, signatures, heuristic, min_group, result):
    """Schedules ops[start:stop] (no barrier among them) into ``result``.

    Two linear scans before any grouping work: signatures (small ints, one dictionary look-up
    per op), and, only if some signature has ``min_group`` members, the dependency DAG."""
    if stop - start < min_group:
        signatures.bailed += stop - start
        result.parts_read = True  # (not looked at)
        _alone(start, stop, result)
        return
    keys = signatures.keys(ops, start, stop)
    least = [min(min_group, rule.min_group or min_group) for rule in signatures.rules]
    if not any(count >= at_least for count, at_least in zip(signatures.counts, least)):
        signatures.bailed += stop - start
        result.parts_read = True  # (not looked at)
        _alone(start, stop, result)  # no signature could fill a group: nothing to schedule
        return
    # The DAG as flat lists of ints (offsets from ``start``): few long-lived containers, so the
    # garbage collector has little to scan on a tape of thousands of ops. ``producer`` is keyed
    # by the Variables themselves (no id() call per look-up): they hash by identity, and live
    # Variables never share a hash, so the dictionary never calls their elementwise ``__eq__``.
    producer, depth, waiting, sources, targets = {}, [], [], [], []
    get = producer.get
    last_random = -1
    offset = 0
    parts_read = False
    for op in ops[start:stop]:
        defn = op.defn
        level = count = 0
        first = -1
        if defn.random:  # after the random op before it: the same draws as eager mode
            if last_random >= 0:
                sources.append(last_random)
                targets.append(offset)
                count, level, first = 1, depth[last_random] + 1, last_random
            last_random = offset
        if defn.fast:
            for var in op.args:
                p = get(var)
                if p is None:
                    continue
                if var._piece is not None:
                    parts_read = True
                if p != first:
                    if count and p in sources[len(sources) - count :]:
                        continue  # (an input read twice: one edge)
                    first = p
                    sources.append(p)
                    targets.append(offset)
                    count += 1
                    if depth[p] >= level:
                        level = depth[p] + 1
            producer[op.results[0]] = offset
        else:  # (a list of inputs, as a traced call reads: its producers so far in ``mine``)
            mine = [first] if count else []
            for var in op.args[0] if op.__class__ is CallHandle else inputs(op):
                p = get(var)
                if p is None:
                    continue
                if var._piece is not None:
                    parts_read = True
                if p not in mine:
                    mine.append(p)
                    sources.append(p)
                    targets.append(offset)
                    if depth[p] >= level:
                        level = depth[p] + 1
            count = len(mine)
            if op.__class__ is CallHandle:  # (its packed output, then the list of its parts)
                out, parts = op.results
                producer[out] = offset
                for var in parts:
                    producer[var] = offset
            else:
                for entry in op.results:  # (op.output_vars() without the list it builds)
                    if entry.__class__ is list or entry.__class__ is tuple:
                        for var in entry:
                            producer[var] = offset
                    elif entry is not None:
                        producer[entry] = offset
        waiting.append(count)
        depth.append(level)
        offset += 1
    if parts_read:
        result.parts_read = True
    if heuristic == "depth":
        order = _by_depth(depth, keys)
    else:
        order = _by_agenda(waiting, sources, targets, depth, keys, signatures.counts)
    rules = signatures.rules
    groups_append, rules_append = result.groups.append, result.rules.append
    for key, members in order:
        if key < 0 or len(members) < least[key]:
            for offset in members:
                groups_append((start + offset,))
                rules_append(None)
        else:
            groups_append(tuple([start + m for m in members]))
            rules_append(rules[key])


def _by_depth(depth, keys):
    groups = {}
    for offset, key in enumerate(keys):
        group = (depth[offset], key if key >= 0 else -1 - offset)
        found = groups.get(group)
        if found is None:
            groups[group] = (key, [offset])
        else:
            found[1].append(offset)
    return [groups[g] for g in sorted(groups, key=lambda g: (g[0], groups[g][1][0]))]


def _by_agenda(waiting, sources, targets, depth, keys, sizes):
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
    total = [0] * len(sizes)
    for key, level in zip(keys, depth):
        if key >= 0:
            total[key] += level
    average = [s / n if n else 0.0 for s, n in zip(total, sizes)]
    ready, order = {}, []
    singles = [offset for offset in range(count) if not waiting[offset]]
    for offset in singles:
        key = keys[offset]
        if key >= 0:
            members = ready.get(key)
            if members is None:
                ready[key] = [offset]
            else:
                members.append(offset)
    singles = collections.deque(offset for offset in singles if keys[offset] < 0)
    append, pop, deal = order.append, singles.popleft, ready.get
    while singles or ready:
        if singles:
            key, members = -1, (pop(),)
        else:
            key = min(ready, key=average.__getitem__)
            members = ready.pop(key)
        append((key, members))
        for m in members:
            for s in successors[begin[m] : begin[m + 1]]:
                left = waiting[s] - 1
                waiting[s] = left
                if not left:
                    k = keys[s]
                    if k < 0:
                        singles.append(s)
                    else:
                        found = deal(k)
                        if found is None:
                            ready[k] = [s]
                        else:
                            found.append(s)
    return order


def inputs(op):
    """The Variables ``op`` reads (its argument list itself for one list slot: not a copy)."""
    args = op.args
    if op.defn.simple_inputs:
        return args
    if len(args) == 1 and args[0].__class__ is list:  # (a traced call, a sum)
        return args[0]
    return op.input_vars()


_UNSEEN = object()


class _Signatures:
    """Signatures of the ops of one schedule as small ints (-1: the op does not batch): one
    dictionary look-up per op, the rule's verdict asked once per distinct signature.

    ``rules[k]``: signature k's batch rule; ``counts[k]``: its ops in the last segment;
    ``bailed``: ops of segments where no signature had enough members to form a group."""

    def __init__(self, parts=False):
        self.parts = parts
        self.kinds = {}  # defn -> its rule, or None: the op never batches
        self.fixed = set()  # defns whose attributes fix their inputs' shapes (shapes_in_attrs)
        self.attr_keys = {}  # id(attrs) -> hashable key, or None (the ops hold their attrs)
        self.tails = {}  # id(attrs) -> how many last inputs the attributes fix (fixed_inputs)
        self.known = {}  # (defn, attribute key, inputs) -> signature
        self.programs = {}  # id(a traced program's attributes) -> its calls' signature
        self.rules, self.counts, self.bailed = [], [], 0

    def keys(self, ops, start, stop):
        """The signatures of ops[start:stop], counted (in ``counts``) afresh."""
        self.counts = counts = [0] * len(self.rules)
        kinds, attr_keys, known, fixed = self.kinds, self.attr_keys, self.known, self.fixed
        tails = self.tails
        keys = []
        append = keys.append
        programs = self.programs
        for op in ops[start:stop]:
            if op.__class__ is CallHandle and op.watched is not None:
                # (the call's program fixes it, where none of the user's Variables is shared)
                key = programs.get(id(op.attrs))
                if key is not None and (not op.watched or _unshared(op)):
                    if key >= 0:
                        counts[key] += 1
                    append(key)
                    continue
            defn = op.defn
            rule = kinds.get(defn, _UNSEEN)
            if rule is _UNSEEN:
                rule = kinds[defn] = _rule(defn, self.parts)
                if rule is not None and rule.shapes_in_attrs:
                    fixed.add(defn)
            if rule is None:
                append(-1)
                continue
            args = op.args
            if not defn.fast:  # only the list rule (_rule): one list slot
                if len(args) != 1 or args[0].__class__ is not list:
                    append(-1)
                    continue
                args = args[0]
            attrs = op.attrs
            akey = attr_keys.get(id(attrs), _UNSEEN)
            if akey is _UNSEEN:
                akey = attr_keys[id(attrs)] = _attr_key(attrs)
            if akey is None:
                append(-1)
                continue
            # One flat tuple: per input (id, None) if shared, else (shape, dtype); only the
            # id or None where the attributes fix the inputs' shapes (a traced call's program),
            # and nothing for the last inputs they fix outright (the program's parameters: the
            # same Variables in every call, so their entries would be the same in every key).
            parts = [defn, akey]
            if defn in fixed:
                tail = tails.get(id(attrs))
                if tail is None:
                    tail = tails[id(attrs)] = rule.fixed_inputs(attrs)
                for var in args[: len(args) - tail] if tail else args:
                    shared_var = var.persistable or (var._leaf and var.requires_grad)
                    parts.append(id(var) if shared_var else None)
            else:
                for var in args:
                    if var.persistable or (var._leaf and var.requires_grad):  # shared()
                        parts += (id(var), None)
                    else:
                        parts += (var.shape, var.dtype)
            signature = tuple(parts)
            try:
                key = known.get(signature)
            except TypeError:  # a shape given as a list
                signature = tuple(tuple(p) if p.__class__ is list else p for p in parts)
                key = known.get(signature)
            if key is None:
                key = known[signature] = self._new(rule, attrs, args)
            if op.__class__ is CallHandle and op.watched is not None and not any(parts[2:]):
                programs[id(op.attrs)] = key  # (no input shared: the program's signature)
            if key >= 0:
                counts[key] += 1
            append(key)
        return keys

    def _new(self, rule, attrs, args):
        shapes = [tuple(var.shape) for var in args]
        each = [not shared(var) for var in args]
        if not rule.accepts(attrs, shapes, each):
            return -1
        self.rules.append(rule)
        self.counts.append(0)
        return len(self.rules) - 1


def _unshared(call):
    """Whether none of the user's Variables a traced call was passed (``CallHandle.watched``)
    has been made shared since the call was recorded."""
    inputs = call.args[0]
    return not any(shared(inputs[position]) for position in call.watched)


def _rule(defn, parts=False):
    """The op type's batch rule, or None when it never batches (random, side-effecting or
    in-place ops; several outputs or list inputs, except the list rule's one list slot, and
    a first output with ``Parts`` views of it where the caller fills them: ``parts``)."""
    if defn.random or defn.side_effect or defn.inplace:
        return None
    rule = rule_of(defn)
    if rule is None or defn.fast:
        return rule
    several = not defn.single_output and not (parts and getattr(rule, "parts", False))
    if not rule.lists or several:
        return None
    return rule


def _attr_key(attrs):
    """The attributes as a hashable key, or None. An op's attribute dicts list their keys in
    the schema's order (check_attrs), so the values alone identify them."""
    key = tuple(attrs.values())
    try:
        hash(key)
    except TypeError:
        return None
    return key


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
    if xp is np:  # (one C loop over the list: np.stack converts and expands each value, 3x)
        return np.array(values)
    return xp.stack(values)


def rows_of(out, count):
    """The ``count`` rows of a batched result, as arrays (0-d ones for a vector, not numpy
    scalars)."""
    if out.ndim == 1:
        return [out[i, ...] for i in range(count)]
    return list(out)


__all__ = [
    "schedule",
    "inputs",
    "Schedule",
    "gather",
    "rows_of",
    "shared",
    "MIN_GROUP",
    "HEURISTICS",
]
