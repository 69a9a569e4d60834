"""BatchNorm and LayerNorm: running statistics as buffers, train/eval modes, values and gradients
against per-channel loops and torch.nn.functional, gradients of gradients, error messages."""

import numpy as np
import pytest

import layers
import ops
import tape
from tape.testing import gradcheck
from tests.layers.numeric import check_layer_gradients
from tests.ops.cases_norm import batch_norm_reference, layer_norm_reference

RNG = np.random.default_rng(0)


def _randn(*shape):
    return RNG.standard_normal(shape)


def test_running_statistics_are_buffers_not_parameters():
    bn = layers.BatchNorm2d(3)
    assert [name for name, _ in bn.named_params()] == ["weight", "bias"]
    assert [name for name, _ in bn.buffers()] == ["running_mean", "running_var"]
    assert not bn.running_mean.requires_grad and bn.running_mean.persistable
    np.testing.assert_array_equal(bn.running_mean.numpy(), np.zeros(3, np.float32))
    np.testing.assert_array_equal(bn.running_var.numpy(), np.ones(3, np.float32))
    np.testing.assert_array_equal(bn.weight.numpy(), np.ones(3, np.float32))
    np.testing.assert_array_equal(bn.bias.numpy(), np.zeros(3, np.float32))


def test_training_updates_running_statistics_in_place_over_steps():
    bn = layers.BatchNorm(3, momentum=0.2, dtype="float64")
    mean_buffer = bn.running_mean
    mean, var = np.zeros(3), np.ones(3)
    for _ in range(3):
        x = _randn(4, 3, 2, 2) * 2 + 1
        y = bn(tape.Variable(x)).numpy()
        expected = batch_norm_reference(x, np.ones(3), np.zeros(3), mean, var, momentum=0.2)
        np.testing.assert_allclose(y, expected[0], rtol=1e-12, atol=1e-12)
        mean, var = expected[1], expected[2]
        np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-12)
        np.testing.assert_allclose(bn.running_var.numpy(), var, rtol=1e-12)
    assert bn.running_mean is mean_buffer


def test_running_statistics_update_under_no_grad_but_not_in_eval():
    bn = layers.BatchNorm1d(2)
    with tape.no_grad():
        bn(tape.Variable(np.array([[1.0, 2.0], [3.0, 6.0]], np.float32)))
    np.testing.assert_allclose(bn.running_mean.numpy(), [0.2, 0.4], rtol=1e-6)
    bn.eval()
    x = np.array([[1.0, 2.0], [3.0, 5.0]], np.float32)
    y = bn(tape.Variable(x)).numpy()
    np.testing.assert_allclose(bn.running_mean.numpy(), [0.2, 0.4], rtol=1e-6)
    expected = (x - [0.2, 0.4]) / np.sqrt(bn.running_var.numpy() + 1e-5)
    np.testing.assert_allclose(y, expected, rtol=1e-5)
    assert bn.train().training


@pytest.mark.parametrize("shape", [(5, 3), (4, 3, 6), (2, 3, 4, 5)])
@pytest.mark.parametrize("training", [True, False])
def test_gradients_match_finite_differences(shape, training):
    bn = layers.BatchNorm(3, dtype="float64")
    bn.running_mean.set_value(_randn(3))
    bn.running_var.set_value(RNG.uniform(0.5, 2.0, 3))
    bn.train(training)
    check_layer_gradients(bn, bn, [_randn(*shape)])


def test_layer_norm_matches_the_row_loop_and_finite_differences():
    ln = layers.LayerNorm((3, 4), eps=1e-3, dtype="float64")
    ln.weight.set_value(_randn(3, 4))
    ln.bias.set_value(_randn(3, 4))
    x = _randn(2, 3, 4)
    expected, _, _ = layer_norm_reference(x, ln.weight.numpy(), ln.bias.numpy(), 1, 1e-3)
    np.testing.assert_allclose(ln(tape.Variable(x)).numpy(), expected, rtol=1e-12, atol=1e-12)
    check_layer_gradients(ln, ln, [x])


