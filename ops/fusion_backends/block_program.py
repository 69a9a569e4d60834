"""What the blocked backend runs per block: ufunc calls writing into reused scratch, or kernels.

A step whose kernel *is* a fixed sequence of numpy ufunc calls (``RECIPES``: ``x * y``,
``tanh``, ``1 / (1 + exp(-x))``, ...) becomes those calls with ``out=`` a scratch
buffer (or the output array itself), so a block allocates nothing: the buffers are assigned once
per expression by a linear scan over the block's instructions (a value's buffer is reused as soon
as its last reader ran, in place where shapes and dtypes agree) and allocated once per run. Each
call is the very ufunc loop the kernel runs, on the same operands in the same order, so values
are bit for bit the kernel's. Any other step calls its registered kernel.
"""

from __future__ import annotations

import numpy as np

from ops.fused_expression import flat_refs

A0, A1, A2 = ("a", 0), ("a", 1), ("a", 2)


def _t(i):
    return ("t", i)


def _exp_overflowing(x, out=None):
    """``np.exp`` with its overflow not reported: the sigmoid's exp(-x) below x = -88 in
    float32, which gives 1 / (1 + inf) = 0 (``ops.activation``'s kernel does the same)."""
    with np.errstate(over="ignore"):
        return np.exp(x, out=out)


# Calls of recipes that are not plain ufuncs: name -> (numpy's callable, the ufunc whose dtype
# rules it follows)
_CALLABLES = {"exp_overflowing": (_exp_overflowing, "exp")}


def ufunc_of(xp, name):
    """The callable a recipe's call ``name`` runs with array module ``xp``."""
    special = _CALLABLES.get(name)
    if special is None:
        return getattr(xp, name)
    return special[0] if xp is np else getattr(xp, special[1])


def _dtype_rules(name):
    """The numpy ufunc whose type resolution a recipe's call ``name`` follows."""
    return getattr(np, _CALLABLES[name][1] if name in _CALLABLES else name)


def _sigmoid(dtype):
    return [
        ("negative", (A0,)),
        ("exp_overflowing", (_t(0),)),
        ("add", (1.0, _t(1))),
        ("true_divide", (1.0, _t(2))),
    ]


def _scale(attrs, dtype):
    factor, bias = attrs["scale"], attrs["bias"]
    if dtype.kind != "f":
        return None  # integers are cast back (the kernel truncates): its own kernel
    if not bias:
        return [("multiply", (A0, factor))]
    if attrs["bias_after_scale"]:
        return [("multiply", (A0, factor)), ("add", (_t(0), bias))]
    return [("add", (A0, bias)), ("multiply", (_t(0), factor))]


def _sum(n):
    if n == 1:
        return None  # a copy: its own kernel
    calls = [("add", (A0, A1))]
    calls += [("add", (_t(i - 2), ("a", i))) for i in range(2, n)]
    return calls


_UNARY = {
    "neg": "negative",
    "abs": "absolute",
    "square": "square",
    "reciprocal": "reciprocal",
    "logical_not": "logical_not",
    "isnan": "isnan",
    "isinf": "isinf",
    "isfinite": "isfinite",
    "asin": "arcsin",
    "acos": "arccos",
    "atan": "arctan",
    "asinh": "arcsinh",
    "acosh": "arccosh",
    "atanh": "arctanh",
}
_UNARY.update(
    (name, name)
    for name in "exp exp2 expm1 log log2 log10 log1p sqrt sin cos tan tanh sinh cosh".split()
)
_BINARY = {
    "elementwise_add": "add",
    "elementwise_sub": "subtract",
    "elementwise_mul": "multiply",
    "elementwise_div": "true_divide",
    "elementwise_max": "maximum",
    "elementwise_min": "minimum",
    "atan2": "arctan2",
    "copysign": "copysign",
    "equal": "equal",
    "not_equal": "not_equal",
    "less_than": "less",
    "less_equal": "less_equal",
    "greater_than": "greater",
    "greater_equal": "greater_equal",
    "logical_and": "logical_and",
    "logical_or": "logical_or",
    "logical_xor": "logical_xor",
}

