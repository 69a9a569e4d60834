"""Autobatching in a compiled plan: groups of independent ops of one signature become one call.

The interpreted tier autobatches each run anew (``tape.passes.autobatch``: signatures, the
dependency DAG and the agenda every run, ~2 us per op). A structure that repeats -- the same
trees, sentences or parses every step -- runs its compiled plan instead, which ran every op of
every example as its own kernel: 4,000 small products a step for the ``scaling`` benchmark's
64 trees. This pass schedules the plan's block once, with the same signatures, rules and
heuristics, and rewrites each batched group into its gathers and one ``batched_call``
(``ops/batched_call.py``) whose rows are the members' outputs, so every later run of the plan
pays one kernel call per group.

- Gathers: a member operand that differs per example is stacked by one ``gather_rows``, which
  copies rows of earlier groups' results in one indexing call per result (``np.stack`` of
  their views cost ~0.3 us a member: two thirds of the trees' plan); where the members read
  consecutive rows of one earlier group's result, that result (or a ``slice`` of it) is read
  instead, with no copy (a chain of groups: ``tanh`` of a batched product).
- Joins: a ``concat`` along axis 0 of equal pieces that are mostly earlier groups' rows
  (``batch_products`` joins every node's value of every tree for one weight-gradient product)
  is one ``gather_rows`` of those rows and a reshape: a concat of 1,235 rows read ~0.5 ms, the
  gather from their 10 groups' results ~0.1 ms.
- Order: ops run in the schedule's order (each group after every group it reads from). Ops
  that write a variable read or written before them (in-place updates), side-effecting and
  in-place ops are barriers: the ops before one run before it, those after it after it.
- Results: equal to the unbatched plan's within the rounding of a BLAS call over more rows
  (the rules run the op's own kernel); ``exact=True`` and ``autobatch=False`` leave the plan
  unbatched.

A group is batched only where that is cheaper than its members' instructions, by a cost model
measured on the ``scaling`` trees' plan (2-core machine, numpy, float32): a plan instruction of
a small op costs ~2 us (``MEMBER_US``), an elementwise one whose operands unbatched elementwise
ops make ~0.2 us (``FUSED_US``: the fusion pass makes it a step of their fused kernel), a
``batched_call`` ~5 us (``CALL_US``), a
``gather_rows`` ~5 us (``GATHER_US``) plus ~0.3 us per whole array it places (``WHOLE_US``),
a ``concat`` ~0.4 us a piece (``JOIN_US``), and reading an earlier group's consecutive rows
nothing. So a group of three sums of eight
gradient terms (eight gathers) runs unbatched, and so do the 600 gradient terms of the
``scaling`` chain's one parameter (they fuse), while 25 products with a shared weight (one
gather) batch, and so does the ``tanh`` of their rows. The interpreted tier's threshold
(``autobatch.MIN_GROUP``) assumes ~5 us per unbatched op, which a plan does not pay.

Cost: one adapter per op and variable, then ``autobatch.schedule``'s linear scans and agenda:
O(n log n) in the block's length, once per plan.
"""

from __future__ import annotations

import itertools

from ops.registry import REGISTRY
from tape.ir import Block, OpDesc, VarDesc, freeze
from tape.passes import autobatch

MEMBER_US, FUSED_US, CALL_US, GATHER_US, WHOLE_US, JOIN_US = 2.0, 0.2, 5.0, 5.0, 0.3, 0.4


class _Var:
    """A block variable as ``autobatch`` reads a Variable (hashed by identity)."""

    __slots__ = ("name", "shape", "dtype", "persistable", "requires_grad", "_leaf")
    _piece = None  # (a block variable is never a traced call's result: autobatch.Schedule)

    def __init__(self, desc, leaf):
        self.name, self.shape, self.dtype = desc.name, tuple(desc.shape), desc.dtype
        self.persistable, self.requires_grad = desc.persistable, desc.requires_grad
        self._leaf = leaf


class _Op:
    """A block op as ``autobatch`` reads an OpHandle: ``args`` per input slot (a list for a
    duplicable one, None where absent), ``results`` per output."""

    __slots__ = ("defn", "args", "results", "attrs", "_inputs")

    def __init__(self, op, defn, var):
        self.defn, self.attrs = defn, op.attrs
        self.args = []
        for slot in defn.input_slots:
            names = op.inputs.get(slot)
            if not names:
                self.args.append(None)
            elif slot in defn.duplicable_inputs:
                self.args.append([var(n) for n in names])
            else:
                self.args.append(var(names[0]))
        self._inputs = [var(n) for n in op.input_names()]
        self.results = [var(n) for n in op.output_names()]

    def input_vars(self):
        return self._inputs

    def output_vars(self):
        return self.results


