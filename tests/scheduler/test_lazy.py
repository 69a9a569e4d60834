"""Lazy mode: recording without running, realizing on demand, early release, what is kept, the
plan cache, errors, and the debug/validate flags."""

import gc
import sys
import weakref

import numpy as np
import pytest

import layers
import ops
import optim
import tape
from ops.registry import register, unregister
from tape.passes import execute, pipeline
from tape.passes.plan import CACHE


def _mlp(seed=0, widths=(6, 16, 16, 3)):
    tape.seed(seed)
    return layers.Sequential(
        *[
            layers.Linear(a, b, act="tanh" if i < len(widths) - 2 else None)
            for i, (a, b) in enumerate(zip(widths, widths[1:], strict=False))
        ]
    )


def _data(seed=1):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((8, 6)).astype(np.float32),
        rng.standard_normal((8, 3)).astype(np.float32),
    )


def _train(lazy, steps=3, **options):
    model, (xs, ys) = _mlp(), _data()
    opt = optim.Adam(lr=0.01)
    losses = []
    with tape.lazy(lazy, **options):
        for _ in range(steps):
            tape.reset_global_tape()
            diff = model(tape.Variable(xs)) - tape.Variable(ys)
            loss = (diff * diff).mean()
            tape.backward(loss)
            opt(model.params())
            losses.append(loss.numpy())
    return losses, [p.numpy() for p in model.params()]


def test_recording_runs_nothing_until_a_value_is_asked_for():
    with tape.lazy():
        t = tape.reset_global_tape()
        x = tape.Variable(np.array([-1.0, 2.0], np.float32))
        y = ops.relu(x * 3.0)
        assert y._value is None and y._pending is t and len(t._pending_ops) == 2
        np.testing.assert_array_equal(y.numpy(), [0.0, 6.0])
        assert y._pending is None and t._pending_ops == []


def test_shape_errors_are_raised_at_the_users_line():
    with tape.lazy():
        tape.reset_global_tape()
        x = tape.Variable(np.ones((2, 3), np.float32))
        with pytest.raises(tape.ShapeError) as info:
            ops.matmul(x, x)
    message = str(info.value)
    assert message.startswith("op 'matmul' (matmul_0): inner dimensions differ")
    assert "recorded at: test_lazy.py:" in message and "in test_shape_errors" in message


def _twice(h):
    return h + h  # a user's helper: its line is the op's


@pytest.mark.parametrize("tracking", [False, True], ids=["plain", "track_memory"])
def test_every_lazy_op_keeps_the_users_line_whichever_way_it_was_recorded(tracking):
    """Operators, OpDef calls, layers (``apply``) and a user's own helper each skip a different
    number of library frames to reach the user's line."""
    import contextlib

    line = sys._getframe().f_lineno
    with tape.lazy(), tape.track_memory() if tracking else contextlib.nullcontext():
        t = tape.reset_global_tape()
        x = tape.Variable(np.ones((2, 3), np.float32))
        lines = {"add": line + 5}
        _ = x + x
        lines["neg"] = line + 7
        _ = -x
        lines["tanh"] = line + 9
        ops.tanh(x)
        lines["linear"] = line + 11
        layers.Linear(3, 2)(x)
        lines["helper"] = _twice.__code__.co_firstlineno + 1
        _twice(x)
        found = [op.location for op in t.ops]
        tape.reset_global_tape()
    name = "test_every_lazy_op_keeps_the_users_line"
    assert f"test_lazy.py:{lines['add']} in {name}" in found[0]
    assert f"test_lazy.py:{lines['neg']} in {name}" in found[1]
    assert f"test_lazy.py:{lines['tanh']} in {name}" in found[2]
    assert all(f"test_lazy.py:{lines['linear']} in {name}" in where for where in found[3:-1])
    assert found[-1] == f"test_lazy.py:{lines['helper']} in _twice"


def test_leaving_the_block_runs_what_is_pending_and_returns_to_eager():
    with tape.lazy():
        t = tape.reset_global_tape()
        y = ops.tanh(tape.Variable(np.ones(2, np.float32)))
        assert y._value is None
    assert y._value is not None and not t.lazy and t._pending_ops == []


def test_training_lazily_equals_training_eagerly():
    eager = _train(False)
    for options in ({}, {"threads": 2}, {"validate": True}):
        lazy = _train(True, **options)
        for want, got in zip(eager[0] + eager[1], lazy[0] + lazy[1], strict=True):
            np.testing.assert_array_equal(got, want)


