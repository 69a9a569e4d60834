"""The op table: one OpDef per op type: schema, inference, kernels, gradient and scheduler facts.

An OpDef is also the op's public function: ``ops.relu(x)`` calls the ``relu`` OpDef, which records
the op on the current tape. Everything known about an op is declared once, beside its kernel::

    @register("tanh", inputs=("X",), outputs=("Out",), infer=same_as_input, elementwise=True)
    def tanh(xp, attrs, x):
        return xp.tanh(x)

    @tanh.gradient
    def _(g):
        (out,), (gout,) = g.outputs, g.gouts
        return (tanh_grad(out, gout),)
"""

from __future__ import annotations

import sys

import numpy as np

from tape.errors import AttrError, InputError, brief, user_location

REGISTRY: dict[str, "OpDef"] = {}

# The engine installs its op runner here at import; OpDef.__call__ goes through it.
_dispatch = None


def _as_int(value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError("an int")
    return int(value)


def _as_float(value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise TypeError("a float")
    return float(value)


def _as_bool(value):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError("a bool")
    return bool(value)


def _as_str(value):
    if not isinstance(value, str):
        raise TypeError("a str")
    return value


def _as_ints(value):
    if value.__class__ is tuple and all(v.__class__ is int for v in value):
        return value  # the common case (slices, shapes), on every recorded op: kept short
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        raise TypeError("a list of ints")
    try:
        return tuple(_as_int(v) for v in value)
    except TypeError:
        raise TypeError("a list of ints") from None


def _as_floats(value):
    try:
        return tuple(_as_float(v) for v in value)
    except TypeError:
        raise TypeError("a list of floats") from None


def _as_axes(value):
    """None (all axes), one int, or a list of ints; normalised to None or a tuple."""
    if value is None:
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),)
    try:
        return _as_ints(value)
    except TypeError:
        raise TypeError("None, an int or a list of ints") from None


def canonical_dtype(value) -> str:
    """'float32' for np.float32, np.dtype('float32') or 'float32'; TypeError for anything else."""
    try:
        dtype = np.dtype(value)
    except TypeError:
        raise TypeError("a dtype") from None
    if dtype.kind not in "biuf":
        raise TypeError("a numeric dtype")
    return dtype.name


def _as_any(value):
    return value


_CONVERTERS = {
    "int": _as_int,
    "float": _as_float,
    "bool": _as_bool,
    "str": _as_str,
    "ints": _as_ints,
    "floats": _as_floats,
    "axes": _as_axes,
    "dtype": canonical_dtype,
    "any": _as_any,
}


class Attr:
    """An attribute's schema: its kind (a key of the converters), default and value check.

    ``check`` is a predicate on the converted value; ``rule`` says in words what it demands.
    ``choices`` restricts a value to a fixed set.
    """

    __slots__ = ("kind", "default", "check", "rule", "choices", "required")

    def __init__(self, kind, default=None, check=None, rule=None, choices=None, required=False):
        if kind not in _CONVERTERS:
            raise ValueError(f"unknown attribute kind {kind!r}; valid: {sorted(_CONVERTERS)}")
        self.kind, self.default, self.check = kind, default, check
        self.rule, self.choices, self.required = rule, choices, required

    def convert(self, op_type, name, value):
        if value is None and (self.default is None and not self.required):
            return None
        try:
            value = _CONVERTERS[self.kind](value)
        except TypeError as err:
            raise AttrError(
                op_type,
                f"attribute '{name}' has the wrong type",
                expected=str(err),
                actual=f"{brief(value)} ({type(value).__name__})",
                type_error=True,
            ) from None
        if self.choices is not None and value not in self.choices:
            raise AttrError(
                op_type,
                f"attribute '{name}' has an invalid value",
                expected=f"one of {list(self.choices)}",
                actual=brief(value),
            )
        if self.check is not None and not self.check(value):
            raise AttrError(
                op_type,
                f"attribute '{name}' has an invalid value",
                expected=self.rule or "a value passing the op's check",
                actual=brief(value),
            )
        return value

    def describe(self):
        text = f"{self.kind}"
        if self.required:
            return text + ", required"
        return text + f" = {self.default!r}"


# Checked attributes remembered per op: a loop calling ``x.sum(axis=1)`` or
# ``concat(..., axis=-1)`` converts them once (a third of such an op's recording). Ops share the
# dict as they share their defaults: no one writes into an op's attributes.
_CHECKED_LIMIT = 64
_PLAIN = frozenset({int, bool, str, type(None)})


def _checked_key(attrs):
    """A key for attributes whose conversion depends on their values only -- ints, bools,
    strings, None, tuples of ints and floats other than zero (-0.0 == 0.0) and NaN -- with each
    value's class (1, 1.0 and True are equal keys otherwise); None for any other."""
    key = []
    for name, value in attrs.items():
        kind = value.__class__
        if kind is float:
            if value == 0.0 or value != value:
                return None
        elif kind is tuple:
            for item in value:
                if item.__class__ is not int:
                    return None
        elif kind not in _PLAIN:
            return None
        key += (name, kind, value)
    return tuple(key)


