"""The im2col columns a convolution keeps for its filter gradient (conv<n>d's hidden Columns
output): the filter gradient read from them equals the one gathered again and the reference,
for padded, strided, dilated and grouped geometries, float32 and float64, contiguous and
non-contiguous inputs; columns are never kept where they would be the input itself."""

import numpy as np
import pytest

import ops
import tape
from ops import conv_kernels
from ops.conv import FAMILIES
from tests.ops.cases_conv import grad_filter_reference

RNG = np.random.default_rng(7)

# (Input shape, Filter shape, attrs)
GEOMETRIES = [
    ((2, 3, 7, 6), (4, 3, 3, 3), {"paddings": (1, 1)}),
    ((2, 4, 9, 8), (6, 2, 3, 2), {"strides": (2, 1), "dilations": (1, 2), "groups": 2}),
    ((1, 2, 6, 6), (3, 2, 2, 2), {"paddings": (1, 0, 2, 1), "strides": (2, 2)}),
    ((2, 3, 5, 5), (2, 3, 1, 1), {"strides": (2, 2)}),
]


def _attrs(attrs):
    return {"strides": (1, 1), "paddings": (0, 0), "dilations": (1, 1), "groups": 1, **attrs}


def _input(shape, dtype, contiguous):
    if contiguous:
        return RNG.standard_normal(shape).astype(dtype)
    # The same values through a transposed buffer: strides that are not C order.
    n, c, h, w = shape
    return RNG.standard_normal((n, c, w, h)).astype(dtype).swapaxes(2, 3)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("contiguous", [True, False], ids=["contiguous", "strided"])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=["pad", "stride_group", "uneven", "1x1_s2"])
def test_the_filter_gradient_from_kept_columns_equals_the_reference(geometry, contiguous, dtype):
    x_shape, w_shape, attrs = geometry
    attrs = _attrs(attrs)
    x = _input(x_shape, dtype, contiguous)
    w = RNG.standard_normal(w_shape).astype(dtype)
    out, cols = conv_kernels.convolve(np, x, w, attrs)
    assert cols.shape == conv_kernels.columns_shape(attrs, x.shape, w_shape[2:])
    assert not np.may_share_memory(cols, x)
    gout = RNG.standard_normal(out.shape).astype(dtype)
    kept = conv_kernels.filter_gradient(np, x, gout, w_shape, attrs, cols)
    gathered = conv_kernels.filter_gradient(np, x, gout, w_shape, attrs)
    np.testing.assert_array_equal(kept, gathered)
    tolerance = 1e-4 if dtype == "float32" else 1e-12
    expected = grad_filter_reference(x, gout, filter_shape=w_shape, **attrs)
    np.testing.assert_allclose(kept, expected, rtol=tolerance, atol=tolerance)


def test_a_1x1_stride_1_convolution_keeps_no_columns_its_input_is_them():
    attrs = _attrs({})
    x = RNG.standard_normal((2, 3, 4, 4))
    _, cols = conv_kernels.convolve(np, x, RNG.standard_normal((5, 3, 1, 1)), attrs)
    assert cols.shape == (0,)


def _conv_and_gathers(monkeypatch):
    """conv2d of a padded 3x3 filter, then its filter gradient; returns (conv op, dFilter, how
    many times the backward gathered columns)."""
    tape.reset_global_tape()
    x = tape.Variable(RNG.standard_normal((2, 3, 5, 5)))
    w = tape.Variable(RNG.standard_normal((4, 3, 3, 3)), requires_grad=True)
    out = ops.conv2d(x, w, paddings=[1, 1])
    assert isinstance(out, tape.Variable) and out.shape == (2, 4, 5, 5)
    (conv_op,) = [op for op in tape.get_global_tape().ops if op.type == "conv2d"]
    gathers, gather = [], conv_kernels.columns
    monkeypatch.setattr(conv_kernels, "columns", lambda *a: gathers.append(1) or gather(*a))
    (gw,) = tape.grad(out.sum(), [w])
    attrs = _attrs({"paddings": (1, 1)})
    expected = grad_filter_reference(x.numpy(), np.ones(out.shape), filter_shape=w.shape, **attrs)
    np.testing.assert_allclose(gw.numpy(), expected, rtol=1e-12)
    return conv_op, len(gathers)


def test_the_convolution_returns_its_output_and_the_backward_reads_the_kept_columns(monkeypatch):
    assert FAMILIES[2][0].output_slots == ("Output", "Columns")
    conv_op, gathers = _conv_and_gathers(monkeypatch)
    assert conv_op.outputs["Columns"][0].shape == (2, 1, 27, 25)
    assert gathers == 0


def test_columns_over_the_budget_are_not_kept_and_the_gradient_gathers_them(monkeypatch):
    monkeypatch.setattr(conv_kernels, "COLUMNS_BUDGET", 0)
    conv_op, gathers = _conv_and_gathers(monkeypatch)
    assert conv_op.outputs["Columns"][0].shape == (0,)
    assert gathers == 1
