"""Edge cases of the reductions and scans against PyTorch (zeros in products, constant slices,
zero vectors, wide ranges), second derivatives, error messages, the Variable methods, integer
dtypes and lazy mode."""

import warnings

import numpy as np
import pytest
import torch

import ops
import tape

_ZERO_PATTERNS = [
    [2.0, 3.0, -1.5, 0.5],
    [2.0, 0.0, -1.5, 0.5],
    [0.0, 3.0, -1.5, 0.5],
    [2.0, 3.0, -1.5, 0.0],
    [0.0, 3.0, 0.0, 0.5],
    [2.0, 0.0, 0.0, 0.0],
]


def _first_and_second(ours, theirs, x, weights, direction):
    """First gradients of <w, f(x)> and the gradient of <v, first gradient>, ours and torch's."""
    tape.reset_global_tape()
    variable = tape.Variable(x, requires_grad=True)
    (gx,) = tape.grad(
        (ours(variable) * tape.Variable(weights)).sum(), [variable], create_graph=True
    )
    (ggx,) = tape.grad((gx * tape.Variable(direction)).sum(), [variable])
    tensor = torch.tensor(x, requires_grad=True)
    (tgx,) = torch.autograd.grad(
        (theirs(tensor) * torch.tensor(weights)).sum(), [tensor], create_graph=True
    )
    (tggx,) = torch.autograd.grad((tgx * torch.tensor(direction)).sum(), [tensor])
    return (gx.numpy(), ggx.numpy()), (tgx.detach().numpy(), tggx.numpy())


@pytest.mark.parametrize("row", _ZERO_PATTERNS)
@pytest.mark.parametrize(
    "ours, theirs",
    [
        (lambda v: ops.prod(v, axis=1), lambda t: t.prod(1)),
        (lambda v: ops.prod(v), lambda t: t.prod()),
        (lambda v: ops.cumprod(v, axis=1), lambda t: t.cumprod(1)),
        (lambda v: ops.cumprod(v, axis=0), lambda t: t.cumprod(0)),
    ],
    ids=["prod_axis", "prod_all", "cumprod_axis1", "cumprod_axis0"],
)
def test_products_with_zeros_have_pytorchs_first_and_second_derivatives(row, ours, theirs):
    x = np.array([row, row[::-1]])
    rng = np.random.default_rng(0)
    weights = rng.standard_normal(theirs(torch.tensor(x)).shape)
    direction = rng.standard_normal(x.shape)
    (gx, ggx), (tgx, tggx) = _first_and_second(ours, theirs, x, weights, direction)
    np.testing.assert_allclose(gx, tgx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ggx, tggx, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("row", _ZERO_PATTERNS)
def test_cumprod_gradient_op_records_one_op_and_matches_pytorch(row):
    x = np.array([row, row[::-1]])
    gout = np.random.default_rng(1).standard_normal(x.shape)
    tape.reset_global_tape()
    variable = tape.Variable(x, requires_grad=True)
    out = ops.cumprod(variable, axis=1)
    (gx,) = tape.grad(out, [variable], grad=gout)
    tensor = torch.tensor(x, requires_grad=True)
    (tgx,) = torch.autograd.grad(tensor.cumprod(1), [tensor], torch.tensor(gout))
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), rtol=1e-12, atol=1e-12)


def test_std_of_a_constant_slice_has_pytorchs_zero_gradient():
    x = np.array([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]])
    tape.reset_global_tape()
    variable = tape.Variable(x, requires_grad=True)
    (gx,) = tape.grad(ops.std(variable, axis=1).sum(), [variable])
    tensor = torch.tensor(x, requires_grad=True)
    (tgx,) = torch.autograd.grad(tensor.std(1).sum(), [tensor])
    np.testing.assert_array_equal(gx.numpy()[0], [0.0, 0.0, 0.0])
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), rtol=1e-12)


