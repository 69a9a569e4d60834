"""Learning-rate schedules: objects an optimizer reads its current rate from, advanced by
``step()`` (Paddle's ``LRScheduler``; PyTorch's names are aliases).

A schedule takes the base rate, or an optimizer whose rate it then drives (PyTorch's form)::

    >>> import optim
    >>> sched = optim.lr_scheduler.StepDecay(0.1, step_size=2, gamma=0.5)
    >>> opt = optim.SGD(lr=sched)
    >>> rates = []
    >>> for epoch in range(5):
    ...     rates.append(opt.lr)
    ...     sched.step()
    >>> rates
    [0.1, 0.1, 0.05, 0.05, 0.025]
"""

from __future__ import annotations

import math
import numbers

from tape.errors import AttrError


def _number(owner, name, value, check=lambda v: v >= 0, rule=">= 0"):
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or not check(value)
    ):
        raise AttrError(
            None,
            f"{owner}: invalid '{name}'",
            expected=f"a finite number {rule}",
            actual=repr(value),
        )
    return value


class LRScheduler:
    """Base: ``get_lr()`` gives the rate at ``last_epoch`` in closed form.

    Args:
        lr: the base rate, or an optimizer (its current rate is the base, and the optimizer
            reads its rate from this schedule from then on).
        last_epoch: the epoch to start after (-1: start at epoch 0 with the base rate).
    """

    def __init__(self, lr, last_epoch=-1):
        optimizer = None
        if hasattr(lr, "scheduler") and hasattr(lr, "lr"):  # an optimizer
            optimizer, lr = lr, lr.lr
        self.base_lr = float(_number(type(self).__name__, "lr", lr))
        self.last_epoch = int(last_epoch)
        self.last_lr = self.base_lr
        self.step()
        if optimizer is not None:
            optimizer.lr = self

    def get_lr(self):
        raise NotImplementedError

    def __call__(self):
        """The current rate."""
        return self.last_lr

    def step(self, epoch=None):
        """Advances to the next epoch (or to ``epoch``) and recomputes the rate."""
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        self.last_lr = float(self.get_lr())

    def state_dict(self):
        """The epoch counter and rates as plain values (nested schedules included)."""
        return {
            "type": type(self).__name__,
            "last_epoch": self.last_epoch,
            "last_lr": self.last_lr,
            "base_lr": self.base_lr,
        }

    def load_state_dict(self, state):
        """Restores ``state_dict()``'s result; checks all of it (nested schedules included)
        before changing anything, raising an AttrError (a ValueError) naming the entry."""
        values = self.check_state(state)
        schedule = self
        for last_epoch, base_lr, last_lr in values:
            schedule.last_epoch, schedule.base_lr, schedule.last_lr = last_epoch, base_lr, last_lr
            schedule = getattr(schedule, "after", None)

    def check_state(self, state):
        """(last_epoch, base_lr, last_lr) for this schedule and each one it wraps, from
        ``state``; AttrError if anything is missing, mistyped or out of range."""
        values, schedule = [], self
        while schedule is not None:
            kind = type(schedule).__name__
            if not isinstance(state, dict) or state.get("type") != kind:
                found = state.get("type") if isinstance(state, dict) else type(state).__name__
                raise AttrError(
                    None,
                    "schedule state is for another schedule",
                    expected=kind,
                    actual=repr(found),
                )
            epoch = state.get("last_epoch")
            if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral) or epoch < -1:
                raise AttrError(
                    None,
                    f"{kind} state: invalid 'last_epoch'",
                    expected="an int >= -1",
                    actual=repr(epoch),
                )
            values.append(
                (
                    int(epoch),
                    float(_number(f"{kind} state", "base_lr", state.get("base_lr"))),
                    float(_number(f"{kind} state", "last_lr", state.get("last_lr"))),
                )
            )
            schedule = getattr(schedule, "after", None)
            if (state.get("after") is None) != (schedule is None):
                raise AttrError(
                    None,
                    f"{kind} state and schedule disagree on a wrapped schedule",
                    actual=repr(state.get("after")),
                )
            state = state.get("after")
        return values

    def __repr__(self):
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, lr={self.last_lr!r})"


