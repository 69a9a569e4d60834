"""Kernels equal to eager mode's within rounding (tape/passes/fast_kernels.py): on in plans the
pipeline rewrites, off in eager mode and with ``exact=True``; a plan using them gives eager
mode's loss and gradients within rounding, and ``validate=True`` accepts it."""

import numpy as np
import pytest

import ops
import tape
from ops.fusion_backends import compiled_loop, lstm_grad_loop, numba_loops, softmax_rows
from ops.registry import REGISTRY
from tape.ir import Block, OpDesc, VarDesc, freeze
from tape.passes import fast_kernels
from tests.ops.loop_helpers import compile_now, isolated

SWCE = REGISTRY["softmax_with_cross_entropy"]


def _swce_op(**attrs):
    return OpDesc(
        "softmax_with_cross_entropy",
        {"Logits": ["x"], "Label": ["y"]},
        {"Softmax": ["p"], "Loss": ["l"]},
        freeze(SWCE.check_attrs(attrs)),
    )


def _block(*ops_):
    names = {"x": (4, 3), "y": (4, 1), "p": (4, 3), "l": (4, 1)}
    variables = {n: VarDesc(n, s, "int64" if n == "y" else "float32") for n, s in names.items()}
    return Block(variables, list(ops_))


def test_the_pass_turns_fast_exp_on_for_hard_labels_only():
    hard, soft = _swce_op(), _swce_op(soft_label=True)
    rewritten = fast_kernels.rewrite(_block(hard, soft))
    assert [op.attrs["fast_exp"] for op in rewritten.ops] == [True, False]
    assert hard.attrs["fast_exp"] is False  # (the block it was given is untouched)
    assert [op.inputs for op in rewritten.ops] == [hard.inputs, soft.inputs]


def test_a_block_with_nothing_to_switch_is_returned_as_is():
    block = _block(_swce_op(soft_label=True))
    assert fast_kernels.rewrite(block) is block


@pytest.fixture
def loaded_rows(tmp_path, monkeypatch):
    """The float32 row kernel compiled into this test's kernel cache (as the compile process
    does), so plans find it at once."""
    if not numba_loops.available():
        pytest.skip("numba is not installed")
    argument = compiled_loop.array(np.dtype(np.float32), 2)
    for _ in isolated(tmp_path, monkeypatch, softmax_rows):  # (its set-up, then its tear-down)
        compile_now(softmax_rows.source(np.float32), [argument] * 4)
        yield


def _step(logits_value, label_value, **lazy):
    """A language model's output layer: loss and the logits' and bias's gradients, and the
    plan of the run (None in eager mode)."""
    x = tape.Variable(logits_value, requires_grad=True)
    b = tape.Variable(np.zeros(logits_value.shape[1], np.float32), requires_grad=True)
    label = tape.Variable(label_value)
    with tape.lazy(enabled=bool(lazy), **lazy):
        t = tape.reset_global_tape()
        _, loss = ops.softmax_with_cross_entropy(x + b, label)
        loss = ops.mean(loss)
        tape.backward(loss)
        values = [loss.numpy().copy(), x.grad().numpy().copy(), b.grad().numpy().copy()]
        plan = getattr(t, "_last_plan", None)
        tape.reset_global_tape()
    return values, plan


def _data():
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((64, 1024)) * 3).astype(np.float32)
    return logits, rng.integers(0, 1024, (64, 1))


def _fast_exp(plan):
    return [op.attrs["fast_exp"] for op in plan.analysis.block.ops if op.type == SWCE.type]


def test_a_plan_runs_the_row_softmax_within_rounding_of_eager_mode(loaded_rows):
    eager, _ = _step(*_data())
    lazy, plan = _step(*_data(), compile=True)
    assert _fast_exp(plan) == [True]
    assert softmax_rows._LOOPS[np.dtype(np.float32)].loops is not None  # (the loop ran)
    for got, want in zip(lazy, eager, strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-9)


