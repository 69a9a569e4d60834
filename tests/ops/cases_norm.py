"""Cases for batch_norm, layer_norm and their gradient ops, against per-channel / per-row loops."""

import math

import numpy as np

from tape.testing import OpCase


def positive(shape):
    return lambda rng, dtype: rng.uniform(0.5, 2.0, shape).astype(dtype)


def _channel_axis(x, data_layout):
    return x.ndim - 1 if data_layout == "NHWC" and x.ndim > 2 else 1


def _stats(values):
    mean = sum(values) / len(values)
    return mean, sum((v - mean) ** 2 for v in values) / len(values)


def batch_norm_reference(
    x, scale, bias, mean, variance, epsilon=1e-5, momentum=0.1, is_test=False, data_layout="NCHW"
):
    axis = _channel_axis(x, data_layout)
    y = np.zeros(x.shape)
    outs = [np.zeros(scale.shape) for _ in range(4)]
    for c in range(x.shape[axis]):
        values = list(np.take(x, c, axis=axis).ravel())
        mu, var = (mean[c], variance[c]) if is_test else _stats(values)
        inv_std = 1 / math.sqrt(var + epsilon)
        index = (slice(None),) * axis + (c,)
        y[index] = (np.take(x, c, axis=axis) - mu) * inv_std * scale[c] + bias[c]
        unbiased = var * len(values) / (len(values) - 1) if not is_test else var
        keep = 1.0 if is_test else 1 - momentum
        outs[0][c] = keep * mean[c] + (1 - keep) * mu
        outs[1][c] = keep * variance[c] + (1 - keep) * unbiased
        outs[2][c], outs[3][c] = mu, inv_std
    return (y, *outs)


def batch_norm_grad_reference(x, scale, mu, inv_std, gy, is_test=False, data_layout="NCHW"):
    axis = _channel_axis(x, data_layout)
    gx, gscale, gbias = np.zeros(x.shape), np.zeros(scale.shape), np.zeros(scale.shape)
    for c in range(x.shape[axis]):
        index = (slice(None),) * axis + (c,)
        xhat = (x[index] - mu[c]) * inv_std[c]
        g, m = gy[index], xhat.size
        gbias[c], gscale[c] = g.sum(), (g * xhat).sum()
        if is_test:
            gx[index] = g * scale[c] * inv_std[c]
        else:
            gx[index] = scale[c] * inv_std[c] / m * (m * g - gbias[c] - xhat * gscale[c])
    return gx, gscale, gbias


def layer_norm_reference(x, scale=None, bias=None, begin_norm_axis=1, epsilon=1e-5):
    rows = x.reshape(math.prod(x.shape[:begin_norm_axis]), -1)
    y, means, variances = np.zeros(rows.shape), [], []
    for i, row in enumerate(rows):
        mean, var = _stats(list(row))
        y[i] = (row - mean) / math.sqrt(var + epsilon)
        if scale is not None:
            y[i] *= scale.ravel()
        if bias is not None:
            y[i] += bias.ravel()
        means.append(mean)
        variances.append(var)
    return y.reshape(x.shape), np.array(means), np.array(variances)


def layer_norm_grad_reference(x, scale, mean, var, gy, begin_norm_axis=1, epsilon=1e-5):
    affine = x.shape[begin_norm_axis:]
    rows, grows = x.reshape(len(mean), -1), gy.reshape(len(mean), -1)
    gx, gscale, gbias = np.zeros(rows.shape), np.zeros(rows.shape[1]), np.zeros(rows.shape[1])
    for i, (row, g) in enumerate(zip(rows, grows, strict=True)):
        inv_std = 1 / math.sqrt(var[i] + epsilon)
        xhat = (row - mean[i]) * inv_std
        gscale += g * xhat
        gbias += g
        s = g if scale is None else g * scale.ravel()
        gx[i] = inv_std * (s - s.mean() - xhat * (s * xhat).mean())
    return gx.reshape(x.shape), gscale.reshape(affine), gbias.reshape(affine)


def _bn_inputs(shape, channels):
    return {
        "X": shape,
        "Scale": (channels,),
        "Bias": (channels,),
        "Mean": (channels,),
        "Variance": positive((channels,)),
    }


def _bn_grad_inputs(shape, channels):
    return {
        "X": shape,
        "Scale": (channels,),
        "SavedMean": (channels,),
        "SavedVariance": positive((channels,)),
        "Y@GRAD": shape,
    }


# (name, X shape, channels, attrs)
BN_GEOMETRIES = [
    ("2d", (4, 3), 3, {}),
    ("nchw", (2, 3, 2, 2), 3, {"momentum": 0.3}),
    ("nhwc", (2, 2, 2, 3), 3, {"data_layout": "NHWC", "epsilon": 1e-3}),
    ("ncl_size1", (2, 1, 3), 1, {}),
    ("eval", (2, 3, 2, 2), 3, {"is_test": True}),
    ("eval_2d", (3, 2), 2, {"is_test": True}),
]

# (name, X shape, Scale shape or None, Bias shape or None, attrs)
LN_GEOMETRIES = [
    ("2d", (3, 4), (4,), (4,), {}),
    ("3d_flat_scale", (2, 3, 4), (12,), (3, 4), {"begin_norm_axis": 1}),
    ("last_axis", (2, 3, 4), (4,), None, {"begin_norm_axis": 2, "epsilon": 1e-3}),
    ("plain", (4, 5), None, None, {}),
    ("size1_rows", (3, 1), (1,), (1,), {}),
]


def _cases():
    cases = []
    for name, shape, channels, attrs in BN_GEOMETRIES:
        cases.append(
            OpCase(
                "batch_norm",
                _bn_inputs(shape, channels),
                attrs,
                reference=batch_norm_reference,
                double_grad=name in ("nchw", "eval", "ncl_size1"),
                name=name,
            )
        )
        grad_attrs = {k: v for k, v in attrs.items() if k in ("is_test", "data_layout")}
        cases.append(
            OpCase(
                "batch_norm_grad",
                _bn_grad_inputs(shape, channels),
                grad_attrs,
                reference=batch_norm_grad_reference,
                double_grad=name in ("2d", "nhwc", "eval"),
                name=name,
            )
        )
    for name, shape, scale, bias, attrs in LN_GEOMETRIES:
        inputs = {"X": shape, "Scale": scale, "Bias": bias}
        inputs = {k: v for k, v in inputs.items() if v is not None}
        cases.append(
            OpCase(
                "layer_norm",
                inputs,
                attrs,
                reference=layer_norm_reference,
                double_grad=name in ("2d", "3d_flat_scale", "plain"),
                name=name,
            )
        )
        begin = attrs.get("begin_norm_axis", 1)
        rows = math.prod(shape[:begin])
        grad_inputs = {
            "X": shape,
            "Scale": scale,
            "Mean": (rows,),
            "Variance": positive((rows,)),
            "Y@GRAD": shape,
        }
        grad_inputs = {k: v for k, v in grad_inputs.items() if v is not None}
        cases.append(
            OpCase(
                "layer_norm_grad",
                grad_inputs,
                attrs,
                reference=layer_norm_grad_reference,
                double_grad=name in ("2d", "last_axis", "plain"),
                name=name,
            )
        )
    return cases


CASES = _cases()
