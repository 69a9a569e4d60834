"""Cases for the random ops, checked statistically: a few thousand samples must show the right
range, mean, spread, keep-rate and scaling. Tolerances are about 6 standard errors, so an
unseeded run fails by chance less than once in a hundred million.

Dropout's gradient cannot be checked by finite differences through a freshly drawn mask; with a
non-zero ``seed`` attribute the mask repeats, so that case is gradient-checked like any op (the
unseeded gradient is tested in test_random_ops.py).
"""

import numpy as np

from tape.testing import OpCase

_SAMPLES = (40, 100)  # 4000 draws


def _standard_error(std):
    return 6 * std / np.sqrt(np.prod(_SAMPLES))


def _check_uniform(outputs, inputs, attrs):
    (out,) = outputs
    low, high = attrs.get("min", -1.0), attrs.get("max", 1.0)
    assert out.dtype == np.dtype(attrs.get("dtype", "float32"))
    assert out.shape == tuple(attrs["shape"])
    sample = out.astype(np.float64)
    assert low <= sample.min() and sample.max() <= high, (sample.min(), sample.max())
    std = (high - low) / np.sqrt(12)
    assert abs(sample.mean() - (low + high) / 2) < _standard_error(std)
    # the sample std of a uniform has relative standard error sqrt(0.8 / (4 n))
    assert abs(sample.std() - std) < 6 * std * np.sqrt(0.2 / sample.size)
    if out.dtype != np.float16:  # float16 has too few values in range for distinct draws
        assert len(np.unique(sample)) > 0.99 * sample.size, "draws repeat"


def _check_gaussian(outputs, inputs, attrs):
    (out,) = outputs
    mean, std = attrs.get("mean", 0.0), attrs.get("std", 1.0)
    assert out.dtype == np.dtype(attrs.get("dtype", "float32"))
    assert out.shape == tuple(attrs["shape"])
    sample = out.astype(np.float64)
    assert abs(sample.mean() - mean) < _standard_error(std)
    assert abs(sample.std() - std) < 6 * std / np.sqrt(2 * sample.size)
    # a normal puts 68.3% of its mass within one std of the mean
    inside = np.mean(np.abs(sample - mean) < std)
    assert abs(inside - 0.6827) < 6 * np.sqrt(0.6827 * 0.3173 / sample.size)


def _check_dropout(outputs, inputs, attrs):
    out, mask = outputs
    (x,) = inputs
    p = attrs.get("dropout_prob", 0.5)
    upscale = attrs.get("mode", "upscale_in_train") == "upscale_in_train"
    assert out.dtype == x.dtype and mask.dtype == x.dtype
    if attrs.get("is_test", False):
        factor = 1.0 if upscale else 1.0 - p
        np.testing.assert_allclose(out, x * factor, rtol=1e-6)
        np.testing.assert_allclose(mask, np.full(x.shape, factor), rtol=1e-6)
        return
    scale = 1.0 / (1.0 - p) if upscale else 1.0
    kept = mask != 0
    np.testing.assert_allclose(mask[kept], scale, rtol=1e-6)
    np.testing.assert_allclose(out, np.where(kept, x * scale, 0.0), rtol=1e-6, atol=1e-30)
    keep_rate = kept.mean()
    assert abs(keep_rate - (1 - p)) <= 6 * np.sqrt(p * (1 - p) / kept.size), keep_rate


def _uniform(attrs, name, **options):
    return OpCase(
        "uniform_random",
        {},
        {"shape": list(_SAMPLES), **attrs},
        check=_check_uniform,
        grad=False,
        name=name,
        **options,
    )


def _gaussian(attrs, name, **options):
    return OpCase(
        "gaussian_random",
        {},
        {"shape": list(_SAMPLES), **attrs},
        check=_check_gaussian,
        grad=False,
        name=name,
        **options,
    )


def _dropout(attrs, name, shape=_SAMPLES, **options):
    options.setdefault("grad", False)
    return OpCase(
        "dropout",
        {"X": lambda rng, dt: rng.uniform(0.5, 2.0, shape).astype(dt)},
        attrs,
        check=_check_dropout,
        name=name,
        **options,
    )


CASES = [
    _uniform({}, "default"),
    _uniform({"min": 2.0, "max": 5.0, "dtype": "float64"}, "range_float64"),
    _uniform({"min": -0.5, "max": 0.5, "dtype": "float16"}, "float16"),
    _uniform({"seed": 11}, "private_seed"),
    _gaussian({}, "default"),
    _gaussian({"mean": -3.0, "std": 0.25, "dtype": "float64"}, "mean_std_float64"),
    _gaussian({"std": 2.0, "dtype": "float16"}, "float16"),
    _gaussian({"seed": 5}, "private_seed"),
    _dropout({}, "default"),
    _dropout({"dropout_prob": 0.2}, "p0.2"),
    _dropout({"dropout_prob": 0.7, "mode": "downgrade_in_infer"}, "downgrade"),
    _dropout({"dropout_prob": 0.0}, "p0"),
    _dropout({"is_test": True}, "is_test"),
    _dropout(
        {"is_test": True, "mode": "downgrade_in_infer", "dropout_prob": 0.3}, "is_test_downgrade"
    ),
    _dropout({"dropout_prob": 0.4, "seed": 3}, "seeded_grad", grad=True, double_grad=True),
]
