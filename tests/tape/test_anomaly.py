"""Anomaly mode: the first op producing NaN or Inf raises, naming the op, inputs and line."""

import inspect
import warnings

import numpy as np
import pytest

import layers
import ops
import optim
import tape

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's own NaN warnings


def _line(offset):
    frame = inspect.currentframe().f_back
    return f"test_anomaly.py:{frame.f_lineno + offset} in {frame.f_code.co_name}"


def _model(w):
    h = ops.tanh(w) * 2.0
    root = ops.sqrt(h)  # NaN where h < 0
    return root.sum()


SQRT_LINE = f"test_anomaly.py:{_model.__code__.co_firstlineno + 2} in _model"


def _weights(values=(1.0, -1.0, 0.5)):
    return tape.Variable(np.array(values, np.float32), requires_grad=True)


def test_eager_forward_raises_at_the_op_naming_its_inputs_and_line():
    tape.reset_global_tape()
    w = _weights()
    with tape.detect_anomaly(), pytest.raises(tape.NonFiniteError) as caught:
        _model(w)
    err = caught.value
    assert isinstance(err, FloatingPointError) and isinstance(err, tape.FluidError)
    text = str(err)
    assert text.splitlines()[0] == (
        "op 'sqrt' (sqrt_2): output Out holds non-finite values (1 NaN, 0 Inf of 3)"
    )
    assert "input X: finite (shape (3,), float32)" in text
    assert f"recorded at: {SQRT_LINE}" in text
    assert "made finite inputs non-finite" in text
    assert err.forward is None and err.inputs == (("X", True, "shape (3,), float32"),)


def test_an_input_that_was_already_non_finite_is_named():
    tape.reset_global_tape()
    x = tape.Variable(np.array([np.nan, 1.0], np.float32))
    with tape.detect_anomaly(), pytest.raises(tape.NonFiniteError) as caught:
        ops.exp(x)
    text = str(caught.value)
    assert "input X: ALREADY NON-FINITE (shape (2,), float32, 1 NaN, 0 Inf)" in text
    assert "ran before anomaly checks started" in text


def test_eager_backward_names_the_gradient_op_and_its_forward_op_and_line():
    tape.reset_global_tape()
    w = _weights((1.0, 0.0, 0.5))  # d sqrt(w)/dw is infinite at 0
    with tape.detect_anomaly():
        loss = (ops.sqrt(w) * 2.0).sum()
        forward_line = _line(-1)
        with pytest.raises(tape.NonFiniteError) as caught:
            backward_line = _line(1)
            tape.backward(loss)
    err = caught.value
    assert err.forward == ("sqrt", "sqrt_0", forward_line)
    assert err.location == backward_line
    text = str(err)
    assert "op 'elementwise_div'" in text and "0 NaN, 1 Inf of 3" in text
    assert f"gradient of: op 'sqrt' (sqrt_0) recorded at {forward_line}" in text
    assert w.grad() is None  # the failed backward accumulated nothing


def test_finite_runs_are_unchanged():
    tape.reset_global_tape()
    w = _weights((1.0, 2.0, 0.5))
    with tape.detect_anomaly():
        loss = _model(w)
        tape.backward(loss)
    expected = 2.0 * (1 - np.tanh(w.numpy()) ** 2) / (2 * np.sqrt(2 * np.tanh(w.numpy())))
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-5)


@pytest.mark.parametrize("how", ["detect_anomaly", "check_finite"])
def test_lazy_forward_raises_at_the_op_in_both_tiers(lazy_tier, how):
    tape.reset_global_tape()
    w = _weights()
    checked = tape.detect_anomaly() if how == "detect_anomaly" else tape.lazy(check_finite=True)
    with pytest.raises(tape.NonFiniteError) as caught:
        with checked, tape.lazy():
            tape.reset_global_tape()
            loss = _model(w)
            loss.numpy()
    err = caught.value
    assert err.op == "sqrt" and err.location == SQRT_LINE
    assert err.inputs[0][:2] == ("X", True)