def test_layer_norm_without_affine_has_no_parameters():
    ln = layers.LayerNorm(4, elementwise_affine=False)
    assert ln.params() == []
    y = ln(tape.Variable(_randn(2, 3, 4).astype(np.float32))).numpy()
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-6)
    np.testing.assert_allclose(y.var(-1), 1, rtol=1e-3)


def test_batch_norm_statistic_outputs_are_differentiable():
    """A loss may read SavedMean, SavedVariance, MeanOut and VarianceOut: their paths count."""
    scale, bias, mean, var = _randn(3), _randn(3), _randn(3), RNG.uniform(0.5, 2, 3)
    weights = [_randn(4, 3)] + [_randn(3) for _ in range(4)]

    def every_output(x):
        outputs = ops.batch_norm(x, scale, bias, mean.copy(), var.copy(), momentum=0.3)
        return sum((o * w).sum() for o, w in zip(outputs, weights, strict=True))

    assert gradcheck(every_output, [_randn(4, 3)])


def test_float32_stays_float32():
    for layer, shape in ((layers.BatchNorm2d(3), (2, 3, 2, 2)), (layers.LayerNorm(4), (3, 4))):
        x = tape.Variable(_randn(*shape).astype(np.float32), requires_grad=True)
        out = layer(x)
        tape.backward(out.sum())
        grads = [x.grad] + [p.grad for p in layer.params()]
        assert out.dtype == np.float32 and all(g.dtype == np.float32 for g in grads)
    assert layers.BatchNorm2d(3).running_var.dtype == np.float32


def test_errors_name_the_layer_and_the_shapes():
    with pytest.raises(tape.ShapeError) as err:
        layers.BatchNorm(4)(tape.Variable(np.ones((2, 3), np.float32)))
    assert "op 'batch_norm'" in str(err.value) and "expects 4 channels" in str(err.value)
    assert "actual:   X.shape=(2, 3)" in str(err.value) and "test_norm.py" in str(err.value)
    with pytest.raises(tape.ShapeError, match="BatchNorm2d expects a 4-D input"):
        layers.BatchNorm2d(3)(tape.Variable(np.ones((2, 3), np.float32)))
    with pytest.raises(tape.ShapeError, match="BatchNorm1d expects a 2-D or 3-D input"):
        layers.BatchNorm1d(3)(tape.Variable(np.ones((2, 3, 1, 1), np.float32)))
    with pytest.raises(tape.ShapeError, match="training needs more than one value per channel"):
        layers.BatchNorm(3)(tape.Variable(np.ones((1, 3), np.float32)))
    with pytest.raises(tape.ShapeError, match=r"normalises the trailing dimensions \(4,\)"):
        layers.LayerNorm(4)(tape.Variable(np.ones((4, 3), np.float32)))
    x = tape.Variable(np.ones((2, 3), np.float32))
    with pytest.raises(
        tape.ShapeError,
        match=r"Scale must hold one value per channel\n"
        r"  expected: Scale.shape == \(3,\)",
    ):
        ops.batch_norm(x, np.ones(2, np.float32), *[np.ones(3, np.float32)] * 3)
    with pytest.raises(tape.DTypeError, match="input Bias must be floating point"):
        ops.layer_norm(x, np.ones(3, np.float32), np.ones(3, np.int32))
    with pytest.raises(tape.ShapeError, match="begin_norm_axis 2 is out of range"):
        ops.layer_norm(x, begin_norm_axis=2)


