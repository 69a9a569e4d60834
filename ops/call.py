"""The op ``call``: a traced function (``tape.traced``) run as one op, on one example or many.

A DyNet-style model calls the same small function (a tree node's composition, a parser's
transition) thousands of times a step, and lazy mode records each of its ~20 ops every time:
recording, not arithmetic, is what such a step costs (about 1.5 us an op, against the few
microseconds a batched kernel spends per example). Cavs (Xu et al., ATC 2018) batches such
models by their *vertex function* instead of by op: the function is analysed once and the
runtime runs it on every vertex ready at once. Here the function is traced once per input
signature into a ``Program`` (the registered ops it records, numbered); each call records one
``call`` op reading the call's arguments and the parameters the function reads.

- ``Program.run`` interprets the ops with their own kernels, so one call equals the function's
  ops run one by one (bit for bit).
- The batch rule ``CALL`` runs a group of calls as the program *vectorised*
  (``Vectorised``): each op of it once over the members' values stacked along a new leading
  axis, with the op's own batch rule (``ops.batching``); an op without one runs member by
  member. A value that no per-example input reaches (a parameter's transpose) is computed once.
- The gradient of a call is a call of the program's gradient (``Program.grad``: the ops
  replayed on fresh inputs and differentiated by the tape's own backward, traced once per set
  of inputs that need a gradient); a group's gradient is the gradient program vectorised, the
  gradients of shared inputs (parameters) summed over the members.

Several results leave a call packed in one flat array, ``Out`` (one dtype), and are its
``Parts``, views of it: a group's call computes one array whose rows are its members' ``Out``,
as autobatching's other rules do, and fills the parts from it (``CALL.fill_parts``); a call
reading another call's results reads its ``Out`` (``tape.traced``). A gradient call's parts
are the input gradients.
"""

from __future__ import annotations

import functools
import itertools
import math
import sys
import types

import numpy as np

from ops import batching, buffers
from ops.elementwise import elementwise_add as _ADD
from ops.fill import fill_zeros_like as _ZEROS
from ops.registry import Attr, register
from ops.select import _slice_index
from ops.select import slice as _SLICE
from ops.shape import _split_sizes
from ops.shape import concat as _CONCAT
from ops.shape import reshape as _RESHAPE
from tape.errors import ExecutionError, FluidError, InputError, ShapeError
from tape.tape import apply, apply_inferred, run_kernel, state
from tape.variable import Variable


class Step:
    """One recorded op of a program: its op, attributes, per input slot the value numbers it
    reads (None: an absent optional input; a list: a duplicable slot), per output slot the
    numbers it writes, the member shapes of its inputs and outputs, and the user's line."""

    __slots__ = ("defn", "attrs", "args", "outs", "in_shapes", "out_shapes", "location")

    def __init__(self, defn, attrs, args, outs, in_shapes, out_shapes, location):
        self.defn, self.attrs, self.args, self.outs = defn, attrs, args, outs
        self.in_shapes, self.out_shapes, self.location = in_shapes, out_shapes, location

    def values(self, env):
        return [
            None if a is None else env[a] if a.__class__ is int else [env[i] for i in a]
            for a in self.args
        ]

    def store(self, env, results):
        for ref, result in zip(self.outs, results):
            if ref.__class__ is int:
                env[ref] = result
            else:
                for i, r in zip(ref, result):
                    env[i] = r

    def located(self, name, run, *args):
        """``run(*args)``: this step's results, a kernel's failure reported as this step's in
        traced function ``name`` (``failed``)."""
        try:
            return run(*args)
        except FluidError:
            raise
        except Exception as err:
            raise self.failed(name, err) from err

    def failed(self, name, err):
        return ExecutionError(
            self.defn.type,
            f"kernel failed in traced function '{name}': {type(err).__name__}: {err}",
            location=self.location,
        )