def test_an_in_place_update_keeps_the_old_value_until_it_runs():
    with tape.lazy():
        tape.reset_global_tape()
        w = tape.Variable(np.ones(2, np.float32), requires_grad=True)
        tape.backward((w * w).sum())
        optim.SGD(lr=0.5)([w])
        np.testing.assert_array_equal(w._value, [1.0, 1.0])  # recorded, not run
        np.testing.assert_array_equal(w.numpy(), [0.0, 0.0])


def test_reset_runs_the_updates_the_old_tape_still_owes():
    with tape.lazy():
        t = tape.reset_global_tape()
        w = tape.Variable(np.ones(2, np.float32), requires_grad=True)
        tape.backward((w * w).sum())
        optim.SGD(lr=0.25)([w])
        tape.reset_global_tape()
        assert t._pending_ops == [] and w._pending is None
        np.testing.assert_array_equal(w._value, [0.5, 0.5])


def _step_with_activations():
    model, (xs, ys) = _mlp(), _data()
    with tape.lazy(compile=True):
        t = tape.reset_global_tape()
        loss = ops.square(model(tape.Variable(xs)) - tape.Variable(ys)).mean()
        forward = len(t.ops)
        # Weak references: holding the Variables themselves would keep their buffers.
        activations = [weakref.ref(v) for op in t.ops for v in op.output_vars()]
        tape.backward(loss)
        optim.SGD(lr=0.1)(model.params())
        loss.numpy()
    return t, forward, activations, loss


def test_forward_activations_are_freed_right_after_their_last_gradient_op(monkeypatch):
    monkeypatch.setattr(pipeline, "FUSION", False)  # (names the recorded ops by tape index)
    t, forward, activations, loss = _step_with_activations()
    decisions = t._last_plan.analysis
    block, memory = decisions.block, decisions.memory
    tape_index = [int(op.name.rsplit("_", 1)[1]) for op in block.ops]
    freed_after = {name: i for i, names in enumerate(memory.free_after) for name in names}
    forward_names = {
        name
        for i, op in enumerate(block.ops)
        if tape_index[i] < forward
        for name in op.output_names()
    }
    backward_read = 0
    for name in forward_names - memory.kept:
        readers = [i for i, op in enumerate(block.ops) if name in op.input_names()]
        assert freed_after[name] == max(readers)  # right after the last reader...
        if tape_index[max(readers)] >= forward:
            backward_read += 1  # ...which for saved activations is a gradient op
    assert backward_read == 3  # the two tanh outputs (for the weight gradients) and the error
    alive = [ref() for ref in activations]  # (ops that ran leave the tape: most are gone)
    kept = [var for var in alive if var is not None and var._value is not None]
    assert kept == [loss]  # only the loss, which we hold, keeps its buffer


def test_variables_the_user_holds_are_kept():
    model, (xs, _) = _mlp(), _data()
    with tape.lazy():
        tape.reset_global_tape()
        hidden = model[0](tape.Variable(xs))
        out = model[1](hidden)
        total = out.sum()
        total.numpy()
        assert hidden._value is not None and hidden._pending is None
        assert out._value is not None
        np.testing.assert_array_equal(hidden.numpy(), model[0](tape.Variable(xs)).numpy())


def test_a_run_leaves_no_reference_to_the_variables_behind():
    """Otherwise a Variable would look held by the user, and keep its buffer, until the next
    garbage collection (a reference cycle in the scheduler would do that)."""
    gc.disable()
    try:
        with tape.lazy():
            tape.reset_global_tape()
            hidden = ops.tanh(tape.Variable(np.ones(3, np.float32)))
            out = ops.exp(hidden)
            before = sys.getrefcount(hidden)
            out.numpy()
            ops.neg(out).numpy()
            assert sys.getrefcount(hidden) <= before  # (fewer: the ops that ran left the tape)
    finally:
        gc.enable()