@pytest.mark.parametrize("correction", [1, 3, 5])
def test_degenerate_variances_match_pytorchs_values(correction):
    x = np.array([[1.0, 2.0, 4.0], [2.0, 2.0, 2.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = torch.var(torch.tensor(x), 1, correction=correction).numpy()
        expected_std = torch.std(torch.tensor(x), 1, correction=correction).numpy()
    tape.reset_global_tape()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy warnings from the kernels
        got = ops.var(tape.Variable(x), axis=1, correction=correction).numpy()
        got_std = ops.std(tape.Variable(x), axis=1, correction=correction).numpy()
        empty = ops.var_mean(tape.Variable(np.zeros((2, 0))), axis=1)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got_std, expected_std)
    assert np.isnan(empty.var.numpy()).all() and np.isnan(empty.mean.numpy()).all()


@pytest.mark.parametrize("p", [2, 1, 3, 1.5, 0.5, -1, np.inf, -np.inf, "fro"])
def test_norm_gradients_at_zero_match_pytorch(p):
    x = np.array([[0.0, 0.0, 0.0], [0.0, -2.0, 3.0], [3.0, -3.0, 1.0]])
    tape.reset_global_tape()
    variable = tape.Variable(x, requires_grad=True)
    (gx,) = tape.grad(ops.norm(variable, p=p, axis=1).sum(), [variable])
    tensor = torch.tensor(x, requires_grad=True)
    (tgx,) = torch.autograd.grad(torch.norm(tensor, p=p, dim=1).sum(), [tensor])
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), rtol=1e-12)


def test_norm_of_a_zero_vector_has_zero_gradient_for_p2():
    tape.reset_global_tape()
    x = tape.Variable(np.zeros(3, np.float32), requires_grad=True)
    (gx,) = tape.grad(ops.norm(x), [x])
    np.testing.assert_array_equal(gx.numpy(), np.zeros(3, np.float32))


def test_logcumsumexp_is_stable_in_float32_like_pytorch():
    x = np.array([[-200.0, 0.0, 150.0, -300.0, 151.0], [-1e4, -1e4, -1e4, -1e4, 100.0]], np.float32)
    tape.reset_global_tape()
    variable = tape.Variable(x, requires_grad=True)
    gout = np.array([[1.0, 0.0, -2.0, 0.0, 0.5], [0.0, 0.0, 1.0, 0.0, 0.0]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = ops.logcumsumexp(variable, axis=1)
        (gx,) = tape.grad(out, [variable], grad=gout)
    tensor = torch.tensor(x, requires_grad=True)
    expected = torch.logcumsumexp(tensor, 1)
    (tgx,) = torch.autograd.grad(expected, [tensor], torch.tensor(gout))
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), rtol=1e-5, atol=1e-30)
    assert gx.dtype == np.float32


def test_second_derivative_of_logcumsumexp_matches_pytorch():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 5)) * 3
    weights, direction = rng.standard_normal((2, 5)), rng.standard_normal((2, 5))
    (gx, ggx), (tgx, tggx) = _first_and_second(
        lambda v: ops.logcumsumexp(v, axis=1), lambda t: t.logcumsumexp(1), x, weights, direction
    )
    np.testing.assert_allclose(gx, tgx, rtol=1e-10)
    np.testing.assert_allclose(ggx, tggx, rtol=1e-9)


# ---- errors -----------------------------------------------------------------------------------


def _raises(error, call, *messages):
    with pytest.raises(error) as info:
        call()
    text = str(info.value)
    for message in messages:
        assert message in text, text
    assert "test_reductions_edges.py" in text, text


def test_errors_name_the_op_the_input_and_the_rule():
    tape.reset_global_tape()
    x = tape.Variable(np.ones((2, 4), np.float32))
    ints = tape.Variable(np.ones((2, 4), np.int64))
    _raises(ValueError, lambda: ops.topk(x, k=5), "op 'topk'", "'k' is out of range", "0 <= k <= 4")
    _raises(ValueError, lambda: ops.kthvalue(x, k=0, axis=0), "1 <= k <= 2", "actual:   0")
    _raises(TypeError, lambda: ops.var(ints), "op 'var'", "must be real floating point", "int64")
    _raises(TypeError, lambda: ops.norm(ints), "op 'norm'", "must be real floating point")
    _raises(TypeError, lambda: ops.logcumsumexp(ints, axis=0), "must be floating point")
    _raises(ValueError, lambda: ops.norm(x, p="nuc"), "attribute 'p'", "'fro' or a number")
    empty = tape.Variable(np.ones((2, 0), np.float32))
    _raises(ValueError, lambda: ops.argmax(empty, axis=1), "argmax or argmin over an empty axis")
    _raises(ValueError, lambda: ops.median(empty), "median over an empty axis")
    _raises(ValueError, lambda: ops.norm(empty, p=np.inf, axis=1), "inf norm over an empty axis")
    _raises(IndexError, lambda: ops.cumsum(x, axis=2), "op 'cumsum'", "axis 2 is out of range")
    _raises(ValueError, lambda: ops.cumsum(x), "missing required attribute 'axis'")
    _raises(ValueError, lambda: ops.isclose(x, x, rtol=-1.0), "'rtol' has an invalid value", ">= 0")
    _raises(
        ValueError,
        lambda: ops.pick_along(x, np.zeros((3, 4), np.int64), axis=1),
        "Indices must have X's shape except along the axis",
        "Indices.shape=(3, 4)",
    )
    _raises(TypeError, lambda: ops.pick_along(x, x), "Indices must hold integers")


