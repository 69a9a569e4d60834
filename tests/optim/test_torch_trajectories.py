"""Optimizers, clipping and schedules follow torch.optim's trajectories step by step."""

import numpy as np
import pytest

import optim
from tests.optim.problem import coefficients, initial_values, tape_loss

torch = pytest.importorskip("torch")

CONFIGS = {
    "sgd_nesterov_wd": (
        lambda: optim.SGD(lr=0.02, momentum=0.9, nesterov=True, weight_decay=0.01),
        lambda ps: torch.optim.SGD(ps, lr=0.02, momentum=0.9, nesterov=True, weight_decay=0.01),
    ),
    "adam_wd": (
        lambda: optim.Adam(lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
        lambda ps: torch.optim.Adam(ps, lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
    ),
    "adamw": (
        lambda: optim.AdamW(lr=0.05, weight_decay=0.1),
        lambda ps: torch.optim.AdamW(ps, lr=0.05, weight_decay=0.1),
    ),
    "rmsprop": (lambda: optim.RMSProp(lr=0.01), lambda ps: torch.optim.RMSprop(ps, lr=0.01)),
    "rmsprop_centered_momentum": (
        lambda: optim.RMSProp(
            lr=0.005, alpha=0.9, eps=1e-6, momentum=0.5, centered=True, weight_decay=0.05
        ),
        lambda ps: torch.optim.RMSprop(
            ps, lr=0.005, alpha=0.9, eps=1e-6, momentum=0.5, centered=True, weight_decay=0.05
        ),
    ),
    "adagrad": (
        lambda: optim.Adagrad(
            lr=0.1, lr_decay=0.05, initial_accumulator_value=0.5, weight_decay=0.02
        ),
        lambda ps: torch.optim.Adagrad(
            ps, lr=0.1, lr_decay=0.05, initial_accumulator_value=0.5, weight_decay=0.02
        ),
    ),
}


def torch_loss(params, coeffs):
    total = 0
    for p, (c, d, e) in zip(params, coeffs, strict=True):
        c, d, e = (torch.tensor(a, dtype=p.dtype) for a in (c, d, e))
        total = total + (c * p * p + d * p + e * torch.tanh(p)).sum()
    return total


def compare(ours, theirs, dtype, rtol, atol, steps=60, clip=None, torch_clip=None, schedules=None):
    import tape

    coeffs = coefficients()
    params = [tape.Variable(v.astype(dtype), requires_grad=True) for v in initial_values()]
    tparams = [torch.tensor(v.astype(dtype), requires_grad=True) for v in initial_values()]
    opt = ours()
    if clip is not None:
        opt.grad_clip = clip
    topt = theirs(tparams)
    schedule, tschedule = schedules(opt, topt) if schedules else (None, None)
    for t in range(steps):
        tape.reset_global_tape()
        tape.backward(tape_loss(params, coeffs))
        opt(params)
        topt.zero_grad()
        torch_loss(tparams, coeffs).backward()
        if torch_clip is not None:
            torch_clip(tparams)
        topt.step()
        if schedule is not None:
            assert opt.lr == pytest.approx(tschedule.get_last_lr()[0], rel=1e-12)
            schedule.step()
            tschedule.step()
        for i, (p, tp) in enumerate(zip(params, tparams, strict=True)):
            np.testing.assert_allclose(
                p.numpy(),
                tp.detach().numpy(),
                rtol=rtol,
                atol=atol,
                err_msg=f"parameter {i} after step {t + 1}",
            )


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_float64_trajectory_equals_torch(name):
    compare(*CONFIGS[name], np.float64, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_float32_trajectory_equals_torch(name):
    compare(*CONFIGS[name], np.float32, rtol=1e-5, atol=1e-6)


def test_global_norm_clipping_equals_clip_grad_norm():
    compare(
        *CONFIGS["adam_wd"],
        np.float64,
        rtol=1e-10,
        atol=1e-12,
        clip=optim.ClipGradByGlobalNorm(0.5),
        torch_clip=lambda ps: torch.nn.utils.clip_grad_norm_(ps, 0.5),
    )


def test_value_clipping_equals_clip_grad_value():
    compare(
        *CONFIGS["sgd_nesterov_wd"],
        np.float64,
        rtol=1e-10,
        atol=1e-12,
        clip=optim.ClipGradByValue(-0.25, 0.25),
        torch_clip=lambda ps: torch.nn.utils.clip_grad_value_(ps, 0.25),
    )


SCHEDULES = {
    "step": (
        lambda opt: optim.lr_scheduler.StepLR(opt, step_size=7, gamma=0.5),
        lambda topt: torch.optim.lr_scheduler.StepLR(topt, step_size=7, gamma=0.5),
    ),
    "exponential": (
        lambda opt: optim.lr_scheduler.ExponentialLR(opt, gamma=0.95),
        lambda topt: torch.optim.lr_scheduler.ExponentialLR(topt, gamma=0.95),
    ),
    "cosine": (
        lambda opt: optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20, eta_min=0.001),
        lambda topt: torch.optim.lr_scheduler.CosineAnnealingLR(topt, T_max=20, eta_min=0.001),
    ),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_scheduled_trajectory_equals_torch(name):
    ours, theirs = SCHEDULES[name]
    compare(
        *CONFIGS["adam_wd"],
        np.float64,
        rtol=1e-10,
        atol=1e-12,
        steps=50,
        schedules=lambda opt, topt: (ours(opt), theirs(topt)),
    )


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedule_rates_equal_torch_for_long_runs(name):
    """Rates past T_max too (cosine: torch's recursive form equals the closed form)."""
    ours, theirs = SCHEDULES[name]
    opt = optim.SGD(lr=0.1)
    topt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    schedule, tschedule = ours(opt), theirs(topt)
    for epoch in range(70):
        assert opt.lr == pytest.approx(tschedule.get_last_lr()[0], rel=1e-9, abs=1e-12), epoch
        schedule.step()
        topt.step()  # torch expects an optimizer step before each schedule step
        tschedule.step()
