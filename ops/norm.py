"""Normalisation: batch_norm (running statistics as new values) and layer_norm, with grad ops.

Both normalise X over a set of axes with per-group mean mu and inverse std r = 1/sqrt(var + eps),
xhat = (X - mu) * r, then apply an affine map. Their gradients are the fused ops of
``ops.norm_grad``, themselves differentiable to any order. Every float output is differentiable,
the statistics included (a loss may read them), so the tape never silently drops a path.
"""

from __future__ import annotations

from ops.norm_grad import (
    EPSILON,
    LAYOUT,
    LN_ATTRS,
    add_terms,
    batch_norm_grad,
    bn_axes,
    check_affine,
    layer_norm_grad,
    ln_shapes,
    ln_split,
    rsum,
    same_float,
    shaped,
)
from ops.registry import Attr, register
from ops.xp import promote
from tape.errors import ShapeError
from tape.tape import apply

BN_ATTRS = {
    "epsilon": EPSILON,
    "momentum": Attr("float", 0.1, check=lambda v: 0 <= v <= 1, rule="0 <= momentum <= 1"),
    "is_test": Attr("bool", False),
    "data_layout": LAYOUT,
}


def _infer_bn(attrs, x, scale, bias, mean, variance):
    vectors = (("Scale", scale), ("Bias", bias), ("Mean", mean), ("Variance", variance))
    dtype = same_float(vectors, x)
    if len(x.shape) < 2:
        raise ShapeError(
            None,
            "input X needs a channel axis",
            expected="X (N, C, ...)",
            actual=f"X.shape={x.shape}",
        )
    _, channel, _, count = bn_axes(x.shape, attrs["data_layout"])
    channels = x.shape[channel]
    for slot, var in vectors:
        if tuple(var.shape) != (channels,):
            raise ShapeError(
                None,
                f"{slot} must hold one value per channel",
                expected=f"{slot}.shape == ({channels},) (X.shape={x.shape}, "
                f"{attrs['data_layout']})",
                actual=f"{slot}.shape={var.shape}",
            )
    if not attrs["is_test"] and count < 2:
        raise ShapeError(
            None,
            "training needs more than one value per channel",
            expected="N * H * W > 1 (set is_test=True to use running statistics)",
            actual=f"X.shape={x.shape}",
        )
    vector = ((channels,), dtype)
    # MeanOut and VarianceOut are the running statistics' own buffers, updated in place.
    running = ((channels,), mean.dtype), ((channels,), variance.dtype)
    return (tuple(x.shape), dtype), *running, vector, vector


@register(
    "batch_norm",
    inputs=("X", "Scale", "Bias", "Mean", "Variance"),
    outputs=("Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance"),
    attrs=BN_ATTRS,
    infer=_infer_bn,
    inplace={"MeanOut": "Mean", "VarianceOut": "Variance"},
)
def batch_norm(xp, attrs, x, scale, bias, mean, variance):
    """Y = (X - mu) * r * Scale + Bias per channel (axis 1, or last for NHWC), r = 1/sqrt(var +
    epsilon). Training: mu, var are the batch's (biased) statistics over all other axes, and the
    running ones are updated, MeanOut = (1 - momentum) * Mean + momentum * mu, VarianceOut
    likewise with the unbiased batch variance (PyTorch). is_test: mu, var = Mean, Variance.
    SavedMean = mu, SavedVariance = r.

    Training: dX = Scale * r / m * (m * dY - sum(dY) - xhat * sum(dY * xhat)) over the m values of
    a channel, dScale = sum(dY * xhat), dBias = sum(dY) (batch_norm_grad); the statistic outputs
    add their own terms. is_test: dX = dY * Scale * r.
    """
    axes, _, bshape, count = bn_axes(x.shape, attrs["data_layout"])
    momentum, epsilon = attrs["momentum"], attrs["epsilon"]
    # Mixed dtypes compute in the promoted one; the running statistics keep theirs.
    x, scale, bias, mean_in, variance_in = promote(x, scale, bias, mean, variance)
    if attrs["is_test"]:
        mu, var = mean_in.copy(), variance_in
    else:
        mu = x.mean(axis=axes)
    centered = x - mu.reshape(bshape)
    if not attrs["is_test"]:
        var = (centered * centered).mean(axis=axes)
        mean = mean * (1.0 - momentum)  # new buffers: a kernel never writes its inputs
        mean += momentum * mu
        variance = variance * (1.0 - momentum)
        variance += (momentum * count / (count - 1)) * var
    inv_std = 1.0 / xp.sqrt(var + epsilon)
    centered *= (scale * inv_std).reshape(bshape)
    centered += bias.reshape(bshape)
    return centered, mean, variance, mu, inv_std


@batch_norm.gradient
def _(g):
    x, scale, _, _, _ = g.inputs
    _, _, _, saved_mean, inv_std = g.outputs
    gy = g.gouts[0]
    gx = gscale = gbias = None
    if gy is not None and (g.needs(0) or g.needs(1) or g.needs(2)):
        gx, gscale, gbias = apply(
            batch_norm_grad,
            (x, scale, saved_mean, inv_std, gy),
            {"is_test": g.attrs["is_test"], "data_layout": g.attrs["data_layout"]},
        )
    if g.attrs["is_test"]:
        return (gx, gscale, gbias) + _bn_running_grads_test(g)
    if g.needs(0):
        gx = add_terms(gx, _bn_statistics_grad(g))
    decay = 1.0 - g.attrs["momentum"]
    g_mean_out, g_var_out = g.gouts[1:3]
    g_mean = None if g_mean_out is None or not g.needs(3) else g_mean_out * decay
    g_var = None if g_var_out is None or not g.needs(4) else g_var_out * decay
    return gx, gscale, gbias, g_mean, g_var