def test_ops_that_ran_and_that_no_backward_needs_leave_the_tape():
    with tape.lazy():
        t = tape.reset_global_tape()
        x = tape.Variable(np.array([0.5, -0.5], np.float32))
        w = tape.Variable(np.ones(2, np.float32), requires_grad=True)
        total = ops.exp(ops.tanh(x)).sum()
        loss = (w * w).sum()
        total.numpy()
        loss.numpy()
        t.compact()  # (runs compact as the tape doubles; the rule is the same)
        # The product and the sum stay: a backward from the loss may still differentiate them.
        assert [op.type for op in t.ops] == ["elementwise_mul", "reduce_sum"]
        assert [op.index for op in t.ops] == [0, 1]
        tape.backward(loss)
        w.grad().numpy()
        t.compact()
        assert t.ops == []
    kept = tape.Tape(lazy=True, record_all=True)  # record_all keeps the whole history
    y = kept.add_op("tanh", {"X": [tape.Variable(np.ones(2, np.float32))]})
    y.numpy()
    assert [op.type for op in kept.ops] == ["tanh"]


def test_random_ops_draw_in_program_order_as_in_eager_mode():
    def draws(lazy):
        tape.seed(11)
        with tape.lazy(lazy):
            tape.reset_global_tape()
            first = ops.uniform_random(shape=[3])
            second = ops.gaussian_random(shape=[3])
            return second.numpy(), first.numpy()

    for want, got in zip(draws(False), draws(True), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_second_identical_step_hits_the_plan_cache_and_a_changed_one_misses():
    def step(batch=8, scale=2.0):
        with tape.lazy(compile=True):
            tape.reset_global_tape()
            w = tape.Variable(np.ones((3, 2), np.float32), requires_grad=True)
            x = tape.Variable(np.ones((batch, 3), np.float32))
            loss = ops.scale(x @ w, scale=scale).sum()
            tape.backward(loss)
            loss.numpy()
        return CACHE.hits, CACHE.misses

    step()  # loss.numpy() runs the forward and the gradient w still owes: one plan
    before = step()
    after = step()
    assert after[1] == before[1] and after[0] - before[0] == 1
    assert step(batch=5)[1] > after[1]
    changed = step(scale=3.0)[1]
    assert changed > after[1] + 1
    assert "plan cache:" in tape.explain(tape.get_global_tape())


_BOOM = []


def _register_boom():
    @register("boom_for_test", inputs=("X",), infer=lambda attrs, x: (x.shape, x.dtype))
    def boom(xp, attrs, x):
        """Out = X, or fails on negative inputs (a test op)."""
        if (x < 0).any():
            raise ValueError("negative input")
        return x

    return boom


@pytest.fixture
def boom():
    op = _register_boom()
    yield op
    unregister("boom_for_test")


def test_a_failing_op_stops_the_run_cleanly_and_names_where_it_was_recorded(boom):
    with tape.lazy():
        t = tape.reset_global_tape()
        x = tape.Variable(np.array([1.0, -1.0], np.float32))
        ok = ops.exp(x)
        bad = boom(ops.neg(ok))
        with pytest.raises(tape.ExecutionError) as info:
            bad.numpy()
        # The run's ops are dropped; what it computed before the failure is kept.
        assert t._pending_ops == []
        np.testing.assert_allclose(ok.numpy(), np.exp([1.0, -1.0]), rtol=1e-6)
        with pytest.raises(tape.GraphError, match="lazy run that was to compute this value"):
            bad.numpy()
    message = str(info.value)
    assert message.startswith(
        "op 'boom_for_test' (boom_for_test_2): kernel failed: ValueError: negative input"
    )
    assert "recorded at: test_lazy.py:" in message
    assert isinstance(info.value.__cause__, ValueError)


def test_thread_pool_failure_is_reported_the_same_way(boom):
    with tape.lazy(threads=2):
        tape.reset_global_tape()
        x = tape.Variable(np.array([-1.0], np.float32))
        parts = [ops.exp(x), boom(x), ops.tanh(x)]
        with pytest.raises(tape.ExecutionError, match="op 'boom_for_test' .*negative input"):
            ops.sum(parts).numpy()
        assert tape.get_global_tape()._pending_ops == []


def test_debug_prints_one_line_per_pass(capsys):
    CACHE.clear()
    with tape.lazy(debug=True):
        tape.reset_global_tape()
        ops.tanh(tape.Variable(np.ones(3, np.float32) * 0.1234)).numpy()
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "[fluidtape scheduler] prune",
        "[fluidtape scheduler] dependencies",
        "[fluidtape scheduler] memory_plan",
        "[fluidtape scheduler] plan",
    ]
    assert lines[0].endswith("1 ops -> 1 ops (targets: 1 variables, 0 ops)")


