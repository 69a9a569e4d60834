"""The one dtype rule (ops/infer.py), held by every registered op, checked from the sweep's cases.

Every case with two or more float inputs runs with each float input in turn float64 among float32
ones, and float32 among float64 ones: each float output has numpy's promotion of the inputs'
dtypes (in-place outputs keep their buffer's), the values equal an all-float64 run of the same
numbers, and every input's gradient has that input's dtype. Cases of elementwise ops also run with
an integer input. New ops and cases are covered as they are registered.
"""

import numpy as np
import pytest

import ops
import tape
from ops.registry import REGISTRY
from tape.errors import DTypeError, FluidError
from tape.testing import _differentiable_leaves, _float_slots, _ordered, run_op
from tests.ops.test_registry_sweep import CASES


def _float_positions(values):
    """(slot index, list index or None) of every float array among a case's inputs."""
    positions = []
    for i, value in enumerate(values):
        if isinstance(value, list):
            positions += [(i, k) for k, a in enumerate(value) if a.dtype.kind == "f"]
        elif value is not None and value.dtype.kind == "f":
            positions.append((i, None))
    return positions


def _retyped(values, dtype_at):
    """The values with each float array cast to ``dtype_at(position)``."""
    out = []
    for i, value in enumerate(values):
        if isinstance(value, list):
            out.append([_cast(a, dtype_at((i, k))) for k, a in enumerate(value)])
        else:
            out.append(None if value is None else _cast(value, dtype_at((i, None))))
    return out


def _cast(array, dtype):
    if array.dtype.kind != "f":
        return array
    if np.dtype(dtype).kind == "i":
        finite = np.where(np.isfinite(array), array, 0.0)
        return np.round(finite * 3).astype(dtype)  # small integers, some equal, some zero
    return array.astype(dtype)


def _mixed_variants(case):
    """(label, values) for each float input made the odd one out."""
    base = _ordered(case, case.arrays("float64"))
    for odd in _float_positions(base):
        for odd_dtype, rest in (("float64", "float32"), ("float32", "float64")):
            values = _retyped(base, lambda p, odd=odd, o=odd_dtype, r=rest: o if p == odd else r)
            yield f"input {odd} {odd_dtype}, others {rest}", values


def _is_update(defn):
    return bool(defn.side_effect and defn.inplace)


def _updated_inputs(defn, variables, count):
    """For each of the ``count`` flat outputs, the input Variable it updates in place (the
    registry's ``inplace`` fact: an optimizer's ParamOut is its Param), or None."""
    if not defn.inplace or defn.returns is not None:
        return [None] * count
    slots = []
    for slot in defn.output_slots:  # duplicable output slots hold one output per input entry
        source = defn.inplace.get(slot)
        entry = variables[defn.input_slots.index(source)] if source else None
        if isinstance(entry, list):
            slots += entry
        elif slot in defn.duplicable_outputs:
            slots += [] if entry is None else [entry]
        else:
            slots.append(entry)
    return slots if len(slots) == count else [None] * count


def _run(case, values, grad_slots):
    """Outputs (as Variables) and the gradients of sum(out * w) for ``grad_slots``' inputs."""
    tape.reset_global_tape()
    defn = REGISTRY[case.op]
    values = [
        None if v is None else ([a.copy() for a in v] if isinstance(v, list) else v.copy())
        for v in values
    ]  # in-place ops (running statistics) write their inputs
    variables, outputs = run_op(case, values, grad_slots)
    leaves = _differentiable_leaves(variables, defn.input_slots, grad_slots)
    written = _updated_inputs(defn, variables, len(outputs))
    rng = np.random.default_rng(1)
    loss = None
    for out in outputs:
        if out.requires_grad:
            weight = tape.Variable(rng.standard_normal(out.shape).astype(out.dtype))
            term = (out * weight).sum()
            loss = term if loss is None else loss + term
    grads = tape.grad(loss, leaves) if loss is not None and leaves else []
    return outputs, written, leaves, grads


