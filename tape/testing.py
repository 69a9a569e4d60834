"""Testing helpers: declarative op cases, forward checks and float64 finite-difference gradients.

An ``OpCase`` says how to build an op's inputs, its attributes and a plain-numpy reference; the
registry sweep (``tests/ops/test_registry_sweep.py``) derives from each case a forward check per
dtype (and on non-contiguous inputs), a gradient check against central differences in float64,
and a double-backward check where the case asks for one (``tape.testing_device.check_on_device``
runs a case on the emulated GPU). ``gradcheck`` is the same gradient checker for any function of
Variables.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

import tape
from ops.registry import REGISTRY

Maker = Callable[[np.random.Generator, np.dtype], np.ndarray]


@dataclasses.dataclass
class OpCase:
    """One test case of a registered op.

    Attributes:
        op: the op type.
        inputs: slot -> a shape (standard-normal floats), an array, a maker ``f(rng, dtype)``,
            or a list of those for a duplicable slot. Integer arrays are used as they are.
        attrs: attributes passed to the op.
        reference: ``f(*inputs, **attrs)`` on numpy arrays (in slot order), returning the output
            array, or a tuple with one entry per output slot; None when ``check`` is given.
        check: ``f(outputs, inputs, attrs)`` asserting properties, for ops without a reference
            (random ops).
        grad: check gradients of the float inputs against finite differences.
        grad_inputs: slots to differentiate (default: all float slots).
        double_grad: also check the gradient of the gradient.
        dtypes: float dtypes to run the forward check in.
        tol: dtype name -> (rtol, atol) for the forward check.
        name: a label shown in test ids.
        fresh_inputs: the random-tape property tests (tests/scheduler) build this case's float
            inputs from its own makers, never from earlier ops' outputs: for inputs that must
            be well conditioned (a matrix to invert, factor or decompose), which an arbitrary
            earlier value would make singular, indefinite or non-finite.
    """

    op: str
    inputs: dict
    attrs: dict = dataclasses.field(default_factory=dict)
    reference: Callable | None = None
    check: Callable | None = None
    grad: bool = True
    grad_inputs: tuple | None = None
    double_grad: bool = False
    dtypes: tuple = ("float32", "float64")
    tol: dict = dataclasses.field(default_factory=dict)
    name: str = ""
    fresh_inputs: bool = False

    def __post_init__(self):
        if self.reference is None and self.check is None:
            raise ValueError(f"case for '{self.op}' needs a reference or a check")

    @property
    def id(self):
        return f"{self.op}-{self.name}" if self.name else self.op

    def arrays(self, dtype, seed=0):
        """The case's inputs as numpy arrays, floats in ``dtype``, drawn reproducibly."""
        rng = np.random.default_rng(seed)
        return {slot: _build(spec, rng, np.dtype(dtype)) for slot, spec in self.inputs.items()}


def _build(spec, rng, dtype):
    if isinstance(spec, list):
        return [_build(s, rng, dtype) for s in spec]
    if callable(spec):
        return np.asarray(spec(rng, dtype))
    if isinstance(spec, tuple):
        return rng.standard_normal(spec).astype(dtype)
    array = np.asarray(spec)
    return array.astype(dtype) if array.dtype.kind == "f" else array


_DEFAULT_TOL = {"float16": (1e-2, 1e-3), "float32": (2e-5, 2e-6), "float64": (1e-10, 1e-12)}


def _ordered(case, arrays):
    defn = REGISTRY[case.op]
    return [arrays.get(slot) for slot in defn.input_slots]


def _variables(values, requires_grad_slots=(), slots=()):
    out = []
    for slot, value in zip(slots, values):
        if value is None:
            out.append(None)
        elif isinstance(value, list):
            out.append([tape.Variable(v, requires_grad=slot in requires_grad_slots) for v in value])
        else:
            out.append(
                tape.Variable(
                    value, requires_grad=slot in requires_grad_slots and value.dtype.kind == "f"
                )
            )
    return out


def run_op(case, values, requires_grad_slots=()):
    """Runs the case's op on ``values`` (slot order); returns (input Variables, output list)."""
    defn = REGISTRY[case.op]
    variables = _variables(values, requires_grad_slots, defn.input_slots)
    outputs = defn(*variables, **case.attrs)
    return variables, _as_list(outputs)


def _as_list(outputs):
    if isinstance(outputs, tape.Variable):
        return [outputs]
    flat = []
    for out in outputs:
        flat.extend(out if isinstance(out, list) else [out])
    return flat


def _copy(values):
    return [
        ([v.copy() for v in x] if isinstance(x, list) else (None if x is None else x.copy()))
        for x in values
    ]