def test_validate_catches_a_plan_that_computes_something_else(monkeypatch):
    original = execute.run

    def corrupt(plan, vals, threads=0):
        original(plan, vals, threads)
        for slot in plan.writeback:
            vals[slot] = vals[slot] + 1

    monkeypatch.setattr(execute, "run", corrupt)
    with tape.lazy(validate=True):
        tape.reset_global_tape()
        y = ops.tanh(tape.Variable(np.ones(3, np.float32)))
        with pytest.raises(tape.GraphError, match="lazy and eager results differ"):
            y.numpy()


def test_a_program_takes_over_pending_ops():
    with tape.lazy():
        t = tape.reset_global_tape()
        w = tape.Variable(np.ones(2, np.float32), requires_grad=True)
        tape.backward((w * w).sum())
        optim.SGD(lr=0.5)([w])
        program = tape.Program.from_tape(t)
        tape.reset_global_tape()  # nothing left to flush: the program owns the update
        np.testing.assert_array_equal(w.numpy(), [1.0, 1.0])
    (sgd,) = [op for op in program.global_block().ops if op.type == "sgd"]
    tape.Executor().run(program, targets=[sgd])
    np.testing.assert_array_equal(w.numpy(), [0.0, 0.0])


def test_asking_for_one_gradient_computes_every_held_gradient_in_one_run():
    model, (xs, ys) = _mlp(), _data()
    with tape.lazy():
        t = tape.reset_global_tape()
        tape.backward(ops.square(model(tape.Variable(xs)) - tape.Variable(ys)).mean())
        params = model.params()
        params[0].grad().numpy()
        assert t._pending_ops == []
        assert all(p.grad()._pending is None and p.grad()._value is not None for p in params)
    eager = _mlp()
    tape.reset_global_tape()
    tape.backward(ops.square(eager(tape.Variable(xs)) - tape.Variable(ys)).mean())
    for want, got in zip(eager.params(), params, strict=True):
        np.testing.assert_array_equal(got.grad().numpy(), want.grad().numpy())


def test_a_lazy_tape_reused_eagerly_is_numbered_afresh_after_backward_drops_its_ops():
    w = tape.Variable(np.full(2, 0.5, np.float32), requires_grad=True)
    t = tape.reset_global_tape()
    with tape.lazy():
        first = ops.tanh(w)
        first.numpy()
    tape.backward(ops.exp(first).sum())  # eager: drops the ops the lazy run numbered
    with tape.lazy():
        held = ops.exp(w)
        total = (held * 2.0).sum()
        np.testing.assert_allclose(total.numpy(), 2 * np.exp(0.5) * 2, rtol=1e-6)
        assert held._value is not None and t is tape.get_global_tape()


def test_a_run_numbers_only_the_ops_recorded_since_the_previous_run():
    with tape.lazy():
        t = tape.reset_global_tape()
        w = tape.Variable(np.array([0.5], np.float32), requires_grad=True)
        y = ops.tanh(w)  # stays on the tape: a backward may differentiate it
        y.numpy()
        numbering = t._structure
        assert numbering.scanned == 1
        z = ops.exp(y)
        np.testing.assert_allclose(z.numpy(), np.exp(np.tanh([0.5])), rtol=1e-6)
        assert t._structure is numbering and numbering.scanned == 2


def test_an_op_reading_a_buffer_a_later_update_overwrites_still_sees_the_old_value():
    """adam updates Moment2's buffer in place even when Moment2Out is another variable: an op
    recorded before it that read Moment2 must run before it, as in eager mode."""

    def record(lazy, threads=0):
        with tape.lazy(lazy, threads=threads):
            tape.reset_global_tape()
            moment2 = ops.exp(tape.Variable(np.zeros(2, np.float32)))
            early = moment2 + 1.0
            arrays = [
                np.full(2, 0.5, np.float32),
                np.full(2, 2.0, np.float32),
                np.zeros(2, np.float32),
            ]
            scalars = [
                np.array([0.1], np.float32),
                np.array([0.9], np.float32),
                np.array([0.999], np.float32),
            ]
            param, grad, moment1 = (tape.Variable(a) for a in arrays)
            lr, beta1_pow, beta2_pow = (tape.Variable(s) for s in scalars)
            out = ops.adam(param, grad, moment1, moment2, lr, beta1_pow, beta2_pow)
            return out[0].numpy(), early.numpy()

    for threads in (0, 2):
        for want, got in zip(record(False), record(True, threads), strict=True):
            np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(record(True)[1], [2.0, 2.0])