class Program:
    """A traced function: values 0..k-1 are its inputs (``in_descs``), then the Variables it
    read from outside (``consts``: parameters and constants, read when it runs), then the
    outputs of its ``steps`` in order; ``outputs`` are the numbers of its results."""

    def __init__(self, name, in_descs, consts, steps, size, outputs, out_descs):
        self.name, self.in_descs, self.consts = name, tuple(in_descs), tuple(consts)
        self.steps, self.size, self.outputs = tuple(steps), size, tuple(outputs)
        self.out_descs = tuple(out_descs)
        dtypes = {dtype for _, dtype in out_descs}
        if len(out_descs) != 1 and len(dtypes) > 1:
            raise InputError(
                "call",
                f"the results of traced function '{name}' have different dtypes",
                expected="one dtype (they leave the call packed in one array)",
                actual=", ".join(str(d) for _, d in out_descs),
            )
        self.dtype = out_descs[0][1]
        self.sizes = tuple(math.prod(shape) for shape, _ in out_descs)
        # (a call's output: the one result as it is, or every result flattened and joined)
        self._out_shape = self.out_descs[0][0] if len(self.out_descs) == 1 else (sum(self.sizes),)
        self._grads, self._vectorised = {}, {}
        # (the results as the call's Parts: none for one result, which is Out itself)
        self.part_descs = list(self.out_descs) if len(self.out_descs) > 1 else []
        # (per part: its shape and its token (layout, index), as tape.call_region marks them)
        self.part_pieces = ()
        self.attrs = {"fn": self}  # (a call's attributes, and its outputs' descriptions)
        self.descs = ((self.out_shape, self.dtype), self.part_descs)
        self.captured = []  # (the parameters a call passes after its arguments: tape.traced)
        self.layout = None  # (the number its calls' parts name out_descs by: tape.traced)
        # (a gradient program's values that recompute its forward's, {number: the forward's
        # number}: tape.traced.trace_gradient; a batched backward reads them from the forward)
        self.recomputed = {}

    @property
    def out_shape(self):
        """A call's output: the one result as it is, or every result flattened and joined."""
        return self._out_shape

    def __repr__(self):
        return f"<traced {self.name}: {len(self.steps)} ops>"

    def infer(self, xs):
        if len(xs) != len(self.in_descs):
            raise InputError(
                None,
                f"traced function '{self.name}' takes {len(self.in_descs)} inputs",
                expected=str(len(self.in_descs)),
                actual=str(len(xs)),
            )
        _check_inputs(xs, self.in_descs, f"traced function '{self.name}'")
        return self.descs

    def parts(self, packed, lead=()):
        """The results from a packed output (views): ``lead``: the leading (member) axes."""
        if not self.part_descs:
            return []
        parts, offset = [], 0
        for (shape, _), size in zip(self.part_descs, self.sizes):
            parts.append(packed[..., offset : offset + size].reshape(lead + shape))
            offset += size
        return parts

    def _env(self, xp, values):
        env = [None] * self.size
        k = len(values)
        env[:k] = values
        for i, var in enumerate(self.consts):
            value = var._array()
            env[k + i] = value if xp is np else xp.asarray(value)
        return env

    def run(self, xp, values):
        """The results of one call, packed (``out_shape``)."""
        env = self._env(xp, values)
        for step in self.steps:
            step.store(
                env, step.located(self.name, run_kernel, step.defn, step.attrs, step.values(env))
            )
        results = [env[r] for r in self.outputs]
        if len(results) == 1:
            (out,) = results
            return out.copy() if self.outputs[0] < len(values) + len(self.consts) else out
        return xp.concatenate([r.reshape(-1) for r in results])

    def vectorised(self, each):
        """This program run over ``n`` members at once, ``each[k]``: whether input k differs
        per member (stacked along a new leading axis) or is shared."""
        each = tuple(each)
        found = self._vectorised.get(each)
        if found is None:
            found = self._vectorised[each] = Vectorised(self, each)
        return found

    def grad(self, mask, differentiable=False):
        """The program of the gradient: inputs this program's and the output's gradient, its
        results the gradients of the inputs ``mask`` lists (zeros where none flows).
        ``differentiable``: itself differentiable again (``create_graph``)."""
        key = (tuple(mask), bool(differentiable))
        found = self._grads.get(key)
        if found is None:
            from tape.traced import trace_gradient

            found = self._grads[key] = trace_gradient(self, key[0], key[1])
        return found


def _check_inputs(xs, wants, what):
    """Each of ``xs`` has the (shape, dtype) of ``wants``: what its trace was made for."""
    for k, (x, (shape, dtype)) in enumerate(zip(xs, wants)):
        if tuple(x.shape) != shape or x.dtype != dtype:
            raise ShapeError(
                None,
                f"input {k} of {what} differs from its trace",
                expected=f"{shape} {dtype}",
                actual=f"{tuple(x.shape)} {x.dtype}",
            )


