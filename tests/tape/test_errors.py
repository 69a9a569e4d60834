"""Errors are the library's own types, raised at the user's line, naming the op, the input, and
the shapes or values involved; a failed op leaves the tape unchanged."""

import os

import numpy as np
import pytest

import ops
import tape
from tape.errors import AttrError, FluidError, GraphError, InputError, ShapeError

HERE = os.path.basename(__file__)


@pytest.fixture(autouse=True)
def fresh_tape():
    tape.reset_global_tape()


def f32(*shape):
    return tape.Variable(np.ones(shape, np.float32), requires_grad=True)


def test_a_shape_error_names_op_inputs_shapes_and_the_users_line():
    x, y = f32(3, 4), f32(5, 6)
    with pytest.raises(ShapeError) as err:
        x + y  # the line the message must point at
    message = str(err.value)
    assert message.startswith("op 'elementwise_add' (elementwise_add_0): inputs X and Y cannot")
    assert "X.shape=(3, 4), Y.shape=(5, 6)" in message
    assert f"recorded at: {HERE}:" in message and "in test_a_shape_error_names" in message


def test_shape_errors_are_value_errors_and_fluid_errors():
    with pytest.raises(ValueError):
        ops.mul(f32(2, 3), f32(4, 5))
    with pytest.raises(FluidError):
        ops.mul(f32(2, 3), f32(4, 5))


def test_mul_reports_the_flattened_inner_dimensions():
    with pytest.raises(ShapeError) as err:
        ops.mul(f32(2, 3), f32(4, 5))
    message = str(err.value)
    assert "op 'mul'" in message and "inner dimensions differ" in message
    assert "expected: prod(X.shape[x_num_col_dims:]) == prod(Y.shape[:y_num_col_dims])" in message
    assert "actual:   3 != 4 (X.shape=(2, 3), Y.shape=(4, 5))" in message


def test_an_unknown_attribute_lists_the_valid_ones():
    with pytest.raises(AttrError) as err:
        tape.get_global_tape().add_op(
            "mul", {"X": [f32(2, 3)], "Y": [f32(3, 2)]}, None, {"x_num_cols": 1}
        )
    message = str(err.value)
    assert "op 'mul'" in message and "unknown attribute 'x_num_cols'" in message
    assert "valid attributes: x_num_col_dims (int = 1), y_num_col_dims (int = 1)" in message
    assert f"recorded at: {HERE}:" in message


def test_an_attribute_of_the_wrong_type_is_a_type_error():
    with pytest.raises(TypeError) as err:
        ops.mul(f32(2, 3), f32(3, 2), x_num_col_dims="one")
    assert "attribute 'x_num_col_dims' has the wrong type" in str(err.value)
    assert "expected: an int" in str(err.value) and "actual:   'one' (str)" in str(err.value)


def test_an_attribute_failing_its_check_says_the_rule():
    with pytest.raises(ValueError) as err:
        ops.mul(f32(2, 3), f32(3, 2), x_num_col_dims=0)
    assert "attribute 'x_num_col_dims' has an invalid value" in str(err.value)
    assert "expected: >= 1" in str(err.value) and "actual:   0" in str(err.value)


def test_a_missing_required_attribute_is_named():
    with pytest.raises(AttrError, match="missing required attribute 'shape'"):
        tape.get_global_tape().add_op("fill_constant", {}, None, {"value": 1.0})


def test_unknown_op_types_suggest_close_names():
    with pytest.raises(InputError) as err:
        tape.get_global_tape().add_op("elementwise_ad", {})
    assert "unknown op type" in str(err.value) and "elementwise_add" in str(err.value)


def test_unknown_and_missing_slots_are_named():
    t = tape.get_global_tape()
    with pytest.raises(InputError, match="unknown input slot 'Z'"):
        t.add_op("relu", {"X": [f32(2)], "Z": [f32(2)]})
    with pytest.raises(InputError, match="missing input 'Y'"):
        t.add_op("mul", {"X": [f32(2, 2)]})
    with pytest.raises(InputError, match="input 'X' must hold Variables"):
        t.add_op("relu", {"X": [np.ones(2)]})


def test_a_failed_op_leaves_the_tape_and_its_output_handle_unchanged():
    t = tape.get_global_tape()
    x = f32(2, 3)
    ok = ops.relu(x)
    recorded = len(t)
    handle = tape.Variable(name="out")
    with pytest.raises(ShapeError):
        t.add_op("mul", {"X": [ok], "Y": [f32(4, 4)]}, {"Out": [handle]})
    assert len(t) == recorded
    assert handle.shape is None and handle._value is None


def test_reading_an_empty_handle_explains_why():
    with pytest.raises(GraphError, match="has no value") as err:
        tape.Variable(name="nothing").value()
    assert "empty handle" in str(err.value)


def test_item_assignment_into_a_leaf_that_requires_grad_is_refused_with_a_hint():
    x = f32(3)  # x[i] = v rebinds x to a new value (tape.indexing): not for a parameter
    with pytest.raises(GraphError, match="is a leaf that requires a gradient") as err:
        x[0] = 1.0
    assert "hint: assign into a copy" in str(err.value)


def test_errors_format_expected_actual_and_hint_lines():
    err = ShapeError(
        "matmul",
        "inner dimensions differ",
        expected="X.shape[-1] == Y.shape[-2]",
        actual="4 != 5",
        name="matmul_7",
        location="train.py:42 in forward",
    )
    assert str(err) == (
        "op 'matmul' (matmul_7): inner dimensions differ\n"
        "  expected: X.shape[-1] == Y.shape[-2]\n"
        "  actual:   4 != 5\n"
        "  recorded at: train.py:42 in forward"
    )


def test_a_repeated_bad_attribute_is_reported_every_time():
    # (checked attributes are remembered per op: a failing check never is)
    for _ in range(2):
        with pytest.raises(ValueError, match="has an invalid value"):
            ops.mul(f32(2, 3), f32(3, 2), x_num_col_dims=0)


def test_remembered_attributes_keep_each_values_type_and_the_sign_of_zero():
    x = tape.Variable(np.array([2.0, -3.0]))
    assert ops.scale(x, scale=1).numpy().tolist() == [2.0, -3.0]  # (int for a float: taken)
    with pytest.raises(TypeError, match="wrong type"):  # (True == 1, but a bool is refused)
        ops.scale(x, scale=True)
    positive = ops.scale(x, scale=0.0).numpy()
    negative = ops.scale(x, scale=-0.0).numpy()
    assert np.signbit(negative).tolist() == [True, False]
    assert np.signbit(positive).tolist() == [False, True]
    assert ops.reduce_sum(f32(2, 3), axis=1).shape == (2,)
    assert ops.reduce_sum(f32(2, 3), axis=(1,)).shape == (2,)
    assert ops.reduce_sum(f32(2, 3), axis=1, keepdim=True).shape == (2, 1)