# Multi-call recipes need every argument in the step's dtype and shape (the kernels promote
# first, and a temporary must have the step's shape); one-call recipes broadcast and promote as
# the kernel's single ufunc call does.
_MULTI = {
    "sigmoid": lambda attrs, dtype, n: _sigmoid(dtype),
    "scale": lambda attrs, dtype, n: _scale(attrs, dtype),
    "sum": lambda attrs, dtype, n: _sum(n),
    "rsqrt": lambda attrs, dtype, n: [("sqrt", (A0,)), ("reciprocal", (_t(0),))],
    "tanh_grad": lambda attrs, dtype, n: [
        ("multiply", (A0, A0)),
        ("subtract", (1.0, _t(0))),
        ("multiply", (A1, _t(1))),
    ],
    "sigmoid_grad": lambda attrs, dtype, n: [
        ("multiply", (A1, A0)),
        ("subtract", (1.0, A0)),
        ("multiply", (_t(0), _t(1))),
    ],
    "softsign": lambda attrs, dtype, n: [
        ("absolute", (A0,)),
        ("add", (1.0, _t(0))),
        ("true_divide", (A0, _t(1))),
    ],
    "relu_grad": lambda attrs, dtype, n: [
        ("less_equal", (A0, 0)),
        ("invert", (_t(0),)),
        ("multiply", (A1, _t(1))),
    ],
}


def recipe(step, dtype, arg_shapes, arg_dtypes, shape):
    """The ufunc calls computing ``step`` exactly as its kernel does, or None (run the kernel).
    Each call is (ufunc name, operands): ("a", k) argument k, ("t", i) call i's result, or a
    Python constant; the last call gives the step's value."""
    if step.op in _UNARY:
        return [(_UNARY[step.op], (A0,))]
    if step.op in _BINARY:
        return [(_BINARY[step.op], (A0, A1))]
    if step.op == "relu":
        return [("maximum", (A0, 0))]
    make = _MULTI.get(step.op)
    if make is None:
        return None
    uniform = all(s == shape for s in arg_shapes) and all(d == dtype for d in arg_dtypes)
    return make(dict(step.attrs), dtype, len(arg_shapes)) if uniform else None


def result_dtypes(calls, arg_dtypes):
    """The dtype of each call's result (numpy's resolution for these operand dtypes)."""
    found = []
    for name, operands in calls:
        kinds = []
        for op in operands:
            if isinstance(op, tuple):
                kinds.append(arg_dtypes[op[1]] if op[0] == "a" else found[op[1]])
            else:
                kinds.append(type(op))
        dtype = _dtype_rules(name).resolve_dtypes(tuple(kinds) + (None,))[-1]
        found.append(np.dtype(dtype))
    return found


def step_args(step):
    """The step's references flattened (``sum``'s X* included), in operand order."""
    return list(flat_refs(step.args))


UFUNC, KERNEL = 0, 1
TO_BUFFER, TO_OUTPUT = 0, 1