# ``call`` runs a program traced for its inputs' exact dtypes (tape.traced traces again for
# others, and a call of other dtypes is refused by name: tests/tape/test_traced.py)
MIXED_CASES = [
    case
    for case in CASES
    if not REGISTRY[case.op].random
    and case.op != "call"
    and len(_float_positions(_ordered(case, case.arrays("float64")))) >= 2
]


@pytest.mark.parametrize("case", MIXED_CASES, ids=[c.id for c in MIXED_CASES])
def test_mixed_float_inputs_follow_the_rule(case):
    defn = REGISTRY[case.op]
    base = _ordered(case, case.arrays("float64"))
    grad_slots = _float_slots(case, base) if case.grad else ()
    for label, values in _mixed_variants(case):
        where = f"{case.id} ({label})"
        # The same numbers, all in float64: what the promoted computation must give.
        ref_outputs, _, _, ref_grads = _run(case, _retyped(values, lambda p: "float64"), grad_slots)
        try:
            outputs, written, leaves, grads = _run(case, values, grad_slots)
        except DTypeError as err:
            # An optimizer step may refuse a gradient or state of another dtype than its
            # parameter's (the engine guarantees they agree); nothing else may refuse floats.
            assert _is_update(defn), f"{where}: refused mixed floats: {err}"
            assert "dtype" in str(err) and case.op in str(err), str(err)
            continue
        promoted = np.result_type(*[a.dtype for a in _flat(values) if a.dtype.kind == "f"])
        for i, (out, ref) in enumerate(zip(outputs, ref_outputs, strict=True)):
            value = out.numpy()
            assert value.dtype == out.dtype, (
                f"{where}: output {i} inferred {out.dtype}, got {value.dtype}"
            )
            if written[i] is not None:
                assert out.dtype == written[i].dtype, f"{where}: in-place output {i}"
                continue
            want = promoted if ref.dtype.kind == "f" else ref.dtype
            assert out.dtype == want, f"{where}: output {i} is {out.dtype}, the rule says {want}"
            if not _is_update(defn):
                np.testing.assert_allclose(
                    value, ref.numpy(), rtol=1e-9, atol=1e-12, err_msg=f"{where}: output {i}"
                )
        for leaf, g, ref in zip(leaves, grads, ref_grads, strict=True):
            if g is None:
                continue
            assert g.dtype == leaf.dtype, f"{where}: a {leaf.dtype} input got a {g.dtype} gradient"
            np.testing.assert_allclose(
                g.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"{where}: gradient"
            )


def _flat(values):
    for value in values:
        if isinstance(value, list):
            yield from value
        elif value is not None:
            yield value


INT_CASES = [
    case
    for case in CASES
    if REGISTRY[case.op].elementwise
    and len(_float_positions(_ordered(case, case.arrays("float32")))) >= 2
]


@pytest.mark.parametrize("case", INT_CASES, ids=[c.id for c in INT_CASES])
def test_integer_and_float_inputs_promote_as_numpy(case):
    """An int32 input among float32 ones gives float64 (numpy's promotion), computed as if every
    input were float64, or, for a function defined on floats only, a DTypeError saying so."""
    base = _ordered(case, case.arrays("float32"))
    first = _float_positions(base)[0]
    values = _retyped(base, lambda p: "int32" if p == first else "float32")
    promoted = np.result_type(*[a.dtype for a in _flat(values)])
    tape.reset_global_tape()
    try:
        _, outputs = run_op(case, values)
    except DTypeError as err:
        assert "floating point" in str(err) or "real numbers" in str(err), str(err)
        return
    tape.reset_global_tape()
    _, expected = run_op(case, [_cast_all(v, promoted) for v in values])
    for out, ref in zip(outputs, expected, strict=True):
        want = promoted if ref.dtype.kind == "f" else ref.dtype
        assert out.dtype == want == out.numpy().dtype, f"{case.id}: {out.dtype}, numpy: {want}"
        np.testing.assert_array_equal(out.numpy(), ref.numpy(), err_msg=case.id)


def _cast_all(value, dtype):
    if value is None:
        return None
    if isinstance(value, list):
        return [a.astype(dtype) for a in value]
    return value.astype(dtype) if value.dtype.kind in "if" else value