def check_forward(case, dtype, contiguous=True):
    """The op's outputs equal the reference, with the inferred shapes and dtypes."""
    tape.reset_global_tape()
    values = _ordered(case, case.arrays(dtype))
    if not contiguous:
        values = [_noncontiguous(v) for v in values]
    _, outputs = run_op(case, _copy(values))
    for out in outputs:
        assert out.value().shape == out.shape, (
            f"{case.id}: inferred shape {out.shape} != kernel's {out.value().shape}"
        )
        assert out.value().dtype == out.dtype, (
            f"{case.id}: inferred dtype {out.dtype} != kernel's {out.value().dtype}"
        )
    if case.check is not None:
        case.check([o.numpy() for o in outputs], values, case.attrs)
        return
    expected = case.reference(*_copy(values), **case.attrs)
    expected = _as_list_arrays(expected)
    assert len(expected) == len(outputs), (
        f"{case.id}: {len(outputs)} outputs, reference gave {len(expected)}"
    )
    rtol, atol = case.tol.get(np.dtype(dtype).name, _DEFAULT_TOL[np.dtype(dtype).name])
    for i, (out, ref) in enumerate(zip(outputs, expected)):
        ref = np.asarray(ref)
        assert out.shape == ref.shape, f"{case.id} output {i}: shape {out.shape} != {ref.shape}"
        np.testing.assert_allclose(
            out.numpy().astype(np.float64) if out.dtype.kind in "fc" else out.numpy(),
            ref,
            rtol=rtol,
            atol=atol,
            err_msg=f"{case.id} output {i} ({dtype})",
        )


def _as_list_arrays(expected):
    if isinstance(expected, tuple):
        flat = []
        for item in expected:
            flat.extend(item if isinstance(item, list) else [item])
        return flat
    if isinstance(expected, list):
        return expected
    return [expected]


def _noncontiguous(value):
    """A strided view with the same contents (every other element of a doubled last axis)."""
    if value is None:
        return None
    if isinstance(value, list):
        return [_noncontiguous(v) for v in value]
    if value.ndim == 0 or value.size == 0:
        return value
    doubled = np.repeat(value, 2, axis=-1)
    view = doubled[..., ::2]
    assert not view.flags.c_contiguous or value.shape[-1] == 1
    return view


def _float_slots(case, values):
    defn = REGISTRY[case.op]
    slots = case.grad_inputs or tuple(
        s
        for s, v in zip(defn.input_slots, values)
        if v is not None and (v[0] if isinstance(v, list) else v).dtype.kind == "f"
    )
    return slots


def _cotangents(outputs, rng):
    return [rng.standard_normal(o.shape) if o.dtype.kind == "f" else None for o in outputs]


def _weighted_sum(outputs, weights):
    total = None
    for out, w in zip(outputs, weights):
        if w is None or not out.requires_grad:
            continue
        term = (out * tape.Variable(w.astype(out.dtype))).sum()
        total = term if total is None else total + term
    return total


def _scalar_objective(case, values, weights):
    with tape.no_grad():
        _, outputs = run_op(case, values)
        return sum(float(np.sum(o.numpy() * w)) for o, w in zip(outputs, weights) if w is not None)


def _differentiable_leaves(variables, slots, grad_slots):
    leaves = []
    for slot, var in zip(slots, variables):
        if slot not in grad_slots or var is None:
            continue
        leaves.extend(var if isinstance(var, list) else [var])
    return leaves


def check_grad(case, seed=0):
    """Analytic gradients of <w, op(x)> match float64 central differences."""
    tape.reset_global_tape()
    defn = REGISTRY[case.op]
    values = _ordered(case, case.arrays("float64", seed))
    grad_slots = _float_slots(case, values)
    variables, outputs = run_op(case, _copy(values), grad_slots)
    weights = _cotangents(outputs, np.random.default_rng(seed + 1))
    loss = _weighted_sum(outputs, weights)
    leaves = _differentiable_leaves(variables, defn.input_slots, grad_slots)
    assert loss is not None, f"{case.id}: no output requires a gradient"
    analytic = tape.grad(loss, leaves)
    positions = _leaf_positions(defn.input_slots, values, grad_slots)

    def objective(perturbed):
        return _scalar_objective(case, perturbed, weights)

    for leaf, got, where in zip(leaves, analytic, positions):
        got = np.zeros(leaf.shape) if got is None else got.numpy()
        assert got.dtype == np.float64, f"{case.id}: gradient dtype {got.dtype}"
        _compare_numeric(case, objective, values, where, got, f"d<w,out>/d{where}")


def check_double_grad(case, seed=0):
    """Gradients of <v, grad<w, op(x)>> match finite differences of the analytic gradient."""
    tape.reset_global_tape()
    defn = REGISTRY[case.op]
    values = _ordered(case, case.arrays("float64", seed))
    grad_slots = _float_slots(case, values)
    rng = np.random.default_rng(seed + 2)
    variables, outputs = run_op(case, _copy(values), grad_slots)
    weights = _cotangents(outputs, np.random.default_rng(seed + 1))
    leaves = _differentiable_leaves(variables, defn.input_slots, grad_slots)
    firsts = tape.grad(_weighted_sum(outputs, weights), leaves, create_graph=True)
    directions = [rng.standard_normal(leaf.shape) for leaf in leaves]
    second = None
    for g, v in zip(firsts, directions):
        if g is None or not g.requires_grad:
            continue
        term = (g * tape.Variable(v)).sum()
        second = term if second is None else second + term
    if second is None:  # the first gradient is constant in x: its derivative is zero
        analytic = [np.zeros(leaf.shape) for leaf in leaves]
    else:
        analytic = [
            np.zeros(leaf.shape) if g is None else g.numpy()
            for g, leaf in zip(tape.grad(second, leaves), leaves)
        ]

    def objective(perturbed):
        tape.reset_global_tape()
        variables, outputs = run_op(case, perturbed, grad_slots)
        leaves = _differentiable_leaves(variables, defn.input_slots, grad_slots)
        grads = tape.grad(_weighted_sum(outputs, weights), leaves)
        return sum(float(np.sum(g.numpy() * v)) for g, v in zip(grads, directions) if g is not None)

    positions = _leaf_positions(defn.input_slots, values, grad_slots)
    for got, where in zip(analytic, positions):
        _compare_numeric(case, objective, values, where, got, f"d<v,grad>/d{where}")