class Program:
    """The instructions of one block and the scratch buffers they write.

    Value slots: the expression's inputs, then one per step, then temporaries and constants.
    ``code`` holds ``(UFUNC, ufunc, operand slots, TO_BUFFER or TO_OUTPUT, buffer or output
    index, result slot)`` and ``(KERNEL, kernel, attrs, argument spec, result slot, output index
    or None)``; ``buffers`` holds (template shape, dtype) with ``None`` for the block's length on
    the cut axis. ``fixed`` steps (hoisted) are read, never computed.
    """

    def __init__(self, expression, xp, kernels, templates, fixed):
        self.n_inputs = len(expression.inputs)
        self.n_slots = self.n_inputs + len(expression.steps)
        self.constants, self.code, self.buffers = [], [], []
        self.shapes = list(templates[0]) + list(templates[1])
        self.dtypes = [np.dtype(d) for _, d in expression.inputs] + list(expression.step_dtypes)
        out_of = {}
        for i, j in enumerate(expression.outputs):
            out_of.setdefault(j, i)
        pending = []  # per instruction: (index, result slot, operand slots, template, dtype)
        for j, step in enumerate(expression.steps):
            if j not in fixed:
                self._step(xp, j, step, kernels[j], out_of.get(j), pending)
        self._allocate(pending, expression)

    def _step(self, xp, j, step, kernel, output, pending):
        slots = [self._slot(ref) for ref in step_args(step)]
        result = self.n_inputs + j
        arg_dtypes = [self.dtypes[s] for s in slots]
        shape, dtype = self.shapes[result], self.dtypes[result]
        calls = recipe(step, dtype, [self.shapes[s] for s in slots], arg_dtypes, shape)
        if calls is not None:
            self._calls(xp, calls, slots, arg_dtypes, j, shape, output, pending)
            return
        spec = [self._spec(arg) for arg in step.args]
        self.code.append((KERNEL, kernel[0], kernel[1], spec, result, output))
        pending.append((len(self.code) - 1, None, slots, None, None))

    def _slot(self, ref):
        return ref[1] if ref[0] == "in" else self.n_inputs + ref[1]

    def _spec(self, arg):
        if arg is None:
            return None
        if len(arg) == 2 and isinstance(arg[0], str):
            return self._slot(arg)
        return [self._slot(ref) for ref in arg]

    def _new_slot(self, shape, dtype):
        self.shapes.append(shape)
        self.dtypes.append(dtype)
        self.n_slots += 1
        return self.n_slots - 1

    def _constant(self, value):
        slot = self._new_slot((), None)
        self.constants.append((slot, value))
        return slot

    def _calls(self, xp, calls, slots, arg_dtypes, j, template, output, pending):
        made = []
        for index, (name, dtype) in enumerate(zip(calls, result_dtypes(calls, arg_dtypes))):
            name, operands = calls[index]
            ops = [
                (slots[op[1]] if op[0] == "a" else made[op[1]])
                if isinstance(op, tuple)
                else self._constant(op)
                for op in operands
            ]
            last = index == len(calls) - 1
            slot = self.n_inputs + j if last else self._new_slot(template, dtype)
            made.append(slot)
            to_output = last and output is not None
            kind = TO_OUTPUT if to_output else TO_BUFFER
            self.code.append((UFUNC, ufunc_of(xp, name), ops, kind, output, slot))
            pending.append((len(self.code) - 1, slot, ops, None if to_output else template, dtype))

    def _allocate(self, pending, expression):
        """Linear scan: a buffer is free again once the last reader of its value has run;
        values read by a reduction stay alive to the end of the block."""
        last = {}
        for index, (_, _, ops, _, _) in enumerate(pending):
            for s in ops:
                last[s] = index
        for r in expression.reductions:
            last[self.n_inputs + r.step] = len(pending)
        free, holder = {}, {}
        for index, (at, slot, ops, template, dtype) in enumerate(pending):
            for s in ops:
                if last.get(s) == index and s in holder:
                    free.setdefault(self.buffers[holder[s]], []).append(holder.pop(s))
            if template is None:
                continue
            pool = free.get((template, dtype))
            buffer = pool.pop() if pool else self._new_buffer(template, dtype)
            holder[slot] = buffer
            kind, fn, operands, _, _, result = self.code[at]
            self.code[at] = (kind, fn, operands, TO_BUFFER, buffer, result)

    def _new_buffer(self, template, dtype):
        self.buffers.append((template, dtype))
        return len(self.buffers) - 1


__all__ = ["Program", "recipe", "ufunc_of", "UFUNC", "KERNEL", "TO_BUFFER", "TO_OUTPUT"]