class Vectorised:
    """A program run over the members of a group at once (see the module docstring)."""

    def __init__(self, program, each, summed=()):
        self.program, self.each = program, each
        self.name = program.name
        per = [False] * program.size
        per[: len(each)] = each
        into, totals = _summed_products(program, summed), set()
        self.plan = []  # per step: (step, how, rule, flags); how: "shared", "rule",
        # "members", or "summed" (a product whose sum over the members is wanted: one product)
        for step in program.steps:
            flags = [
                None if a is None else per[a] if a.__class__ is int else [per[i] for i in a]
                for a in step.args
            ]
            varies = any(f if f.__class__ is bool else any(f) for f in flags if f is not None)
            how, rule = "shared", None
            if (
                varies
                and step.outs[0].__class__ is int
                and step.outs[0] in into
                and _sums(step, flags)
            ):
                how = "summed"  # (its result is the members' total)
                totals.add(step.outs[0])
            elif varies:
                how, rule = "members", _rule_for(step, flags)
                if rule is not None:
                    direct = _direct(step, rule, flags)
                    how = "rule" if direct is None else "direct"
                    rule = rule if direct is None else direct
                elif step.defn.type == "split" and flags[0]:
                    how = "split"  # (the members' pieces: one split past the member axis)
                for ref in step.outs:
                    for i in [ref] if ref.__class__ is int else ref:
                        per[i] = True
            self.plan.append((step, how, rule, flags))
        self.out_per = tuple(per[r] for r in program.outputs)
        # per result: "per" member, the members' "total", or "shared" (the same for each)
        self.out_kinds = tuple(
            "per" if per[r] else "total" if r in totals else "shared" for r in program.outputs
        )
        self._grads = {}
        self._saved_plan = None
        # (the plan as generated functions, on numpy, by what they keep and skip: _straight_line)
        self._straight = {}

    def __repr__(self):
        return f"<traced {self.name} over members: {self.each}>"

    def count(self, xs):
        for x, per in zip(xs, self.each):
            if per:
                return x.shape[0] if x.shape else None
        return None

    def run_results(self, xp, values, keep=(), saved=None, stacked=True):
        """The member count, each result stacked over the members, and the values numbered
        ``keep`` as the plan computed them (for the gradient's ``saved``). ``saved``: the
        values ``saved_plan`` names, from the forward: the steps computing them are skipped.
        ``stacked=False``: a result the members share stays as it is (``out_per`` says
        which), not broadcast over them."""
        program = self.program
        n = self.count(values)
        skip, given = self.saved_plan()[:2] if saved is not None else (frozenset(), ())
        if xp is np:
            key = (keep, saved is not None)
            straight = self._straight.get(key)
            if straight is None:
                straight = self._straight[key] = _straight_line(self, keep, skip, given)
            try:
                results, kept = straight(values, n, saved)
            except Exception:  # (the interpreter below fails again, naming the step)
                pass
            else:
                return n, self._stacked(np, results, n) if stacked else results, kept
        env = program._env(xp, values)
        for ref, value in zip(given, saved or ()):
            env[ref] = value
        for index, (step, how, rule, flags) in enumerate(self.plan):
            if index in skip:
                continue
            results = step.located(self.name, _step_runner, xp, step, how, rule, flags, env, n)
            step.store(env, results)
        results = [env[ref] for ref in program.outputs]
        if stacked:
            results = self._stacked(xp, results, n)
        return n, results, [env[ref] for ref in keep]

    def saved_plan(self):
        """For a gradient program's plan: (the indices of the steps that recompute its
        forward's values, the numbers of those values the other steps and the results read,
        the forward's numbers of them, the inputs nothing else reads). A batched backward
        takes those values from its forward run (``CALL.run_saving``) and skips the steps: the
        gradient of a Tree-LSTM node replays the node's ~25 ops before its own ~25; and it
        does not gather the inputs nothing else reads. A step whose result is the members' total
        (``summed``) is not skipped (the forward computed the members' values)."""
        if self._saved_plan is None:
            recomputed = self.program.recomputed
            skip = frozenset(
                index
                for index, (step, how, _, _) in enumerate(self.plan)
                if how != "summed" and all(ref in recomputed for ref in _flat_refs(step.outs))
            )
            read = set(self.program.outputs)
            for index, (step, _, _, _) in enumerate(self.plan):
                if index not in skip:
                    read.update(_flat_refs(step.args))
            given = tuple(
                sorted(
                    ref
                    for index in skip
                    for ref in _flat_refs(self.plan[index][0].outs)
                    if ref in read
                )
            )
            unread = frozenset(range(len(self.program.in_descs))) - read
            self._saved_plan = (skip, given, tuple(recomputed[ref] for ref in given), unread)
        return self._saved_plan

    def _stacked(self, xp, results, n):
        """The results, one the members share broadcast over them."""
        return [
            value if per else xp.broadcast_to(value, (n, *shape))
            for value, per, (shape, _) in zip(results, self.out_per, self.program.out_descs)
        ]

    def run(self, xp, values, keep=()):
        """The members' packed results; with ``keep``, and the values numbered ``keep``."""
        n, results, kept = self.run_results(xp, values, keep)
        if len(results) == 1:
            out = xp.array(results[0], copy=True)  # (never a view of an input, or read-only)
        else:
            out = xp.concatenate([r.reshape(n, -1) for r in results], axis=1)
        return (out, kept) if keep else out

    def grad(self, mask):
        """The gradient of this plan for the inputs in ``mask``, run over the members
        (``CALL.differentiate``; a batched backward is never recorded, so never
        differentiated again)."""
        mask = tuple(mask)
        found = self._grads.get(mask)
        if found is None:
            program, per = self.program.grad(mask), tuple(self.each[j] for j in mask)
            summed = [r for r, p in zip(program.outputs, per) if not p]
            inner = Vectorised(program, self.each + (True,), summed)
            found = self._grads[mask] = SummedGrad(inner, per)
        return found


class SummedGrad:
    """A vectorised gradient program whose results for shared inputs (parameters) are summed
    over the members: a group's call differentiated as one op (``tape.batched_backward``)."""

    def __init__(self, inner, per):
        self.inner, self.per = inner, per
        self.name = inner.name
        self.descs = inner.program.out_descs

    def __repr__(self):
        return f"<gradient of {self.name} over members, summed where shared>"

    def bound(self, saved):
        """This gradient reading the values its forward run kept (``CALL.run_saving``)
        instead of computing them again."""
        return _BoundGrad(self, saved)

    def pieces(self, xp, values, saved=None):
        """The input gradients, each as its own array."""
        n, results, _ = self.inner.run_results(xp, values, saved=saved, stacked=False)
        return [
            r
            if per
            else r.sum(axis=0)
            if kind == "per"
            else r
            if kind == "total"
            else r * n  # (the same for every member)
            for r, per, kind in zip(results, self.per, self.inner.out_kinds)
        ]


class _BoundGrad:
    """A group's ``SummedGrad`` with the values its forward kept: what the batched backward
    runs for it (``CALL.with_saved``)."""

    def __init__(self, summed, saved):
        self.summed, self.saved, self.name = summed, saved, summed.name

    def __repr__(self):
        return f"<gradient of {self.name} over members, reading its forward's values>"

    def pieces(self, xp, values):
        return self.summed.pieces(xp, values, self.saved)


