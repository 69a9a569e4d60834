"""The normalisation gradient ops (batch_norm_grad, layer_norm_grad) and the helpers both
normalisations share.

The first gradients are fused kernels; the gradients of those are composed from registered ops by
one rule (``_grad_of_grad``), so derivatives of any order work.
"""

from __future__ import annotations

import math

from ops.infer import normalize_axis, promoted_float
from ops.reduce import reduce_sum, sum_to
from ops.registry import Attr, register
from ops.shape import reshape
from ops.xp import promote
from tape.errors import ShapeError
from tape.tape import apply

EPSILON = Attr("float", 1e-5, check=lambda v: v >= 0, rule=">= 0")
LAYOUT = Attr("str", "NCHW", choices=("NCHW", "NHWC"))
LN_ATTRS = {"begin_norm_axis": Attr("int", 1), "epsilon": EPSILON}


def bn_axes(shape, layout):
    """(reduced axes, channel axis, broadcast shape of a per-channel vector, values per channel)."""
    channel = len(shape) - 1 if layout == "NHWC" and len(shape) > 2 else 1
    axes = tuple(a for a in range(len(shape)) if a != channel)
    bshape = tuple(d if a == channel else 1 for a, d in enumerate(shape))
    return axes, channel, bshape, math.prod(shape[a] for a in axes)


def same_float(op_slots, x):
    """X and every given (slot, Variable) are floating point; returns their promoted dtype (the
    dtype of the normalised output and of the statistics)."""
    return promoted_float((("X", x), *op_slots))


def add_terms(*terms):
    """The sum of the terms that are not None (None if all are)."""
    total = None
    for term in terms:
        if term is not None:
            total = term if total is None else total + term
    return total


def rsum(v, axes):
    """sum of ``v`` over ``axes``, keeping them as 1s (one statistic per group, broadcastable)."""
    return apply(reduce_sum, (v,), {"axis": axes, "keepdim": True})


def shaped(v, shape):
    """``v`` reshaped (for broadcasting or back to a slot's shape); None stays None."""
    if v is None or tuple(v.shape) == tuple(shape):
        return v
    return apply(reshape, (v,), {"shape": tuple(shape)})


def ln_split(shape, attrs):
    """(begin axis, rows = prod(shape[:begin]), values per row = prod(shape[begin:]))."""
    begin = normalize_axis(None, attrs["begin_norm_axis"], len(shape), "begin_norm_axis")
    return begin, math.prod(shape[:begin]), math.prod(shape[begin:])


def check_affine(x, slot, var, begin, size):
    if var is not None and tuple(var.shape) not in (tuple(x.shape[begin:]), (size,)):
        raise ShapeError(
            None,
            f"{slot} must match the normalised dimensions",
            expected=f"{slot}.shape == {tuple(x.shape[begin:])} or ({size},) "
            f"(X.shape={x.shape}, begin_norm_axis={begin})",
            actual=f"{slot}.shape={var.shape}",
        )


def ln_shapes(x, begin):
    """Shapes broadcasting a per-row statistic and a per-value (Scale) vector against X."""
    rank = len(x.shape)
    return tuple(x.shape[:begin]) + (1,) * (rank - begin), (1,) * begin + tuple(x.shape[begin:])


def _infer_bn_grad(attrs, x, scale, saved_mean, inv_std, gy):
    dtype = same_float(
        (("Scale", scale), ("SavedMean", saved_mean), ("SavedVariance", inv_std), ("Y@GRAD", gy)), x
    )
    _, channel, _, _ = bn_axes(x.shape, attrs["data_layout"])
    for slot, var in (("Scale", scale), ("SavedMean", saved_mean), ("SavedVariance", inv_std)):
        if tuple(var.shape) != (x.shape[channel],):
            raise ShapeError(
                None,
                f"{slot} must hold one value per channel",
                expected=f"({x.shape[channel]},)",
                actual=str(var.shape),
            )
    if tuple(gy.shape) != tuple(x.shape):
        raise ShapeError(
            None, "Y@GRAD must have X's shape", expected=str(x.shape), actual=str(gy.shape)
        )
    vector = ((x.shape[channel],), dtype)
    return (tuple(x.shape), dtype), vector, vector


