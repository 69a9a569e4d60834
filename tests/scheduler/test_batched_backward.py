"""The backward of an autobatched forward batches as the forward did (tape.batched_backward):
a per-example model's gradients are eager mode's (within the rounding of sums taken in another
order), members a gradient did not reach send none on, inputs that need no gradient get none,
and where a group cannot be differentiated as one the members are, one by one."""

import contextlib
import importlib
import sys

import numpy as np
import pytest

import ops
import tape
from ops import batching
from ops.registry import register, unregister
from tape import batched_backward, replay
from tape.errors import FluidError

DIM = 5


def _params():
    rng = np.random.default_rng(0)
    w = tape.Variable(rng.standard_normal((2 * DIM, DIM)) / DIM, requires_grad=True)
    b = tape.Variable(rng.standard_normal(DIM), requires_grad=True)
    table = tape.Variable(rng.standard_normal((9, DIM)), requires_grad=True)
    for name, var in (("w", w), ("b", b), ("table", table)):
        var.name, var.persistable = name, True
    return w, b, table


def _tree(leaves, params, seed):
    """A per-example tree RNN over ``leaves`` ids, combined left to right: a node is
    tanh(concat(left, right) @ W + b); returns the root."""
    w, b, table = params
    rng = np.random.default_rng(seed)
    nodes = [ops.lookup_table(table, tape.Variable(np.array([i]))) for i in leaves]
    while len(nodes) > 1:
        i = int(rng.integers(len(nodes) - 1))
        joined = ops.concat([nodes[i], nodes[i + 1]], axis=-1)
        nodes[i : i + 2] = [ops.tanh(ops.matmul(joined, w) + b)]
    return nodes[0]


def _forget_structures():
    lazy = importlib.import_module("tape.lazy")  # (the module: tape.lazy is the context manager)
    replay.forget()
    for remembered in (lazy._SEEN, lazy._BATCHED):
        remembered.clear()


def _step(forest, lazy, used=None, inputs=None):
    """Gradients of the sum of the roots' squares (of the trees ``used``, default all), and of
    per-example inputs ``inputs`` (scales, requires_grad flags) multiplied into the roots."""
    params = _params()
    used_tapes.clear()
    _forget_structures()  # (each step here is a first sighting, as a new tree batch is)

    def run():
        tape.reset_global_tape()
        roots = [_tree(leaves, params, seed) for seed, leaves in enumerate(forest)]
        scales = []
        if inputs is not None:
            scales = [tape.Variable(np.full(DIM, s), requires_grad=r) for s, r in inputs]
            roots = [root * scale for root, scale in zip(roots, scales, strict=True)]
        chosen = roots if used is None else [roots[i] for i in used]
        loss = ops.sum([ops.reduce_sum(r * r) for r in chosen])
        tape.backward(loss)
        used_tapes.append(tape.get_global_tape())
        return loss, scales

    if lazy is None:
        loss, scales = run()
        explained = None
    else:
        with tape.lazy(**lazy):
            loss, scales = run()
            explained = tape.explain()
    grads = [None if p.grad() is None else p.grad().numpy().copy() for p in params]
    grads += [None if s.grad() is None else s.grad().numpy().copy() for s in scales]
    return loss.numpy(), grads, explained


used_tapes = []  # (the tape of the last step)
FOREST = [[1, 2, 3, 4], [5, 6, 7], [1, 8, 2, 3, 4], [2, 2], [7, 6, 5, 4, 3]]
BATCHED = {"compile": False, "autobatch": True}


def _assert_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert (g is None) == (w is None)
        if w is not None:
            np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-13)


def test_a_per_example_models_backward_batches_as_its_forward_did():
    want_loss, want, _ = _step(FOREST, None)
    loss, got, explained = _step(FOREST, BATCHED)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-12)
    _assert_close(got, want)
    assert "backward batched as the forward" in explained, explained
    lines = explained.splitlines()
    at = next(i for i, s in enumerate(lines) if s.startswith("backward batched"))
    assert not lines[at].startswith("backward batched as the forward: 0 ops"), lines[at]
    per_type = {s.split(":")[0].strip() for s in lines[at + 1 :]}  # (one line per op type)
    assert {"matmul", "concat", "tanh", "lookup_table"} <= per_type, explained


