"""Unary ops beyond the registry sweep: hot-path op counts, erf accuracy, extreme inputs, errors."""

import math
import warnings

import numpy as np
import pytest

import ops
import tape
import tape.tape as engine
from tape import Variable


@pytest.fixture
def recorded_types(monkeypatch):
    """The op types recorded (forward and gradient ops alike) while the test runs."""
    types = []
    record, run_trusted = engine.record, engine.run_trusted

    def counting(tp, defn, args, attrs, given=None, *rest):
        if not (engine.state.trusted and defn.fast and given is None):
            types.append(defn.type)  # (else it runs trusted, counted there)
        return record(tp, defn, args, attrs, given, *rest)

    def counting_trusted(defn, args, attrs):
        types.append(defn.type)  # (an eager backward's gradient op, run without recording)
        return run_trusted(defn, args, attrs)

    monkeypatch.setattr(engine, "record", counting)
    monkeypatch.setattr(engine, "run_trusted", counting_trusted)
    return types


@pytest.mark.parametrize(
    "op, grad_op", [("tanh", "tanh_grad"), ("sigmoid", "sigmoid_grad"), ("relu", "relu_grad")]
)
def test_hot_activations_take_one_op_forward_and_one_backward(op, grad_op, recorded_types):
    tape.reset_global_tape()
    x = Variable(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3) + 0.05, requires_grad=True)
    out = ops.REGISTRY[op](x)
    assert recorded_types == [op]
    (gx,) = tape.grad(out, [x], grad=np.ones((2, 3), np.float32))
    assert recorded_types == [op, grad_op]
    assert gx.dtype == np.float32


def test_erf_is_accurate_to_a_few_ulp_in_float64():
    x = np.concatenate(
        [
            np.linspace(-7.0, 7.0, 14001),
            np.geomspace(1e-300, 7.0, 2000),
            [0.0, 2.0, -2.0, np.nextafter(2.0, 0.0), 6.0],
        ]
    )
    tape.reset_global_tape()
    got = ops.erf(Variable(x)).numpy()
    expected = np.array([math.erf(v) for v in x])
    np.testing.assert_array_less(np.abs(got - expected), 4 * np.spacing(np.abs(expected)) + 1e-320)


def test_erf_in_float32_stays_float32_and_within_four_ulp():
    # Computed in float32 (Horner's rule in float32 arithmetic): the largest error measured
    # over every 7th float32 in [1e-3, 6] is 3.2 ulp, near |x| = 2.
    x = np.linspace(-5.0, 5.0, 4001, dtype=np.float32)
    got = ops.erf(Variable(x)).numpy()
    assert got.dtype == np.float32
    expected = np.array([math.erf(float(v)) for v in x])
    np.testing.assert_array_less(
        np.abs(got - expected), 4 * np.spacing(np.abs(expected).astype(np.float32)) + 1e-38
    )


def test_erf_limits():
    got = ops.erf(Variable(np.array([np.inf, -np.inf, np.nan, -0.0]))).numpy()
    np.testing.assert_array_equal(got[:2], [1.0, -1.0])
    assert np.isnan(got[2]) and got[3] == 0.0 and np.signbit(got[3])


@pytest.mark.parametrize("op", ["sigmoid", "softplus", "elu", "gelu", "tanh", "erf"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_extreme_inputs_give_finite_results_without_warnings(op, dtype):
    x = Variable(
        np.array([-1e4, -1000.0, -90.0, 0.0, 90.0, 1000.0, 1e4], dtype), requires_grad=True
    )
    tape.reset_global_tape()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = ops.REGISTRY[op](x)
        (gx,) = tape.grad(out.sum(), [x])
    assert np.all(np.isfinite(out.numpy())) and np.all(np.isfinite(gx.numpy()))
    assert out.dtype == gx.dtype == dtype


def test_sigmoid_saturates_to_exact_limits():
    out = ops.sigmoid(Variable(np.array([-1000.0, 1000.0], np.float32))).numpy()
    assert out[0] < 1e-37 and out[1] == 1.0


def test_against_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal(50).astype(np.float32) * 4
    tx = torch.tensor(x)
    fn = torch.nn.functional
    pairs = [
        (ops.gelu(Variable(x)), fn.gelu(tx)),
        (ops.gelu(Variable(x), approximate=True), fn.gelu(tx, approximate="tanh")),
        (ops.softplus(Variable(x), beta=2.0, threshold=3.0), fn.softplus(tx, 2.0, 3.0)),
        (ops.elu(Variable(x), alpha=0.3), fn.elu(tx, 0.3)),
        (ops.leaky_relu(Variable(x)), fn.leaky_relu(tx)),
        (ops.erf(Variable(x)), torch.erf(tx)),
        (ops.clip(Variable(x), min=-1.0, max=2.0), torch.clamp(tx, -1.0, 2.0)),
    ]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=2e-6, atol=2e-6)


def test_float_ops_reject_integer_inputs():
    x = Variable(np.arange(3))
    with pytest.raises(tape.DTypeError, match="op 'exp'.*input X must be floating point"):
        ops.exp(x)
    with pytest.raises(tape.DTypeError, match="op 'gelu'.*input X must be real floating point"):
        ops.gelu(x)


def test_clip_bounds_are_checked():
    x = Variable(np.ones(3))
    with pytest.raises(tape.AttrError, match="'min' and 'max' are both None"):
        ops.clip(x)


def test_softplus_rejects_beta_zero():
    with pytest.raises(tape.AttrError, match="beta != 0"):
        ops.softplus(Variable(np.ones(2)), beta=0.0)


def test_gradient_ops_check_that_shapes_agree():
    with pytest.raises(tape.ShapeError) as info:
        ops.tanh_grad(Variable(np.ones((2, 3))), Variable(np.ones((3, 2))))
    assert "Out@GRAD must have the shape of the forward tensor" in str(info.value)
    assert "expected: (2, 3)" in str(info.value) and "actual:   (3, 2)" in str(info.value)


def test_cast_to_the_same_dtype_does_not_alias_its_input():
    tape.reset_global_tape()
    param = Variable(np.ones(3, np.float32), requires_grad=True)
    copy = param.astype("float32")
    param._value[...] = 5.0  # a raw write into the buffer (the library itself never does one)
    np.testing.assert_array_equal(copy.numpy(), np.ones(3, np.float32))


def test_scale_follows_paddle_for_integers():
    out = ops.scale(Variable(np.array([1, 2, 3])), scale=0.5, bias=1.0)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out.numpy(), [1, 2, 2])


def test_abs_operator_and_its_gradient_at_zero():
    tape.reset_global_tape()
    x = Variable(np.array([-2.0, 0.0, 3.0]), requires_grad=True)
    (gx,) = tape.grad(abs(x).sum(), [x])
    np.testing.assert_array_equal(gx.numpy(), [-1.0, 0.0, 1.0])


def test_third_derivative_of_tanh():
    tape.reset_global_tape()
    x = Variable(np.array([0.3, -0.7]), requires_grad=True)
    y = ops.tanh(x).sum()
    (g1,) = tape.grad(y, [x], create_graph=True)
    (g2,) = tape.grad(g1.sum(), [x], create_graph=True)
    (g3,) = tape.grad(g2.sum(), [x])
    t = np.tanh(x.numpy())
    np.testing.assert_allclose(g3.numpy(), -2 * (1 - t * t) * (1 - 3 * t * t), rtol=1e-12)
