"""Optimizer state dicts: saving and validated loading of step counts, hyper-parameters, the
schedule and per-parameter state, as numpy arrays and plain Python values."""

from __future__ import annotations

import numbers

import numpy as np

from ops.xp import to_numpy
from optim.regularizer import as_regularizer


def _error(headline, **details):
    from tape.checkpoint import CheckpointError

    return CheckpointError(None, headline, **details)


def _keys(optimizer, params):
    """id(param) -> state key: the position, or the name in ``params`` when given."""
    if params is None:
        return {pid: str(pos) for pid, pos in optimizer._position.items()}, None
    from tape.checkpoint import named_variables

    named = named_variables(params)
    return {id(var): name for name, var in named.items()}, named


def state_dict(optimizer, params=None):
    keys, _ = _keys(optimizer, params)
    entries = {}
    for pid, state in optimizer._state.items():
        if pid not in keys:
            continue
        entry = {"step": state.step, "name": state.param._name}
        for slot, var in state.vars.items():
            entry[slot] = np.array(to_numpy(var.value()), copy=True)
        entries[keys[pid]] = entry
    if params is None:  # loaded entries still waiting for their parameters
        for pos, entry in optimizer._pending.items():
            entries[str(pos)] = {
                k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in entry.items()
            }
    hyper = {name: getattr(optimizer, name) for name in optimizer.hyper}
    hyper = {k: list(v) if isinstance(v, tuple) else v for k, v in hyper.items()}
    scheduler = optimizer.scheduler
    regularizer = optimizer.regularization
    return {
        "optimizer": type(optimizer).__name__,
        "step": optimizer.step_count,
        "lr": None if scheduler is not None else optimizer.lr,
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "weight_decay": None if regularizer is None else regularizer.state_dict(),
        "hyper": hyper,
        "state": dict(sorted(entries.items(), key=lambda kv: _sort_key(kv[0]))),
    }


def _sort_key(key):
    return (0, int(key), "") if key.isdigit() else (1, 0, key)


def prepare_load(optimizer, state, params=None):
    """Validates ``state`` against ``optimizer`` (and ``params``); returns a function applying it.

    Nothing is changed until the returned function runs, so a checkpoint can validate the
    optimizer's state and the parameters' values before assigning either.
    """
    from optim.optimizer import check_loaded

    kind = type(optimizer).__name__
    if not isinstance(state, dict) or state.get("optimizer") != kind:
        found = state.get("optimizer") if isinstance(state, dict) else type(state).__name__
        raise _error(
            "optimizer state is for a different optimizer", expected=kind, actual=repr(found)
        )
    probe = _check_hyper(optimizer, state)
    _check_schedule(optimizer.scheduler, state.get("scheduler"))
    keys, named = _keys(optimizer, params)
    bound, pending = [], {}
    for key, entry in state.get("state", {}).items():
        _check_entry(key, entry)
        if named is not None:
            if key not in named:
                raise _error(
                    f"optimizer state for parameter '{key}', which is not among the parameters",
                    expected=str(sorted(named)),
                    actual=repr(key),
                )
            param = named[key]
        elif not key.isdigit():
            raise _error(
                f"optimizer state key '{key}' is not a position",
                hint="state keyed by name loads with params=",
            )
        elif int(key) < len(optimizer._params):
            param = optimizer._params[int(key)]
        else:
            pending[int(key)] = entry
            continue
        check_loaded(optimizer, param, entry, key)
        bound.append((param, entry))
    affected = set(keys) if named is not None else set(optimizer._state)
    return lambda: _apply(optimizer, probe, state, bound, pending, affected, named is None)


def _check_entry(key, entry):
    if not isinstance(entry, dict) or not isinstance(entry.get("step"), numbers.Integral):
        raise _error(
            f"optimizer state for parameter '{key}' is malformed",
            expected="a dict with an integer 'step' and arrays per slot",
            actual=repr(type(entry).__name__),
        )
    for slot, value in entry.items():
        if slot not in ("step", "name") and not isinstance(value, np.ndarray):
            raise _error(
                f"optimizer state '{slot}' of parameter '{key}' is not an array",
                actual=type(value).__name__,
            )


def _check_hyper(optimizer, state):
    """Checks the saved hyper-parameters by building a probe optimizer from them (``hyper``
    names constructor arguments); returns the probe, whose converted values get applied."""
    hyper = state.get("hyper", {})
    if not isinstance(hyper, dict) or set(hyper) != set(optimizer.hyper):
        raise _error(
            "optimizer hyper-parameters do not match",
            expected=str(sorted(optimizer.hyper)),
            actual=repr(hyper),
        )
    if (state.get("lr") is None) != (optimizer.scheduler is not None):
        raise _error(
            "learning rate kind does not match",
            expected="a schedule" if optimizer.scheduler else "a constant rate",
            actual="a schedule" if state.get("lr") is None else "a constant rate",
        )
    arguments = {k: tuple(v) if isinstance(v, list) else v for k, v in hyper.items()}
    try:
        # the coupled decay (a regularizer), unless it is a hyper-parameter itself (AdamW)
        arguments.setdefault("weight_decay", as_regularizer(state.get("weight_decay")))
        return type(optimizer)(lr=optimizer.scheduler or state["lr"], **arguments)
    except (TypeError, ValueError) as err:  # AttrError is both
        raise _error("optimizer hyper-parameters are invalid", actual=str(err)) from None


def _check_schedule(scheduler, state):
    """The schedule's saved state, checked completely (every value, nested schedules too)."""
    if scheduler is None:
        return
    try:
        scheduler.check_state(state)
    except ValueError as err:  # AttrError is one
        raise _error("learning-rate schedule state is invalid", actual=str(err)) from None


def _apply(optimizer, probe, state, bound, pending, affected, by_position):
    for name in optimizer.hyper:
        setattr(optimizer, name, getattr(probe, name))
    optimizer.step_count = int(state.get("step", 0))
    if optimizer.scheduler is not None:
        optimizer.scheduler.load_state_dict(state["scheduler"])
    else:
        optimizer.lr = probe.lr
    optimizer.regularization = probe.regularization
    for pid in affected:
        optimizer._state.pop(pid, None)
    for param, entry in bound:
        if id(param) not in optimizer._position:
            optimizer._position[id(param)] = len(optimizer._params)
            optimizer._params.append(param)
        optimizer._state[id(param)] = optimizer._new_state(param, entry)
    if by_position:
        optimizer._pending = pending