class OpDef:
    """Everything known about one op type; calling it records the op on the current tape.

    Inputs are slot names; a name ending in '*' is duplicable (takes a list of Variables), one
    ending in '?' is optional (may be absent). ``infer(attrs, *inputs)`` receives Variables (or
    lists of them) and returns ``(shape, dtype)`` for a single output slot, or a tuple with one
    such entry per output slot (a list of entries for a duplicable slot). It raises the library's
    errors for bad shapes. Kernels have the same signature with arrays and the array module
    ``xp`` first. ``grad_maker(g)`` gets a GradContext and returns one gradient Variable (or None)
    per input slot, built from registered ops.
    """

    def __init__(self, op_type, inputs, outputs, attrs, infer, kernel, doc="", **facts):
        self.type = op_type
        self.input_slots = tuple(s.rstrip("*?") for s in inputs)
        self.duplicable_inputs = frozenset(s[:-1] for s in inputs if s.endswith("*"))
        self.optional_inputs = frozenset(s[:-1] for s in inputs if s.endswith("?"))
        self.output_slots = tuple(s.rstrip("*") for s in outputs)
        self.duplicable_outputs = frozenset(s[:-1] for s in outputs if s.endswith("*"))
        self.attrs = dict(attrs or {})
        self.defaults = {k: a.default for k, a in self.attrs.items()}
        self.required = tuple(k for k, a in self.attrs.items() if a.required)
        self._checked = {}  # recent check_attrs results by the given attributes (see there)
        self.infer = infer
        self.kernels = {"any": kernel}
        self.kernel = kernel
        self.grad_maker = None
        self.__doc__ = doc or (kernel.__doc__ or "")
        self.__name__ = op_type
        self.no_need_buffer = frozenset(facts.pop("no_need_buffer", ()))
        self.inplace = dict(facts.pop("inplace", {}))
        self.elementwise = facts.pop("elementwise", False)
        self.random = facts.pop("random", False)
        self.side_effect = facts.pop("side_effect", False)
        self.differentiable = facts.pop("differentiable", True)
        self.returns = facts.pop("returns", None)
        # How independent instances run as one call (ops.batching; None: the default rule,
        # False: never batched).
        self.batch = facts.pop("batch", None)
        if facts:
            raise TypeError(f"op '{op_type}': unknown facts {sorted(facts)}")
        self.single_output = len(self.output_slots) == 1 and not self.duplicable_outputs
        self.simple_inputs = not self.duplicable_inputs and not self.optional_inputs
        # Eligible for the engine's short eager path (one output, one Variable per input slot).
        self.fast = self.single_output and self.simple_inputs and len(self.input_slots) > 0

    def gradient(self, maker):
        """Decorator: registers ``maker(g)`` as this op's gradient maker."""
        self.grad_maker = maker
        return maker

    def kernel_for(self, place):
        """Decorator: registers a place-specific kernel (e.g. 'gpu') beside the generic one."""

        def register_kernel(fn):
            self.kernels[place] = fn
            if place == "cpu":
                self.kernel = fn
            return fn

        return register_kernel

    def check_attrs(self, attrs):
        """Converts and checks user attributes; returns the full attribute dict with defaults."""
        if not attrs:
            if self.required:
                raise AttrError(
                    self.type,
                    f"missing required attribute '{self.required[0]}'",
                    hint=self.attr_listing(),
                )
            return self.defaults
        key = _checked_key(attrs)
        if key is not None:
            out = self._checked.get(key)
            if out is not None:
                return out
        out = dict(self.defaults)
        for name, value in attrs.items():
            spec = self.attrs.get(name)
            if spec is None:
                raise AttrError(self.type, f"unknown attribute '{name}'", hint=self.attr_listing())
            out[name] = spec.convert(self.type, name, value)
        for name, spec in self.attrs.items():
            if spec.required and out[name] is None:
                raise AttrError(
                    self.type, f"missing required attribute '{name}'", hint=self.attr_listing()
                )
        if key is not None:
            if len(self._checked) >= _CHECKED_LIMIT:
                self._checked.clear()
            self._checked[key] = out
        return out

    def attr_listing(self):
        if not self.attrs:
            return f"op '{self.type}' takes no attributes"
        items = ", ".join(f"{k} ({a.describe()})" for k, a in self.attrs.items())
        return f"valid attributes: {items}"

    def __call__(self, *inputs, **attrs):
        """Records this op on the current tape and returns its output Variable(s)."""
        return _dispatch(self, inputs, attrs)

    def too_many_inputs(self, inputs):
        """The error for a call with more inputs than the op has slots."""
        return InputError(
            self.type,
            "too many inputs",
            expected=f"at most {len(self.input_slots)}: {', '.join(self.input_slots)}",
            actual=str(len(inputs)),
            location=user_location(),
        )

    def __repr__(self):
        return f"<op {self.type}({', '.join(self.input_slots)}) -> {', '.join(self.output_slots)}>"


def register(op_type, inputs=(), outputs=("Out",), attrs=None, infer=None, **facts):
    """Decorator: registers the decorated ``kernel(xp, attrs, *inputs)`` as op ``op_type``."""

    def make(kernel):
        if op_type in REGISTRY:
            raise ValueError(f"op '{op_type}' is registered twice")
        if infer is None:
            raise TypeError(f"op '{op_type}' needs an infer function")
        opdef = OpDef(op_type, inputs, outputs, attrs, infer, kernel, **facts)
        REGISTRY[op_type] = opdef
        _expose_doctest(kernel, opdef)
        return opdef

    return make


def _expose_doctest(kernel, opdef):
    """doctest only collects functions and classes, not OpDef objects: list the op's examples in
    its module's ``__test__`` so they run with the suite."""
    if ">>>" in (opdef.__doc__ or ""):
        module = sys.modules.get(kernel.__module__)
        if module is not None:
            module.__dict__.setdefault("__test__", {})[opdef.type] = opdef.__doc__


def unregister(op_type):
    """Removes an op (for tests that register temporary ops)."""
    REGISTRY.pop(op_type, None)


def lookup(op_type) -> OpDef:
    try:
        return REGISTRY[op_type]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(str(op_type), REGISTRY, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "see ops.registry.REGISTRY"
        raise InputError(str(op_type), "unknown op type", hint=hint) from None