class StepDecay(LRScheduler):
    """lr * gamma ** (epoch // step_size) (PyTorch's StepLR)."""

    def __init__(self, lr, step_size, gamma=0.1, last_epoch=-1):
        self.step_size = int(_number("StepDecay", "step_size", step_size, lambda v: v > 0, "> 0"))
        self.gamma = float(_number("StepDecay", "gamma", gamma))
        super().__init__(lr, last_epoch)

    def get_lr(self):
        return self.base_lr * self.gamma ** (self.last_epoch // self.step_size)


class ExponentialDecay(LRScheduler):
    """lr * gamma ** epoch (PyTorch's ExponentialLR)."""

    def __init__(self, lr, gamma, last_epoch=-1):
        self.gamma = float(_number("ExponentialDecay", "gamma", gamma))
        super().__init__(lr, last_epoch)

    def get_lr(self):
        return self.base_lr * self.gamma**self.last_epoch


class CosineAnnealing(LRScheduler):
    """eta_min + (lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 (PyTorch's closed form of
    CosineAnnealingLR, without restarts)."""

    def __init__(self, lr, T_max, eta_min=0.0, last_epoch=-1):  # noqa: N803  (PyTorch's name)
        self.T_max = int(_number("CosineAnnealing", "T_max", T_max, lambda v: v > 0, "> 0"))
        self.eta_min = float(_number("CosineAnnealing", "eta_min", eta_min))
        super().__init__(lr, last_epoch)

    def get_lr(self):
        cosine = 1.0 + math.cos(math.pi * self.last_epoch / self.T_max)
        return self.eta_min + (self.base_lr - self.eta_min) * cosine / 2.0


class LinearWarmup(LRScheduler):
    """Linear from start_lr to end_lr over warmup_steps, then ``lr`` (a float or a schedule,
    which is stepped to epoch - warmup_steps), as Paddle's LinearWarmup.

    >>> import optim
    >>> warm = optim.lr_scheduler.LinearWarmup(0.5, warmup_steps=2, start_lr=0.0, end_lr=1.0)
    >>> rates = []
    >>> for _ in range(4):
    ...     rates.append(warm())
    ...     warm.step()
    >>> rates
    [0.0, 0.5, 0.5, 0.5]
    """

    def __init__(self, lr, warmup_steps, start_lr, end_lr, last_epoch=-1):
        optimizer = None
        if hasattr(lr, "scheduler") and hasattr(lr, "lr"):  # an optimizer: wrap its rate
            optimizer, lr = lr, (lr.scheduler or lr.lr)
        self.after = lr if isinstance(lr, LRScheduler) else None
        self.warmup_steps = int(
            _number("LinearWarmup", "warmup_steps", warmup_steps, lambda v: v > 0, "> 0")
        )
        self.start_lr = float(_number("LinearWarmup", "start_lr", start_lr))
        self.end_lr = float(_number("LinearWarmup", "end_lr", end_lr))
        super().__init__(lr.base_lr if self.after is not None else lr, last_epoch)
        if optimizer is not None:
            optimizer.lr = self

    def get_lr(self):
        if self.last_epoch < self.warmup_steps:
            fraction = self.last_epoch / self.warmup_steps
            return self.start_lr + (self.end_lr - self.start_lr) * fraction
        if self.after is None:
            return self.base_lr
        self.after.step(self.last_epoch - self.warmup_steps)
        return self.after()

    def state_dict(self):
        state = super().state_dict()
        state["after"] = None if self.after is None else self.after.state_dict()
        return state


StepLR = StepDecay
ExponentialLR = ExponentialDecay
CosineAnnealingLR = CosineAnnealingDecay = CosineAnnealing

__all__ = [
    "LRScheduler",
    "StepDecay",
    "StepLR",
    "ExponentialDecay",
    "ExponentialLR",
    "CosineAnnealing",
    "CosineAnnealingLR",
    "CosineAnnealingDecay",
    "LinearWarmup",
]