class _WithSaved:
    """A group's vectorised program as its batched backward reads it: its gradient for the
    forward's ``mask`` bound to the values the forward kept (``saved``)."""

    def __init__(self, vectorised, mask, saved):
        self.vectorised, self.mask, self.saved = vectorised, mask, saved
        self.name = vectorised.name

    def __repr__(self):
        return repr(self.vectorised)

    def grad(self, mask):
        found = self.vectorised.grad(mask)
        return found.bound(self.saved) if tuple(mask) == self.mask else found

    def unread(self, mask):
        """The inputs the gradient for ``mask`` does not read (none unless it is bound)."""
        if tuple(mask) != self.mask:
            return frozenset()
        return self.vectorised.grad(mask).inner.saved_plan()[3]


def _flat_refs(args):
    """The value numbers among a step's argument or output slots."""
    return [r for a in args if a is not None for r in ([a] if a.__class__ is int else a)]


def _straight_line(vectorised, keep=(), skip=frozenset(), given=()):
    """The numpy run of a vectorised plan as one generated Python function of (the inputs'
    arrays, the member count, the ``given`` values) returning the results and the values
    numbered ``keep``: the plan's steps but those in ``skip`` as straight-line calls on local
    variables, so a step costs its kernel call, not an interpreter's dispatch (~2-3 us of a
    Tree-LSTM node's ~25 steps, each on a few kernels' worth of data). A step the rule runs
    with more than its kernel calls a helper with its operands. Errors are left to the
    interpreter, which runs the plan again and names the failing step."""
    program = vectorised.program
    k = len(program.in_descs)
    names = {"np": np, "MIN": buffers.MIN_BYTES}
    lines = ["def run(values, n, given):"]
    quiet = False  # (whether sigmoids are inlined: the body runs with exp's overflow ignored)
    if k:
        lines.append("    " + "".join(f"v{i}, " for i in range(k)) + "= values")
    if given:
        lines.append("    " + "".join(f"v{i}, " for i in given) + "= given")
    for i, var in enumerate(program.consts):
        names[f"c{i}"] = var
        lines.append(f"    v{k + i} = c{i}._array()")
    for index, (step, how, rule, flags) in enumerate(vectorised.plan):
        if index in skip:
            continue
        refs = _flat_refs(step.args)
        if how == "direct":
            names[f"k{index}"], names[f"a{index}"] = step.defn.kernel, rule
            args = "".join(f", v{a}" for a in step.args)
            call = f"k{index}(np, a{index}{args})"
            inline = _inline_direct(index, step, rule, names)
            if inline is not None:
                quiet |= step.defn.type == "sigmoid"
                expression, condition = inline
                call = f"{expression} if {condition} else {call}" if condition else expression
            lines.append(f"    v{step.outs[0]} = {call}")
            continue
        line = _inline_rule(index, step, rule, flags, names) if how == "rule" else None
        if how == "summed" and step.defn.type in ("outer", "matmul"):
            line = _inline_summed(step)  # (x^T y over the members' rows joined)
        if line is not None:
            lines.append(f"    v{step.outs[0]} = {line}")
            continue
        if how == "split":  # (one split past the member axis: a slice per piece, built once)
            x, reads = f"v{step.args[0]}", []
            for piece, cut in enumerate(_split_indices(step.attrs, step.in_shapes[0])):
                names[f"i{index}_{piece}"] = cut
                reads.append(f"{x}[i{index}_{piece}], ")
            lines.append("    " + "".join(f"v{i}, " for i in step.outs[0]) + "= " + "".join(reads))
            continue
        names[f"s{index}"] = functools.partial(_step_runner, np, step, how, rule, flags)
        env = "{" + ", ".join(f"{r}: v{r}" for r in dict.fromkeys(refs)) + "}"
        lines.append(f"    r = s{index}({env}, n)")
        for slot, ref in enumerate(step.outs):
            if ref.__class__ is int:
                lines.append(f"    v{ref} = r[{slot}]")
            elif ref:
                lines.append("    " + "".join(f"v{i}, " for i in ref) + f"= r[{slot}]")
    results = ", ".join(f"v{r}" for r in program.outputs)
    lines.append(f"    return [{results}], [" + ", ".join(f"v{r}" for r in keep) + "]")
    if quiet:  # (the sigmoids' exp overflowing below -88 gives 0, unreported: ops.activation)
        lines[1:] = ['    with np.errstate(over="ignore"):'] + ["    " + line for line in lines[1:]]
    exec(compile("\n".join(lines), f"<vectorised {program.name}>", "exec"), names)  # noqa: S102
    return names["run"]


