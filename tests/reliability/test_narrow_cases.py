"""Narrower cases that were silently wrong: missing, complex and None feeds; signed zero
constants; clear errors for a bad place and data that is not numeric."""

import numpy as np
import pytest

import layers
import tape


def _program():
    t = tape.Tape(lazy=True)
    x = tape.Variable(np.ones(3, np.float32), name="x")
    y = t.add_op("relu", {"X": [x]})
    y.name = "y"
    return tape.Program.from_tape(t)


def test_a_missing_feed_is_an_error_not_the_recorded_value():
    with pytest.raises(tape.InputError, match="no value was fed for 'x'"):
        tape.Executor().run(_program(), fetch_list=["y"])


@pytest.mark.parametrize(
    "value, kind",
    [(np.ones(3) + 1j, "complex128"), (None, "object"), (np.array(["a", "b", "c"]), "<U1")],
)
def test_a_feed_that_would_lose_its_kind_is_refused(value, kind):
    with pytest.raises(tape.InputError, match=f"dtype {kind}"):
        tape.Executor().run(_program(), feed={"x": value}, fetch_list=["y"])


def test_float64_data_still_feeds_a_float32_input():
    (y,) = tape.Executor().run(_program(), feed={"x": -np.ones(3)}, fetch_list=["y"])
    assert y.dtype == np.float32 and not y.any()


def test_negative_zero_is_its_own_constant():
    x = tape.Variable(np.array([1.0, -2.0], np.float32))
    tape.reset_global_tape()
    np.testing.assert_array_equal(np.signbit((x * 0.0).numpy()), [False, True])
    np.testing.assert_array_equal(np.signbit((x * -0.0).numpy()), [True, False])


def test_a_bad_place_is_a_clear_error_at_the_users_line():
    with pytest.raises(tape.InputError) as info:
        tape.Executor(place="tpu")
    assert "expected: 'cpu' or 'gpu'" in str(info.value)
    assert "recorded at: test_narrow_cases.py:" in str(info.value)


@pytest.mark.parametrize(
    "data, words",
    [
        (np.array([object(), object()]), "must be numeric"),
        (np.array(["a", "b"]), "must be numeric"),
        ((i for i in range(3)), "materialise an iterator"),
        ([[1, 2], [3]], "cannot be turned into a numeric array"),
    ],
)
def test_data_without_numeric_meaning_is_refused_at_the_users_line(data, words):
    with pytest.raises(tape.InputError) as info:
        tape.Variable(data)
    assert words in str(info.value) and "test_narrow_cases.py:" in str(info.value)


def test_an_int_list_cannot_require_a_gradient():
    with pytest.raises(tape.InputError) as info:
        tape.Variable([1, 2], requires_grad=True)
    assert "cannot require a gradient" in str(info.value)
    assert "test_narrow_cases.py:" in str(info.value)


def test_object_data_no_longer_runs_through_a_layer():
    with pytest.raises(tape.InputError, match="must be numeric"):
        layers.Linear(2, 2)(tape.Variable(np.array([[object(), object()]])))