def test_members_a_gradient_did_not_reach_send_none_on():
    inputs = [(1.5, True), (0.5, True), (2.0, True), (1.0, True), (0.7, True)]
    want_loss, want, _ = _step(FOREST, None, used=[0, 2, 4], inputs=inputs)
    loss, got, _ = _step(FOREST, BATCHED, used=[0, 2, 4], inputs=inputs)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-12)
    _assert_close(got, want)
    assert got[4] is None and got[6] is None  # (the unused trees' scales: no gradient)


def test_inputs_that_need_no_gradient_get_none_beside_members_that_do():
    inputs = [(1.5, True), (0.5, False), (2.0, True), (1.0, False), (0.7, True)]
    want_loss, want, _ = _step(FOREST, None, inputs=inputs)
    _, got, _ = _step(FOREST, BATCHED, inputs=inputs)
    _assert_close(got, want)
    assert got[4] is None and got[6] is None


def test_a_group_that_does_not_read_as_one_op_is_differentiated_member_by_member(monkeypatch):
    _, want, _ = _step(FOREST, None)
    monkeypatch.setattr(batching.MATMUL, "as_op", lambda *args: None)
    _, got, explained = _step(FOREST, BATCHED)
    _assert_close(got, want)
    assert "backward batched as the forward" in explained  # (the other groups still were)


def test_a_batched_backward_that_fails_leaves_the_op_by_op_backward_to_run(monkeypatch):
    _, want, _ = _step(FOREST, None)

    def failing(*args):
        raise RuntimeError("a group could not be differentiated")

    monkeypatch.setattr(batched_backward, "_as_one", failing)
    _, got, explained = _step(FOREST, BATCHED)
    _assert_close(got, want)
    assert "backward batched" not in explained
    # (said, with why: a fall back costs the batching and is otherwise unseen)
    assert "backward op by op: batching it as the forward failed (RuntimeError: a group" in (
        explained
    )


def test_the_step_leaves_no_op_on_the_tape():
    _step(FOREST, BATCHED)
    (used,) = used_tapes
    assert used.ops == [] and used._pending_ops == []  # as an eager step's


@pytest.fixture
def failing_gradient():
    """An elementwise op whose gradient maker fails."""

    @register("doubled", inputs=("X",), infer=lambda attrs, x: (x.shape, x.dtype), elementwise=True)
    def doubled(xp, attrs, x):
        return 2 * x

    @doubled.gradient
    def _(g):
        raise ValueError("no gradient here")

    yield doubled
    unregister("doubled")


def test_a_failing_gradient_is_reported_as_op_by_op(failing_gradient):
    def run(lazy):
        tape.reset_global_tape()
        params = _params()
        roots = [failing_gradient(_tree(leaves, params, s)) for s, leaves in enumerate(FOREST)]
        with pytest.raises(FluidError) as caught:
            tape.backward(ops.sum([ops.reduce_sum(r) for r in roots]))
        return str(caught.value)

    want = run(None)
    with tape.lazy(**BATCHED):
        got = run(BATCHED)
    assert "no gradient here" in got and "'doubled'" in got
    assert got.splitlines()[0] == want.splitlines()[0]


def _wiring_step(lazy, wire, scaled=False):
    """A layer of per-example tanh(x @ W) nodes (``scaled``: tanh(x * c + W[0])), then products
    of nodes paired by ``wire`` (example k's product reads nodes wire[k]): the gradients of W
    and of the inputs."""
    rng = np.random.default_rng(3)
    w = tape.Variable(rng.standard_normal((DIM, DIM)) / DIM, requires_grad=True)
    # (inputs needing no gradient: a leaf that needs one is read as a parameter, not batched)
    xs = [tape.Variable(rng.standard_normal(DIM), requires_grad=not scaled) for _ in range(6)]
    _forget_structures()
    with tape.lazy(**lazy) if lazy else contextlib.nullcontext():
        tape.reset_global_tape()
        c, v = tape.Variable(np.linspace(0.5, 1.5, DIM)), w[0]
        nodes = [ops.tanh(x * c + v if scaled else ops.matmul(x, w)) for x in xs]
        products = [nodes[a] * nodes[b] for a, b in wire]
        tape.backward(ops.sum([ops.reduce_sum(p) for p in products]))
        explained = tape.explain() if lazy else ""
    grads = [None if v.grad() is None else v.grad().numpy().copy() for v in [w, *xs]]
    return grads, explained


