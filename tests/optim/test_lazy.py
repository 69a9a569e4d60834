"""Optimizer steps recorded in lazy mode give the eager results (updates are pending side
effects that run with the next request)."""

import numpy as np
import pytest

import optim
import tape
from tests.optim.problem import coefficients, initial_values, tape_loss

pytestmark = pytest.mark.usefixtures("lazy_tier")  # both lazy tiers

CONFIGS = {
    "sgd": lambda: optim.SGD(lr=0.05, weight_decay=optim.L1Decay(0.01)),
    "momentum_clip_value": lambda: optim.Momentum(
        lr=0.02, nesterov=True, grad_clip=optim.ClipGradByValue(-0.5, 0.5)
    ),
    "adam_global_norm": lambda: optim.Adam(
        lr=0.05, weight_decay=0.1, grad_clip=optim.ClipGradByGlobalNorm(1.0)
    ),
    "adamw_scheduled": lambda: optim.AdamW(lr=optim.lr_scheduler.StepDecay(0.05, 3, 0.5)),
    "rmsprop_norm": lambda: optim.RMSProp(
        lr=0.01, momentum=0.5, centered=True, grad_clip=optim.ClipGradByNorm(0.5)
    ),
    "adagrad": lambda: optim.Adagrad(lr=0.1, lr_decay=0.1),
}


def train(make, lazy, steps=12):
    coeffs = coefficients()
    params = [tape.Variable(v.astype(np.float32), requires_grad=True) for v in initial_values()]
    opt = make()
    with tape.lazy(enabled=lazy):
        for _ in range(steps):
            tape.reset_global_tape()
            tape.backward(tape_loss(params, coeffs))
            opt(params)
            if opt.scheduler is not None:
                opt.scheduler.step()
        values = [p.numpy().copy() for p in params]
    return values, opt.state_dict()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_lazy_training_equals_eager(name):
    eager, eager_state = train(CONFIGS[name], lazy=False)
    lazy, lazy_state = train(CONFIGS[name], lazy=True)
    for i, (e, z) in enumerate(zip(eager, lazy, strict=True)):
        np.testing.assert_allclose(z, e, rtol=1e-6, atol=1e-7, err_msg=f"parameter {i}")
    for key, entry in eager_state["state"].items():
        for slot, value in entry.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_allclose(
                    lazy_state["state"][key][slot],
                    value,
                    rtol=1e-6,
                    atol=1e-7,
                    err_msg=f"{key}.{slot}",
                )
