"""Call regions (``tape.call_region``): a lazy step's traced calls recorded as rows and run as
one op, group by group, forward and backward. Each test compares with the same code run
eagerly (or with one op per call, ``call_region.ENABLED = False``)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ops
import tape
from tape import call_region
from tape.errors import ExecutionError, GraphError

HIDDEN = 4


def _params(seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    params = {
        "wx": rng.standard_normal((3, 2 * HIDDEN)) * 0.5,
        "ul": rng.standard_normal((HIDDEN, 2 * HIDDEN)) * 0.5,
        "ur": rng.standard_normal((HIDDEN, 2 * HIDDEN)) * 0.5,
        "b": rng.standard_normal(2 * HIDDEN) * 0.1,
        "wo": rng.standard_normal((HIDDEN, 3)) * 0.5,
    }
    out = {}
    for name, value in params.items():
        var = tape.Variable(value.astype(dtype), requires_grad=True, name=name)
        var.persistable = True
        out[name] = var
    return out


def _model(p):
    """A binary tree cell (leaf, node) and a loss, as plain functions of Variables."""

    def leaf(x):
        z = ops.matmul(x, p["wx"]) + p["b"]
        return ops.tanh(z[:HIDDEN]), ops.sigmoid(z[HIDDEN:])

    def node(hl, cl, hr, cr):
        z = ops.matmul(hl, p["ul"]) + ops.matmul(hr, p["ur"]) + p["b"]
        c = ops.sigmoid(z[:HIDDEN]) * cl + ops.tanh(z[HIDDEN:]) * cr
        return ops.tanh(c), c

    def loss(h, label):
        return (ops.matmul(h, p["wo"]) * label).sum()

    return leaf, node, loss


def _random_tree(rng, leaves):
    if leaves == 1:
        return int(rng.integers(5))
    left = int(rng.integers(1, leaves))
    return (_random_tree(rng, left), _random_tree(rng, leaves - left))


def _run(trees, mode, hold=False, seed=0):
    """(loss, gradients, held values) of the trees' summed losses; ``mode``: "eager",
    "region" or "calls" (one op per call)."""
    p = _params(seed)
    leaf, node, loss = _model(p)
    if mode != "eager":
        leaf, node, loss = tape.traced(leaf), tape.traced(node), tape.traced(loss)
    words = np.random.default_rng(seed + 1).standard_normal((5, 3))
    held = []

    def encode(tree):
        if isinstance(tree, int):
            return leaf(words[tree])
        pair = node(*encode(tree[0]), *encode(tree[1]))
        if hold:
            held.append(pair[1])
        return pair

    previous = call_region.ENABLED
    call_region.ENABLED = mode == "region"
    try:
        tape.reset_global_tape()
        with tape.lazy(enabled=mode != "eager"):
            labels = np.eye(3)
            losses = [loss(encode(t)[0], labels[k % 3]) for k, t in enumerate(trees)]
            total = ops.stack(losses).sum()
            tape.backward(total)
            values = [v.numpy().copy() for v in held]
            result = float(total.numpy()), {k: _grad(v) for k, v in p.items()}
            ops_seen = [op.type for op in tape.get_global_tape().ops]
    finally:
        call_region.ENABLED = previous
    return result, values, ops_seen


def _grad(var):
    """A parameter's gradient, zeros where none reached it (a tree without nodes)."""
    grad = var.grad()
    return np.zeros(var.shape) if grad is None else grad.numpy().copy()


