"""A lazy backward over a structure seen for the first time (tape.backward._after_forward): the
forward runs, then the reverse scan the eager way, so the step costs what eager mode's does and
gives its gradients bit for bit; a structure seen again records its gradient ops and compiles."""

import numpy as np
import pytest

import layers
import ops
import optim
import tape
from tape import autobatch_choice, structure, tier_choice

# (speculation has its own tests: test_eager_speculation)
pytestmark = pytest.mark.usefixtures("no_speculation", "structures_forgotten")

DIM = 4


def _model(seed=0):
    tape.seed(seed)
    return layers.Linear(DIM, DIM, act="tanh"), layers.Linear(DIM, 1)


def _step(model, lengths, lazy, seed=1, options=None):
    """Sum of the model's outputs over sequences of ``lengths`` (a new structure for every new
    list): loss and parameter gradients; the tape."""
    cell, head = model
    rng = np.random.default_rng(seed)
    for param in cell.params() + head.params():
        param.clear_grad()
    with tape.lazy(lazy, **(options or {})):
        t = tape.reset_global_tape()
        losses = []
        for length in lengths:
            h = tape.Variable(rng.standard_normal(DIM).astype(np.float32))
            for _ in range(length):
                h = cell(h) + h
            losses.append(head(h).sum())
        loss = ops.stack(losses).mean()
        tape.backward(loss)
        grads = [p.grad().numpy().copy() for p in cell.params() + head.params()]
    return loss.numpy(), grads, t


@pytest.mark.parametrize("options", [{"autobatch": False}, {"autobatch": True, "exact": True}])
def test_a_new_structure_gets_eager_modes_loss_and_gradients_bit_for_bit(options):
    model = _model()
    for lengths in ([2, 3], [1, 4, 2], [5]):
        want_loss, want, _ = _step(model, lengths, lazy=False)
        got_loss, got, _ = _step(model, lengths, lazy=True, options=options)
        np.testing.assert_array_equal(got_loss, want_loss)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("options", [{"autobatch": True}, {}], ids=["always", "auto"])
def test_an_autobatched_new_structure_gets_eager_modes_gradients_within_rounding(options):
    """Its backward batches as its forward did (tape.batched_backward): a parameter's gradient
    is summed over a group's members in one product, in another order than op by op (auto, the
    default, batches a model's first runs)."""
    model = _model()
    for lengths in ([2, 3], [1, 4, 2], [5]):
        want_loss, want, _ = _step(model, lengths, lazy=False)
        got_loss, got, _ = _step(model, lengths, lazy=True, options=options)
        np.testing.assert_allclose(got_loss, want_loss, rtol=1e-6)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)  # float32: a few ulps


def test_a_new_structure_records_no_gradient_op_and_keeps_no_forward_op():
    _, _, t = _step(_model(), [2, 3], lazy=True)
    assert t._pending_ops == []
    assert t.ops == []  # each forward op left the tape once its gradient ran, as in eager mode


def test_a_new_structures_forward_runs_every_pending_op_as_eager_mode_would():
    """Also an op the loss does not read: eager mode would have computed it, so it is there."""
    cell, head = _model()
    x = np.linspace(-1, 1, DIM).astype(np.float32)
    with tape.lazy(autobatch=False):  # ("auto" batches a model's first run: see below)
        tape.reset_global_tape()
        h = cell(tape.Variable(x))
        side = ops.exp(h)
        tape.backward(head(h).sum())
        assert side._pending is None and side._value is not None  # (before it is asked for)
        got = side.numpy().copy()
    tape.reset_global_tape()
    np.testing.assert_array_equal(got, ops.exp(cell(tape.Variable(x))).numpy())