def _bn_statistics_grad(g):
    """Training: dX from the outputs reading mu = mean(X) and var = mean((X - mu)^2), i.e.
    MeanOut, VarianceOut (unbiased var), SavedMean and SavedVariance = (var + eps)^-1/2."""
    x = g.inputs[0]
    _, _, _, saved_mean, inv_std = g.outputs
    _, g_mean_out, g_var_out, g_mu, g_inv_std = g.gouts
    _, _, bshape, count = bn_axes(x.shape, g.attrs["data_layout"])
    momentum = g.attrs["momentum"]
    g_mu = add_terms(g_mu, None if g_mean_out is None else g_mean_out * momentum)
    g_var = add_terms(
        None if g_var_out is None else g_var_out * (momentum * count / (count - 1)),
        None if g_inv_std is None else g_inv_std * inv_std**3 * -0.5,
    )
    centered = None if g_var is None else x - shaped(saved_mean, bshape)
    return add_terms(
        None if g_mu is None else shaped(g_mu, bshape) * (1.0 / count),
        None if g_var is None else centered * shaped(g_var, bshape) * (2.0 / count),
    )


def _bn_running_grads_test(g):
    """is_test: dMean and dVariance, which Y, SavedMean, SavedVariance (and MeanOut and
    VarianceOut, the same buffers) read."""
    x, scale = g.inputs[:2]
    _, _, _, saved_mean, inv_std = g.outputs
    gy, g_mean_out, g_var_out, g_mu, g_inv_std = g.gouts
    axes, _, bshape, _ = bn_axes(x.shape, g.attrs["data_layout"])
    g_mean = g_var = None
    if g.needs(3):
        from_y = None if gy is None else -shaped(rsum(gy, axes), scale.shape) * scale * inv_std
        g_mean = add_terms(g_mean_out, g_mu, from_y)
    if g.needs(4):
        from_y = (
            None
            if gy is None
            else shaped(rsum(gy * (x - shaped(saved_mean, bshape)), axes), scale.shape) * scale
        )
        g_r = add_terms(g_inv_std, from_y)
        g_var = add_terms(g_var_out, None if g_r is None else g_r * inv_std**3 * -0.5)
    return g_mean, g_var


def _infer_ln(attrs, x, scale, bias):
    dtype = same_float((("Scale", scale), ("Bias", bias)), x)
    begin, rows, size = ln_split(x.shape, attrs)
    check_affine(x, "Scale", scale, begin, size)
    check_affine(x, "Bias", bias, begin, size)
    return (tuple(x.shape), dtype), ((rows,), dtype), ((rows,), dtype)


@register(
    "layer_norm",
    inputs=("X", "Scale?", "Bias?"),
    outputs=("Y", "Mean", "Variance"),
    attrs=LN_ATTRS,
    infer=_infer_ln,
)
def layer_norm(xp, attrs, x, scale, bias):
    """Each row X[i] = X.reshape(rows, -1)[i] (dims from ``begin_norm_axis`` on, Paddle) is
    normalised: Y = (X - Mean) / sqrt(Variance + epsilon) * Scale + Bias, Mean and the biased
    Variance per row (shape (rows,)); Scale and Bias (optional) have the normalised dims' shape.

    dX = r * (s - mean(s) - xhat * mean(s * xhat)) per row with s = dY * Scale, r the inverse
    std; dScale = sum over rows of dY * xhat, dBias = sum over rows of dY (layer_norm_grad); Mean
    and Variance add their own terms when a loss reads them.

    >>> import numpy as np, tape, ops
    >>> y, mean, var = ops.layer_norm(tape.Variable(np.array([[1.0, 3.0]], np.float32)))
    >>> y.numpy().round(3), mean.numpy(), var.numpy()
    (array([[-1.,  1.]], dtype=float32), array([2.], dtype=float32), array([1.], dtype=float32))
    """
    _, rows, size = ln_split(x.shape, attrs)
    x, scale, bias = promote(x, scale, bias)
    x2 = x.reshape(rows, size)
    mean = x2.mean(axis=1)
    centered = x2 - mean[:, None]
    var = (centered * centered).mean(axis=1)
    centered *= (1.0 / xp.sqrt(var + attrs["epsilon"]))[:, None]
    if scale is not None:
        centered *= scale.reshape(size)
    if bias is not None:
        centered += bias.reshape(size)
    return centered.reshape(x.shape), mean, var


@layer_norm.gradient
def _(g):
    x, scale, bias = g.inputs
    _, mean, var = g.outputs
    gy, g_mean, g_var = g.gouts
    gx = gscale = gbias = None
    if gy is not None:
        gx, gscale, gbias = apply(layer_norm_grad, (x, scale, mean, var, gy), g.attrs)
        gscale = None if scale is None else shaped(gscale, scale.shape)
        gbias = None if bias is None else shaped(gbias, bias.shape)
    if g.needs(0) and (g_mean is not None or g_var is not None):
        begin, _, size = ln_split(x.shape, g.attrs)
        row_shape, _ = ln_shapes(x, begin)
        from_mean = None if g_mean is None else shaped(g_mean, row_shape) * (1.0 / size)
        from_var = (
            None
            if g_var is None
            else (x - shaped(mean, row_shape)) * shaped(g_var, row_shape) * (2.0 / size)
        )
        gx = add_terms(gx, from_mean, from_var)
    return gx, gscale, gbias