# Direct steps (an elementwise op or a slice on the stacked operands as they are) computed by
# the numpy expression their kernel evaluates on arrays below ``buffers.MIN_BYTES`` (larger ones
# still call the kernel: reused buffers, threads), without the kernel call's ~1 us (3-5 us for
# a sigmoid's errstate): a tagger's LSTM step is ~20 such steps on 16 x 64 arrays. Each entry:
# (expression, condition) over the operands a, b; where the condition (None: always) fails, the
# kernel runs. (The gradients' tanh_grad and sigmoid_grad kernels already run their ufuncs in
# place: inlined, they measured ~0.1 us faster of ~2, so they stay calls.)
_INLINE = {
    "elementwise_add": ("{a} + {b}", "{a}.nbytes < MIN"),
    "elementwise_sub": ("{a} - {b}", "{a}.nbytes < MIN"),
    "elementwise_mul": ("{a} * {b}", "{a}.nbytes < MIN and {b}.nbytes < MIN"),
    "elementwise_div": ("{a} / {b}", None),
    "tanh": ("np.tanh({a})", "{a}.nbytes < MIN"),
    "sigmoid": ("sig({a})", "{a}.nbytes < MIN and {a}.ndim"),
}


def _split_indices(attrs, shape):
    """Per piece of a ``split`` of members of ``shape`` stacked on a new first axis, the index
    cutting it out: a view, as the kernel's ``np.split`` gives, at ~0.2 us against its ~3.7."""
    axis, sizes = _split_sizes(attrs, types.SimpleNamespace(shape=tuple(shape)))
    bounds = [0, *itertools.accumulate(sizes)]
    lead = (slice(None),) * (axis + 1)
    return [lead + (slice(lo, hi),) for lo, hi in zip(bounds[:-1], bounds[1:])]


def _inline_direct(index, step, attrs, names):
    """(expression, condition) computing a direct step inline in ``_straight_line`` where the
    condition holds (None: always; else its kernel runs), or None: an ``_INLINE`` op with numpy's
    broadcasting (``axis`` -1), or a plain slice (its index built once, here)."""
    kind = step.defn.type
    refs = [f"v{a}" for a in step.args]
    if kind == "slice":
        if attrs["decrease_axis"]:
            return None
        names[f"i{index}"] = _slice_index(attrs, len(step.in_shapes[0]) + 1) + (Ellipsis,)
        return f"{refs[0]}[i{index}]", None
    found = _INLINE.get(kind)
    if found is None or attrs.get("axis", -1) != -1 or None in step.args:
        return None
    if kind == "sigmoid":
        names["sig"] = _sigmoid_quiet
    operands = dict(zip("ab", refs))
    expression, condition = found
    return expression.format(**operands), condition and condition.format(**operands)


def _sigmoid_quiet(x):
    """``ops.activation``'s sigmoid of an array below ``buffers.MIN_BYTES``: its ufuncs, under
    the errstate its caller entered once."""
    t = np.negative(x)
    np.exp(t, out=t)
    np.add(1.0, t, out=t)
    return np.true_divide(1.0, t, out=t)


def _inline_rule(index, step, rule, flags, names):
    """The expression computing a rule-run step of a vectorised plan inline in the generated
    function (its attributes moved past the member axis once, here), or None where the step
    goes through ``_step_runner``: what the rule's ``run`` would do, without its dispatch and
    its attributes rebuilt every call (~2-4 us of a step on a few kernels' worth of data)."""
    defn = step.defn
    if not defn.single_output or (defn.simple_inputs and not defn.fast):
        return None
    kernel, attrs, out_shape = f"k{index}", f"a{index}", f"o{index}"
    names[kernel], names[out_shape] = defn.kernel, tuple(step.out_shapes[0])

    def refs(args):
        return ", ".join(
            f"[{', '.join(f'v{r}' for r in a)}]" if a.__class__ is list else f"v{a}" for a in args
        )

    if rule is batching.VIEW and flags[0]:
        return f"v{step.args[0]}.reshape((n,) + {out_shape})"
    if rule is batching.REDUCE and flags[0]:
        names[attrs] = rule._moved(step.attrs, len(step.in_shapes[0]))
        return f"{kernel}(np, {attrs}, v{step.args[0]})"
    if rule is batching.SLICE or rule is batching.CONCAT or rule is batching.LIST:
        # (every input per member, as these rules accept)
        names[attrs] = step.attrs if rule is batching.LIST else rule._moved(step.attrs)
        return f"{kernel}(np, {attrs}, {refs(step.args)})"
    if rule is batching.SLICES:  # (the stacked gradient's shape: the member count first)
        names[attrs] = batching.SLICES.moved_axes(step.attrs)
        names[f"m{index}"] = tuple(step.attrs["shape"])
        return f'{kernel}(np, {{**{attrs}, "shape": (n,) + m{index}}}, {refs(step.args)})'
    if rule is batching.MATMUL and defn.type == "matmul":
        (x_each, y_each), (x, y) = flags, step.args
        if x_each and not y_each:  # (the members' rows, one product with the shared weight)
            names[attrs] = {**step.attrs, "transpose_x": False}
            names[f"w{index}"] = step.in_shapes[0][-1]
            rows = f"v{x}.reshape(-1, w{index})"
            return f"{kernel}(np, {attrs}, {rows}, v{y}).reshape((n,) + {out_shape})"
        if y_each and not x_each:
            names[attrs] = {"transpose_x": False, "transpose_y": not step.attrs["transpose_x"]}
            return f"{kernel}(np, {attrs}, v{y}, v{x})"
        if x_each and y_each:
            names[attrs] = step.attrs
            return f"{kernel}(np, {attrs}, v{x}, v{y})"
    return None


