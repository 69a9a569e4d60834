"""Lazy backward replay: a tape structure seen before gets its gradient ops without the makers."""

import importlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import layers
import ops
import optim
import tape
from ops.registry import REGISTRY
from tape import grad_memo, replay
from tape.testing import _ordered
from tests.ops.test_registry_sweep import CASES
from tests.scheduler.test_properties import SETTINGS, _argument, _chooser, _flat
from tests.scheduler.test_properties import _replay as _replaying

engine = importlib.import_module("tape.backward")  # (``tape.backward`` is also a function)


@pytest.fixture
def makers_run(monkeypatch):
    """How many times a gradient maker ran while the test runs."""
    calls = []
    run = engine._run_grad_maker

    def counting(op, gouts, pending, memo=None):
        calls.append(op.type)
        return run(op, gouts, pending, memo)

    monkeypatch.setattr(engine, "_run_grad_maker", counting)
    replay.forget()
    grad_memo.clear()
    return calls


def _step(lazy, w, b, x, y, retain_graph=False):
    with tape.lazy(lazy):
        tape.reset_global_tape()
        diff = ops.tanh(x @ w + b) - y
        loss = (diff * diff).mean()  # mean's maker makes a constant (1 / n)
        w.clear_grad()
        b.clear_grad()
        tape.backward(loss, retain_graph=retain_graph)
        return [loss.numpy()] + [p.grad().numpy() for p in (w, b) if p.grad() is not None]


def _inputs(seed):
    rng = np.random.default_rng(seed)
    w = tape.Variable(rng.standard_normal((3, 2)).astype(np.float32), requires_grad=True)
    b = tape.Variable(rng.standard_normal(2).astype(np.float32), requires_grad=True)
    x = tape.Variable(rng.standard_normal((4, 3)).astype(np.float32))
    y = tape.Variable(rng.standard_normal((4, 2)).astype(np.float32))
    return w, b, x, y


def test_a_structure_is_learnt_on_its_third_backward_not_before(makers_run):
    w, b, x, y = _inputs(0)
    _step(True, w, b, x, y)  # a graph that may never repeat: scanned, nothing learnt
    assert makers_run and not replay._TEMPLATES
    makers_run.clear()
    _step(True, w, b, x, y)  # its sketch was seen: numbered, its key seen for the first time
    assert makers_run and not replay._TEMPLATES
    makers_run.clear()
    _step(True, w, b, x, y)
    assert makers_run and len(replay._TEMPLATES) == 1


def test_a_tape_made_by_hand_is_learnt_on_its_second_backward(makers_run):
    """A hand-made lazy tape records its gradient ops (for Programs) and is numbered at every
    backward, so its structure is known on its second sighting."""
    w, b, x, y = _inputs(0)
    for sighting in range(2):
        recording = tape.Tape(lazy=True)
        previous, tape.tape.state.tape = tape.tape.state.tape, recording
        try:
            with tape.lazy():
                diff = ops.tanh(x @ w + b) - y
                tape.backward((diff * diff).mean())
        finally:
            tape.tape.state.tape = previous
        assert len(replay._TEMPLATES) == sighting


def test_a_repeated_lazy_backward_replays_without_running_the_makers(makers_run):
    w, b, x, y = _inputs(0)
    for _ in range(3):  # sketched, seen, then learnt
        _step(True, w, b, x, y)
    assert makers_run
    for seed in (1, 2):  # new values, same structure
        x.set_value(np.random.default_rng(seed).standard_normal((4, 3)).astype(np.float32))
        makers_run.clear()
        lazy = _step(True, w, b, x, y)
        assert makers_run == []
        for want, got in zip(_step(False, w, b, x, y), lazy, strict=True):
            np.testing.assert_array_equal(got, want)


def test_replayed_ops_equal_the_recorded_ones_and_carry_the_backward_line(makers_run):
    def gradient_ops():
        w, b, x, y = _inputs(0)
        with tape.lazy(compile=True):  # (a first sighting records its gradient ops too)
            t = tape.reset_global_tape()
            loss = (ops.tanh(x @ w + b) * y).mean()
            start = len(t._ops)
            tape.backward(loss)
            recorded = [
                (
                    op.type,
                    op.attrs,
                    [v.shape for v in op.input_vars()],
                    [(v.shape, v.dtype) for v in op.output_vars()],
                    op.location,
                )
                for op in t._ops[start:]
            ]
            t._pending_ops.clear()
            return recorded

    scanned, _, replayed = gradient_ops(), gradient_ops(), gradient_ops()
    assert replayed == scanned and len(replay._TEMPLATES) == 1
    assert all(location.startswith("test_replay.py:") for *_, location in replayed)


def test_a_changed_requires_grad_is_a_different_structure(makers_run):
    w, b, x, y = _inputs(0)
    _step(True, w, b, x, y)
    b.requires_grad = False
    lazy = _step(True, w, b, x, y)
    assert len(lazy) == 2 and b.grad() is None  # the loss and w's gradient only
    for want, got in zip(_step(False, w, b, x, y), lazy, strict=True):
        np.testing.assert_array_equal(got, want)
    b.requires_grad = True