def _leaf_positions(slots, values, grad_slots):
    positions = []
    for index, (slot, value) in enumerate(zip(slots, values)):
        if slot not in grad_slots or value is None:
            continue
        if isinstance(value, list):
            positions.extend((index, k, f"{slot}[{k}]") for k in range(len(value)))
        else:
            positions.append((index, None, slot))
    return positions


def _compare_numeric(case, objective, values, where, analytic, label, eps=1e-6):
    index, k, name = where
    base = values[index][k] if k is not None else values[index]
    numeric = np.zeros(base.shape)
    for direction, unit in _directions(base.shape):
        plus, minus = _copy(values), _copy(values)
        _target(plus, index, k)[...] += eps * unit
        _target(minus, index, k)[...] -= eps * unit
        slope = (objective(plus) - objective(minus)) / (2 * eps)
        if direction is None:
            numeric += slope * unit
        else:
            got = float(np.sum(analytic * unit))
            _assert_close(case, got, slope, f"{label} along a random direction ({name})")
    if base.size <= _ELEMENTWISE_LIMIT:
        _assert_close(case, analytic, numeric, f"{label} ({name})")


_ELEMENTWISE_LIMIT = 48


def _directions(shape):
    """Unit vectors per element for small inputs, three random directions for large ones."""
    size = int(np.prod(shape))
    if size <= _ELEMENTWISE_LIMIT:
        for i in range(size):
            unit = np.zeros(size)
            unit[i] = 1.0
            yield None, unit.reshape(shape)
    else:
        rng = np.random.default_rng(size)
        for _ in range(3):
            yield "random", rng.standard_normal(shape)


def _target(values, index, k):
    return values[index][k] if k is not None else values[index]


def _assert_close(case, analytic, numeric, label):
    np.testing.assert_allclose(
        analytic, numeric, rtol=1e-4, atol=1e-6, err_msg=f"{case.id}: analytic vs numeric {label}"
    )


def gradcheck(fn, inputs, eps=1e-6, rtol=1e-4, atol=1e-6):
    """Checks d(sum(w * fn(*inputs)))/d(input) against float64 central differences.

    ``fn`` maps Variables to one Variable; ``inputs`` are float64 arrays. Raises AssertionError
    naming the input and element on a mismatch; returns True otherwise.

    >>> import numpy as np, ops
    >>> gradcheck(lambda x: ops.tanh(x) * x, [np.linspace(-1, 1, 5)])
    True
    """
    arrays = [np.asarray(a, dtype=np.float64) for a in inputs]
    tape.reset_global_tape()
    variables = [tape.Variable(a, requires_grad=True) for a in arrays]
    out = fn(*variables)
    weight = np.random.default_rng(0).standard_normal(out.shape)
    analytic = tape.grad((out * tape.Variable(weight)).sum(), variables)
    for i, (array, got) in enumerate(zip(arrays, analytic)):
        got = np.zeros(array.shape) if got is None else got.numpy()
        numeric = np.zeros(array.shape)
        for j in range(array.size):
            shifted = []
            for sign in (1, -1):
                moved = [a.copy() for a in arrays]
                moved[i].reshape(-1)[j] += sign * eps
                with tape.no_grad():
                    value = fn(*[tape.Variable(a) for a in moved]).numpy()
                shifted.append(float(np.sum(value * weight)))
            numeric.reshape(-1)[j] = (shifted[0] - shifted[1]) / (2 * eps)
        np.testing.assert_allclose(
            got, numeric, rtol=rtol, atol=atol, err_msg=f"gradient of input {i}"
        )
    return True


def assert_within_rounding(got, want, rtol, ulps, err_msg=""):
    """``got`` equals ``want`` within float rounding: relatively within ``rtol``, absolutely
    within ``ulps`` units in the last place of ``want``'s largest finite magnitude (at least 1),
    NaN where NaN. The absolute part covers a kernel that rounds a few ulps otherwise before a
    cancellation (1 - tanh(x)^2 near saturation), whose error scales with the array."""
    finite = np.abs(want[np.isfinite(want)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    atol = ulps * np.finfo(want.dtype).eps * scale
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=err_msg)


__all__ = [
    "OpCase",
    "check_forward",
    "check_grad",
    "check_double_grad",
    "gradcheck",
    "assert_within_rounding",
]