@register(
    "batch_norm_grad",
    inputs=("X", "Scale", "SavedMean", "SavedVariance", "Y@GRAD"),
    outputs=("X@GRAD", "Scale@GRAD", "Bias@GRAD"),
    attrs={"is_test": Attr("bool", False), "data_layout": LAYOUT},
    infer=_infer_bn_grad,
)
def batch_norm_grad(xp, attrs, x, scale, mu, inv_std, gy):
    """With xhat = (X - SavedMean) * r (r = SavedVariance, the inverse std) over the m values of
    each channel: Bias@GRAD = sum(dY), Scale@GRAD = sum(dY * xhat), and X@GRAD =
    Scale * r / m * (m * dY - sum(dY) - xhat * sum(dY * xhat)) in training, dY * Scale * r with
    is_test (fixed statistics). Its own gradient is composed from registered ops
    (``_grad_of_grad``).
    """
    axes, _, bshape, count = bn_axes(x.shape, attrs["data_layout"])
    x, scale, mu, inv_std, gy = promote(x, scale, mu, inv_std, gy)
    xhat = (x - mu.reshape(bshape)) * inv_std.reshape(bshape)
    gbias = gy.sum(axis=axes)
    gscale = (gy * xhat).sum(axis=axes)
    if attrs["is_test"]:
        return gy * (scale * inv_std).reshape(bshape), gscale, gbias
    xhat *= gscale.reshape(bshape)
    gx = gy * float(count) - gbias.reshape(bshape)
    gx -= xhat
    gx *= (scale * inv_std * (1.0 / count)).reshape(bshape)
    return gx, gscale, gbias


@batch_norm_grad.gradient
def _(g):
    x, scale, mu, inv_std, gy = g.inputs
    axes, _, bshape, count = bn_axes(x.shape, g.attrs["data_layout"])
    gg_x, gg_scale, gg_bias = g.gouts
    upstream = (gg_x, shaped(gg_scale, bshape), shaped(gg_bias, bshape))
    gx, gscale_full, gmu, ginv_std, ggy = _grad_of_grad(
        x,
        shaped(scale, bshape),
        shaped(mu, bshape),
        shaped(inv_std, bshape),
        gy,
        upstream,
        axes,
        count,
        not g.attrs["is_test"],
    )
    gscale = None if gscale_full is None else shaped(sum_to(gscale_full, bshape), scale.shape)
    return gx, gscale, shaped(gmu, mu.shape), shaped(ginv_std, inv_std.shape), ggy


def _grad_of_grad(x, scale, mu, inv_std, gy, upstream, axes, count, train):
    """Gradients of <GX, dX> + <GScale, dScale> + <GBias, dBias> for the normalisation gradient
    dX = r * s - r / m * sum(s) - r^3 / m * u * sum(s * u) (s = dY * Scale, u = X - mu; training)
    or r * s (fixed statistics), dScale = sum_to(dY * u * r), dBias = sum_to(dY), with respect to
    X, Scale (unreduced), mu, r and dY. Scale, mu, r and the upstream GScale/GBias come shaped to
    broadcast against X; sums run over ``axes`` (the m values of one statistic).

    Returns (dX, dScale before reduction, dmu, dr, ddY); entries are None where zero.
    """
    g_x, g_scale, g_bias = upstream
    u = x - mu
    s = gy if scale is None else gy * scale
    inner = g_x_sum = g_x_u = None  # inner = d<GX, dX>/ds
    if g_x is not None:
        inner = inv_std * g_x
        if train:
            g_x_sum, g_x_u = rsum(g_x, axes), rsum(g_x * u, axes)
            inner = inner - (inv_std * (1.0 / count)) * (g_x_sum + inv_std * inv_std * g_x_u * u)
    scaled_up = None if g_scale is None else g_scale * inv_std
    d_gy = add_terms(
        inner if scale is None or inner is None else inner * scale,
        None if scaled_up is None else scaled_up * u,
        g_bias,
    )
    d_scale = None if inner is None or scale is None else inner * gy
    d_u = None if scaled_up is None else scaled_up * gy
    d_r = None
    if g_x is not None:
        d_r = rsum(g_x * s, axes)
        if train:
            s_u = rsum(s * u, axes)
            r3_m = inv_std * inv_std * inv_std * (1.0 / count)
            d_u = add_terms(d_u, -(r3_m * (g_x * s_u + g_x_u * s)))
            d_r = d_r - (g_x_sum * rsum(s, axes) + inv_std * inv_std * g_x_u * s_u * 3.0) * (
                1.0 / count
            )
    if g_scale is not None:
        d_r = add_terms(d_r, rsum(g_scale * u * gy, axes))
    d_mu = None if d_u is None else -rsum(d_u, axes)
    return d_u, d_scale, d_mu, d_r, d_gy