# ---- scalars, integer division and overflow ----------------------------------------------------


def _var(values, dtype):
    return tape.Variable(np.asarray(values, dtype=dtype))


@pytest.mark.parametrize(
    "make, numpy_result",
    [
        (lambda x: x * 2.0, lambda a: a * 2.0),
        (lambda x: 2 - x, lambda a: 2 - a),
        (lambda x: x + np.float64(2.0), lambda a: a + np.float64(2.0)),
        (lambda x: x / 2, lambda a: a / 2),
        (lambda x: x**2, lambda a: a**2),
    ],
    ids=["float_scalar", "int_scalar", "numpy_float64_scalar", "division", "power"],
)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8"])
def test_python_scalars_are_weak_as_in_numpy_2(make, numpy_result, dtype):
    array = np.array([1, 2, 3], dtype=dtype)
    expected = numpy_result(array)
    got = make(tape.Variable(array))
    assert got.dtype == expected.dtype == got.numpy().dtype
    np.testing.assert_allclose(got.numpy(), expected)


@pytest.mark.parametrize(
    "x_dtype, y_dtype",
    [("int32", "int32"), ("int32", "int64"), ("uint8", "int8"), ("int32", "float32")],
)
def test_true_division_of_integers_gives_floats_as_numpy(x_dtype, y_dtype):
    x, y = np.array([7, 9, 3], x_dtype), np.array([2, 2, 4], y_dtype)
    got = ops.elementwise_div(tape.Variable(x), tape.Variable(y))
    assert got.dtype == (x / y).dtype == got.numpy().dtype
    np.testing.assert_allclose(got.numpy(), x / y)


@pytest.mark.parametrize(
    "x_dtype, y_dtype", [("int32", "int32"), ("int64", "int32"), ("uint8", "int8")]
)
def test_integer_arithmetic_promotes_as_numpy(x_dtype, y_dtype):
    x, y = np.array([7, 9, 3], x_dtype), np.array([2, 2, 4], y_dtype)
    for got, want in [
        (tape.Variable(x) + tape.Variable(y), x + y),
        (tape.Variable(x) * tape.Variable(y), x * y),
    ]:
        assert got.dtype == want.dtype == got.numpy().dtype
        np.testing.assert_array_equal(got.numpy(), want)


def test_floor_division_of_integers_stays_integer_as_numpy():
    x, y = np.array([7, -7, 3], np.int32), np.array([2, 2, 4], np.int32)
    if not hasattr(tape.Variable, "__floordiv__"):
        pytest.skip("floor division is not registered yet (issue 10, elementwise math)")
    got = tape.Variable(x) // tape.Variable(y)
    assert got.dtype == (x // y).dtype
    np.testing.assert_array_equal(got.numpy(), x // y)


def test_a_python_int_too_large_for_the_array_is_the_librarys_overflow_error():
    with pytest.raises(OverflowError):  # numpy 2 refuses it too
        np.array([1], np.int32) + 10**12
    x = tape.Variable(np.array([1, 2], np.int32))
    with pytest.raises(OverflowError) as info:
        x + 10**12  # the line the error must name
    assert isinstance(info.value, FluidError)
    message = str(info.value)
    assert "op 'elementwise_add'" in message
    assert "1000000000000" in message and "int32" in message
    assert "test_dtype_rule.py" in message


def test_where_types_a_scalar_after_the_other_value_not_the_condition():
    import torch

    condition = np.array([True, False, True])
    x = np.array([1.0, 2.0, 3.0], np.float32)
    got = ops.where(tape.Variable(condition), 2.0, tape.Variable(x))
    want = torch.where(torch.tensor(condition), 2.0, torch.tensor(x))
    assert got.dtype == np.float32 and want.dtype == torch.float32
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert ops.where(tape.Variable(condition), tape.Variable(x), 0).dtype == np.float32
    ints = tape.Variable(np.array([1, 2, 3], np.int32))
    assert ops.where(tape.Variable(condition), 7, ints).dtype == np.int32
