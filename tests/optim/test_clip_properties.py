"""Properties of gradient clipping on arbitrary shapes, including size-0 and size-1 axes."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

import optim
import tape

_FLOATS = st.floats(-1e3, 1e3, allow_nan=False, width=32)
_GRADS = st.lists(
    arrays(
        np.float32, array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4), elements=_FLOATS
    ),
    min_size=1,
    max_size=4,
)


def pairs_of(grads):
    return [(tape.Variable(np.zeros_like(g)), tape.Variable(g)) for g in grads]


@settings(max_examples=60, deadline=None)
@given(_GRADS, st.floats(0.01, 100.0))
def test_global_norm_clipping_bounds_the_joint_norm_and_keeps_direction(grads, max_norm):
    clipped = [g.numpy() for _, g in optim.ClipGradByGlobalNorm(max_norm)(pairs_of(grads))]
    total = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads))
    coef = min(1.0, max_norm / (total + 1e-6))
    for g, c in zip(grads, clipped, strict=True):
        assert c.dtype == np.float32 and c.shape == g.shape
        np.testing.assert_allclose(c, g * coef, rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(_GRADS, st.floats(0.01, 100.0))
def test_norm_clipping_bounds_each_tensor(grads, max_norm):
    clipped = [g.numpy() for _, g in optim.ClipGradByNorm(max_norm)(pairs_of(grads))]
    for g, c in zip(grads, clipped, strict=True):
        norm = np.sqrt(np.sum(g.astype(np.float64) ** 2))
        assert c.dtype == np.float32 and c.shape == g.shape
        np.testing.assert_allclose(c, g * (max_norm / max(norm, max_norm)), rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(_GRADS, _FLOATS, _FLOATS)
def test_value_clipping_is_elementwise_clip(grads, a, b):
    low, high = min(a, b), max(a, b)
    clipped = [g.numpy() for _, g in optim.ClipGradByValue(low, high)(pairs_of(grads))]
    for g, c in zip(grads, clipped, strict=True):
        np.testing.assert_array_equal(c, np.clip(g, np.float32(low), np.float32(high)))


@settings(max_examples=30, deadline=None)
@given(
    arrays(
        np.float32,
        array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
        elements=st.floats(-10, 10, width=32),
    )
)
def test_every_optimizer_updates_any_shape_without_writing_the_old_buffer(value):
    """An update is a new buffer committed to the parameter: a buffer someone still holds (a
    retained graph, the user) never changes under them."""
    for make in (
        lambda: optim.SGD(lr=0.1, momentum=0.9),
        optim.Adam,
        optim.AdamW,
        lambda: optim.RMSProp(centered=True, momentum=0.5),
        optim.Adagrad,
    ):
        param = tape.Variable(value.copy(), requires_grad=True)
        buffer = param._value
        tape.reset_global_tape()
        tape.backward((param * param).sum())
        make()([param])
        np.testing.assert_array_equal(buffer, value)
        assert param.shape == value.shape
        assert param.dtype == np.float32 and np.all(np.isfinite(param.numpy()))