def rewrite(block, keep=(), heuristic="agenda") -> Block:
    """``block`` with its batched groups as ``batched_call`` ops (itself when none forms).
    ``keep`` (the other rewrites' argument) changes nothing: every member's output keeps its
    name, as a row of its group's result."""
    if heuristic not in autobatch.HEURISTICS:
        heuristic = autobatch.HEURISTICS[0]
    produced = {name for op in block.ops for name in op.output_names()}
    variables = {}

    def var(name):
        found = variables.get(name)
        if found is None:
            found = variables[name] = _Var(block.vars[name], name not in produced)
        return found

    ops, barriers, seen = [], [], set()
    for op in block.ops:
        defn = REGISTRY[op.type]
        outputs = op.output_names()
        rewrites = any(name in seen for name in outputs)  # (in place, or written again)
        barriers.append(bool(defn.side_effect or defn.inplace or rewrites))
        seen.update(op.input_names())
        seen.update(outputs)
        ops.append(_Op(op, defn, var))
    schedule = autobatch.schedule(ops, barriers, heuristic)
    if not schedule.batched():
        return block
    return _Emitter(block).emit(schedule, ops)


class _Emitter:
    def __init__(self, block):
        self.block, self.new_vars, self.ops = block, {}, []
        self.rows = {}  # member output name -> (batched result name, row, members)
        self.elementwise = {  # output name -> whether an elementwise op makes it
            name: REGISTRY[op.type].elementwise for op in block.ops for name in op.output_names()
        }
        self.counter = itertools.count()
        self.views = {}  # a split's input seen as rows, not yet emitted: name -> (input, split)
        self.sources = {}  # a split's input -> the name of its view as rows

    def var(self, name):
        return self.new_vars.get(name) or self.block.vars[name]

    def fresh(self, prefix, shape, dtype):
        while True:
            name = f"{prefix}@group{next(self.counter)}"
            if name not in self.block.vars and name not in self.new_vars:
                self.new_vars[name] = VarDesc(name, tuple(shape), dtype)
                return name

    def add(self, type, inputs, outputs, attrs, like, is_target=False):
        full = freeze(REGISTRY[type].check_attrs(attrs))
        name = f"{like.name}/batched_{type}"
        self.ops.append(OpDesc(type, inputs, outputs, full, is_target, name, like.location))

    def emit(self, schedule, adapters):
        """The block in the schedule's order with its groups batched; the block itself where
        the cost model batched none."""
        block, batched = self.block, False
        for members, rule in zip(schedule.groups, schedule.rules, strict=True):
            if rule is None:
                self._alone([block.ops[m] for m in members])
            else:
                ops = [block.ops[m] for m in members]
                batched |= self._group(ops, adapters[members[0]], rule)
        if not batched:
            return block
        return Block({**block.vars, **self.new_vars}, self.ops, block.idx)

    def _group(self, members, first, rule):
        like, defn = members[0], first.defn
        lists = first.args[0].__class__ is list
        if lists:  # (the list rule: one operand per position of the one list slot)
            slot = defn.input_slots[0]
            gathers = [
                [m.inputs[slot][position] for m in members]
                for position in range(len(first.args[0]))
            ]
            read_as_is = [None] * len(gathers)
        else:  # (per slot: the members' names to gather, or None and the one name all read)
            gathers, read_as_is = [], []
            for slot, arg in zip(defn.input_slots, first.args, strict=True):
                gathers.append(
                    None if autobatch.shared(arg) else [m.inputs[slot][0] for m in members]
                )
                read_as_is.append(arg.name)
            self._share_common(gathers, first, rule)
        read = [names for names in gathers if names is not None]
        cost = CALL_US + sum(self._gather_cost(names) for names in read)
        # (an elementwise op reading only what unbatched elementwise ops make fuses into
        # their kernel)
        fuses = defn.elementwise and all(
            n not in self.rows and self.elementwise.get(n, False) for names in read for n in names
        )
        if cost >= (FUSED_US if fuses else MEMBER_US) * len(members):
            self._alone(members)  # (cheaper one by one: see the module docstring)
            return False
        operands = [
            name if names is None else self._gather(names, like)
            for names, name in zip(gathers, read_as_is, strict=True)
        ]
        each = [names is not None for names in gathers]
        outs = [m.output_names()[0] for m in members]
        result = self.var(outs[0])
        n = len(members)
        batched = self.fresh(outs[0], (n, *result.shape), result.dtype)
        attrs = {
            "op": like.type,
            "attrs": tuple(like.attrs.items()),
            "each": tuple(each),
            "lists": lists,
            "count": n,
            "shape": tuple(result.shape),
            "dtype": result.dtype,
            "origins": tuple((m.name, m.location) for m in members),
        }
        target = any(m.is_target for m in members)
        self.add(
            "batched_call",
            {"X": operands},
            {"Batched": [batched], "Out": outs},
            attrs,
            like,
            target,
        )
        for row, name in enumerate(outs):
            self.rows[name] = (batched, row, n)
        return True

    @staticmethod
    def _share_common(gathers, first, rule):
        """Reads as shared (not gathered) an operand every member reads from one variable (a
        constant of the gradient ops), where the rule accepts it so."""
        for k, names in enumerate(gathers):
            if names is None or any(n != names[0] for n in names):
                continue
            each = [g is not None and j != k for j, g in enumerate(gathers)]
            shapes = [tuple(arg.shape) for arg in first.args]
            if rule.accepts(dict(first.attrs), shapes, each):
                gathers[k] = None

    def _alone(self, ops):
        """Emits ``ops`` unbatched; a variable one of them writes is no longer a row, except
        the pieces of a ``split`` into equal parts along axis 0 (``batch_products``' joined
        products), which are rows of its input seen as (parts, *part shape)."""
        for op in ops:
            if not self._join_rows(op):
                self.ops.append(op)
            for name in op.output_names():
                self.rows.pop(name, None)
                view = self.sources.pop(name, None)
                if view is not None:  # (a split's input written again: its rows are stale)
                    self.views.pop(view, None)
                    self.rows = {n: p for n, p in self.rows.items() if p[0] != view}
            if op.type == "split" and op.attrs["axis"] == 0:
                self._split_rows(op)

    def _join_rows(self, op):
        """Emits a ``concat`` along axis 0 of equal pieces that are mostly earlier groups' rows
        (``batch_products``' joined operands of a weight gradient, over every node of every
        tree) as a gather of those rows and a reshape, where the model says it is cheaper
        (``JOIN_US`` a piece against one gather per source); returns whether it did."""
        if op.type != "concat" or op.attrs["axis"] != 0:
            return False
        names = op.inputs["X"]
        shapes = {tuple(self.var(n).shape) for n in names}
        if len(shapes) != 1 or not next(iter(shapes)):
            return False
        places = [self.rows.get(n) for n in names]
        sources = len({p[0] for p in places if p is not None})
        loose = sum(p is None for p in places)
        if not sources or GATHER_US * sources + WHOLE_US * loose >= JOIN_US * len(names):
            return False
        gathered = self._gather(names, op)
        (out,) = op.outputs["Out"]
        shape = tuple(self.var(out).shape)
        self.add("reshape", {"X": [gathered]}, {"Out": [out]}, {"shape": shape}, op, op.is_target)
        return True

    def _split_rows(self, op):
        outs, (source,) = op.outputs["Out"], op.inputs["X"]
        shapes = {tuple(self.var(n).shape) for n in outs}
        if len(shapes) != 1 or any(self.rows.get(n) for n in outs):
            return
        (shape,) = shapes
        whole = self.var(source)
        if not shape or len(outs) * shape[0] != whole.shape[0]:
            return
        view = self.fresh(source, (len(outs), *shape), whole.dtype)
        self.views[view], self.sources[source] = (source, op), view
        for row, name in enumerate(outs):
            self.rows[name] = (view, row, len(outs))

    def _reading(self, name):
        """``name``, emitting first the reshape that makes it where it is a split's view."""
        pending = self.views.pop(name, None)
        if pending is not None:
            source, like = pending
            shape = tuple(self.new_vars[name].shape)
            self.add("reshape", {"X": [source]}, {"Out": [name]}, {"shape": shape}, like)
        return name

    def _gather_cost(self, names):
        """What gathering ``names`` costs (microseconds, the module docstring's model)."""
        places = [self.rows.get(n) for n in names]
        if self._consecutive(places):
            return 0.0
        return GATHER_US + WHOLE_US * sum(p is None for p in places)

    @staticmethod
    def _consecutive(places):
        first = places[0]
        return first is not None and all(
            p is not None and p[0] == first[0] and p[1] == first[1] + k
            for k, p in enumerate(places)
        )

    def _gather(self, names, like):
        """The name of ``names`` stacked along a new leading axis: an earlier group's result
        (or a slice of it) where they are its consecutive rows, else one ``gather_rows`` of
        the rows of earlier results and the other arrays."""
        places = [self.rows.get(n) for n in names]
        if self._consecutive(places):
            batched, start, count = places[0]
            if start == 0 and len(names) == count:
                return self._reading(batched)
            desc = self.var(self._reading(batched))
            sliced = self.fresh(batched, (len(names), *desc.shape[1:]), desc.dtype)
            attrs = {"axes": (0,), "starts": (start,), "ends": (start + len(names),)}
            self.add("slice", {"X": [batched]}, {"Out": [sliced]}, attrs, like)
            return sliced
        sources, pieces = [], {}
        for position, (name, place) in enumerate(zip(names, places, strict=True)):
            if place is None:
                sources.append(name)
                pieces[len(sources) - 1] = ([position], None)
                continue
            batched, row, _ = place
            if batched not in pieces:
                sources.append(self._reading(batched))
                pieces[batched] = (len(sources) - 1, [], [])
            pieces[batched][1].append(position)
            pieces[batched][2].append(row)
        entries = []
        for key, piece in pieces.items():
            if piece[1] is None:  # (a whole array, keyed by its source index)
                entries.append((key, tuple(piece[0]), None))
            else:
                entries.append((piece[0], tuple(piece[1]), tuple(piece[2])))
        member = self.var(names[0])
        gathered = self.fresh(names[0], (len(names), *member.shape), member.dtype)
        attrs = {
            "pieces": tuple(entries),
            "count": len(names),
            "shape": tuple(member.shape),
            "dtype": member.dtype,
        }
        self.add("gather_rows", {"X": sources}, {"Out": [gathered]}, attrs, like)
        return gathered


__all__ = ["rewrite"]