def test_lazy_backward_names_the_forward_op_in_both_tiers(lazy_tier):
    tape.reset_global_tape()
    w = _weights((1.0, 0.0, 0.5))
    with pytest.raises(tape.NonFiniteError) as caught:
        with tape.lazy(check_finite=True):
            tape.reset_global_tape()
            loss = (ops.sqrt(w) * 2.0).sum()
            forward_line = _line(-1)
            backward_line = _line(1)
            tape.backward(loss)
            w.grad.numpy()
    err = caught.value
    assert err.forward[0] == "sqrt" and err.forward[2] == forward_line
    assert err.location == backward_line
    assert f"gradient of: op 'sqrt' ({err.forward[1]}) recorded at {forward_line}" in str(err)


def test_a_step_inside_a_fused_group_is_named_even_when_the_group_output_is_finite(lazy_tier):
    tape.reset_global_tape()
    x = tape.Variable(np.array([1.0, 100.0], np.float32))  # exp(100) overflows float32
    with pytest.raises(tape.NonFiniteError) as caught:
        with tape.lazy(check_finite=True):
            tape.reset_global_tape()
            big = ops.exp(x)
            line = _line(-1)
            small = 1.0 / (big + 1.0)  # finite (0) again
            small.numpy()
    assert caught.value.op == "exp" and caught.value.location == line
    assert "0 NaN, 1 Inf of 2" in str(caught.value)


def test_a_failed_lazy_step_is_rolled_back_and_the_next_step_works(lazy_tier):
    tape.reset_global_tape()
    model = layers.Linear(2, 1)
    sgd = optim.SGD(lr=0.1)
    before = [p.numpy().copy() for p in model.params()]
    bad = np.array([[np.inf, 1.0]], np.float32)
    with pytest.raises(tape.NonFiniteError):
        with tape.lazy(check_finite=True):
            tape.reset_global_tape()
            tape.backward(model(tape.Variable(bad)).sum())
            sgd(model.params())
    for p, old in zip(model.params(), before):
        np.testing.assert_array_equal(p.numpy(), old)
    with tape.lazy(check_finite=True):
        tape.reset_global_tape()
        for p in model.params():
            p.clear_grad()
        loss = model(tape.Variable(np.ones((1, 2), np.float32))).sum()
        tape.backward(loss)
        sgd(model.params())
        assert np.isfinite(loss.numpy())


def test_the_decorator_form_checks_inside_the_function():
    @tape.detect_anomaly()
    def step(x):
        return ops.log(x)

    tape.reset_global_tape()
    with pytest.raises(tape.NonFiniteError, match="op 'log'"):
        step(tape.Variable(np.array([-1.0], np.float32)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert np.isnan(ops.log(tape.Variable(np.array([-1.0], np.float32))).numpy()[0])


def test_an_eager_optimizer_step_with_a_non_finite_gradient_raises_and_updates_nothing():
    tape.reset_global_tape()
    model = layers.Linear(2, 2)
    sgd = optim.SGD(lr=0.1)
    before = [p.numpy().copy() for p in model.params()]
    tape.backward(model(tape.Variable(np.ones((1, 2), np.float32))).sum())
    model.params()[1].grad()._value[...] = np.nan  # made outside the checks
    with tape.detect_anomaly(), pytest.raises(tape.NonFiniteError) as caught:
        sgd(model.params())
    text = str(caught.value)
    assert text.startswith("op 'sgd'") and "output ParamOut" in text
    assert "input Param: finite" in text and "input Grad: ALREADY NON-FINITE" in text
    for p, old in zip(model.params(), before):  # the step is a transaction
        np.testing.assert_array_equal(p.numpy(), old)


def test_a_plan_run_on_threads_raises_at_the_op_too():
    tape.reset_global_tape()
    a = tape.Variable(np.full((8, 8), -1.0, np.float32))
    b = tape.Variable(np.ones((8, 8), np.float32))
    with pytest.raises(tape.NonFiniteError) as caught:
        with tape.lazy(threads=2, check_finite=True):
            tape.reset_global_tape()
            bad = ops.log(ops.matmul(a, b))
            line = _line(-1)
            (bad + ops.matmul(b, b)).sum().numpy()
    assert caught.value.op == "log" and caught.value.location == line