@pytest.mark.parametrize(
    "wire",
    [
        [(0, 1), (2, 3), (4, 5)],  # each product group reads its operands' rows in order
        [(5, 4), (3, 2), (1, 0)],  # in reverse: the rows are added by index
        [(0, 0), (1, 1), (2, 5), (5, 2)],  # a node read twice by one group: its rows add up
        [(0, 1), (0, 2), (3, 0), (4, 4)],  # twice by one operand, every row a group's
    ],
    ids=["in-order", "reversed", "read-twice", "one-operand-twice"],
)
def test_gradients_flow_between_groups_as_stacked_rows(wire):
    want, _ = _wiring_step(None, wire)
    got, explained = _wiring_step(BATCHED, wire)
    _assert_close(got, want)
    assert "backward batched as the forward" in explained, explained


def _mixed_producers_step(lazy):
    """Products whose operands come from two groups of one row shape (tanh and sigmoid
    nodes), in no order, and from a node computed alone: the gradients of W."""
    rng = np.random.default_rng(4)
    w = tape.Variable(rng.standard_normal((DIM, DIM)) / DIM, requires_grad=True)
    xs = [tape.Variable(rng.standard_normal(DIM)) for _ in range(7)]
    _forget_structures()
    with tape.lazy(**lazy) if lazy else contextlib.nullcontext():
        tape.reset_global_tape()
        a = [ops.tanh(ops.matmul(x, w)) for x in xs[:3]]
        b = [ops.sigmoid(ops.matmul(x, w)) for x in xs[3:6]]
        alone = ops.exp(ops.matmul(xs[6], w) * 0.5)
        products = [a[0] * b[2], b[0] * a[1], a[2] * alone, b[1] * a[0], alone * b[2]]
        tape.backward(ops.sum([ops.reduce_sum(p) for p in products]))
        explained = tape.explain() if lazy else ""
    return [w.grad().numpy().copy()], explained


def test_a_group_reading_rows_of_several_groups_and_of_an_op_alone_gets_eagers_gradients():
    want, _ = _mixed_producers_step(None)
    got, explained = _mixed_producers_step(BATCHED)
    _assert_close(got, want)
    assert "backward batched as the forward" in explained, explained


def _stacked_step(lazy, axis):
    """Per-example nodes tanh(x @ W) (a group) and one node computed alone, stacked along
    ``axis`` and weighted, so that each slice's gradient differs: the gradients of W and
    of the alone node's input."""
    rng = np.random.default_rng(5)
    w = tape.Variable(rng.standard_normal((DIM, DIM)) / DIM, requires_grad=True)
    xs = [tape.Variable(rng.standard_normal(DIM)) for _ in range(4)]
    lone = tape.Variable(rng.standard_normal(DIM), requires_grad=True)
    _forget_structures()
    with tape.lazy(**lazy) if lazy else contextlib.nullcontext():
        tape.reset_global_tape()
        nodes = [ops.tanh(ops.matmul(x, w)) for x in xs]
        stacked = ops.stack([nodes[2], nodes[0], ops.exp(lone), nodes[3], nodes[1]], axis=axis)
        weights = tape.Variable(rng.standard_normal(tuple(stacked.shape)))
        tape.backward(ops.reduce_sum(stacked * weights))
        explained = tape.explain() if lazy else ""
    return [w.grad().numpy().copy(), lone.grad().numpy().copy()], explained


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_a_stack_sends_its_slices_gradients_to_the_groups_that_computed_them(axis):
    want, _ = _stacked_step(None, axis)
    got, explained = _stacked_step(BATCHED, axis)
    _assert_close(got, want)
    assert "backward batched as the forward" in explained, explained


def test_a_forward_that_freed_part_of_a_batched_result_still_differentiates_as_eager(
    monkeypatch,
):
    # the products x * c need no gradient and the sum reading them no value, so a run that
    # frees (not the run of every op, which keeps all as eager mode does: here it declines)
    # frees them: the backward then gathers what it reads instead of keeping the forward's
    # batched arrays
    interpret = importlib.import_module("tape.interpret")
    monkeypatch.setattr(interpret, "run_all_batched", lambda tape, heuristic: False)
    runs = []
    gradients = batched_backward.gradients
    monkeypatch.setattr(
        batched_backward, "gradients", lambda *args: runs.append(args[2]) or gradients(*args)
    )
    wire = [(0, 1), (2, 3), (4, 5)]
    want, _ = _wiring_step(None, wire, scaled=True)
    got, _ = _wiring_step(BATCHED, wire, scaled=True)
    _assert_close(got, want)
    (run,) = runs
    _, groups, rules, _, ran, _ = run
    batched = [facts for facts, rule in zip(ran, rules) if rule is not None]
    assert any(facts is None for facts in batched)  # (a result freed in part: not kept)
    assert any(facts is not None for facts in batched)  # (the others kept whole)


