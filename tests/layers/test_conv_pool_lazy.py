"""A model through every new convolution, pooling and resampling layer trains the same in lazy
mode (scheduled plans) as in eager mode: the multi-output ops (indices) and their gradient ops
record, prune and run like any other."""

import numpy as np

import layers
import ops
import tape


def _model():
    tape.seed(0)
    return [
        layers.Conv1D(2, 4, 3, padding=1, dtype="float64"),
        layers.MaxPool1D(2, return_indices=True),
        layers.MaxUnpool1D(2),
        layers.ConvTranspose1D(4, 2, 2, stride=2, dtype="float64"),
        layers.Upsample(scale_factor=1.5, mode="linear"),
        layers.AdaptiveMaxPool1D(3),
    ]


def _step(model, x0):
    conv, pool, unpool, up, resize, adaptive = model
    tape.reset_global_tape()
    x = tape.Variable(x0, requires_grad=True)
    h = unpool(*pool(conv(x)))
    h = resize(up(h))
    h = adaptive(h) + ops.adaptive_avg_pool1d(h, output_size=[3])
    loss = ops.mean(h * h)
    tape.backward(loss)
    params = conv.params() + up.params()
    grads = [p.grad().numpy().copy() for p in params]
    for p in params:
        p.clear_grad()
    return loss.numpy(), x.grad().numpy(), grads


def test_lazy_equals_eager():
    x0 = np.random.default_rng(0).standard_normal((3, 2, 8))
    model = _model()
    eager = _step(model, x0)
    with tape.lazy():
        lazy = _step(model, x0)
    np.testing.assert_allclose(lazy[0], eager[0], rtol=1e-12)
    np.testing.assert_allclose(lazy[1], eager[1], rtol=1e-12)
    for a, b in zip(lazy[2], eager[2], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