def test_exact_plans_keep_numpys_softmax_bit_for_bit(loaded_rows):
    eager, _ = _step(*_data())
    exact, plan = _step(*_data(), compile=True, exact=True)
    assert _fast_exp(plan) == [False]
    for got, want in zip(exact, eager, strict=True):
        np.testing.assert_array_equal(got, want)


def test_validation_accepts_the_row_softmax_as_a_rewrite(loaded_rows):
    values, plan = _step(*_data(), validate=True)
    assert _fast_exp(plan) == [True]
    assert np.isfinite(values[0])


# ---- the LSTM step and its gradient ---------------------------------------------------------


def test_the_pass_turns_fast_exp_on_for_the_lstm_gradient():
    grad = OpDesc(
        "lstm_cell_grad",
        {"Gates": ["z"], "C": ["c"], "Cout": ["c2"], "Hout@GRAD": ["dh"]},
        {"Z@GRAD": ["dz"], "C@GRAD": ["dc"], "Bias@GRAD": ["db"]},
        freeze(REGISTRY["lstm_cell_grad"].defaults),
    )
    shapes = {"z": (2, 8), "dz": (2, 8), "db": (8,)}
    names = ["z", "c", "c2", "dh", "dz", "dc", "db"]
    variables = {n: VarDesc(n, shapes.get(n, (2, 2)), "float32") for n in names}
    (rewritten,) = fast_kernels.rewrite(Block(variables, [grad])).ops
    assert rewritten.attrs["fast_exp"] and not grad.attrs["fast_exp"]


@pytest.fixture
def loaded_cell_loop(tmp_path, monkeypatch):
    """The LSTM gradient's loop compiled into this test's kernel cache, so plans find it at
    once."""
    if not numba_loops.available():
        pytest.skip("numba is not installed")
    for _ in isolated(tmp_path, monkeypatch, lstm_grad_loop):
        compile_now(lstm_grad_loop.BACKWARD, lstm_grad_loop.ARGUMENTS)
        yield


def _lstm_step(**lazy):
    """An LSTM cell over 6 steps and the sum of its states' means: the loss and every parameter's
    gradient, and the plan of the run (None in eager mode)."""
    import layers

    rng = np.random.default_rng(3)
    cell = layers.LSTMCell(5, 8)
    for param in cell.params():
        param.set_value(rng.standard_normal(param.shape).astype(np.float32) * 0.5)
    xs = rng.standard_normal((6, 4, 5)).astype(np.float32)
    with tape.lazy(enabled=bool(lazy), **lazy):
        t = tape.reset_global_tape()
        state = None
        total = None
        for x in xs:
            state = cell(tape.Variable(x), state)
            total = ops.mean(state[0]) if total is None else total + ops.mean(state[0])
        tape.backward(total)
        values = [total.numpy().copy()] + [p.grad().numpy().copy() for p in cell.params()]
        plan = getattr(t, "_last_plan", None)
        tape.reset_global_tape()
    return values, plan


def _cell_fast_exp(plan):
    return [op.attrs["fast_exp"] for op in plan.analysis.block.ops if op.type == "lstm_cell_grad"]


def test_a_plan_runs_the_lstm_gradient_loop_within_rounding_of_eager_mode(loaded_cell_loop):
    eager, _ = _lstm_step()
    lazy, plan = _lstm_step(compile=True)
    assert set(_cell_fast_exp(plan)) == {True}
    assert lstm_grad_loop._LOOPS["backward"].loops is not None  # (it ran)
    for got, want in zip(lazy, eager, strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)


def test_exact_plans_keep_numpys_lstm_gradient_bit_for_bit(loaded_cell_loop):
    eager, _ = _lstm_step()
    exact, plan = _lstm_step(compile=True, exact=True)
    assert set(_cell_fast_exp(plan)) == {False}
    for got, want in zip(exact, eager, strict=True):
        np.testing.assert_array_equal(got, want)