# --- against PyTorch --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (3, 3, 4, 2)])
def test_batch_norm_training_steps_then_eval_equal_torch(shape):
    torch = pytest.importorskip("torch")
    bn = layers.BatchNorm(3, momentum=0.3, dtype="float64")
    t_bn = (torch.nn.BatchNorm1d if len(shape) < 4 else torch.nn.BatchNorm2d)(3, momentum=0.3)
    t_bn = t_bn.double()
    scale, shift = _randn(3), _randn(3)
    for ours, theirs in ((bn.weight, t_bn.weight), (bn.bias, t_bn.bias)):
        ours.set_value(scale if ours is bn.weight else shift)
        with torch.no_grad():
            theirs.copy_(torch.tensor(scale if ours is bn.weight else shift))
    for training in (True, True, True, False):
        bn.train(training)
        t_bn.train(training)
        x0 = _randn(*shape) * 3 + 2
        x, tx = tape.Variable(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
        tape.reset_global_tape()
        out, expected = bn(x), t_bn(tx)
        cotangent = _randn(*shape)
        tape.backward(out, grad=cotangent)
        expected.backward(torch.tensor(cotangent))
        np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(x.grad().numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(bn.running_mean.numpy(), t_bn.running_mean.numpy(), rtol=1e-12)
        np.testing.assert_allclose(bn.running_var.numpy(), t_bn.running_var.numpy(), rtol=1e-12)
    for ours, theirs in ((bn.weight, t_bn.weight), (bn.bias, t_bn.bias)):
        np.testing.assert_allclose(ours.grad().numpy(), theirs.grad.numpy(), rtol=1e-9)


@pytest.mark.parametrize("normalized_shape", [(5,), (3, 5)])
def test_layer_norm_equals_torch(normalized_shape):
    torch = pytest.importorskip("torch")
    x0, w0, b0 = _randn(2, 3, 5), _randn(*normalized_shape), _randn(*normalized_shape)
    ln = layers.LayerNorm(normalized_shape, dtype="float64")
    ln.weight.set_value(w0)
    ln.bias.set_value(b0)
    x = tape.Variable(x0, requires_grad=True)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x0, w0, b0))
    out = ln(x)
    expected = torch.nn.functional.layer_norm(tx, normalized_shape, tw, tb)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    cotangent = _randn(*out.shape)
    tape.backward(out, grad=cotangent)
    expected.backward(torch.tensor(cotangent))
    for ours, theirs in ((x, tx), (ln.weight, tw), (ln.bias, tb)):
        np.testing.assert_allclose(ours.grad().numpy(), theirs.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("which", ["batch_norm", "batch_norm_eval", "layer_norm"])
def test_double_backward_equals_torch(which):
    """A gradient penalty |dL/dX|^2 differentiated again, with respect to X and the scale."""
    torch = pytest.importorskip("torch")
    functional = torch.nn.functional
    shape = (4, 2, 3) if which == "layer_norm" else (4, 3, 2)
    x0, w0, b0, v = _randn(*shape), _randn(3), _randn(3), _randn(*shape)
    mean, var = _randn(3), RNG.uniform(0.5, 2, 3)
    x, w, b = (tape.Variable(a, requires_grad=True) for a in (x0, w0, b0))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x0, w0, b0))
    if which == "layer_norm":
        out = ops.layer_norm(x, w, b, begin_norm_axis=2)[0]
        expected = functional.layer_norm(tx, (3,), tw, tb)
    else:
        training = which == "batch_norm"
        out = ops.batch_norm(x, w, b, mean.copy(), var.copy(), is_test=not training)[0]
        expected = functional.batch_norm(
            tx, torch.tensor(mean), torch.tensor(var), tw, tb, training=training
        )
    gx, gw = tape.grad((out * tape.Variable(v)).sum(), [x, w], create_graph=True)
    ours = tape.grad((gx * gx).sum() + (gw * gw).sum(), [x, w, b])
    tgx, tgw = torch.autograd.grad((expected * torch.tensor(v)).sum(), [tx, tw], create_graph=True)
    theirs = torch.autograd.grad(
        (tgx * tgx).sum() + (tgw * tgw).sum(), [tx, tw, tb], allow_unused=True
    )
    for a, t, leaf in zip(ours, theirs, (x0, w0, b0), strict=True):
        expected_grad = np.zeros(leaf.shape) if t is None else t.numpy()
        actual = np.zeros(leaf.shape) if a is None else a.numpy()
        np.testing.assert_allclose(actual, expected_grad, rtol=1e-8, atol=1e-10)
