"""Learning-rate schedules produce their closed-form sequences and drive optimizers."""

import math

import pytest

import optim
from optim import lr_scheduler
from tape.errors import AttrError


def rates(schedule, n):
    out = []
    for _ in range(n):
        out.append(schedule())
        schedule.step()
    return out


def test_step_decay():
    got = rates(lr_scheduler.StepDecay(0.5, step_size=3, gamma=0.1), 10)
    assert got == pytest.approx([0.5 * 0.1 ** (e // 3) for e in range(10)], rel=1e-12)


def test_exponential_decay():
    got = rates(lr_scheduler.ExponentialDecay(0.2, gamma=0.9), 60)
    assert got == pytest.approx([0.2 * 0.9**e for e in range(60)], rel=1e-12)


def test_cosine_annealing_reaches_eta_min_at_t_max_and_rises_after():
    got = rates(lr_scheduler.CosineAnnealing(0.1, T_max=10, eta_min=0.01), 21)
    expected = [0.01 + 0.09 * (1 + math.cos(math.pi * e / 10)) / 2 for e in range(21)]
    assert got == pytest.approx(expected, rel=1e-12)
    assert got[10] == pytest.approx(0.01) and got[20] == pytest.approx(0.1)


def test_linear_warmup_then_constant():
    got = rates(lr_scheduler.LinearWarmup(0.3, warmup_steps=4, start_lr=0.1, end_lr=0.5), 7)
    assert got == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.3, 0.3, 0.3], rel=1e-12)


def test_linear_warmup_then_wrapped_schedule_from_its_epoch_zero():
    inner = lr_scheduler.ExponentialDecay(1.0, gamma=0.5)
    got = rates(lr_scheduler.LinearWarmup(inner, warmup_steps=2, start_lr=0.0, end_lr=1.0), 6)
    assert got == pytest.approx([0.0, 0.5, 1.0, 0.5, 0.25, 0.125], rel=1e-12)


def test_step_to_an_explicit_epoch():
    schedule = lr_scheduler.StepDecay(1.0, step_size=2, gamma=0.5)
    schedule.step(5)
    assert schedule.last_epoch == 5 and schedule() == pytest.approx(0.25)


def test_optimizer_reads_the_schedule_and_a_schedule_can_take_the_optimizer():
    opt = optim.SGD(lr=0.4)
    schedule = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)  # PyTorch's form
    assert opt.scheduler is schedule and opt.lr == 0.4
    schedule.step()
    assert opt.lr == pytest.approx(0.2)


def test_warmup_can_wrap_an_optimizers_schedule():
    opt = optim.SGD(lr=lr_scheduler.ExponentialDecay(1.0, gamma=0.5))
    warm = lr_scheduler.LinearWarmup(opt, warmup_steps=2, start_lr=0.0, end_lr=1.0)
    assert opt.scheduler is warm
    assert rates(warm, 4) == pytest.approx([0.0, 0.5, 1.0, 0.5])


def test_schedule_state_round_trips():
    inner = lr_scheduler.CosineAnnealing(0.1, T_max=8)
    warm = lr_scheduler.LinearWarmup(inner, warmup_steps=3, start_lr=0.0, end_lr=0.1)
    rates(warm, 6)
    copy = lr_scheduler.LinearWarmup(
        lr_scheduler.CosineAnnealing(0.1, T_max=8), warmup_steps=3, start_lr=0.0, end_lr=0.1
    )
    copy.load_state_dict(warm.state_dict())
    assert rates(copy, 5) == rates(warm, 5)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: lr_scheduler.StepDecay(0.1, step_size=0), "StepDecay: invalid 'step_size'"),
        (lambda: lr_scheduler.ExponentialDecay(-1.0, gamma=0.5), "ExponentialDecay: invalid 'lr'"),
        (lambda: lr_scheduler.CosineAnnealing(0.1, T_max=0), "CosineAnnealing: invalid 'T_max'"),
        (
            lambda: lr_scheduler.LinearWarmup(0.1, 0, 0.0, 0.1),
            "LinearWarmup: invalid 'warmup_steps'",
        ),
    ],
)
def test_invalid_arguments_are_named(make, message):
    with pytest.raises(AttrError, match=message):
        make()