def _infer_ln_grad(attrs, x, scale, mean, var, gy):
    dtype = same_float((("Scale", scale), ("Mean", mean), ("Variance", var), ("Y@GRAD", gy)), x)
    begin, rows, size = ln_split(x.shape, attrs)
    check_affine(x, "Scale", scale, begin, size)
    for slot, v in (("Mean", mean), ("Variance", var)):
        if tuple(v.shape) != (rows,):
            raise ShapeError(
                None,
                f"{slot} must hold one value per row",
                expected=f"({rows},)",
                actual=str(v.shape),
            )
    if tuple(gy.shape) != tuple(x.shape):
        raise ShapeError(
            None, "Y@GRAD must have X's shape", expected=str(x.shape), actual=str(gy.shape)
        )
    affine = (tuple(x.shape[begin:]), dtype)
    return (tuple(x.shape), dtype), affine, affine


@register(
    "layer_norm_grad",
    inputs=("X", "Scale?", "Mean", "Variance", "Y@GRAD"),
    outputs=("X@GRAD", "Scale@GRAD", "Bias@GRAD"),
    attrs=LN_ATTRS,
    infer=_infer_ln_grad,
)
def layer_norm_grad(xp, attrs, x, scale, mean, var, gy):
    """Per row, with r = 1/sqrt(Variance + epsilon), xhat = (X - Mean) * r, s = dY * Scale:
    X@GRAD = r * (s - mean(s) - xhat * mean(s * xhat)); Scale@GRAD = sum over rows of dY * xhat
    and Bias@GRAD = sum over rows of dY (shaped like the normalised dims, computed even when the
    forward had no Scale or Bias). Its own gradient is composed from registered ops.
    """
    begin, rows, size = ln_split(x.shape, attrs)
    x, scale, mean, var, gy = promote(x, scale, mean, var, gy)
    inv_std = (1.0 / xp.sqrt(var + attrs["epsilon"]))[:, None]
    xhat = (x.reshape(rows, size) - mean[:, None]) * inv_std
    g2 = gy.reshape(rows, size)
    gscale, gbias = (g2 * xhat).sum(axis=0), g2.sum(axis=0)
    s = g2 if scale is None else g2 * scale.reshape(size)
    gx = s - s.mean(axis=1, keepdims=True)
    gx -= xhat * (s * xhat).mean(axis=1, keepdims=True)
    gx *= inv_std
    affine = x.shape[begin:]
    return gx.reshape(x.shape), gscale.reshape(affine), gbias.reshape(affine)


@layer_norm_grad.gradient
def _(g):
    x, scale, mean, var, gy = g.inputs
    begin, _, size = ln_split(x.shape, g.attrs)
    row_shape, value_shape = ln_shapes(x, begin)
    gg_x, gg_scale, gg_bias = g.gouts
    inv_std = (shaped(var, row_shape) + g.attrs["epsilon"]) ** -0.5
    axes = tuple(range(begin, len(x.shape)))
    gx, gscale_full, gmu, ginv_std, ggy = _grad_of_grad(
        x,
        shaped(scale, value_shape),
        shaped(mean, row_shape),
        inv_std,
        gy,
        (gg_x, shaped(gg_scale, value_shape), shaped(gg_bias, value_shape)),
        axes,
        size,
        True,
    )
    gscale = None
    if scale is not None and gscale_full is not None:
        gscale = shaped(sum_to(gscale_full, value_shape), scale.shape)
    gvar = None if ginv_std is None else shaped(ginv_std * inv_std**3 * -0.5, var.shape)
    return gx, gscale, shaped(gmu, mean.shape), gvar, ggy
