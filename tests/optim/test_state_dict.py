"""Optimizer state dicts: plain values and numpy arrays that restore training exactly."""

import json

import numpy as np
import pytest

import optim
import tape
from tape.checkpoint import CheckpointError
from tests.optim.problem import coefficients, initial_values, tape_loss

OPTIMIZERS = {
    "sgd": lambda: optim.SGD(lr=0.05),
    "momentum": lambda: optim.Momentum(lr=0.02, momentum=0.9, nesterov=True),
    "adam": lambda: optim.Adam(lr=0.05, weight_decay=optim.L1Decay(0.01)),
    "adamw": lambda: optim.AdamW(lr=0.05, weight_decay=0.1),
    "rmsprop": lambda: optim.RMSProp(lr=0.01, momentum=0.5, centered=True),
    "adagrad": lambda: optim.Adagrad(lr=0.1, lr_decay=0.05, initial_accumulator_value=0.1),
    "scheduled": lambda: optim.Adam(
        lr=optim.lr_scheduler.LinearWarmup(
            optim.lr_scheduler.ExponentialDecay(0.05, gamma=0.9), 3, 0.0, 0.05
        )
    ),
}


def train(opt, params, steps, call_order=None):
    coeffs = coefficients()
    for _ in range(steps):
        tape.reset_global_tape()
        tape.backward(tape_loss(params, coeffs))
        opt(params if call_order is None else [params[i] for i in call_order])
        if opt.scheduler is not None:
            opt.scheduler.step()


def fresh_params():
    return [tape.Variable(v, requires_grad=True) for v in initial_values()]


def copies(params):
    return [tape.Variable(p.numpy().copy(), requires_grad=True) for p in params]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_resuming_from_a_state_dict_continues_the_same_trajectory(name):
    params, opt = fresh_params(), OPTIMIZERS[name]()
    train(opt, params, 7)
    state = opt.state_dict()
    resumed_params, resumed = copies(params), OPTIMIZERS[name]()
    resumed.load_state_dict(state)  # binds by position at the first call
    train(opt, params, 8)
    train(resumed, resumed_params, 8)
    for p, q in zip(params, resumed_params, strict=True):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    assert resumed.step_count == opt.step_count == 15


def test_state_dict_holds_numpy_arrays_and_plain_values():
    params, opt = fresh_params(), OPTIMIZERS["scheduled"]()
    train(opt, params, 4)
    state = opt.state_dict()
    arrays = []

    def plain(value):
        assert isinstance(value, np.ndarray)
        arrays.append(value)
        return None

    json.dumps(state, default=plain)  # everything else is JSON
    assert len(arrays) == 4 * len(params)
    assert state["step"] == 4 and state["state"]["0"]["step"] == 4
    assert state["hyper"] == {"betas": [0.9, 0.999], "eps": 1e-8}
    assert state["scheduler"]["type"] == "LinearWarmup" and state["scheduler"]["last_epoch"] == 4


def test_state_dict_arrays_are_copies():
    params, opt = fresh_params(), optim.Adam(lr=0.1)
    train(opt, params, 1)
    moment = opt.state_dict()["state"]["0"]["Moment1"]
    saved = moment.copy()
    train(opt, params, 1)
    np.testing.assert_array_equal(moment, saved)


def test_state_keyed_by_name_loads_into_reordered_parameters():
    params, opt = fresh_params(), OPTIMIZERS["rmsprop"]()
    train(opt, params, 5)
    state = opt.state_dict({"w": params[0], "b": params[1], "c": params[2]})
    assert sorted(state["state"]) == ["b", "c", "w"]
    resumed_params = copies(params)
    resumed = OPTIMIZERS["rmsprop"]()
    resumed.load_state_dict(
        state, {"c": resumed_params[2], "w": resumed_params[0], "b": resumed_params[1]}
    )
    train(opt, params, 5)
    train(resumed, resumed_params, 5, call_order=[2, 0, 1])  # the state follows the names
    for p, q in zip(params, resumed_params, strict=True):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_loading_another_optimizers_state_is_an_error():
    params, opt = fresh_params(), optim.Adam(lr=0.1)
    train(opt, params, 1)
    with pytest.raises(
        CheckpointError,
        match=r"optimizer state is for a different optimizer\n"
        r"  expected: SGD\n  actual:   'Adam'",
    ):
        optim.SGD(lr=0.1).load_state_dict(opt.state_dict())


def test_a_bad_entry_changes_nothing():
    params, opt = fresh_params(), optim.Adam(lr=0.1)
    train(opt, params, 2)
    state = opt.state_dict()
    state["state"]["0"]["Moment1"] = state["state"]["0"]["Moment1"] + 1.0
    state["state"]["2"]["Moment2"] = np.zeros((9,))
    before = opt.state_dict()
    with pytest.raises(
        CheckpointError,
        match=r"optimizer state 'Moment2' of parameter '2' does "
        r"not match the parameter\n  expected: shape "
        r"\(1, 2, 2\), dtype float64\n  actual:   shape "
        r"\(9,\), dtype float64",
    ):
        opt.load_state_dict(state)
    after = opt.state_dict()
    np.testing.assert_array_equal(after["state"]["0"]["Moment1"], before["state"]["0"]["Moment1"])


def test_unknown_names_and_mismatched_hyper_parameters_are_errors():
    params, opt = fresh_params(), optim.Adam(lr=0.1)
    train(opt, params, 1)
    named = opt.state_dict({"w": params[0], "b": params[1], "c": params[2]})
    with pytest.raises(
        CheckpointError,
        match="optimizer state for parameter 'c', which is not among the parameters",
    ):
        optim.Adam().load_state_dict(named, {"w": params[0], "b": params[1]})
    with pytest.raises(CheckpointError, match="optimizer hyper-parameters do not match"):
        optim.AdamW().load_state_dict({**opt.state_dict(), "optimizer": "AdamW"})
    with pytest.raises(CheckpointError, match="learning rate kind does not match"):
        optim.Adam(lr=optim.lr_scheduler.StepDecay(0.1, 2)).load_state_dict(opt.state_dict())


def test_loading_restores_hyper_parameters_and_the_rate():
    source = optim.Adam(lr=0.02, betas=(0.8, 0.9), eps=1e-4, weight_decay=0.5)
    target = optim.Adam()
    target.load_state_dict(source.state_dict())
    assert (target.lr, target.betas, target.eps) == (0.02, (0.8, 0.9), 1e-4)
    assert isinstance(target.regularization, optim.L2Decay)
    assert target.regularization.coeff == 0.5


def test_invalid_saved_hyper_parameters_are_rejected_before_anything_changes():
    state = optim.Adam(lr=0.1).state_dict()
    state["hyper"]["betas"] = [1.5, 0.999]
    target = optim.Adam(lr=0.2)
    with pytest.raises(
        CheckpointError,
        match=r"optimizer hyper-parameters are invalid\n"
        r"  actual:   Adam: invalid hyper-parameter "
        r"'betas\[0\]'",
    ):
        target.load_state_dict(state)
    assert target.lr == 0.2 and target.betas == (0.9, 0.999)