def _assert_close(got, want):
    (loss, grads), (want_loss, want_grads) = got, want
    assert loss == pytest.approx(want_loss, rel=1e-10, abs=1e-12)
    for name, value in want_grads.items():
        np.testing.assert_allclose(grads[name], value, rtol=1e-9, atol=1e-11, err_msg=name)


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 7), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
    hold=st.booleans(),
)
def test_random_forests_batched_as_one_region_equal_eager(sizes, seed, hold):
    """Trees of random shapes, one call per leaf and node: the region's values, gradients
    and the intermediate results the user holds equal eager mode's and one op per call's."""
    rng = np.random.default_rng(seed)
    trees = [_random_tree(rng, n) for n in sizes]
    eager, eager_held, _ = _run(trees, "eager", hold, seed)
    region, region_held, _ = _run(trees, "region", hold, seed)
    calls, calls_held, _ = _run(trees, "calls", hold, seed)
    _assert_close(region, eager)
    _assert_close(calls, eager)
    for got, want in zip(region_held, eager_held, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_ops_between_calls_join_the_region_as_rows():
    """Ops with a batch rule recorded among the calls (a lookup feeding them, an elementwise
    op between two calls, the losses' sum) are rows of the region too: one op on the tape,
    and the values and gradients of eager mode."""
    got = {}
    for mode in ("eager", "region"):
        table = tape.Variable(np.random.default_rng(1).standard_normal((5, 2)), requires_grad=True)
        w, f = _pair()
        tape.reset_global_tape()
        with tape.lazy(enabled=mode == "region"):
            losses = []
            for sentence in ([0, 3, 1], [4, 4], [2]):
                h = tape.Variable(np.zeros(2))
                for word in sentence:
                    x = ops.lookup_table(table, tape.Variable(np.array(word)))
                    h, c = f(h, x)
                    h = ops.tanh(h) * 0.5 + c
                losses.append(h.sum())
            if mode == "region":
                assert tape.get_global_tape()._region is not None  # (nothing sealed it)
            tape.backward(ops.stack(losses).sum())
            got[mode] = table.grad().numpy().copy(), w.grad().numpy().copy()
    for a, b in zip(got["region"], got["eager"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_a_repeated_structure_runs_as_a_region_every_step():
    trees = [((0, 1), 2), (3, (4, (0, 1)))]
    want, _, _ = _run(trees, "eager")
    for _ in range(3):
        got, _, seen = _run(trees, "region")
        _assert_close(got, want)


def test_a_step_of_calls_is_one_op_and_its_gradient_one_more():
    trees = [((0, 1), 2), (3, (4, (0, 1)))]
    _, _, seen = _run(trees, "region")
    assert "call" not in seen
    assert seen.count("call_region") <= 1  # (the backward drops what it ran)


def _pair():
    w = tape.Variable(np.array([[0.5, -1.0], [2.0, 0.25]]), requires_grad=True)
    w.persistable = True
    f = tape.traced(lambda h, x: (ops.tanh(ops.matmul(h, w)) + x, h * x))
    return w, f


def test_an_op_reading_a_result_seals_the_region_and_later_calls_open_another():
    """The tape stays in order: an ordinary op that reads a call's result comes after the
    calls it reads, and calls after it (reading it) go into a new region."""
    w, f = _pair()
    results = {}
    for mode in ("eager", "region"):
        w.clear_grad()
        tape.reset_global_tape()
        with tape.lazy(enabled=mode == "region"):
            x = tape.Variable(np.array([1.0, -2.0]))
            h, c = f(x, x)
            squashed = ops.tanh(h) * 2.0  # (an ordinary op: the region is sealed here)
            h2, c2 = f(squashed, c)
            h3, _ = f(h2, c2)
            loss = (h3 * c).sum()
            tape.backward(loss)
            kinds = [op.type for op in tape.get_global_tape()._pending_ops]
            results[mode] = float(loss.numpy()), w.grad().numpy().copy()
            assert not kinds  # (all ran)
    assert results["region"][0] == pytest.approx(results["eager"][0], rel=1e-12)
    np.testing.assert_allclose(results["region"][1], results["eager"][1], rtol=1e-12)


def test_reading_a_value_midway_runs_the_calls_so_far_and_the_step_goes_on():
    w, f = _pair()
    tape.reset_global_tape()
    with tape.lazy():
        x = tape.Variable(np.array([1.0, -2.0]))
        h, c = f(x, x)
        early = h.numpy().copy()  # (seals and runs the region)
        h2, _ = f(h, c)
        late = h2.numpy()
    want = np.tanh(np.array([1.0, -2.0]) @ w.numpy()) + np.array([1.0, -2.0])
    np.testing.assert_allclose(early, want, rtol=1e-12)
    want2 = np.tanh(want @ w.numpy()) + np.array([1.0, -2.0]) ** 2
    np.testing.assert_allclose(late, want2, rtol=1e-12)


def test_held_results_keep_their_values_after_later_steps():
    w, f = _pair()
    kept = []
    for step in range(3):
        tape.reset_global_tape()
        with tape.lazy():
            x = tape.Variable(np.full(2, float(step)))
            h, _ = f(x, x)
            kept.append((h, h.numpy().copy()))
    for h, value in kept:
        np.testing.assert_array_equal(h.numpy(), value)


def test_a_parameter_updated_after_the_calls_is_read_as_it_was_when_they_were_recorded():
    """A new value given to a parameter the open region's calls read: the calls before it
    read the old value, as eagerly."""
    results = {}
    for mode in ("eager", "region"):
        w, f = _pair()
        tape.reset_global_tape()
        with tape.lazy(enabled=mode == "region"):
            x = tape.Variable(np.array([1.0, -2.0]))
            h, _ = f(x, x)
            w.set_value(w.numpy() * 2.0)
            h2, _ = f(x, x)
            results[mode] = h.numpy().copy(), h2.numpy().copy()
    for got, want in zip(results["region"], results["eager"], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_calls_passed_different_parameters_run_as_different_groups():
    rng = np.random.default_rng(3)
    ws = [tape.Variable(rng.standard_normal((2, 2)), requires_grad=True) for _ in range(2)]
    f = tape.traced(lambda w, x: ops.tanh(ops.matmul(x, w)).sum())
    got = {}
    for mode in ("eager", "region"):
        for w in ws:
            w.clear_grad()
        tape.reset_global_tape()
        with tape.lazy(enabled=mode == "region"):
            xs = [tape.Variable(rng.standard_normal(2)) for _ in range(4)]
            loss = ops.stack([f(ws[k % 2], x) for k, x in enumerate(xs)]).sum()
            tape.backward(loss)
            got[mode] = [w.grad().numpy().copy() for w in ws]
        rng = np.random.default_rng(3)
        rng.standard_normal((2, 2, 2))
    for a, b in zip(got["region"], got["eager"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_an_input_computed_outside_gets_its_gradient_per_call():
    """An embedding looked up by an ordinary op and passed to calls: each lookup's
    gradient comes back from the calls that read it, two members of a group reading the
    same one included (two chains over one sentence)."""
    got = {}
    for mode in ("eager", "region"):
        table = tape.Variable(np.random.default_rng(0).standard_normal((4, 2)), requires_grad=True)
        w, f = _pair()
        tape.reset_global_tape()
        with tape.lazy(enabled=mode == "region"):
            h = g = tape.Variable(np.zeros(2))
            for word in (0, 3, 3, 1):
                x = ops.lookup_table(table, tape.Variable(np.array(word)))
                h, _ = f(h, x)
                g, _ = f(g * 0.5, x)
            tape.backward(h.sum() + (g * g).sum())
            got[mode] = table.grad().numpy().copy(), w.grad().numpy().copy()
    for a, b in zip(got["region"], got["eager"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_mixed_dtypes_keep_their_own_stores():
    rng = np.random.default_rng(0)
    w32 = tape.Variable(rng.standard_normal((2, 2)).astype(np.float32), requires_grad=True)
    w64 = tape.Variable(rng.standard_normal((2, 2)), requires_grad=True)
    f = tape.traced(lambda x, w: ops.tanh(ops.matmul(x, w)))
    got = {}
    for mode in ("eager", "region"):
        w32.clear_grad()
        w64.clear_grad()
        tape.reset_global_tape()
        with tape.lazy(enabled=mode == "region"):
            a = f(tape.Variable(np.ones(2, np.float32)), w32)
            b = f(tape.Variable(np.ones(2)), w64)
            a, b = f(a, w32), f(b, w64)
            tape.backward(a.sum() + ops.cast(b.sum(), out_dtype="float32"))
            got[mode] = a.numpy().copy(), b.numpy().copy(), w32.grad().numpy(), w64.grad().numpy()
    for x, y in zip(got["region"], got["eager"], strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_allclose(x, y, rtol=1e-6)


def test_without_gradients_the_calls_only_run_forward():
    w, f = _pair()
    tape.reset_global_tape()
    with tape.lazy(), tape.no_grad():
        x = tape.Variable(np.array([1.0, -2.0]))
        h, c = f(x, x)
        h2, _ = f(h, c)
        value = h2.numpy()
        assert not h2.requires_grad
    want = np.tanh(np.array([1.0, -2.0]) @ w.numpy()) + np.array([1.0, -2.0])
    np.testing.assert_allclose(value, np.tanh(want @ w.numpy()) + np.array([1.0, -2.0]) ** 2)


def test_a_kernel_error_inside_a_group_names_the_op_and_the_line_and_the_tape_goes_on():
    w = tape.Variable(np.eye(2), requires_grad=True)
    f = tape.traced(lambda x: ops.cholesky(ops.matmul(x, w)))
    tape.reset_global_tape()
    with pytest.raises(ExecutionError) as info:
        with tape.lazy():
            bad = f(tape.Variable(-np.eye(2)))  # (not positive definite)
            bad.numpy()
    assert "cholesky" in str(info.value)
    assert "test_call_region.py" in str(info.value)
    tape.reset_global_tape()
    with tape.lazy():
        good = f(tape.Variable(np.eye(2) * 4.0)).numpy()
    np.testing.assert_allclose(good, np.eye(2) * 2.0)


def test_a_gradient_with_respect_to_a_result_other_calls_read_is_its_whole_gradient():
    """``tape.grad`` with respect to a call's result that later calls of the region read
    (and that the loss reads directly too): the gradient through both, as eagerly."""
    got = {}
    for mode in ("eager", "region"):
        w, f = _pair()
        tape.reset_global_tape()
        with tape.lazy(enabled=mode == "region"):
            x = tape.Variable(np.array([1.0, -2.0]))
            h, c = f(x, x)
            h2, _ = f(h, c)
            loss = h2.sum() + (h * h).sum()
            (g,) = tape.grad(loss, [h])
            got[mode] = g.numpy().copy()
    np.testing.assert_allclose(got["region"], got["eager"], rtol=1e-12)


def test_a_gradient_with_respect_to_a_result_no_other_call_reads_is_given():
    w, f = _pair()
    got = {}
    for mode in ("eager", "region"):
        tape.reset_global_tape()
        with tape.lazy(enabled=mode == "region"):
            x = tape.Variable(np.array([1.0, -2.0]))
            h, c = f(x, x)
            (g,) = tape.grad((h * h).sum(), [h])
            got[mode] = g.numpy().copy()
    np.testing.assert_allclose(got["region"], got["eager"], rtol=1e-12)


def test_differentiating_the_gradient_again_is_refused_with_a_hint():
    w, f = _pair()
    tape.reset_global_tape()
    with tape.lazy():
        x = tape.Variable(np.array([1.0, -2.0]), requires_grad=True) * 1.0  # (not a leaf)
        h, c = f(x, x)
        with pytest.raises(GraphError, match="autobatch=False"):
            tape.grad((h * c).sum(), [x], create_graph=True)


def test_autobatch_false_and_exact_record_one_op_per_call():
    w, f = _pair()
    for options in ({"autobatch": False}, {"exact": True}):
        tape.reset_global_tape()
        with tape.lazy(**options):
            x = tape.Variable(np.array([1.0, -2.0]))
            h, c = f(x, x)
            f(h, c)[0].numpy()
            kinds = {op.type for op in tape.get_global_tape().ops}
        assert "call_region" not in kinds


def test_a_call_interrupted_while_recorded_leaves_the_region_consistent(monkeypatch):
    """KeyboardInterrupt in the middle of recording a call (here: looking for the user's
    line): the partial row is dropped, and the calls before and after it run."""
    w, f = _pair()
    tape.reset_global_tape()
    with tape.lazy():
        x = tape.Variable(np.array([1.0, -2.0]))
        h, c = f(x, x)

        def interrupted(skip=1):
            raise KeyboardInterrupt

        monkeypatch.setattr(call_region, "user_location", interrupted)
        with pytest.raises(KeyboardInterrupt):
            f(h, c)
        monkeypatch.undo()
        h2, _ = f(h, c)
        value = h2.numpy()
    first = np.tanh(np.array([1.0, -2.0]) @ w.numpy()) + np.array([1.0, -2.0])
    np.testing.assert_allclose(value, np.tanh(first @ w.numpy()) + np.array([1.0, -2.0]) ** 2)


def test_no_gradient_flows_through_a_call_recorded_without_gradients():
    """A call recorded under no_grad and calls recorded with gradients, of one function at one
    level, run as separate groups: the gradient reaching the first's result (through a call
    grouped with one that reads a result needing it) stops there, as eagerly."""
    got = {}
    for mode in ("eager", "region"):
        w, f = _pair()
        tape.reset_global_tape()
        with tape.lazy(enabled=mode == "region"):
            u, v = tape.Variable(np.array([1.0, -2.0])), tape.Variable(np.array([0.5, 3.0]))
            with tape.no_grad():
                a, _ = f(u, v)
            b, _ = f(u * 1.0, v)
            c, _ = f(v * 1.0, u)
            d, _ = f(a, c)  # (one group with e: its first input a, then b)
            e, _ = f(b, c)
            tape.backward((d + e).sum())
            got[mode] = w.grad().numpy().copy()
    np.testing.assert_allclose(got["region"], got["eager"], rtol=1e-12)


def test_calls_interleaved_with_ops_reading_them_fall_back_to_one_op_each():
    """Per example, a call, an op reading its result that cannot be a row (no batch rule:
    ``cumsum``), a call reading that: regions would hold a call each, so after the first the
    step records its calls one op each (which the autobatching pass groups across examples);
    values and gradients equal eager mode's."""
    got, kinds = {}, None
    for mode in ("eager", "region"):
        w, f = _pair()
        tape.reset_global_tape()
        with tape.lazy(enabled=mode == "region"):
            losses = []
            for k in range(6):
                x = tape.Variable(np.array([1.0, -2.0]) * (k + 1) / 6)
                h, c = f(x, x)
                h, _ = f(ops.cumsum(h, axis=0), c)  # (an op reading the call's result)
                losses.append(h.sum())
            if mode == "region":
                kinds = [op.type for op in tape.get_global_tape()._pending_ops]
            tape.backward(ops.stack(losses).sum())
            got[mode] = w.grad().numpy().copy()
    assert kinds.count("call_region") == 1 and kinds.count("call") == 11
    np.testing.assert_allclose(got["region"], got["eager"], rtol=1e-12)


_BETWEEN = {
    "call": None,  # (a call of the traced pair)
    "tanh": lambda h, c: ops.tanh(h),
    "scale": lambda h, c: h * 0.5,
    "mix": lambda h, c: h + c,
    "cumsum": lambda h, c: ops.cumsum(h, axis=0),  # (no batch rule: seals the region)
}


@settings(max_examples=25, deadline=None)
@given(
    steps=st.lists(st.sampled_from(sorted(_BETWEEN)), max_size=6).map(lambda s: ["call", *s]),
    examples=st.integers(1, 5),
    hold=st.booleans(),
)
def test_random_mixes_of_calls_and_ops_equal_eager(steps, examples, hold):
    """Per example, a random sequence of calls and ops between them (rows of the region, or
    ops that seal it): values, parameter gradients and a held intermediate's gradient
    (``tape.grad``) equal eager mode's."""
    got = {}
    for mode in ("eager", "region"):
        w, f = _pair()
        tape.reset_global_tape()
        with tape.lazy(enabled=mode == "region"):
            losses, held = [], []
            for k in range(examples):
                h = tape.Variable(np.array([1.0, -0.5]) * (k + 1)) * 1.0
                c = tape.Variable(np.array([0.25, 2.0]))
                for step in steps:
                    if step == "call":
                        h, c = f(h, c)
                    else:
                        h = _BETWEEN[step](h, c)
                held.append(h)
                losses.append((h * h).sum())
            total = ops.stack(losses).sum()
            grads = tape.grad(total, [w] + (held[:1] if hold else []), retain_graph=True)
            got[mode] = float(total.numpy()), [g.numpy().copy() for g in grads]
    assert got["region"][0] == pytest.approx(got["eager"][0], rel=1e-10)
    for a, b in zip(got["region"][1], got["eager"][1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def _gated(w):
    return lambda h, x: ops.tanh(h * w) * x


@pytest.mark.parametrize("calls", [3, 100], ids=["few rows", "many rows"])
def test_a_result_read_twice_by_one_groups_argument_gets_both_gradients(calls):
    """Calls of one group reading the same result in the same argument (and an input from
    outside read the same way): each read adds its gradient (an indexed add would keep one)."""
    got = {}
    for mode in ("eager", "region"):
        w = tape.Variable(np.array([0.5, -1.5, 2.0]), requires_grad=True)
        f = tape.traced(_gated(w))
        tape.reset_global_tape()
        with tape.lazy(enabled=mode == "region"):
            base = tape.Variable(np.array([0.3, -0.2, 0.9]), requires_grad=True)
            outside = base * 2.0  # (computed before the region opens: an input from outside)
            shared = f(outside, base * 1.0)  # (a row every later call reads)
            outs = [f(shared, outside) for _ in range(calls)]
            total = ops.stack([o.sum() for o in outs]).sum()
            grads = tape.grad(total, [w, base])
            got[mode] = float(total.numpy()), [g.numpy().copy() for g in grads]
    assert got["region"][0] == pytest.approx(got["eager"][0], rel=1e-12)
    for a, b in zip(got["region"][1], got["eager"][1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10)
