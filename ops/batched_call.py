"""The op ``batched_call``: a group of independent ops of one signature run as one kernel call.

A compiled plan's autobatching (``tape/passes/batch_groups.py``) replaces each group that
``tape.passes.autobatch`` schedules by one ``batched_call``: its inputs are the members'
operands stacked along a new leading axis (or shared, as they are), the op's batch rule
(``ops.batching``) runs its kernel once, and the rows of the result are the members' outputs
(views of it, ``Out``), with the whole result as ``Batched`` for later groups to read without
gathering again. The interpreted tier runs the same rules from its own loop
(``tape.interpret``); this is the form a plan holds. ``gather_rows`` stacks a group's operand
from rows of earlier results in one copy per result (``np.stack`` of views costs ~0.3 us a
member: it was two thirds of a batched tree plan's run).

Not differentiable: the pass batches forward and gradient ops after backward was built, as the
fusion pass does.
"""

from __future__ import annotations

import numpy as np

from ops.batching import rule_of
from ops.registry import REGISTRY, Attr, register
from tape.errors import ExecutionError, FluidError, InputError, ShapeError


def _infer(attrs, xs):
    n, shape, each = attrs["count"], tuple(attrs["shape"]), attrs["each"]
    if len(xs) != len(each):
        raise InputError(
            None,
            "the number of operands differs from the members' input slots",
            expected=str(len(each)),
            actual=str(len(xs)),
        )
    for k, (x, gathered) in enumerate(zip(xs, each, strict=True)):
        if gathered and (not x.shape or x.shape[0] != n):
            raise ShapeError(
                None, f"operand X[{k}] does not stack {n} members", (n, "..."), x.shape
            )
    dtype = np.dtype(attrs["dtype"])
    return ((n, *shape), dtype), [(shape, dtype)] * n


@register(
    "batched_call",
    inputs=("X*",),
    outputs=("Batched", "Out*"),
    attrs={
        "op": Attr("str", required=True),
        "attrs": Attr("any", required=True),
        "each": Attr("any", required=True),
        "lists": Attr("bool", False),
        "count": Attr("int", required=True, check=lambda v: v >= 1, rule=">= 1"),
        "shape": Attr("ints", ()),
        "dtype": Attr("str", "float32"),
        "origins": Attr("any", ()),
    },
    infer=_infer,
    differentiable=False,
)
def batched_call(xp, attrs, xs):
    """Batched = the op ``op`` (attributes ``attrs``) of each member, stacked; Out = its rows.

    ``each``: per operand, whether it stacks the members' values (else one value shared by
    all); ``lists``: the operands are the positions of the op's one list slot (``concat``,
    ``sum``); ``count``, ``shape`` and ``dtype``: the members and one member's output.
    ``origins``: each member's (name, recorded-at line): a failing call is run again member
    by member, so that the error names the member that fails, as unbatched execution would."""
    defn = REGISTRY[attrs["op"]]
    kernel = defn.kernel if xp is np else defn.kernels.get("gpu", defn.kernels["any"])
    n, shape, member = attrs["count"], tuple(attrs["shape"]), dict(attrs["attrs"])
    inputs = [(True, x) for x in xs] if attrs["lists"] else list(zip(attrs["each"], xs))
    try:
        out = rule_of(defn).run(xp, kernel, member, inputs, n, shape)
    except Exception as err:
        raise _member_error(xp, kernel, attrs, member, xs, err) from err
    if xp is np and out.__class__ is not np.ndarray:
        out = np.asarray(out)
    rows = [out[i, ...] for i in range(n)] if out.ndim == 1 else list(out)
    return out, rows


def _member_error(xp, kernel, attrs, member, xs, err):
    """The error of the first member that fails on its own (named and located as that op),
    or ``err`` where none does."""
    op_type, origins = attrs["op"], attrs["origins"]
    for i in range(attrs["count"]):
        if attrs["lists"]:
            args = [[x[i] for x in xs]]
        else:
            args = [x[i] if gathered else x for gathered, x in zip(attrs["each"], xs)]
        try:
            kernel(xp, member, *args)
        except Exception as failure:
            name, location = origins[i] if i < len(origins) else (None, None)
            if isinstance(failure, FluidError):
                return failure.with_context(name=name, location=location, op=op_type)
            return ExecutionError(
                op_type,
                f"kernel failed: {type(failure).__name__}: {failure}",
                name=name,
                location=location,
            )
    return err


def _infer_gather(attrs, xs):
    count = 0
    for source, positions, rows in attrs["pieces"]:
        if not 0 <= source < len(xs):
            raise InputError(None, f"piece reads X[{source}]", f"< {len(xs)} sources", source)
        x, shape = xs[source], tuple(attrs["shape"])
        have = tuple(x.shape) if rows is None else tuple(x.shape[1:])
        if have != shape:
            raise ShapeError(None, f"X[{source}] does not hold rows of the output's", shape, have)
        count += len(positions)
    if count != attrs["count"]:
        raise InputError(None, "the pieces do not fill the output", attrs["count"], count)
    return ((attrs["count"], *attrs["shape"]), np.dtype(attrs["dtype"]))


@register(
    "gather_rows",
    inputs=("X*",),
    outputs=("Out",),
    attrs={
        "pieces": Attr("any", required=True),
        "count": Attr("int", required=True, check=lambda v: v >= 1, rule=">= 1"),
        "shape": Attr("ints", ()),
        "dtype": Attr("str", "float32"),
    },
    infer=_infer_gather,
    differentiable=False,
)
def gather_rows(xp, attrs, xs):
    """Out (``count`` rows of ``shape``) from the sources X: per piece ``(source, positions,
    rows)``, Out[positions] = X[source][rows], or, where ``rows`` is None, Out[positions[0]] =
    X[source] (one whole array)."""
    return _Gather(attrs, xp)(xp, attrs, xs)


class _Gather:
    """``gather_rows`` with its index arrays made once (the kernel a plan holds)."""

    __slots__ = ("shape", "dtype", "steps")

    def __init__(self, attrs, xp):
        self.shape, self.dtype = (attrs["count"], *attrs["shape"]), np.dtype(attrs["dtype"])
        self.steps = []
        for source, positions, rows in attrs["pieces"]:
            if rows is None:
                self.steps.append((source, positions[0], None))
                continue
            start, length = positions[0], len(positions)
            runs = positions == tuple(range(start, start + length))
            where = slice(start, start + length) if runs else xp.asarray(positions, np.intp)
            if rows == tuple(range(rows[0], rows[0] + length)):
                self.steps.append((source, where, slice(rows[0], rows[0] + length)))
            else:
                self.steps.append((source, where, xp.asarray(rows, np.intp)))

    def __call__(self, xp, attrs, xs):
        out = xp.empty(self.shape, self.dtype)
        host = xp is np
        for source, where, rows in self.steps:
            x = xs[source] if host else xp.asarray(xs[source])  # (a host constant, on a GPU)
            out[where] = x if rows is None else x[rows]
        return out


gather_rows.bind = _Gather


__all__ = ["batched_call", "gather_rows"]