def test_a_first_sighting_numbers_its_variables_but_interns_no_op_form(monkeypatch):
    # (its structure is neither looked up nor remembered: tape.structure.keyless)
    structure = importlib.import_module("tape.structure")
    interned = []
    intern = structure.intern
    monkeypatch.setattr(
        structure,
        "intern",
        lambda table, key: interned.append(table is structure._OPS) or intern(table, key),
    )
    _, want, _ = _step(FOREST, None)
    interned.clear()
    _, got, explained = _step(FOREST, BATCHED)
    _assert_close(got, want)
    assert "backward batched as the forward" in explained
    assert not any(interned)  # (variables' descriptions only: leaves and parameters)


def test_a_first_sightings_forward_runs_every_op_batched_without_the_reverse_scan(monkeypatch):
    # (the backward reads nearly every value and drops the ops: nothing to prune or free)
    interpret = importlib.import_module("tape.interpret")
    decided = []
    decide = interpret._decide
    monkeypatch.setattr(interpret, "_decide", lambda *args: decided.append(1) or decide(*args))
    _, want, _ = _step(FOREST, None)
    _, got, explained = _step(FOREST, BATCHED)
    _assert_close(got, want)
    assert "interpreted run, autobatched" in explained, explained
    assert "backward batched as the forward" in explained
    assert decided == []


def test_a_kernel_failing_in_a_first_sightings_batched_forward_names_its_op_and_line(
    monkeypatch,
):
    interpret = importlib.import_module("tape.interpret")
    ran = []
    run_all = interpret.run_all_batched
    monkeypatch.setattr(interpret, "run_all_batched", lambda *a: ran.append(1) or run_all(*a))

    @register(
        "checked_log", inputs=("X",), infer=lambda attrs, x: (x.shape, x.dtype), elementwise=True
    )
    def checked_log(xp, attrs, x):
        if (x <= 0).any():
            raise ValueError("log of a non-positive value")
        return xp.log(x)

    try:
        w, _, _ = _params()
        with tape.lazy(**BATCHED):
            tape.reset_global_tape()
            xs = [tape.Variable(np.full(2 * DIM, v)) for v in (1.0, 2.0, -1.0, 3.0)]
            line = sys._getframe().f_lineno + 1
            logs = [checked_log(ops.matmul(x, w) * x[:DIM]) for x in xs]
            loss = ops.sum([ops.reduce_sum(v) for v in logs])
            with pytest.raises(FluidError) as caught:
                tape.backward(loss)
            message = str(caught.value)
            assert "op 'checked_log'" in message and "non-positive" in message
            assert f"test_batched_backward.py:{line}" in message, message
            assert ran  # (the failure came from the batched run of every op)
            # the tape is not jammed: the next step runs
            tape.reset_global_tape()
            y = ops.reduce_sum(ops.matmul(xs[0], w))
            tape.backward(y)
            np.testing.assert_allclose(w.grad().numpy(), np.tile(xs[0].numpy()[:, None], DIM))
    finally:
        unregister("checked_log")


def test_a_bank_of_gradient_rows_is_zero_in_a_reused_buffer():
    """The stacked rows of a step's groups start at zero even where the bank reuses a buffer
    a previous step left full (its row count rounded up to a power of two, so steps of
    different sizes share it)."""
    from ops import buffers

    shape, rows = (64,), 3000  # (4096 rows of 64 float32: 1 MiB, a pooled size)
    dirty = buffers.empty(np, (4096, *shape), np.float32)
    dirty[...] = np.nan
    address = dirty.ctypes.data
    del dirty
    bank = batched_backward._zeros(np, rows, shape, np.dtype(np.float32))
    assert bank.shape == (rows, *shape) and bank.dtype == np.float32
    assert bank.base is not None and bank.ctypes.data == address  # (the reused buffer)
    assert not bank.any()