def _inline_summed(step):
    """``_summed_product`` of an ``outer`` or ``matmul`` step as an expression."""
    x, y = step.args
    if step.defn.type == "outer":
        return f"v{x}.T @ v{y}"
    rows = f"v{x}.reshape(-1, {step.in_shapes[0][-1]}).T"
    return f"{rows} @ v{y}.reshape(-1, {step.in_shapes[1][-1]})"


def _step_runner(xp, step, how, rule, flags, env, n):
    """One step of a vectorised plan: its results per output slot (``env``: its operands by
    value number). A direct step's ``rule`` holds the attributes its kernel takes on the
    stacked operands (on a GPU its own kernels run, through the op's batch rule)."""
    if how == "direct":
        if xp is np:
            return (step.defn.kernel(np, rule, *[env[a] for a in step.args]),)
        return _run_rule(xp, step, batching.rule_of(step.defn), flags, env, n)
    if how == "shared":
        return run_kernel(step.defn, step.attrs, step.values(env))
    if how == "rule":
        return _run_rule(xp, step, rule, flags, env, n)
    if how == "split":
        return _run_split(xp, step, env)
    if how == "summed":
        return (_summed_product(xp, step, env),)
    return _run_members(xp, step, flags, env, n)


def _summed_products(program, summed):
    """The results among ``summed`` (value numbers whose sum over the members is wanted) that
    an op of ``_SUMMABLE`` computes and nothing else reads: a weight's gradient,
    ``outer(x_i, g_i)`` summed over the members i, is one product ``X^T G`` of the stacked
    operands (not a (n, a, b) array of outer products summed afterwards)."""
    readers = {}
    for step in program.steps:
        for a in step.args:
            for i in () if a is None else [a] if a.__class__ is int else a:
                readers[i] = readers.get(i, 0) + 1
    found = set()
    for step in program.steps:
        ref = step.outs[0]
        if (
            ref.__class__ is int
            and ref in summed
            and not readers.get(ref)
            and program.outputs.count(ref) == 1
            and step.defn.type in _SUMMABLE
        ):
            found.add(ref)
    return found


def _sums(step, flags):
    """Whether ``step`` (of ``_SUMMABLE``) computes its members' total in one call, given
    which inputs are per member (``flags``)."""
    kind = step.defn.type
    if kind == "outer":
        return all(flags)
    if kind == "matmul":
        return (
            all(flags)
            and step.attrs["transpose_x"]
            and not step.attrs["transpose_y"]
            and all(len(shape) == 2 for shape in step.in_shapes)
        )
    return flags[1] and flags[2]  # lookup_table_grad: the ids and their rows' gradients


def _summed_product(xp, step, env):
    """The sum over the members of what a step ``_sums`` computes, from stacked operands."""
    kind = step.defn.type
    if kind == "lookup_table_grad":  # (it adds every id's row: all members' ids at once)
        return run_kernel(step.defn, step.attrs, step.values(env))[0]
    x, y = (env[a] for a in step.args)
    if kind == "outer":  # x (n, a), y (n, b): sum_i x_i^T y_i
        return x.T @ y
    # matmul(x^T, y) per member, x (n, m, a), y (n, m, b): rows of all members joined
    return x.reshape(-1, x.shape[-1]).T @ y.reshape(-1, y.shape[-1])


# Ops whose results summed over a group's members are one call on the stacked operands: the
# gradients of a weight (a product) and of an embedding table (rows added per id).
_SUMMABLE = frozenset({"outer", "matmul", "lookup_table_grad"})


def _direct(step, rule, flags):
    """The attributes with which ``step``'s own kernel computes the whole group from its
    operands as they are (stacked or shared), or None where the rule must reshape them: an
    elementwise op whose per-member operands have the result's rank (the member axes line up)
    and whose shared ones no higher (they broadcast), the seed's ``axis`` dropped where every
    operand has that rank; a ``slice`` of per-member operands, its axes moved past the member
    axis."""
    defn = step.defn
    if not defn.fast:
        return None
    if rule is batching.SLICE:
        return rule._moved(step.attrs) if all(flags) else None
    if rule is not batching.ELEMENTWISE:
        return None
    rank = len(step.out_shapes[0])
    if step.attrs.get("axis", -1) != -1:
        # (the seed's axis matters only between inputs of different ranks: a Linear's bias)
        if any(len(shape) != rank for shape in step.in_shapes):
            return None
        return {**step.attrs, "axis": -1}
    fits = all(
        len(shape) == rank if per else len(shape) <= rank
        for shape, per in zip(step.in_shapes, flags)
    )
    return step.attrs if fits else None


def _rule_for(step, flags):
    """The batch rule that runs ``step`` over stacked members, or None (member by member)."""
    defn = step.defn
    rule = batching.rule_of(defn)
    several = getattr(rule, "several", False) or getattr(rule, "parts", False)
    if rule is None or (not defn.single_output and not several):
        return None
    if defn.simple_inputs:
        each, shapes = flags, step.in_shapes
    elif rule.lists and len(step.args) == 1 and step.args[0].__class__ is list:
        each, shapes = flags[0], step.in_shapes[0]
    else:
        return None
    return rule if rule.accepts(step.attrs, list(shapes), list(each)) else None


