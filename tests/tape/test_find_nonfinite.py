"""NaN bisection: tape.find_first_nonfinite re-runs the recorded ops and names the first bad one."""

import numpy as np
import pytest

import layers
import ops
import tape

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's own NaN warnings


def _loss(w):
    h = ops.tanh(w) * 2.0
    return ops.exp(ops.log(h)).sum()  # log of a negative: the first NaN


LOG_LINE = f"test_find_nonfinite.py:{_loss.__code__.co_firstlineno + 2} in _loss"


def test_the_first_op_with_a_non_finite_output_is_reported_in_eager_mode():
    tape.reset_global_tape()
    w = tape.Variable(np.array([1.0, -1.0, 0.5], np.float32), requires_grad=True)
    loss = _loss(w)
    report = tape.find_first_nonfinite(loss)
    assert report.op == "log" and report.output == "Out"
    assert report.inputs == (("X", True, "shape (3,), float32"),)
    assert report.output_summary == "shape (3,), float32, 1 NaN, 0 Inf"
    assert (report.step, report.ops) == (2, 5)  # tanh, mul, log | exp, reduce_sum
    assert "first non-finite value: op 'log'" in str(report)


def test_all_finite_gives_none_and_runs_no_user_code():
    tape.reset_global_tape()
    w = tape.Variable(np.array([1.0, 0.2], np.float32), requires_grad=True)
    loss = _loss(w)
    before = loss.numpy().copy()
    assert tape.find_first_nonfinite(loss) is None
    np.testing.assert_array_equal(loss.numpy(), before)
    tape.backward(loss)  # the tape is untouched: backward still works
    assert w.grad is not None


def test_lazy_ops_are_re_run_with_their_lines_pending_or_computed(lazy_tier):
    tape.reset_global_tape()
    w = tape.Variable(np.array([1.0, -1.0], np.float32), requires_grad=True)
    with tape.lazy():
        tape.reset_global_tape()
        loss = _loss(w)
        pending = tape.find_first_nonfinite(loss)
        assert np.isnan(loss.numpy())
        computed = tape.find_first_nonfinite(loss)
    for report in (pending, computed):
        assert report.op == "log" and report.location == LOG_LINE


def test_an_input_that_was_non_finite_already_is_reported_at_its_first_reader():
    tape.reset_global_tape()
    model = layers.Linear(2, 2)
    x = tape.Variable(np.array([[np.nan, 1.0]], np.float32))
    report = tape.find_first_nonfinite(ops.relu(model(x)).sum())
    assert report.op == "mul" and report.inputs[0][:2] == ("X", False)


def test_a_value_no_recorded_op_produces_is_an_error_that_says_what_to_do():
    tape.reset_global_tape()
    w = tape.Variable(np.array([1.0], np.float32), requires_grad=True)
    loss = _loss(w)
    tape.backward(loss)  # releases the ops (no retain_graph)
    with pytest.raises(tape.GraphError, match="retain_graph=True"):
        tape.find_first_nonfinite(loss)
    with pytest.raises(tape.InputError, match="expects a Variable"):
        tape.find_first_nonfinite(np.ones(2))
