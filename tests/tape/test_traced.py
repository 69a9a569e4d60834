"""tape.traced: a function of Variables runs as itself eagerly and as one ``call`` op lazily,
traced once per signature; calls ready together run as the program vectorised over them; values
and gradients equal the function's own ops (bit for bit unbatched, within rounding batched);
what a trace cannot capture is refused at the user's line.
"""

import gc
import importlib
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layers
import ops
import optim
import tape
from tape import call_region
from tape.errors import ExecutionError, GraphError, InputError, ShapeError
from tests.scheduler.test_autobatch import STEPS
from tests.scheduler.test_autobatch import _params as autobatch_params

H = 4
LAZY_MODES = [
    pytest.param({"autobatch": False}, id="unbatched"),
    pytest.param({"exact": True}, id="exact"),
    pytest.param({"autobatch": True}, id="batched"),
    pytest.param({}, id="default"),
]


@pytest.fixture
def one_op_per_call(monkeypatch):
    """Calls recorded one op each (``ops.call``), as where no region is used (an observer,
    ``autobatch=False``): the tests using it specify that engine's schedule and batched
    backward; ``tests/tape/test_call_region.py`` specifies regions."""
    monkeypatch.setattr(call_region, "ENABLED", False)


def _tree_params(seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return {
        "w": tape.Variable(rng.standard_normal((2 * H, 5 * H)).astype(dtype), requires_grad=True),
        "b": tape.Variable(rng.standard_normal(5 * H).astype(dtype), requires_grad=True),
        "table": tape.Variable(rng.standard_normal((11, H)).astype(dtype), requires_grad=True),
    }


def _tree_model(p):
    """A Tree-LSTM's leaf (embeds its word) and node, as a DyNet user writes them."""

    def leaf(word):
        x = ops.lookup_table(p["table"], word)
        return ops.tanh(x), ops.sigmoid(x)

    def node(hl, cl, hr, cr):
        z = ops.matmul(ops.concat([hl, hr]), p["w"]) + p["b"]
        i, fl = ops.sigmoid(z[:H]), ops.sigmoid(z[H : 2 * H])
        fr, o = ops.sigmoid(z[2 * H : 3 * H]), ops.sigmoid(z[3 * H : 4 * H])
        c = i * ops.tanh(z[4 * H :]) + fl * cl + fr * cr
        return o * ops.tanh(c), c

    return leaf, node


def _random_tree(rng, leaves):
    trees = [int(w) for w in rng.integers(11, size=leaves)]
    while len(trees) > 1:
        k = int(rng.integers(len(trees) - 1))
        trees[k : k + 2] = [(trees[k], trees[k + 1])]
    return trees[0]


def _forest_step(p, leaf, node, trees, lazy):
    """The mean of the root states' sums over ``trees``; returns (loss, gradients)."""
    tape.reset_global_tape()
    for param in p.values():
        param.clear_grad()

    def encode(tree):
        if isinstance(tree, int):
            return leaf(np.array(tree))
        return node(*encode(tree[0]), *encode(tree[1]))

    def run():
        roots = [encode(tree) for tree in trees]
        loss = ops.stack([(h * c).sum() for h, c in roots]).mean()
        tape.backward(loss)
        return loss

    if lazy is None:
        loss = run()
    else:
        with tape.lazy(**lazy):
            loss = run()
            tape.get_global_tape().realize([loss])
    return float(loss.numpy()), {k: v.grad().numpy().copy() for k, v in p.items()}


def _trees(seed, count=6, sizes=(1, 7)):
    rng = np.random.default_rng(seed)
    return [_random_tree(rng, int(rng.integers(*sizes))) for _ in range(count)]


@pytest.mark.parametrize("lazy", LAZY_MODES)
def test_a_forest_of_traced_calls_equals_the_functions_run_eagerly(lazy):
    p = _tree_params()
    leaf, node = _tree_model(p)
    traced_leaf, traced_node = tape.traced(leaf), tape.traced(node)
    for seed in range(3):  # (new trees every step: a new structure each time)
        trees = _trees(seed)
        want = _forest_step(p, leaf, node, trees, None)
        got = _forest_step(p, traced_leaf, traced_node, trees, lazy)
        if lazy.get("exact") or lazy.get("autobatch") is False:
            assert got[0] == want[0]
            for name in p:
                np.testing.assert_array_equal(got[1][name], want[1][name], err_msg=name)
        else:
            np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
            for name in p:
                np.testing.assert_allclose(got[1][name], want[1][name], rtol=1e-10, atol=1e-12)


def test_with_exact_a_traced_function_records_its_ops_inline():
    """exact=True promises eager mode's bits, nested traced functions included: no call op."""
    w = tape.Variable(np.ones((2, 2)), requires_grad=True)
    inner = tape.traced(lambda x: ops.tanh(ops.matmul(x, w)))
    outer = tape.traced(lambda x: inner(x) * inner(x + 1.0))
    tape.reset_global_tape()
    with tape.lazy(exact=True):
        outer(tape.Variable(np.ones((1, 2)))).sum().numpy()
        assert "call" not in {op.type for op in tape.get_global_tape().ops}
    assert not outer.programs and not inner.programs


@pytest.mark.usefixtures("one_op_per_call")
def test_an_inner_block_with_exact_records_inline_and_the_outer_block_calls_again():
    w = tape.Variable(np.ones((2, 2)), requires_grad=True)
    f = tape.traced(lambda x: ops.tanh(ops.matmul(x, w)))
    x = tape.Variable(np.ones((1, 2)))
    tape.reset_global_tape()
    with tape.lazy():
        with tape.lazy(exact=True):
            f(x).numpy()
            inner = [op.type for op in tape.get_global_tape().ops]
        f(x).sum().numpy()
        outer = [op.type for op in tape.get_global_tape().ops]
    assert "call" not in inner and "matmul" in inner
    assert outer.count("call") == 1


def test_eagerly_a_traced_function_is_the_function():
    p = _tree_params()
    leaf, _ = _tree_model(p)
    traced_leaf = tape.traced(leaf)
    tape.reset_global_tape()
    h, c = traced_leaf(np.array(3))
    np.testing.assert_array_equal(h.numpy(), np.tanh(p["table"].numpy()[3]))
    assert not traced_leaf.programs  # (nothing traced: the function ran)
    assert traced_leaf.__name__ == "leaf"


@pytest.mark.usefixtures("one_op_per_call")
def test_calls_ready_together_run_as_one_batched_call_forward_and_backward():
    p = _tree_params()
    leaf, node = _tree_model(p)
    leaf, node = tape.traced(leaf), tape.traced(node)
    trees = [((1, 2), (3, 4))] * 8
    _forest_step(p, leaf, node, trees, {"autobatch": True})
    counts, _ = tape.get_global_tape()._batched_backward
    # 32 leaves, then 16 and 8 nodes: one group each way (forward and backward)
    groups, members = counts["call"]
    assert groups == 3 and members == 32 + 16 + 8
    text = tape.explain()
    assert "batched call of _tree_model.<locals>.leaf x32" in text, text  # (named)


@pytest.mark.usefixtures("one_op_per_call")
def test_a_call_alone_runs_its_program_vectorised_forward_and_backward():
    """One member: the generated vectorised run beats interpreting the program op by op, and
    its backward reads what the forward kept (a sentence's last words, a lone tree)."""
    w = tape.Variable(np.random.default_rng(0).standard_normal((3, 3)), requires_grad=True)

    def f(x):
        return ops.tanh(ops.matmul(x, w)) * x

    got = {}
    for fn, lazy in ((f, None), (tape.traced(f), {"autobatch": True})):
        tape.reset_global_tape()
        w.clear_grad()
        with tape.lazy(enabled=lazy is not None, **(lazy or {})):
            x = tape.Variable(np.array([0.5, -1.0, 2.0])) * 1.0
            loss = fn(x).sum()
            tape.backward(loss)
            got[lazy is None] = float(loss.numpy()), w.grad().numpy().copy()
    assert tape.get_global_tape()._batched_backward[0]["call"] == [1, 1]
    assert got[False][0] == pytest.approx(got[True][0], rel=1e-12)
    np.testing.assert_allclose(got[False][1], got[True][1], rtol=1e-12)


@pytest.mark.usefixtures("one_op_per_call")
def test_a_result_of_a_call_can_be_the_loss():
    """The backward starts at a call's part (not read by any op): its gradient is collected
    where the part lies in its call's packed output."""
    w = tape.Variable(np.array([0.5, -1.0, 2.0]), requires_grad=True)

    def f(x):
        y = ops.tanh(x * w)
        return y.sum(), y * 3.0

    got = {}
    for fn, lazy in ((f, None), (tape.traced(f), {"autobatch": True})):
        tape.reset_global_tape()
        w.clear_grad()
        with tape.lazy(enabled=lazy is not None, **(lazy or {})):
            y = tape.Variable(np.array([1.0, 2.0, 3.0])) * 1.0
            for _ in range(3):  # (a chain: each call a group of one)
                loss, y = fn(y)
            tape.backward(loss)
            got[lazy is None] = float(loss.numpy()), w.grad().numpy().copy()
    assert tape.get_global_tape()._batched_backward[0]["call"] == [3, 3]
    assert got[False][0] == pytest.approx(got[True][0], rel=1e-12)
    np.testing.assert_allclose(got[False][1], got[True][1], rtol=1e-12)


@pytest.mark.usefixtures("one_op_per_call")
def test_parts_no_op_reads_get_their_values_only_where_someone_holds_them(monkeypatch):
    """A call's results are views of its packed output; where no op reads them (calls read
    the packed output), only those the user holds are given their view, as the executor
    frees what nobody holds. Held ones read what eager mode computes."""
    call = importlib.import_module("ops.call")
    filled = []
    fill = call._Call.fill_parts

    def counting(members, out, unread=None):
        fill(members, out, unread)
        filled.extend(var._value is not None for op in members for var in op.results[1])

    monkeypatch.setattr(call._Call, "fill_parts", staticmethod(counting))
    p = _tree_params()
    leaf, node = _tree_model(p)
    tree_loss = tape.traced(lambda h, c: (h * c).sum())
    trees = _trees(4, count=6)
    values = {}
    for lazy in (False, True):
        fns = (leaf, node) if not lazy else (tape.traced(leaf), tape.traced(node))

        def encode(tree, fns=fns):
            if isinstance(tree, int):
                return fns[0](np.array(tree))
            return fns[1](*encode(tree[0], fns), *encode(tree[1], fns))

        tape.reset_global_tape()
        with tape.lazy(enabled=lazy, autobatch=True):
            roots = [encode(tree) for tree in trees]
            held = roots[0]  # (the first tree's root: the user keeps it)
            losses = [tree_loss(*root) if lazy else (root[0] * root[1]).sum() for root in roots]
            roots = None
            tape.backward(ops.stack(losses).sum())
            values[lazy] = [v.numpy().copy() for v in held]
    for got, want in zip(values[True], values[False], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert filled.count(True) == 2, filled.count(True)  # (the held root's h and c)
    assert len(filled) > 20


@pytest.mark.usefixtures("one_op_per_call")
def test_calls_group_by_program_and_which_parameters_they_are_passed():
    """A call's signature is its program (which fixes its inputs' shapes) and the identity of
    each shared input: calls passed different parameters run as different groups."""
    rng = np.random.default_rng(0)
    weights = [tape.Variable(rng.standard_normal((3, 3)), requires_grad=True) for _ in range(2)]
    xs = [rng.standard_normal(3) for _ in range(8)]

    def f(x, w):
        return ops.tanh(ops.matmul(x, w))

    grads = {}
    for fn, lazy in ((f, None), (tape.traced(f), {"autobatch": True})):
        tape.reset_global_tape()
        for w in weights:
            w.clear_grad()
        with tape.lazy(enabled=lazy is not None, **(lazy or {})):
            outs = [fn(tape.Variable(x) * 1.0, weights[k % 2]) for k, x in enumerate(xs)]
            tape.backward(ops.stack([o.sum() for o in outs]).sum())
            grads[lazy is None] = [w.grad().numpy().copy() for w in weights]
    _, groups, _ = tape.get_global_tape()._last_autobatch
    assert sorted(size for kind, size, *_ in groups if kind.startswith("call")) == [4, 4]
    for got, want in zip(grads[False], grads[True], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_piece_names_its_packed_layout_so_calls_of_other_layouts_trace_apart():
    """A part passed to a call is keyed by its packed output's layout (a number standing for
    its results' shapes and dtypes): the same function given the first part of results laid
    out differently traces twice, and each trace slices its own layout."""
    rng = np.random.default_rng(0)
    short = tape.traced(lambda x: (ops.tanh(x), ops.tanh(x[:2])))  # (3,) then (2,)
    long = tape.traced(lambda x: (ops.sigmoid(x), x * 2.0))  # (3,) then (3,)
    head = tape.traced(lambda h: ops.tanh(h) * 3.0)
    xs = [rng.standard_normal(3) for _ in range(4)]
    tape.reset_global_tape()
    with tape.lazy(autobatch=True):
        outs = [head(short(tape.Variable(x))[0]) for x in xs[:2]]
        outs += [head(long(tape.Variable(x))[0]) for x in xs[2:]]
        values = [o.numpy() for o in outs]
    assert len(head.programs) == 2
    keys = list(head.programs)
    assert keys[0][0][2] != keys[1][0][2]  # (("piece", input, layout, index),)
    want = [np.tanh(np.tanh(x)) * 3 for x in xs[:2]]
    want += [np.tanh(1 / (1 + np.exp(-x))) * 3 for x in xs[2:]]
    for got, expected in zip(values, want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.mark.usefixtures("one_op_per_call")
def test_a_call_with_no_shared_argument_is_looked_up_by_its_program():
    """The autobatching pass looks such a call's signature up by its program instead of
    scanning its inputs (``CallHandle.watched``: the positions of the user's own Variables
    among them): the keys equal those of the scan, and a call passed a parameter as an
    argument is scanned (its signature names the parameter)."""
    from tape.op_handle import CallHandle, OpHandle
    from tape.passes import autobatch

    rng = np.random.default_rng(0)
    w = tape.Variable(rng.standard_normal((3, 3)), requires_grad=True)
    f = tape.traced(lambda x, v: ops.tanh(ops.matmul(x, v)))
    g = tape.traced(lambda x: ops.sigmoid(x))
    tape.reset_global_tape()
    with tape.lazy(autobatch=True):
        xs = [tape.Variable(rng.standard_normal(3)) * 1.0 for _ in range(6)]
        outs = [g(f(x, w)) for x in xs[:3]]  # (f passed a parameter, g a pending result)
        outs += [f(x, tape.Variable(rng.standard_normal((3, 3)))) for x in xs[3:]]
        pending = list(tape.get_global_tape()._pending_ops)
        calls = [op for op in pending if op.__class__ is CallHandle]
        assert [op.watched for op in calls] == [None, [0]] * 3 + [[0, 1]] * 3
        scanned = [
            OpHandle(op.defn, op.args, op.results, op.attrs, op.location, op.index)
            for op in pending
        ]
        keys = autobatch._Signatures(True).keys(pending, 0, len(pending))
        assert keys == autobatch._Signatures(True).keys(scanned, 0, len(scanned))
        assert len({keys[pending.index(op)] for op in calls}) == 3
        tape.backward(ops.stack([o.sum() for o in outs]).sum())


def test_a_variable_made_a_parameter_after_the_call_is_read_per_call():
    """Calls passed different Variables of the user's go as one program; one of them made a
    parameter before the run (``persistable``) is then shared, so its calls form a group of
    their own and every call reads its own Variable, values and gradients as eagerly."""
    rng = np.random.default_rng(1)
    f = tape.traced(lambda x, v: ops.tanh(ops.matmul(x, v)))
    xs = [rng.standard_normal(3) for _ in range(6)]
    ws = [rng.standard_normal((3, 3)) for _ in range(2)]

    def run(lazy):
        tape.reset_global_tape()
        weights = [tape.Variable(w) for w in ws]
        leaves = [tape.Variable(x, requires_grad=True) for x in xs]
        with tape.lazy(enabled=lazy, autobatch=True):
            outs = [f(x * 1.0, weights[k % 2]) for k, x in enumerate(leaves)]
            weights[0].persistable = True  # (after the calls were recorded)
            tape.backward(ops.stack([o.sum() for o in outs]).sum())
            return [o.numpy() for o in outs] + [x.grad().numpy() for x in leaves]

    lazy, eager = run(True), run(False)
    for got, want in zip(lazy, eager, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(lazy[0], np.tanh(xs[0] @ ws[0]), rtol=1e-12)
    np.testing.assert_allclose(lazy[1], np.tanh(xs[1] @ ws[1]), rtol=1e-12)


@pytest.mark.usefixtures("one_op_per_call")
def test_a_call_made_by_hand_with_other_parameters_is_not_grouped_with_traced_calls():
    """A traced call's signature leaves out the parameters its program passes after the
    arguments (the same Variables in every traced call); a call of the same program made by
    hand may pass others there, so it is keyed by them, runs in a group of its own and reads
    them."""
    call = importlib.import_module("ops.call").call
    rng = np.random.default_rng(0)
    w, w2 = (tape.Variable(rng.standard_normal((3, 3)), requires_grad=True) for _ in range(2))
    f = tape.traced(lambda x: ops.tanh(ops.matmul(x, w)))
    xs = [rng.standard_normal(3) for _ in range(8)]
    tape.reset_global_tape()
    with tape.lazy(autobatch=True):
        outs = [f(tape.Variable(x) * 1.0) for x in xs[:4]]
        program = f.program_for(tape.Variable(xs[0]))
        outs += [call([tape.Variable(x) * 1.0, w2], fn=program)[0] for x in xs[4:]]
        tape.backward(ops.stack([o.sum() for o in outs]).sum())
        values = [o.numpy() for o in outs]
    _, groups, _ = tape.get_global_tape()._last_autobatch
    assert sorted(size for kind, size, *_ in groups if kind.startswith("call")) == [4, 4]
    for k, (value, x) in enumerate(zip(values, xs, strict=True)):
        np.testing.assert_allclose(value, np.tanh(x @ (w if k < 4 else w2).numpy()), rtol=1e-12)
    want = sum(np.outer(x, 1 - np.tanh(x @ w2.numpy()) ** 2) for x in xs[4:])
    np.testing.assert_allclose(w2.grad().numpy(), want, rtol=1e-12)


def test_the_generated_vectorised_run_equals_the_plan_interpreted_step_by_step():
    """On numpy a vectorised plan runs as one generated function, most rules' steps inline
    (reshapes, reductions, slices, concatenations, sums, products with a shared weight, the
    slices' gradient); it gives the interpreter's bits, forward and gradient."""
    call = importlib.import_module("ops.call")
    rng = np.random.default_rng(3)
    w = tape.Variable(rng.standard_normal((6, 8)), requires_grad=True)
    v = tape.Variable(rng.standard_normal((4, 3)), requires_grad=True)
    bias = tape.Variable(rng.standard_normal(2), requires_grad=True)

    def f(a, b):
        z = ops.matmul(ops.concat([a, b], axis=0), w)  # (per-member rows, shared weight)
        gates = ops.sigmoid(z[:4]) * ops.tanh(z[4:])
        m = ops.reshape(gates, shape=(2, 2)).sum(axis=1) + ops.matmul(v, b).sum()
        m = ops.elementwise_add(m, bias, axis=0)  # (a Linear's bias: the seed's axis)
        row = ops.reshape(a, shape=(1, 3))
        return m, ops.reshape(ops.matmul(row, v, transpose_y=True), shape=(4,))

    traced = tape.traced(f)
    tape.reset_global_tape()
    with tape.lazy(autobatch=True):
        args = [[tape.Variable(rng.standard_normal(3)) * 1.0 for _ in range(2)] for _ in range(5)]
        outs = [traced(a, b) for a, b in args]
        tape.backward(ops.stack([m.sum() + e.sum() for m, e in outs]).sum())
    (program,) = traced.programs.values()
    (forward,) = program._vectorised.values()
    plans = [forward] + [g.inner for g in forward._grads.values()]
    assert len(plans) == 2
    kinds = {step.defn.type for plan in plans for step, how, *_ in plan.plan if how == "rule"}
    assert {"matmul", "concat", "reshape", "reduce_sum", "slices_grad", "sum"} <= kinds, kinds
    hows = {how for plan in plans for _, how, *_ in plan.plan}
    assert {"summed", "split"} <= hows, hows
    biased = [
        how
        for step, how, *_ in forward.plan
        if step.defn.type == "elementwise_add" and step.attrs["axis"] == 0
    ]
    assert biased == ["direct"]  # (ranks equal: the axis means nothing, numpy broadcasting)
    n = 5
    for plan in plans:
        values = []
        for (shape, dtype), per in zip(plan.program.in_descs, plan.each, strict=True):
            value = rng.standard_normal((n, *shape) if per else shape).astype(dtype)
            values.append(value)
        env = plan.program._env(np, values)
        for step, how, rule, flags in plan.plan:
            step.store(env, call._step_runner(np, step, how, rule, flags, env, n))
        want = [env[r] for r in plan.program.outputs]
        run = call._straight_line(plan)
        got, _ = run(values, n, None)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
        inline = {"matmul", "concat", "reshape", "sum", "reduce_sum", "slices_grad", "slice"}
        helped = [
            (step.defn.type, how)
            for i, (step, how, *_) in enumerate(plan.plan)
            if f"s{i}" in run.__globals__
            and (how in ("split", "summed") or how == "rule" and step.defn.type in inline)
        ]
        assert not helped, helped


def test_autobatch_auto_always_batches_traced_calls():
    """A call run alone interprets its program: the default never measures that way."""
    p = _tree_params()
    leaf, node = _tree_model(p)
    leaf, node = tape.traced(leaf), tape.traced(node)
    for seed in range(4):
        _forest_step(p, leaf, node, _trees(seed, count=8), {"compile": False})
        assert "interpreted run, autobatched" in tape.explain()


class _Cell(layers.Function):
    def __init__(self, scale):
        super().__init__()
        self.w = layers.Linear(3, 3)
        self.scale = scale

    @tape.traced
    def step(self, x):
        return ops.tanh(self.w(x)) * self.scale


def test_a_traced_method_is_traced_per_instance():
    a, b = _Cell(1.0), _Cell(2.0)
    x = np.ones(3)
    with tape.lazy():
        ya, yb = a.step(tape.Variable(x)), b.step(tape.Variable(x))
        for cell, y in ((a, ya), (b, yb)):
            want = cell.scale * np.tanh(x @ cell.w.weight.numpy() + cell.w.bias.numpy())
            np.testing.assert_allclose(y.numpy(), want)
    assert a.step is a.step and a.step is not b.step  # (bound once per instance)
    assert len(a.step.programs) == len(b.step.programs) == 1
    assert not _Cell.step.programs  # (nothing traced on the class itself)
    dead = weakref.ref(a)
    del a, ya
    tape.reset_global_tape()
    gc.collect()
    assert dead() is None  # (its traces die with it)


def test_a_program_is_traced_once_per_signature():
    p = _tree_params()
    leaf, node = _tree_model(p)
    leaf, node = tape.traced(leaf), tape.traced(node)
    for seed in range(3):
        _forest_step(p, leaf, node, _trees(seed), {"autobatch": True})
    assert len(leaf.programs) == 1
    # a node reads its children packed: one program for every mix of leaf and node children
    (key,) = node.programs
    assert [spec[0] for spec in key] == ["piece"] * 4
    program = node.programs[key]
    assert len(program.captured) == 2  # (w and b, passed to every call as shared inputs)
    assert len(program._grads) >= 1  # (its gradient traced once, on the first backward)


@pytest.mark.usefixtures("one_op_per_call")
def test_results_passed_between_calls_are_read_packed():
    """A call's results are its Parts (views of its packed output); a call reading another
    call's results reads the packed output itself, which the program slices: no op between
    the calls."""
    p = _tree_params()
    leaf, node = _tree_model(p)
    leaf, node = tape.traced(leaf), tape.traced(node)
    tape.reset_global_tape()
    with tape.lazy(autobatch=True):
        h, c = node(*node(*leaf(np.array(1)), *leaf(np.array(2))), *leaf(np.array(3)))
        recorded = tape.get_global_tape()._pending_ops
        assert [op.type for op in recorded] == ["call"] * 5
        outer = recorded[-1]  # (after leaf 1, leaf 2, the inner node and leaf 3)
        assert outer.args[0][0] is recorded[2].results[0]  # (the inner node's packed output)
        assert outer.args[0][1] is recorded[3].results[0]  # (the third leaf's)
        (h * c).sum().numpy()
        np.testing.assert_array_equal(h.numpy(), outer.results[0].numpy()[:H])


@pytest.mark.usefixtures("one_op_per_call")
def test_results_read_by_other_ops_get_their_gradients_in_a_batched_backward():
    w = tape.Variable(np.random.default_rng(0).standard_normal((3, 3)), requires_grad=True)

    def f(x):
        y = ops.tanh(ops.matmul(x, w))
        return y, y * x

    traced = tape.traced(f)
    xs = [np.random.default_rng(k).standard_normal(3) for k in range(6)]
    got = {}
    for fn, lazy in ((f, None), (traced, {"autobatch": True})):
        tape.reset_global_tape()
        w.clear_grad()
        with tape.lazy(enabled=lazy is not None, **(lazy or {})):
            outs = [fn(tape.Variable(x)) for x in xs]
            loss = ops.stack([(a * b).sum() + a.sum() for a, b in outs]).sum()
            tape.backward(loss)
            got[lazy is None] = float(loss.numpy()), w.grad().numpy().copy()
    counts, _ = tape.get_global_tape()._batched_backward
    assert counts["call"] == [1, 6]  # (one group of six, differentiated as one)
    assert got[False][0] == pytest.approx(got[True][0], rel=1e-12)
    np.testing.assert_allclose(got[False][1], got[True][1], rtol=1e-12)


def _gradient_runs(monkeypatch):
    """Counts the batched gradient runs of traced calls, by whether they read their forward's
    values (``saved``) or computed them again."""
    call = importlib.import_module("ops.call")
    runs = {"saved": 0, "recomputed": 0}
    original = call.SummedGrad.pieces

    def pieces(self, xp, values, saved=None):
        runs["recomputed" if saved is None else "saved"] += 1
        return original(self, xp, values, saved)

    monkeypatch.setattr(call.SummedGrad, "pieces", pieces)
    return call, runs


@pytest.mark.usefixtures("one_op_per_call")
def test_a_batched_backward_reads_the_values_its_forward_computed(monkeypatch):
    """A group's gradient program replays the function before differentiating it; its batched
    backward takes those values from the forward run instead, and gives the same bits."""
    p = _tree_params()
    leaf, node = _tree_model(p)
    leaf, node = tape.traced(leaf), tape.traced(node)
    trees = _trees(3, count=8)
    call, runs = _gradient_runs(monkeypatch)
    batched_backward = importlib.import_module("tape.batched_backward")
    regathered, inside = [], []  # (the operands a call group's backward stacks again)

    def as_one(active, *args):
        inside.append(active[0].defn.type == "call")
        try:
            return as_one.original(active, *args)
        finally:
            inside.pop()

    def gather(values, rows, xp):
        if inside and inside[-1]:
            regathered.append(len(values))
        return gather.original(values, rows, xp)

    as_one.original, gather.original = batched_backward._as_one, batched_backward.gather
    monkeypatch.setattr(batched_backward, "_as_one", as_one)
    monkeypatch.setattr(batched_backward, "gather", gather)
    got = _forest_step(p, leaf, node, trees, {"autobatch": True})
    assert runs["saved"] >= 2 and runs["recomputed"] == 0, runs
    assert regathered == []  # (what the gradients read, the forward kept: values or operands)
    (program,) = node.programs.values()
    (vectorised,) = program._vectorised.values()
    (gradient,) = vectorised._grads.values()
    skip, given, sources, unread = gradient.inner.saved_plan()
    assert len(skip) >= 10 and len(given) == len(sources) > 0  # (the node's ops, not redone)
    # (the children's packed results are read only through slices the forward kept: the
    # backward does not gather them again)
    assert {j for j, per in enumerate(vectorised.each) if per} <= unread, unread
    monkeypatch.setattr(call._Call, "saves", False)  # (the gradient computes them again)
    want = _forest_step(p, leaf, node, trees, {"autobatch": True})
    assert runs["recomputed"] >= 2
    assert got[0] == want[0]
    for name in p:
        np.testing.assert_array_equal(got[1][name], want[1][name], err_msg=name)


@pytest.mark.usefixtures("one_op_per_call")
def test_a_group_whose_members_differ_in_what_needs_a_gradient_computes_it_again(monkeypatch):
    """The forward keeps values for its first member's inputs needing gradients; a group whose
    other members need more runs the gradient that recomputes them (values still right)."""
    w = tape.Variable(np.random.default_rng(0).standard_normal((3, 3)), requires_grad=True)

    def f(x):
        return ops.tanh(ops.matmul(x, w)) * x

    traced = tape.traced(f)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(3) for _ in range(6)]
    scale = tape.Variable(np.array(1.5), requires_grad=True)
    call, runs = _gradient_runs(monkeypatch)
    got = {}
    for fn, lazy in ((f, None), (traced, {"autobatch": True})):
        tape.reset_global_tape()
        w.clear_grad()
        with tape.lazy(enabled=lazy is not None, **(lazy or {})):
            scale.clear_grad()
            # (computed inputs, so gathered per member: the first needs no gradient)
            inputs = [tape.Variable(x) * (scale if k else 1.0) for k, x in enumerate(xs)]
            loss = ops.stack([fn(x).sum() for x in inputs]).sum()
            tape.backward(loss)
            got[lazy is None] = float(loss.numpy()), [w.grad().numpy(), scale.grad().numpy()]
    assert tape.get_global_tape()._batched_backward[0]["call"] == [1, 6]
    assert runs == {"saved": 0, "recomputed": 1}
    assert got[False][0] == pytest.approx(got[True][0], rel=1e-12)
    for a, b in zip(got[False][1], got[True][1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.usefixtures("one_op_per_call")
@pytest.mark.parametrize("lazy", [{}, {"compile": False}])
def test_a_repeated_structure_with_calls_batches_its_backward_at_once(lazy):
    """The same trees every step: a step with traced calls always runs its forward batched and
    its backward batched as the forward did, at once; never a recorded backward, which would
    differentiate each call alone (a parameter's gradient per member, summed afterwards)."""
    p = _tree_params()
    leaf, node = _tree_model(p)
    traced_leaf, traced_node = tape.traced(leaf), tape.traced(node)
    trees = _trees(7)
    want = _forest_step(p, leaf, node, trees, None)
    for _ in range(4):
        got = _forest_step(p, traced_leaf, traced_node, trees, lazy)
        assert "backward batched as the forward" in tape.explain()
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        for name in p:
            np.testing.assert_allclose(got[1][name], want[1][name], rtol=1e-10, atol=1e-12)


def test_options_that_compile_every_structure_record_a_traced_functions_ops():
    """A compiled plan autobatches ops, not calls: with compile=True the function's ops are
    recorded as they come."""
    p = _tree_params()
    leaf, node = _tree_model(p)
    traced_leaf, traced_node = tape.traced(leaf), tape.traced(node)
    trees = _trees(3)
    want = _forest_step(p, leaf, node, trees, None)
    got = _forest_step(p, traced_leaf, traced_node, trees, {"compile": True})
    assert not traced_leaf.programs and not traced_node.programs
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)


def test_parameters_are_read_when_the_call_runs():
    """A trace captures parameters by identity, not value: an optimizer's updates are seen."""
    results = {}
    for traced in (False, True):
        p = _tree_params()
        leaf, node = _tree_model(p)
        if traced:
            leaf, node = tape.traced(leaf), tape.traced(node)
        sgd = optim.SGD(list(p.values()), lr=0.1)
        losses = []
        for seed in range(3):
            lazy = {"autobatch": False} if traced else None  # (unbatched: eager's bits)
            loss, _ = _forest_step(p, leaf, node, _trees(seed), lazy)
            sgd.step()
            losses.append(loss)
        results[traced] = (losses, p["w"].numpy().copy())
    assert results[True][0] == results[False][0]
    np.testing.assert_array_equal(results[True][1], results[False][1])


@pytest.mark.parametrize("lazy", [{"autobatch": True}, {"autobatch": False}])
def test_a_traced_function_calling_another(lazy):
    """An inner traced function is a call step of the outer program (its results its parts),
    run and differentiated there like any op."""
    w = tape.Variable(np.random.default_rng(0).standard_normal((3, 3)), requires_grad=True)

    def inner(x):
        y = ops.tanh(ops.matmul(x, w))
        return y, y * x

    traced_inner = tape.traced(inner)

    def outer(x, pair=traced_inner):
        a, b = pair(x)
        c, d = pair(a + b)
        return (c * d).sum()

    xs = [np.random.default_rng(k).standard_normal(3) for k in range(5)]
    got = {}
    for fn, mode in ((outer, None), (tape.traced(outer), lazy)):
        tape.reset_global_tape()
        w.clear_grad()
        with tape.lazy(enabled=mode is not None, **(mode or {})):
            loss = ops.stack([fn(tape.Variable(x)) for x in xs]).sum()
            tape.backward(loss)
            got[mode is None] = float(loss.numpy()), w.grad().numpy().copy()
    assert got[False][0] == pytest.approx(got[True][0], rel=1e-12)
    np.testing.assert_allclose(got[False][1], got[True][1], rtol=1e-12, atol=1e-15)


def test_a_result_assigned_into_is_read_with_its_new_value():
    """A call's result is read packed by the calls it is passed to, until it changes: an
    assignment into it (``h[0] = ...``) makes it another value, which later calls read."""
    w = tape.Variable(np.eye(2), requires_grad=True)
    f = tape.traced(lambda x: (ops.matmul(x, w), ops.matmul(x, w) * 2.0))
    g = tape.traced(lambda a: a * 1.0)
    got = {}
    for lazy in (False, True):
        tape.reset_global_tape()
        with tape.lazy(enabled=lazy):
            a, b = f(tape.Variable(np.array([1.0, 2.0])))
            a[0] = 100.0
            got[lazy] = g(a).numpy().copy(), g(b).numpy().copy()
    np.testing.assert_array_equal(got[True][0], [100.0, 2.0])
    np.testing.assert_array_equal(got[True][1], got[False][1])


def test_another_shape_or_dtype_is_traced_again():
    w = tape.Variable(np.ones((3, 2)), requires_grad=True)
    f = tape.traced(lambda x: ops.matmul(x, w))
    with tape.lazy():
        a = f(tape.Variable(np.ones((1, 3))))
        b = f(tape.Variable(np.ones((5, 3))))
        c = f(tape.Variable(np.ones((1, 3), np.float32)))
        np.testing.assert_array_equal(b.numpy(), np.full((5, 2), 3.0))
        assert a.shape == (1, 2) and c.dtype == np.float64  # (float32 x float64 promotes)
    assert len(f.programs) == 3


def test_double_backward_through_a_traced_call():
    w = tape.Variable(np.array([[0.5, -1.0], [2.0, 0.25]]), requires_grad=True)
    f = tape.traced(lambda x: ops.tanh(ops.matmul(x, w)) * x)
    x0 = np.array([0.3, -0.7])
    grads = {}
    for lazy in (None, {"autobatch": False}):
        tape.reset_global_tape()
        x = tape.Variable(x0, requires_grad=True)

        def run(x=x):
            (g,) = tape.grad(f(x).sum(), [x], create_graph=True)
            (gg,) = tape.grad((g * g).sum(), [x])
            return gg

        if lazy is None:
            grads[lazy is None] = run().numpy()
        else:
            with tape.lazy(**lazy):
                grads[False] = run().numpy()
    np.testing.assert_allclose(grads[False], grads[True], rtol=1e-12)


def test_size_one_and_size_zero_axes():
    w = tape.Variable(np.random.default_rng(0).standard_normal((3, 2)), requires_grad=True)
    f = tape.traced(lambda x: ops.tanh(ops.matmul(x, w)))
    for rows in (0, 1):
        xs = [np.random.default_rng(k).standard_normal((rows, 3)) for k in range(4)]
        results = {}
        for lazy in (None, {"autobatch": True}):
            tape.reset_global_tape()
            w.clear_grad()

            def run(xs=xs):
                outs = [f(tape.Variable(x)) for x in xs]
                loss = ops.stack([o.sum() for o in outs]).sum()
                tape.backward(loss)
                return [o.numpy() for o in outs]

            if lazy is None:
                results["eager"] = run(), w.grad().numpy().copy()
            else:
                with tape.lazy(**lazy):
                    results["lazy"] = run(), w.grad().numpy().copy()
        for got, want in zip(results["lazy"][0], results["eager"][0]):
            assert got.shape == want.shape == (rows, 2)
            np.testing.assert_allclose(got, want, rtol=1e-12)
        np.testing.assert_allclose(results["lazy"][1], results["eager"][1], atol=1e-12)


# ---- what a trace refuses, at the user's line ----------------------------------------------


def test_reading_a_value_computed_in_the_step_must_be_an_argument():
    w = tape.Variable(np.ones((2, 2)), requires_grad=True)
    with tape.lazy():
        context = ops.tanh(w)  # (computed in the step: changes from call to call)
        f = tape.traced(lambda x: ops.matmul(x, context))
        with pytest.raises(GraphError, match="computed outside it") as info:
            f(tape.Variable(np.ones((1, 2))))
    assert "pass it as an argument" in str(info.value)
    assert "test_traced.py" in str(info.value)


def test_reading_a_value_inside_a_trace_is_refused():
    f = tape.traced(lambda x: x * float(x.sum().numpy()))
    with tape.lazy(), pytest.raises(GraphError, match="read a value while it was traced"):
        f(tape.Variable(np.ones(2)))


def test_random_ops_are_refused():
    f = tape.traced(lambda x: ops.dropout(x, dropout_prob=0.5))
    with tape.lazy(), pytest.raises(GraphError, match="random op 'dropout'"):
        f(tape.Variable(np.ones(4)))


def test_results_must_be_variables_of_one_dtype():
    with tape.lazy():
        with pytest.raises(InputError, match="must return a Variable"):
            tape.traced(lambda x: 3)(tape.Variable(np.ones(2)))
        with pytest.raises(InputError, match="different dtypes"):
            tape.traced(lambda x: (x, ops.cast(x, out_dtype="float32")))(tape.Variable(np.ones(2)))


@pytest.mark.parametrize("regions", [True, False], ids=["call region", "one op per call"])
def test_inputs_needing_gradients_of_two_dtypes_are_refused_at_the_call(regions, monkeypatch):
    monkeypatch.setattr(call_region, "ENABLED", regions)
    f = tape.traced(lambda x, y: x * y)
    x32 = tape.Variable(np.ones(2, np.float32), requires_grad=True)
    x64 = tape.Variable(np.ones(2), requires_grad=True)
    with tape.lazy(compile=False), pytest.raises(InputError) as info:
        tape.reset_global_tape()
        outs = [f(x32 * 1.0, x64 * 1.0) for _ in range(3)]
        tape.backward(ops.stack([out.sum() for out in outs]).sum())
    message = str(info.value)
    assert "that need a gradient have different dtypes" in message
    assert "float32, float64" in message and "test_traced.py" in message


def test_unhashable_arguments_are_refused():
    f = tape.traced(lambda x, options: x)
    with tape.lazy(), pytest.raises(InputError, match="argument 1 .* neither a Variable"):
        f(tape.Variable(np.ones(2)), {"a": 1})


def test_a_shape_error_inside_names_the_functions_line():
    f = tape.traced(lambda x: ops.matmul(x, tape.Variable(np.ones((3, 2)))))
    with tape.lazy(), pytest.raises(ShapeError) as info:
        f(tape.Variable(np.ones((1, 4))))
    assert "test_traced.py" in str(info.value) and "lambda" in str(info.value)


@pytest.mark.parametrize("lazy", [{"autobatch": True}, {"autobatch": False}])
def test_a_kernel_error_inside_a_call_names_the_op_and_the_functions_line(lazy):
    table = tape.Variable(np.ones((5, 2)), requires_grad=True)

    def embed(word):
        return ops.tanh(ops.lookup_table(table, word))  # the failing line

    f = tape.traced(embed)
    tape.reset_global_tape()
    with pytest.raises(ExecutionError) as info, tape.lazy(**lazy):
        outs = [f(np.array(k)) for k in (1, 2, 9)]  # id 9 is out of range
        ops.stack(outs).numpy()
    text = str(info.value)
    assert "lookup_table" in text and "in embed" in text, text


# ---- random per-example programs (the autobatching suite's steps) ------------------------


def _grad_or_none(var):
    return None if var.grad() is None else var.grad().numpy().copy()


@settings(max_examples=15, deadline=None)
@given(
    program=st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=5),
    rows=st.sampled_from([(4,), (1, 4), (3, 4)]),
    count=st.integers(1, 6),
)
def test_random_traced_programs_equal_their_ops_run_eagerly(program, rows, count):
    params = autobatch_params()

    def example(h, x):
        for name in program:
            h = STEPS[name](h, params, x if h.shape == x.shape else ops.tanh(h))
        return h

    traced = tape.traced(example)
    rng = np.random.default_rng(0)
    inputs = [(rng.standard_normal(rows), rng.standard_normal(rows)) for _ in range(count)]
    results = {}
    for lazy in (None, {"autobatch": True}, {"autobatch": False}):
        tape.reset_global_tape()
        for param in params.values():
            param.clear_grad()

        leaves = [tape.Variable(h, requires_grad=True) for h, _ in inputs]

        def run(fn, leaves=leaves):
            outs = [fn(h, tape.Variable(x)) for h, (_, x) in zip(leaves, inputs)]
            loss = ops.stack([(o * o).sum() for o in outs]).sum()
            tape.backward(loss)
            return [o.numpy() for o in outs]

        if lazy is None:
            outs = run(example)
        else:
            with tape.lazy(**lazy):
                outs = run(traced)
        grads = {k: _grad_or_none(v) for k, v in params.items()}
        grads.update({k: h.grad().numpy().copy() for k, h in enumerate(leaves)})
        results[str(lazy)] = outs, grads
    want_outs, want_grads = results["None"]
    for key in ("{'autobatch': True}", "{'autobatch': False}"):
        outs, grads = results[key]
        for got, want in zip(outs, want_outs):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
        for name, want in want_grads.items():
            if want is None:
                assert grads[name] is None or not grads[name].any()
            else:
                np.testing.assert_allclose(grads[name], want, rtol=1e-9, atol=1e-11)


@settings(max_examples=20, deadline=None)
@given(
    program=st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=5),
    rows=st.sampled_from([(4,), (1, 4), (3, 4)]),
    count=st.integers(2, 6),
    hold=st.booleans(),
)
@pytest.mark.usefixtures("one_op_per_call")
def test_random_chains_of_two_result_calls_batched_equal_eager(program, rows, count, hold):
    """Calls batched across examples (inputs computed per example), each returning two results,
    the second call reading the first's (packed) and the loss reading only the last call's:
    the backward reads what the forward kept, parts nobody holds get no value, and values and
    gradients equal eager mode's."""
    params = autobatch_params()

    def example(h, x):
        for name in program:
            h = STEPS[name](h, params, x if h.shape == x.shape else ops.tanh(h))
        return h, ops.tanh(h) * 0.5

    traced = tape.traced(example)
    loss_of = tape.traced(lambda h, aux: (h * h).sum() + aux.sum())
    rng = np.random.default_rng(1)
    inputs = [(rng.standard_normal(rows), rng.standard_normal(rows)) for _ in range(count)]
    results = {}
    for lazy in (None, {"autobatch": True}):
        tape.reset_global_tape()
        for param in params.values():
            param.clear_grad()
        scale = tape.Variable(np.array(1.5), requires_grad=True)
        fn, loss_fn = (example, loss_of.fn) if lazy is None else (traced, loss_of)
        with tape.lazy(enabled=lazy is not None, **(lazy or {})):
            held, losses = [], []
            for h, x in inputs:
                x = tape.Variable(x)
                first = fn(tape.Variable(h) * scale, x)  # (computed: gathered per member)
                second = fn(first[0], x)
                losses.append(loss_fn(*second))
                if hold:
                    held.append(first[1])
            tape.backward(ops.stack(losses).sum())
            values = [v.numpy().copy() for v in held]
        grads = {k: _grad_or_none(v) for k, v in params.items()}
        grads["scale"] = scale.grad().numpy().copy()
        results[lazy is None] = values, grads
    if lazy is not None:
        assert tape.get_global_tape()._batched_backward[0]["call"][1] >= 2 * count
    for got, want in zip(results[False][0], results[True][0], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    for name, want in results[True][1].items():
        got = results[False][1][name]
        if want is None:
            assert got is None or not got.any()
        else:
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("attrs", [{"sections": [1, -1, 2], "axis": -1}, {"num": 2, "axis": 0}])
def test_a_split_in_a_generated_vectorised_run_gives_the_kernels_pieces(attrs):
    """The generated run cuts a split's pieces by indices built once: views of the same
    elements the kernel's ``np.split`` gives, with the axis counted past the member axis."""
    call = importlib.import_module("ops.call")
    rng = np.random.default_rng(4)

    def f(x):
        return tuple(ops.tanh(piece) for piece in ops.split(x, **attrs))

    traced = tape.traced(f)
    tape.reset_global_tape()
    with tape.lazy(autobatch=True):
        outs = [traced(tape.Variable(rng.standard_normal((4, 6))) * 1.0) for _ in range(3)]
        [piece.numpy() for out in outs for piece in out]
    (program,) = traced.programs.values()
    (plan,) = program._vectorised.values()
    assert "split" in {how for _, how, *_ in plan.plan}
    values = [rng.standard_normal((5, 4, 6))]
    env = plan.program._env(np, values)
    for step, how, rule, flags in plan.plan:
        step.store(env, call._step_runner(np, step, how, rule, flags, env, 5))
    got, _ = call._straight_line(plan)(values, 5, None)
    for a, b in zip(got, [env[r] for r in plan.program.outputs], strict=True):
        np.testing.assert_array_equal(a, b)
    bounds, axis = ([1, 4], 2) if "sections" in attrs else ([2], 1)  # (past the member axis)
    for a, piece in zip(got, np.split(values[0], bounds, axis=axis), strict=True):
        np.testing.assert_array_equal(a, np.tanh(piece))