def _run_rule(xp, step, rule, flags, env, n):
    defn = step.defn
    kernel = defn.kernel if xp is np else defn.kernels.get("gpu", defn.kernels["any"])
    if defn.simple_inputs:
        inputs = [(f, env[a]) for f, a in zip(flags, step.args)]
    else:
        inputs = [(f, env[a]) for f, a in zip(flags[0], step.args[0])]
    out = rule.run(xp, kernel, step.attrs, inputs, n, step.out_shapes[0])
    if getattr(rule, "parts", False):  # (a nested traced call: its results, per member)
        return out, step.attrs["fn"].parts(out, (n,))
    if defn.single_output:
        return (out if out.__class__ is np.ndarray or xp is not np else np.asarray(out),)
    return tuple(o if o.__class__ is np.ndarray or xp is not np else np.asarray(o) for o in out)


def _run_split(xp, step, env):
    """``split`` of stacked members: the same pieces, cut along the axis after the member one."""
    attrs = step.attrs
    axis = attrs["axis"]
    moved = {**attrs, "axis": axis + 1} if axis >= 0 else attrs
    return run_kernel(step.defn, moved, [env[step.args[0]]])


def _run_members(xp, step, flags, env, n):
    """``step`` run on each member's row of its per-member inputs; its results stacked."""
    values = step.values(env)

    def row(value, per, i):
        if value is None:
            return None
        if value.__class__ is list:
            return [v[i] if p else v for v, p in zip(value, per)]
        return value[i] if per else value

    runs = [
        run_kernel(step.defn, step.attrs, [row(v, f, i) for v, f in zip(values, flags)])
        for i in range(n)
    ]
    stacked = []
    for slot, shape in enumerate(step.out_shapes):
        if shape.__class__ is list:
            stacked.append([xp.stack([r[slot][j] for r in runs]) for j in range(len(shape))])
        else:
            stacked.append(xp.stack([r[slot] for r in runs]))
    return stacked


class _Call(batching.Rule):
    """Calls of one traced program, each with its own arguments and the same parameters: the
    program vectorised over the members (``Vectorised``)."""

    name = "call"
    lists = True
    parts = True  # (``run`` computes Out; the caller takes the Parts from it: ``fill_parts``)
    saves = True  # (before a batched backward: ``run_saving``, ``with_saved``)
    # A call alone runs its program op by op (``Program.run``: a kernel dispatch, ~3 us, per
    # step, and its gradient traced and interpreted the same way); vectorised over one member it
    # runs as one generated function (~1 us a step) and its backward reads what it kept.
    min_group = 1
    # (a call's program fixes its inputs' shapes and dtypes: its signature needs only which
    # inputs are shared, tape.passes.autobatch)
    shapes_in_attrs = True

    @staticmethod
    def fixed_inputs(attrs):
        """The program's parameters, which ``tape.traced`` passes after a call's arguments
        (its calls carry the program's own attributes; a call made otherwise may pass other
        Variables there: none fixed)."""
        fn = attrs["fn"]
        return len(fn.captured) if attrs is fn.attrs else 0

    def accepts(self, attrs, shapes, each):
        return attrs["fn"].__class__ is Program and any(each)

    @staticmethod
    def part_spans(op):
        """Where each of a call's Parts lies in its (flat) Out: slices."""
        spans, offset = [], 0
        for size in op.attrs["fn"].sizes if op.results[1] else ():
            spans.append(slice(offset, offset + size))
            offset += size
        return spans

    @staticmethod
    def fill_parts(members, out, unread=None):
        """Sets each member call's Parts to views of its row of the group's result ``out``.
        ``unread``: no op of the run reads a part; then only the parts someone holds (the
        user: a reference count above the op's own) get their view, the others are marked
        ``unread`` (freed, as the executor frees what nobody holds: a Tree-LSTM step's 6.4k
        parts cost ~3 ms of views and stores, and nothing reads them)."""
        program = members[0].attrs["fn"]
        if not program.part_descs:
            return
        stacks = program.parts(out, (len(members),))
        if unread is None:
            chosen = range(len(members))
        else:
            chosen, count = [], sys.getrefcount
            for index, op in enumerate(members):
                for var in op.results[1]:
                    if count(var) > _UNHELD:  # (more than the op's list and this loop)
                        chosen.append(index)
                        break
                    var._pending = unread
        for index in chosen:
            for var, stack in zip(members[index].results[1], stacks):
                var._value, var._pending = stack[index, ...], None

    def run(self, xp, kernel, attrs, inputs, n, out_shape):
        each = tuple(per for per, _ in inputs)
        return attrs["fn"].vectorised(each).run(xp, [value for _, value in inputs])

    @staticmethod
    def run_saving(xp, attrs, inputs, op):
        """``run``, and what the group's batched backward reads from it: (the input mask
        its first member ``op`` differentiates, the values the gradient for it would compute
        again (``Vectorised.saved_plan``), the inputs that gradient reads: the caller keeps
        those operands as it gathered them), or None where no input needs a gradient."""
        each = tuple(per for per, _ in inputs)
        vectorised, values = attrs["fn"].vectorised(each), [value for _, value in inputs]
        mask = tuple(j for j, x in enumerate(op.args[0]) if x.requires_grad)
        keep, unread = vectorised.grad(mask).inner.saved_plan()[2:] if mask else ((), ())
        if not keep:
            return vectorised.run(xp, values), None
        out, kept = vectorised.run(xp, values, keep)
        return out, (mask, kept, frozenset(range(len(values))) - unread)

    @staticmethod
    def with_saved(attrs, saved):
        """The attributes of a group's call (``as_op``'s) whose gradient reads what its
        forward kept (``run_saving``)."""
        mask, values, _ = saved
        return {**attrs, "fn": _WithSaved(attrs["fn"], mask, values)}

    @staticmethod
    def differentiate(xp, attrs, shaped, gout):
        """A group's call (``as_op``'s attributes, ``shaped``: its stacked operands as one
        list slot) differentiated at once (``tape.batched_backward``): the gradient program
        run straight, not recorded through the op's gradient maker (an op, its inference
        and its outputs per group). Returns the maker's form: per input a Variable or None."""
        (xs,) = shaped
        grads = [None] * len(xs)
        mask = tuple(j for j, x in enumerate(xs) if x.requires_grad)
        if not mask:
            return (grads,)
        program = attrs["fn"].grad(mask)
        for j, grad in zip(mask, program.pieces(xp, [x._value for x in xs] + [gout])):
            grads[j] = Variable._make(grad, grad.shape, grad.dtype, False)
        return (grads,)

    @staticmethod
    def unread(attrs, mask):
        """The inputs of a group's call (``with_saved``'s attributes) that its gradient for
        the inputs in ``mask`` does not read."""
        return attrs["fn"].unread(mask)

    def as_op(self, attrs, shapes, each, n, out_shape):
        stacked = [(n, *shape) if per else tuple(shape) for shape, per in zip(shapes, each)]
        fn = attrs["fn"].vectorised(tuple(each))
        return {**attrs, "fn": fn}, (0,), [stacked], (n, *out_shape)


