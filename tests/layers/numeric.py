"""Finite-difference checks for layers: gradients of parameters and inputs in float64."""

import numpy as np

import tape


def check_layer_gradients(layer, forward, inputs, eps=1e-6, rtol=1e-5, atol=1e-8, seed=0):
    """d<w, forward(*inputs)>/d(param and input) against central differences, in float64.

    ``forward`` maps input Variables to one Variable (or a tuple, whose parts are all weighted);
    ``inputs`` are float64 arrays (integer arrays are passed through without a gradient). Each
    parameter is perturbed in place (elementwise when small, along random directions when
    large), so the layer must hold float64 parameters.
    """
    tape.reset_global_tape()
    variables = [tape.Variable(a, requires_grad=a.dtype.kind == "f") for a in inputs]
    outputs = _as_tuple(forward(*variables))
    rng = np.random.default_rng(seed)
    weights = [rng.standard_normal(o.shape) for o in outputs]
    terms = [(o * tape.Variable(w)).sum() for o, w in zip(outputs, weights, strict=True)]
    loss = sum(terms[1:], start=terms[0])
    params = layer.params()
    float_inputs = [v for v in variables if v.requires_grad]
    analytic = tape.grad(loss, params + float_inputs)

    def objective():
        with tape.no_grad():
            outs = _as_tuple(forward(*[tape.Variable(a) for a in inputs]))
            return sum(float(np.sum(o.numpy() * w)) for o, w in zip(outs, weights, strict=True))

    names = [name for name, _ in layer.named_params()] + [
        f"input {i}" for i, a in enumerate(inputs) if a.dtype.kind == "f"
    ]
    # (perturbed in place: backward already ran, and the objective records nothing)
    buffers = [p._value for p in params] + [a for a in inputs if a.dtype.kind == "f"]
    for name, buffer, got in zip(names, buffers, analytic, strict=True):
        assert buffer.dtype == np.float64, f"{name}: check gradients in float64"
        got = np.zeros(buffer.shape) if got is None else got.numpy()
        for direction in _directions(buffer.shape, rng):
            buffer += eps * direction
            plus = objective()
            buffer -= 2 * eps * direction
            minus = objective()
            buffer += eps * direction
            numeric = (plus - minus) / (2 * eps)
            np.testing.assert_allclose(
                np.sum(got * direction),
                numeric,
                rtol=rtol,
                atol=atol,
                err_msg=f"gradient of {name} along a direction",
            )


def _directions(shape, rng):
    size = int(np.prod(shape))
    if size <= 24:
        for i in range(size):
            unit = np.zeros(size)
            unit[i] = 1.0
            yield unit.reshape(shape)
    else:
        for _ in range(4):
            yield rng.standard_normal(shape)


def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)