# ---- Variable methods, dtypes, lazy mode ------------------------------------------------------


def test_variable_methods_match_pytorchs_tensor_methods():
    data = np.array([[1.0, 5.0, 3.0, 5.0], [2.0, 0.0, 4.0, -1.0], [0.5, 0.5, 0.5, 0.5]])
    tape.reset_global_tape()
    x, t = tape.Variable(data), torch.tensor(data)
    pairs = [
        (x.prod(1), t.prod(1)),
        (x.var(), t.var()),
        (x.var(1, False), t.var(1, False)),
        (x.std(0, keepdim=True, correction=0), t.std(0, keepdim=True, correction=0)),
        (x.argmax(), t.argmax()),
        (x.argmin(1, True), t.argmin(1, True)),
        (x.any(1), t.any(1)),
        (x.all(), t.all()),
        (x.cumsum(1), t.cumsum(1)),
        (x.cumprod(0), t.cumprod(0)),
        (x.logcumsumexp(-1), t.logcumsumexp(-1)),
        (x.norm(), t.norm()),
        (x.norm(1, 0, True), t.norm(1, 0, True)),
        (x.median(), t.median()),
        (x.isclose(x + 1e-9), t.isclose(t + 1e-9)),
    ]
    pairs += list(zip(x.cummax(1), t.cummax(1)))
    pairs += list(zip(x.sort(1, True, stable=True), t.sort(dim=1, descending=True, stable=True)))
    pairs += list(zip(x.topk(1, 0), t.topk(1, 0)))
    pairs += list(zip(x.kthvalue(3, 1), t.kthvalue(3, 1)))
    pairs += list(zip(x.median(0, True), t.median(0, True)))
    pairs += [(x.argsort(0, stable=True), t.argsort(dim=0, stable=True))]
    for ours, theirs in pairs:
        assert ours.shape == tuple(theirs.shape)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)
    assert x.allclose(x + 1e-9) is True and x.allclose(x + 1.0) is False
    with pytest.raises(TypeError, match="either 'unbiased' or 'correction'"):
        x.var(0, True, correction=0)


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int32, np.uint8, np.int64])
def test_integer_sums_and_products_declare_the_dtype_their_kernels_give(dtype):
    tape.reset_global_tape()
    x = tape.Variable(np.ones((2, 3), dtype))
    for out in [
        ops.reduce_sum(x, axis=1),
        ops.prod(x),
        ops.cumsum(x, axis=1),
        ops.cumprod(x, axis=0),
    ]:
        assert out.dtype == out.numpy().dtype == np.result_type(np.sum(np.ones(1, dtype)))
    assert ops.argmax(x).dtype == ops.sort(x).indices.dtype == np.int64
    assert ops.any(x, axis=0).dtype == ops.isclose(x, x).dtype == np.bool_


def test_lazy_mode_gives_eager_values_and_gradients():
    data = np.random.default_rng(3).standard_normal((3, 5))

    def run():
        tape.reset_global_tape()
        x = tape.Variable(data, requires_grad=True)
        spread, mean = ops.std_mean(x, axis=1)
        values, _ = ops.sort(x, axis=0, descending=True)
        top, _ = ops.topk(x, k=2)
        running, _ = ops.cummax(x, axis=1)
        loss = (
            (spread * mean).sum()
            + (values * values).sum()
            + top.sum()
            + ops.cumprod(x, axis=1).sum()
            + ops.logcumsumexp(x, axis=0).sum()
            + ops.norm(x, p=3)
            + ops.median(x, axis=1).values.sum()
            + running.sum()
        )
        (gx,) = tape.grad(loss, [x])
        return loss.numpy(), gx.numpy()

    eager = run()
    with tape.lazy():
        lazy = run()
    np.testing.assert_allclose(lazy[0], eager[0], rtol=1e-12)
    np.testing.assert_allclose(lazy[1], eager[1], rtol=1e-12)
