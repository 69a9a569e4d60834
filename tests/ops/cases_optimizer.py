"""Cases for the optimizer update ops: one step of each rule against its published formula."""

import numpy as np

from tape.testing import OpCase


def _value(v):
    return lambda rng, dtype: np.asarray([v], dtype)


def _positive(shape, low=0.1, high=2.0):
    return lambda rng, dtype: rng.uniform(low, high, shape).astype(dtype)


def _momentum(param, grad, velocity, lr, mu, use_nesterov=False):
    velocity = mu * velocity + grad
    step = grad + mu * velocity if use_nesterov else velocity
    return param - lr[0] * step, velocity


def _adam(param, grad, m1, m2, lr, b1p, b2p, beta1, beta2, epsilon, coeff=0.0):
    param = param * (1 - lr[0] * coeff)
    m1 = beta1 * m1 + (1 - beta1) * grad
    m2 = beta2 * m2 + (1 - beta2) * grad**2
    denom = np.sqrt(m2) / np.sqrt(1 - b2p[0]) + epsilon
    return param - lr[0] / (1 - b1p[0]) * m1 / denom, m1, m2, b1p * beta1, b2p * beta2


def _rmsprop(param, grad, ms, moment, mg, lr, decay, epsilon, momentum=0.0, centered=False):
    ms = decay * ms + (1 - decay) * grad**2
    if centered:
        mg = decay * mg + (1 - decay) * grad
        avg = np.sqrt(ms - mg**2) + epsilon
    else:
        avg = np.sqrt(ms) + epsilon
    if moment is not None:
        moment = momentum * moment + grad / avg
        param = param - lr[0] * moment
    else:
        param = param - lr[0] * grad / avg
    return (param, ms, [] if moment is None else [moment], [] if mg is None else [mg])


def _adagrad(param, grad, moment, lr, epsilon):
    moment = moment + grad**2
    return param - lr[0] * grad / (np.sqrt(moment) + epsilon), moment


_P = (3, 4)
_ADAM_INPUTS = {
    "Param": _P,
    "Grad": _P,
    "Moment1": _P,
    "Moment2": _positive(_P),
    "LearningRate": _value(0.01),
    "Beta1Pow": _value(0.9**3),
    "Beta2Pow": _value(0.999**3),
}
_ADAM_ATTRS = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}

CASES = [
    OpCase(
        "momentum",
        {"Param": _P, "Grad": _P, "Velocity": _P, "LearningRate": _value(0.1)},
        {"mu": 0.9},
        reference=_momentum,
        grad=False,
    ),
    OpCase(
        "momentum",
        {"Param": _P, "Grad": _P, "Velocity": _P, "LearningRate": _value(0.1)},
        {"mu": 0.8, "use_nesterov": True},
        reference=_momentum,
        grad=False,
        name="nesterov",
    ),
    OpCase("adam", _ADAM_INPUTS, _ADAM_ATTRS, reference=_adam, grad=False),
    OpCase("adamw", _ADAM_INPUTS, {**_ADAM_ATTRS, "coeff": 0.1}, reference=_adam, grad=False),
    OpCase(
        "rmsprop",
        {"Param": _P, "Grad": _P, "MeanSquare": _positive(_P), "LearningRate": _value(0.01)},
        {"decay": 0.9, "epsilon": 1e-6},
        reference=_rmsprop,
        grad=False,
    ),
    OpCase(
        "rmsprop",
        {
            "Param": _P,
            "Grad": _P,
            "MeanSquare": _positive(_P, 1.0, 2.0),
            "Moment": _P,
            "MeanGrad": _positive(_P, -0.5, 0.5),
            "LearningRate": _value(0.01),
        },
        {"decay": 0.9, "epsilon": 1e-6, "momentum": 0.5, "centered": True},
        reference=_rmsprop,
        grad=False,
        name="centered_momentum",
    ),
    OpCase(
        "adam",
        {**_ADAM_INPUTS, "Param": (), "Grad": (), "Moment1": (), "Moment2": _positive(())},
        _ADAM_ATTRS,
        reference=_adam,
        grad=False,
        name="0d",
    ),
    OpCase(
        "rmsprop",
        {
            "Param": (),
            "Grad": (),
            "MeanSquare": _positive((), 1.0, 2.0),
            "MeanGrad": _positive((), -0.5, 0.5),
            "LearningRate": _value(0.01),
        },
        {"decay": 0.99, "epsilon": 1e-8, "centered": True},
        reference=_rmsprop,
        grad=False,
        name="0d_centered",
    ),
    OpCase(
        "adagrad",
        {"Param": (), "Grad": (), "Moment": _positive(()), "LearningRate": _value(0.1)},
        {"epsilon": 1e-10},
        reference=_adagrad,
        grad=False,
        name="0d",
    ),
    OpCase(
        "adagrad",
        {"Param": _P, "Grad": _P, "Moment": _positive(_P), "LearningRate": _value(0.1)},
        {"epsilon": 1e-10},
        reference=_adagrad,
        grad=False,
    ),
]