@pytest.mark.parametrize("autobatch", ["auto", True, False])
def test_a_new_structures_batch_norm_and_dropout_run_as_in_eager_mode(autobatch):
    """In-place updates (batch norm's running statistics) and random draws (dropout) in a
    first sighting's forward: the same values, statistics and gradients as eager mode, bit for
    bit, step after step (a running statistic released by one step's backward does not make
    the next step's run free what its batch norm's gradient reads)."""

    def train(lazy):
        tape.seed(3)
        linear, norm, drop = layers.Linear(DIM, DIM), layers.BatchNorm(DIM), layers.Dropout(0.3)
        rng = np.random.default_rng(5)
        seen = []
        for rows in (3, 5, 4):  # a new batch size, so a new structure, every step
            x = tape.Variable(rng.standard_normal((rows, DIM)).astype(np.float32))
            for p in linear.params() + norm.params():
                p.clear_grad()
            with tape.lazy(lazy, autobatch=autobatch):
                tape.reset_global_tape()
                loss = ops.tanh(drop(norm(linear(x)))).sum()
                tape.backward(loss)
                seen.append(loss.numpy().copy())
                seen += [p.grad().numpy().copy() for p in linear.params() + norm.params()]
            seen += [norm.running_mean.numpy().copy(), norm.running_var.numpy().copy()]
        return seen

    for got, want in zip(train(True), train(False), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_new_structure_is_known_new_by_its_sketch_without_numbering_the_tape(monkeypatch):
    numbered = []
    extend = structure.Structure.extend
    monkeypatch.setattr(
        structure.Structure, "extend", lambda self: numbered.append(1) or extend(self)
    )
    model = _model()
    _step(model, [2, 3], lazy=True, options={"autobatch": False})
    assert numbered == []
    _step(model, [2, 3], lazy=True, options={"autobatch": False})  # a known sketch: numbered
    assert numbered


def test_autobatch_auto_weighs_batching_against_the_run_in_tape_order():
    """A model's first runs batch (``WARM_RUNS``: the first is cold), the next runs in tape
    order; both ways are timed, and each later run takes the cheaper (tape.autobatch_choice)."""
    model = _model()
    for lengths in ([2, 3], [3, 2], [2, 2, 1])[: autobatch_choice.WARM_RUNS]:
        _step(model, lengths, lazy=True)
        assert "autobatched" in tape.explain()
    _step(model, [1, 4], lazy=True)
    explained = tape.explain()
    assert "did not batch this run" in explained and "not measured" not in explained


def test_the_same_ops_wired_differently_share_a_sketch_but_not_their_gradients():
    """``x * tanh(y)`` and ``tanh(x) * y`` record the same ops with the same shapes: one sketch,
    two structures, each differentiated as its own, however often they alternate."""
    rng = np.random.default_rng(0)
    x, y = (tape.Variable(rng.standard_normal((2, 3)), requires_grad=True) for _ in range(2))

    def step(lazy, flipped):
        x.clear_grad()
        y.clear_grad()
        with tape.lazy(lazy):
            t = tape.reset_global_tape()
            loss = (ops.tanh(x) * y if flipped else x * ops.tanh(y)).sum()
            sketched = tier_choice.sketch(t, loss, False)
            tape.backward(loss)
            return sketched, x.grad().numpy().copy(), y.grad().numpy().copy()

    sketches = set()
    for flipped in [False, True] * 4:
        sketched, *got = step(True, flipped)
        sketches.add(sketched)
        for g, w in zip(got, step(False, flipped)[1:], strict=True):
            np.testing.assert_array_equal(g, w)
    assert len(sketches) == 1


def test_an_input_pending_on_another_tape_is_computed_first():
    """The in-order run takes only values that are ready; the full run settles the others."""
    _, head = _model()
    x = np.linspace(-1, 1, DIM).astype(np.float32)
    other = tape.Tape(lazy=True)
    previous, tape.tape.state.tape = tape.tape.state.tape, other
    try:
        h = ops.tanh(tape.Variable(x))  # (no gradient flows into another tape)
    finally:
        tape.tape.state.tape = previous
    assert h._pending is other
    with tape.lazy(autobatch=False):
        tape.reset_global_tape()
        loss = head(h * 2.0).sum()
        tape.backward(loss)
        got = [loss.numpy()] + [p.grad().numpy().copy() for p in head.params()]
    for p in head.params():
        p.clear_grad()
    tape.reset_global_tape()
    loss = head(ops.tanh(tape.Variable(x)) * 2.0).sum()
    tape.backward(loss)
    want = [loss.numpy()] + [p.grad().numpy() for p in head.params()]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("autobatch", ["auto", False])  # (batched, then in tape order)
def test_a_kernel_error_in_a_new_structures_forward_names_the_op_and_the_users_line(
    monkeypatch, autobatch
):
    from ops.registry import REGISTRY

    defn = REGISTRY["tanh"]

    def broken(xp, attrs, x):
        raise RuntimeError("injected")

    cell, head = _model()
    x = tape.Variable(np.ones(DIM, np.float32))
    with tape.lazy(autobatch=autobatch):
        t = tape.reset_global_tape()
        loss = head(ops.tanh(x)).sum()
        monkeypatch.setattr(defn, "kernel", broken)
        with pytest.raises(tape.ExecutionError, match="injected") as raised:
            tape.backward(loss)
        monkeypatch.undo()
        assert raised.value.op == "tanh"
        assert "test_fresh_backward.py" in str(raised.value)
        assert t._pending_ops == []  # the failed run's ops left the pending list
        assert all(p.grad() is None for p in head.params())
        tape.reset_global_tape()
        loss = head(ops.tanh(x)).sum()
        tape.backward(loss)  # the next step runs
        assert np.isfinite(loss.numpy())


def test_a_repeated_structure_records_its_gradient_ops_and_runs_them_as_a_compiled_plan():
    model = _model()
    want_loss, want, _ = _step(model, [2, 3], lazy=False)
    for _ in range(4):
        loss, got, t = _step(model, [2, 3], lazy=True)
        np.testing.assert_allclose(loss, want_loss, rtol=1e-6)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert t._last_plan is not None  # (forward and backward's fourth sighting compiled it)
    fused = [line for line in tape.explain(t).splitlines() if "fused[" in line]
    assert any("tanh_grad" in line for line in fused), "the backward runs inside the plan"


def test_a_tape_made_by_hand_keeps_its_gradient_ops_for_programs():
    cell, head = _model()
    recording = tape.Tape(lazy=True)
    previous, tape.tape.state.tape = tape.tape.state.tape, recording
    try:
        with tape.lazy():
            loss = head(cell(tape.Variable(np.ones(DIM, np.float32)))).sum()
            tape.backward(loss)
    finally:
        tape.tape.state.tape = previous
    types = [op.type for op in tape.Program.from_tape(recording).global_block().ops]
    assert "tanh_grad" in types and "matmul" in types


def test_an_optimizer_step_after_a_fresh_backward_updates_as_in_eager_mode():
    def train(lazy):
        model = _model()
        opt = optim.SGD(lr=0.1)
        for lengths in ([2, 1], [3], [1, 1, 2]):
            _step(model, lengths, lazy, options={"exact": True})
            with tape.lazy(lazy, exact=True):  # (a compiled update may fuse: exact is bitwise)
                opt(model[0].params() + model[1].params())
        return [p.numpy().copy() for p in model[0].params() + model[1].params()]

    for got, want in zip(train(True), train(False), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_failing_gradient_kernel_leaves_the_step_resumable(monkeypatch):
    """A gradient kernel that fails once: backward raises, the parameters keep no partial
    gradient, and the same call again completes with eager mode's gradients."""
    model = _model()
    _, want, _ = _step(model, [2, 2], lazy=False)
    from ops.registry import REGISTRY

    defn = REGISTRY["tanh_grad"]
    kernel, calls = defn.kernel, []

    def failing_once(xp, attrs, *args):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected")
        return kernel(xp, attrs, *args)

    cell, head = model
    for param in cell.params() + head.params():
        param.clear_grad()
    rng = np.random.default_rng(1)
    with tape.lazy():
        tape.reset_global_tape()
        losses = []
        for length in [2, 2]:
            h = tape.Variable(rng.standard_normal(DIM).astype(np.float32))
            for _ in range(length):
                h = cell(h) + h
            losses.append(head(h).sum())
        loss = ops.stack(losses).mean()
        monkeypatch.setattr(defn, "kernel", failing_once)
        with pytest.raises(tape.ExecutionError, match="injected"):
            tape.backward(loss)
        assert all(p.grad() is None for p in cell.params() + head.params())
        tape.backward(loss)  # resumes where it stopped
        got = [p.grad().numpy() for p in cell.params() + head.params()]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