def _unheld_count():
    """``sys.getrefcount`` of a list's item read in a loop, nothing else holding it: 3 here
    (the list, the loop's variable, the call's argument), measured rather than assumed."""
    for var in [object()]:
        return sys.getrefcount(var)


_UNHELD = _unheld_count()
CALL = _Call()


def _infer(attrs, xs):
    return attrs["fn"].infer(xs)


@register(
    "call",
    inputs=("X*",),
    outputs=("Out", "Parts*"),
    attrs={"fn": Attr("any", required=True)},
    infer=_infer,
    batch=CALL,
)
def call(xp, attrs, xs):
    """Out = the traced function ``fn`` (``tape.traced``) applied to X: its arguments, then the
    parameters it reads; several results leave packed in Out, flattened and joined, and are
    the Parts (views of Out; none for one result, which is Out).

    dX = call(fn's gradient program, X + [dOut]), dOut joining the Parts' gradients: the
    function's ops differentiated once, when first needed, and replayed as one op from then on.
    """
    fn = attrs["fn"]
    out = fn.run(xp, list(xs))
    return out, fn.parts(out)


@call.gradient
def _(g):
    (xs,), fn = g.inputs, g.attrs["fn"]
    gout = _packed_gradient(g)
    mask = tuple(j for j, x in enumerate(xs) if x.requires_grad)
    grads = [None] * len(xs)
    if not mask or gout is None:
        return (grads,)
    program = fn.grad(mask, state.grad_enabled)
    out, parts = apply(call, ([*xs, gout],), {"fn": program})  # (parts: one per input in mask)
    for j, grad in zip(mask, parts or [out]):
        grads[j] = grad
    return (grads,)


def _packed_gradient(g):
    """The gradient of a call's Out with its Parts' gradients joined in (zeros for a part none
    reached), or None where none reached any."""
    gout = g.gouts[0]
    gparts = g.gouts[1] if len(g.gouts) > 1 else None
    if not gparts or all(p is None for p in gparts):
        return gout
    pieces = [
        apply(_RESHAPE, (p if p is not None else apply(_ZEROS, (part,), {}),), {"shape": (-1,)})
        for p, part in zip(gparts, g.outputs[1])
    ]
    joined = apply(_CONCAT, (pieces,), _CONCAT.check_attrs({"axis": 0}))
    return joined if gout is None else apply(_ADD, (gout, joined), _ADD.defaults)


def _slice_attrs(start, stop):
    """The checked attributes of ``slice`` taking [start, stop) of a flat array."""
    return _SLICE.check_attrs({"axes": (0,), "starts": (start,), "ends": (stop,)})


def unpack(out_descs, out):
    """The results (``out_descs``: their shapes and dtypes) of a packed output ``out``, as
    recorded slices (and reshapes): how a traced program reads another call's results."""
    if len(out_descs) == 1:
        return out
    results = []
    for attrs, desc, reshape in _pieces(tuple(out_descs)):
        piece = apply_inferred(_SLICE, (out,), attrs, desc)
        if reshape is not None:
            piece = apply_inferred(_RESHAPE, (piece,), *reshape)
        results.append(piece)
    return tuple(results)


@functools.lru_cache(maxsize=256)
def _pieces(out_descs):
    """Per result of a packed call: the slice's checked attributes and result description,
    and the reshape's attributes and description (None for a vector)."""
    pieces, offset = [], 0
    for shape, dtype in out_descs:
        size = math.prod(shape)
        reshape = None if len(shape) == 1 else ({"shape": shape}, (shape, dtype))
        pieces.append((_slice_attrs(offset, offset + size), ((size,), dtype), reshape))
        offset += size
    return tuple(pieces)


__all__ = ["call", "Program", "Vectorised", "SummedGrad", "CALL", "unpack"]