def test_retain_graph_and_a_second_backward_replay_like_eager(makers_run):
    def twice(lazy):
        w, b, x, y = _inputs(3)
        with tape.lazy(lazy):
            tape.reset_global_tape()
            loss = (ops.tanh(x @ w + b) * y).sum()
            tape.backward(loss, retain_graph=True)
            tape.backward(loss * 2.0)
            return [w.grad().numpy(), b.grad().numpy()]

    eager = twice(False)
    for _ in range(3):
        for want, got in zip(eager, twice(True), strict=True):
            np.testing.assert_array_equal(got, want)


def test_a_lazy_training_loop_with_an_optimizer_equals_eager(makers_run):
    def train(lazy):
        tape.seed(0)
        model = layers.Sequential(layers.Linear(4, 8, act="tanh"), layers.Linear(8, 2))
        opt = optim.Adam(lr=0.01)
        rng = np.random.default_rng(5)
        losses = []
        with tape.lazy(lazy):
            for _ in range(4):
                tape.reset_global_tape()
                x = tape.Variable(rng.standard_normal((5, 4)).astype(np.float32))
                loss = (model(x) * model(x)).mean()
                tape.backward(loss)
                opt(model.params())
                losses.append(loss.numpy())
        return losses + [p.numpy() for p in model.params()]

    for want, got in zip(train(False), train(True), strict=True):
        np.testing.assert_array_equal(got, want)


def _record_backward(choose, lazy):
    """A random tape of registry cases (as tests.scheduler.test_properties draws them), then
    ``backward`` of a weighted sum of its differentiable outputs; the values and gradients."""
    tape.seed(0)
    with np.errstate(all="ignore"), tape.lazy(lazy, exact=True):  # (bit for bit: see _record)
        tape.reset_global_tape()
        pool, leaves = [], {}
        for step in range(choose(5) + 1):
            case = CASES[choose(len(CASES))]
            args = [
                _argument(value, pool, choose, case)
                for value in _ordered(case, case.arrays("float64", seed=step))
            ]
            leaves.update(
                (id(v), v)
                for v in _flat([a for a in args if a is not None])
                if v.is_leaf and v.requires_grad
            )
            pool.extend(_flat(REGISTRY[case.op](*args, **case.attrs)))
        wanted = [v for v in pool if v.requires_grad]
        if not wanted:
            return [v.numpy() for v in pool]
        loss = sum(
            ((v * float(i + 1)).sum() for i, v in enumerate(wanted[1:], 1)), (wanted[0] * 1.0).sum()
        )
        tape.backward(loss)
        grads = [v.grad() for v in leaves.values()]
        return [v.numpy() for v in pool] + [g.numpy() for g in grads if g is not None]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@SETTINGS
@given(st.data())
def test_a_replayed_backward_of_a_random_tape_equals_eager(data):
    log = []
    eager = _record_backward(_chooser(data, log), lazy=False)
    for _ in range(4):  # sketched, seen, learnt, then replayed
        lazy = _record_backward(_replaying(log), lazy=True)
        assert len(lazy) == len(eager)
        for want, got in zip(eager, lazy, strict=True):
            assert want.shape == got.shape and want.dtype == got.dtype
            np.testing.assert_array_equal(got, want)


def test_a_replaced_gradient_maker_is_learnt_anew(makers_run, monkeypatch):
    w, b, x, y = _inputs(0)
    for _ in range(3):  # sketched, seen, learnt
        _step(True, w, b, x, y)
    assert len(replay._TEMPLATES) == 1
    tanh = REGISTRY["tanh"]
    doubled = []

    def twice_the_gradient(g):
        doubled.append(True)
        (gx,) = original(g)
        return (gx * 2.0,)

    original = tanh.grad_maker
    monkeypatch.setattr(tanh, "grad_maker", twice_the_gradient)
    lazy = _step(True, w, b, x, y)
    assert doubled
    for want, got in zip(_step(False, w, b, x, y), lazy, strict=True):
        np.testing.assert_array_equal(got, want)


def test_gradient_ops_without_inputs_or_with_list_inputs_replay(makers_run, monkeypatch):
    """A maker may record an op with no inputs (fill_constant) or a list input (sum)."""
    tanh = REGISTRY["tanh"]
    original = tanh.grad_maker

    def with_a_zero_term(g):
        (gx,) = original(g)
        zero = ops.fill_constant(shape=list(gx.shape), value=0.0, dtype=gx.dtype.name)
        return (ops.sum([gx, zero]),)

    monkeypatch.setattr(tanh, "grad_maker", with_a_zero_term)
    w, b, x, y = _inputs(0)
    eager = _step(False, w, b, x, y)
    for _ in range(4):  # seen, learnt, then replayed
        makers_run.clear()
        for want, got in zip(eager, _step(True, w, b, x, y), strict=True):
            np.testing.assert_array_equal(got, want)
    assert makers_run == []
