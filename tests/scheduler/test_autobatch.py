"""Autobatching (tape.passes.autobatch, ops.batching): independent ops of one signature in a lazy
run become one batched call, with the values and gradients of one op at a time (within the
rounding of a larger product; bit for bit with exact=True or autobatch=False), errors naming the
member that failed, random ops left in their order, and held intermediates readable.
"""

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ops
import tape
from ops import batching
from ops.registry import REGISTRY, register, unregister
from tape.errors import FluidError
from tape.passes import autobatch

DIM = 4


def _params(seed=0):
    rng = np.random.default_rng(seed)
    params = {
        "w": tape.Variable(rng.standard_normal((DIM, DIM)), requires_grad=True),
        "b": tape.Variable(rng.standard_normal(DIM), requires_grad=True),
        "table": tape.Variable(rng.standard_normal((7, DIM)), requires_grad=True),
    }
    for name, var in params.items():
        var.name, var.persistable = name, True
    return params


# One step of a per-example program: (name, function of (h, params, the example's own input)).
STEPS = {
    "xw": lambda h, p, x: ops.matmul(h, p["w"]),
    "wx": lambda h, p, x: ops.matmul(p["w"], h) if h.ndim == 1 else h,
    "xwt": lambda h, p, x: ops.matmul(h, p["w"], transpose_y=True),
    "bias": lambda h, p, x: h + p["b"],
    "tanh": lambda h, p, x: ops.tanh(h),
    "relu": lambda h, p, x: ops.relu(h),
    "sigmoid": lambda h, p, x: ops.sigmoid(h),
    "times_input": lambda h, p, x: h * x,
    "outer": lambda h, p, x: ops.matmul(h, x, transpose_x=True) if h.ndim == 2 else h,
    "sum_rows": lambda h, p, x: ops.reduce_sum(h, axis=0) if h.ndim == 2 else h,
    "unsqueeze": lambda h, p, x: ops.reshape(h, shape=(1, DIM)) if h.ndim == 1 else h,
    "halves": lambda h, p, x: ops.concat([ops.tanh(h[..., :1]), h[..., 1:]], axis=-1),
    "rows": lambda h, p, x: ops.concat([h, h * h], axis=0)[: h.shape[0]] if h.ndim == 2 else h,
}


def _example(program, rows, ids, params, seed):
    """One example's graph: an embedding lookup, then ``program``; returns (loss, held)."""
    x = tape.Variable(np.random.default_rng(seed).standard_normal(rows))
    h = ops.lookup_table(params["table"], tape.Variable(np.array(ids)))
    if len(rows) == 1:
        h = ops.reshape(h, shape=(DIM,))
    held = []
    for name in program:
        h = STEPS[name](h, params, x if h.shape == x.shape else ops.tanh(h))
        held.append(h)
    return ops.reduce_sum(h * h), held


def _forest(examples, mode):
    """Values and gradients of the forest ``examples`` ((program, rows, ids) each) in ``mode``:
    'eager', or the keyword arguments of tape.lazy."""
    params = _params()
    tape.reset_global_tape()

    def build():
        losses, held = [], []
        for index, (program, rows, ids) in enumerate(examples):
            loss, kept = _example(program, rows, ids, params, seed=index)
            losses.append(loss)
            held += kept
        total = ops.sum(losses)
        tape.backward(total)
        return total, held

    if mode == "eager":
        total, held = build()
    else:
        with tape.lazy(**mode):
            tape.reset_global_tape()
            total, held = build()
    grads = {name: p.grad() for name, p in params.items()}
    grads = {name: None if g is None else g.numpy().copy() for name, g in grads.items()}
    return total.numpy().copy(), [h.numpy().copy() for h in held], grads


_programs = st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=5)


@st.composite
def _forests(draw):
    """A few programs, each run by several examples of their own row counts and ids."""
    examples = []
    for program in draw(st.lists(_programs, min_size=1, max_size=3)):
        for _ in range(draw(st.integers(1, 5))):
            rows = draw(st.sampled_from([(DIM,), (1, DIM), (2, DIM)]))
            ids = draw(st.integers(0, 6)) if len(rows) == 1 else [0, 6][: rows[0]]
            examples.append((program, rows, ids))
    return draw(st.permutations(examples))


@settings(max_examples=25, deadline=None)
@given(_forests())
def test_batched_forest_equals_one_op_at_a_time(examples):
    want = _forest(examples, "eager")
    batched = _forest(examples, {"compile": False, "autobatch": True})
    unbatched = _forest(examples, {"compile": False, "autobatch": False})
    exact = _forest(examples, {"compile": False, "exact": True})
    for got in (unbatched, exact):  # bit for bit
        np.testing.assert_array_equal(got[0], want[0])
        for a, b in zip(got[1], want[1], strict=True):
            np.testing.assert_array_equal(a, b)
        for name in want[2]:
            assert (got[2][name] is None) == (want[2][name] is None), name
            np.testing.assert_array_equal(got[2][name], want[2][name])
    assert_forest_close(batched, want)


def assert_forest_close(got, want):
    """``_forest`` results equal within the rounding of products over more rows: the value, the
    held intermediates and the gradients."""
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    for a, b in zip(got[1], want[1], strict=True):  # held intermediates
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    for name in want[2]:
        if want[2][name] is None:
            assert got[2][name] is None, name
        else:
            np.testing.assert_allclose(got[2][name], want[2][name], rtol=1e-11, atol=1e-12)


def test_depth_heuristic_batches_each_level_with_the_values_of_eager_mode():
    examples = [(["xw", "bias", "tanh", "unsqueeze"], (DIM,), i % 7) for i in range(4)] + [
        (["times_input", "outer", "sum_rows"], (2, DIM), [0, 6]) for _ in range(3)
    ]
    want = _forest(examples, "eager")
    got = _forest(examples, {"compile": False, "autobatch": "depth"})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    for a, b in zip(got[1], want[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    for name in want[2]:
        np.testing.assert_allclose(got[2][name], want[2][name], rtol=1e-11, atol=1e-12)
    with tape.lazy(compile=False, autobatch="depth"):
        tape.reset_global_tape()
        tape.get_global_tape().realize(_linear_forest(5))
        text = tape.explain()
    for line in ("batched matmul x5", "batched elementwise_add x5", "batched relu x5"):
        assert line in text, text


def _linear_forest(count, dim=DIM):
    params = _params()
    outs = []
    for i in range(count):
        x = tape.Variable(np.full(dim, float(i)))
        outs.append(ops.relu(ops.matmul(x, params["w"]) + params["b"]))
    return outs


def test_explain_names_the_groups_and_their_sizes():
    with tape.lazy(compile=False):
        tape.reset_global_tape()
        outs = _linear_forest(5)
        tape.get_global_tape().realize(outs)
        text = tape.explain()
    assert "autobatched" in text
    for line in ("batched matmul x5", "batched elementwise_add x5", "batched relu x5"):
        assert line in text, text
    assert "batched matmul x5: gathered X; shared Y" in text  # the rows, not the weight


def test_groups_smaller_than_the_cost_model_minimum_run_alone():
    with tape.lazy(compile=False):
        tape.reset_global_tape()
        outs = _linear_forest(autobatch.MIN_GROUP - 1)
        tape.get_global_tape().realize(outs)
        assert "0 batched groups" in tape.explain()


def test_autobatch_off_and_exact_record_no_groups():
    for options in ({"autobatch": False}, {"exact": True}):
        with tape.lazy(compile=False, **options):
            tape.reset_global_tape()
            tape.get_global_tape().realize(_linear_forest(5))
            assert "batched" not in tape.explain()


def test_dependent_ops_of_one_signature_are_never_grouped():
    with tape.lazy(compile=False):
        tape.reset_global_tape()
        x = tape.Variable(np.linspace(-1, 1, DIM))
        chain = [x]
        for _ in range(5):
            chain.append(ops.tanh(chain[-1]))
        np.testing.assert_array_equal(
            chain[-1].numpy(), np.tanh(np.tanh(np.tanh(np.tanh(np.tanh(np.linspace(-1, 1, DIM))))))
        )
        assert "0 batched groups" in tape.explain()


@pytest.fixture
def failing_op():
    """An elementwise op whose kernel fails (at run time) on negative inputs."""

    @register(
        "checked_sqrt", inputs=("X",), infer=lambda attrs, x: (x.shape, x.dtype), elementwise=True
    )
    def checked_sqrt(xp, attrs, x):
        if (x < 0).any():
            raise ValueError("negative input")
        return xp.sqrt(x)

    yield checked_sqrt
    unregister("checked_sqrt")


def test_an_error_in_one_member_names_that_members_op_and_line(failing_op):
    with tape.lazy(compile=False):
        tape.reset_global_tape()
        good = [failing_op(tape.Variable(np.full(DIM, 4.0))) for _ in range(3)]
        bad = failing_op(tape.Variable(np.full(DIM, -1.0)))  # the failing member
        line = test_an_error_in_one_member_names_that_members_op_and_line.__code__.co_firstlineno
        with pytest.raises(FluidError) as caught:
            ops.sum(good + [bad]).numpy()
    message = str(caught.value)
    assert "op 'checked_sqrt'" in message and "negative input" in message
    assert f"test_autobatch.py:{line + 4}" in message, message


def test_random_ops_keep_eager_draws():
    def run(lazy):
        tape.seed(7)
        tape.reset_global_tape()
        xs = [tape.Variable(np.full((3, DIM), float(i + 1))) for i in range(4)]
        outs = [ops.tanh(ops.dropout(x * 2.0, dropout_prob=0.5)[0]) for x in xs]
        tape.get_global_tape().realize(outs)
        return [o.numpy().copy() for o in outs]

    want = run(False)
    with tape.lazy(compile=False):
        got = run(True)
        assert "batched tanh x4" in tape.explain()
        assert "dropout" not in tape.explain()
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_structure_that_batched_well_stays_interpreted():
    def step():
        tape.reset_global_tape()
        outs = _linear_forest(6)
        tape.get_global_tape().realize(outs)
        return [o.numpy() for o in outs]

    with tape.lazy(autobatch=True):
        first = step()
        second = step()  # same structure: not compiled into a one-op-at-a-time plan
        assert tape.explain().startswith("interpreted run, autobatched")
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_structure_that_batched_little_is_compiled_on_its_second_sighting():
    def step():
        tape.reset_global_tape()
        h = tape.Variable(np.linspace(-1, 1, DIM))
        for _ in range(12):  # a recurrence: nothing to batch
            h = ops.tanh(h * 0.5 + 0.1)
        extra = _linear_forest(3)
        tape.get_global_tape().realize([h] + extra)
        return h.numpy()

    with tape.lazy():
        first = step()
        assert "autobatched" in tape.explain()
        second = step()
        assert tape.explain().startswith("ops kept")  # a compiled plan's account
    np.testing.assert_allclose(second, first, rtol=1e-13)


def _pending(build):
    """The ops ``build`` records lazily (not yet run) and its outputs."""
    tape.reset_global_tape()
    outs = build()
    return list(tape.get_global_tape()._pending_ops), outs


def _few_of_each():
    """A chain in which every signature occurs fewer than MIN_GROUP times."""
    h = tape.Variable(np.linspace(-1, 1, DIM))
    for _ in range(autobatch.MIN_GROUP - 1):
        h = ops.sigmoid(ops.relu(ops.tanh(h)))
    return [h]


def test_a_run_where_no_signature_can_fill_a_group_bails_out_without_grouping_work():
    with tape.lazy(compile=False):
        pending, (h,) = _pending(_few_of_each)
        plan = autobatch.schedule(pending, [False] * len(pending))
        assert plan.bailed == len(pending)
        assert plan.groups == [(i,) for i in range(len(pending))]  # tape order, one at a time
        assert plan.batched() == []
        got = h.numpy().copy()
        account = tape.explain()
        assert "0 batched groups" in account
        assert f"{len(pending)} ops run in tape order (no signature could fill a group)" in account
    want = np.linspace(-1, 1, DIM)
    for _ in range(autobatch.MIN_GROUP - 1):
        want = 1 / (1 + np.exp(-np.maximum(np.tanh(want), 0)))
    np.testing.assert_allclose(got, want, rtol=1e-15)


def test_a_run_with_enough_ops_of_one_signature_does_not_bail_out():
    with tape.lazy(compile=False):
        pending, outs = _pending(lambda: _linear_forest(autobatch.MIN_GROUP))
        plan = autobatch.schedule(pending, [False] * len(pending))
        assert plan.bailed == 0
        assert [len(group) for group, _ in plan.batched()] == [autobatch.MIN_GROUP] * 3
        tape.get_global_tape().realize(outs)


def test_a_dependent_chain_of_one_signature_runs_in_tape_order_without_groups():
    with tape.lazy(compile=False):

        def chain():
            h = tape.Variable(np.linspace(-1, 1, DIM))
            for _ in range(6):
                h = ops.tanh(h)
            return [h]

        pending, (h,) = _pending(chain)
        plan = autobatch.schedule(pending, [False] * len(pending))
        assert plan.bailed == 0  # (six tanh ops share a signature: the DAG decides)
        assert plan.batched() == []
        got = h.numpy().copy()
        assert "0 batched groups" in tape.explain()
    want = np.linspace(-1, 1, DIM)
    for _ in range(6):
        want = np.tanh(want)
    np.testing.assert_array_equal(got, want)


def test_signatures_are_the_op_attributes_per_example_shapes_and_shared_inputs():
    params = _params()
    with tape.lazy(compile=False):

        def record():
            a, b = (tape.Variable(np.ones(DIM)) for _ in range(2))
            c = tape.Variable(np.ones((2, DIM)))
            return [
                ops.matmul(a, params["w"]),  # 0
                ops.matmul(b, params["w"]),  # 1: as 0 (another example, the same weight)
                ops.matmul(c, params["w"]),  # 2: another per-example shape
                ops.matmul(a, params["w"], transpose_y=True),  # 3: other attributes
                ops.matmul(b, params["w"], transpose_y=True),  # 4: as 3
                ops.matmul(a, tape.Variable(np.ones((DIM, DIM)))),  # 5: a per-example weight
                ops.dropout(c, dropout_prob=0.5)[0],  # 6: random: never batched
            ]

        pending, _ = _pending(record)
        keys = autobatch._Signatures().keys(pending, 0, len(pending))
    assert keys[0] == keys[1] >= 0 and keys[3] == keys[4] >= 0
    assert len({keys[0], keys[2], keys[3], keys[5]}) == 4
    assert keys[6] == -1


def test_unknown_heuristic_is_refused():
    with pytest.raises(ValueError, match="autobatch must be"):
        tape.lazy(autobatch="greedy")


# The batch rules on their own: one call equals the op applied to each member.


def _members_equal(op_type, per_example, shared, attrs=None, slots_each=None):
    """Runs ``op_type``'s batch rule over ``per_example`` (list of tuples of arrays, None where
    the input is ``shared``) and compares each row with the op's kernel on that member."""
    defn = REGISTRY[op_type]
    attrs = defn.check_attrs(attrs or {})
    rule = batching.rule_of(defn)
    each = [value is None for value in shared]
    shapes = [
        np.shape(per_example[0][i]) if each[i] else np.shape(shared[i]) for i in range(len(each))
    ]
    assert rule.accepts(attrs, shapes, each)
    inputs = [
        (True, np.stack([m[i] for m in per_example])) if each[i] else (False, shared[i])
        for i in range(len(each))
    ]
    members = [[m[i] if each[i] else shared[i] for i in range(len(each))] for m in per_example]
    want = [defn.kernel(np, attrs, *m) for m in members]
    got = rule.run(np, defn.kernel, attrs, inputs, len(members), np.shape(want[0]))
    assert got.shape == (len(members),) + np.shape(want[0])
    for row, expected in zip(got, want, strict=True):
        np.testing.assert_allclose(row, expected, rtol=1e-13)


RNG = np.random.default_rng(3)


def _r(*shape):
    return RNG.standard_normal(shape)


@pytest.mark.parametrize(
    "case",
    [
        ("vector @ shared W", [(_r(3), None) for _ in range(4)], (None, _r(3, 5)), {}),
        (
            "rows @ shared W^T",
            [(_r(2, 3), None) for _ in range(4)],
            (None, _r(5, 3)),
            {"transpose_y": True},
        ),
        ("shared W @ vector", [(None, _r(3)) for _ in range(4)], (_r(5, 3), None), {}),
        (
            "shared W^T @ vector",
            [(None, _r(5)) for _ in range(4)],
            (_r(5, 3), None),
            {"transpose_x": True},
        ),
        (
            "x^T @ g per example",
            [(_r(1, 3), _r(1, 5)) for _ in range(4)],
            (None, None),
            {"transpose_x": True},
        ),
    ],
    ids=lambda case: case[0],
)
def test_matmul_rule(case):
    _, members, shared, attrs = case
    _members_equal("matmul", members, shared, attrs)


def test_matmul_rule_refuses_a_dot_of_two_per_example_vectors():
    attrs = REGISTRY["matmul"].check_attrs({})
    assert not batching.MATMUL.accepts(attrs, [(3,), (3,)], [True, True])


def test_slices_grad_rule_builds_every_members_gradient_at_once():
    defn = REGISTRY["slices_grad"]
    attrs = defn.check_attrs({"shape": [2, 6], "axes": [1], "starts": [0, 4], "ends": [4, 6]})
    rule = batching.rule_of(defn)
    assert rule.accepts(attrs, [(2, 4), (2, 2)], [True, True])
    members = [[_r(2, 4), _r(2, 2)] for _ in range(3)]
    stacks = [(True, np.stack([m[j] for m in members])) for j in range(2)]
    got = rule.run(np, defn.kernel, attrs, stacks, 3, (2, 6))
    for row, member in zip(got, members, strict=True):
        assert np.array_equal(row, defn.kernel(np, attrs, member))


def test_outer_rule_stacks_vectors_per_example_or_shared():
    _members_equal("outer", [(_r(3), _r(5)) for _ in range(4)], (None, None))
    _members_equal("outer", [(_r(3), None) for _ in range(4)], (None, _r(5)))
    _members_equal("outer", [(None, _r(5)) for _ in range(4)], (_r(3), None))


@pytest.mark.parametrize(
    "attrs", [{}, {"axis": [0]}, {"axis": [-1], "keepdim": True}, {"axis": [0, 1]}]
)
def test_reduce_rule(attrs):
    _members_equal("reduce_sum", [(_r(2, 3),) for _ in range(3)], (None,), attrs)
    _members_equal("reduce_mean", [(_r(2, 3),) for _ in range(3)], (None,), attrs)


def test_elementwise_rule_broadcasts_members_of_lower_rank_and_shared_inputs():
    _members_equal("elementwise_add", [(_r(3), None) for _ in range(4)], (None, _r(2, 3)))
    _members_equal("elementwise_mul", [(_r(2, 3), _r(3)) for _ in range(4)], (None, None))
    _members_equal("tanh", [(_r(2, 3),) for _ in range(3)], (None,))
    _members_equal("elementwise_add", [(_r(3), None) for _ in range(3)], (None, _r(3)), {"axis": 0})


def test_elementwise_rule_refuses_seed_axis_broadcasting_between_ranks():
    attrs = REGISTRY["elementwise_add"].check_attrs({"axis": 0})
    assert not batching.ELEMENTWISE.accepts(attrs, [(2, 3), (2,)], [True, True])


def test_view_and_lookup_rules():
    _members_equal("reshape", [(_r(1, 6),) for _ in range(3)], (None,), {"shape": [2, 3]})
    _members_equal("unsqueeze", [(_r(4),) for _ in range(3)], (None,), {"axes": [0]})
    ids = [(None, np.array(i % 5)) for i in range(4)] + [(None, np.array(2))]
    _members_equal("lookup_table", ids, (_r(5, 3), None))
    _members_equal("lookup_table", [(None, np.array([0, 4])) for _ in range(3)], (_r(5, 3), None))


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_cross_entropy_rule_moves_its_class_axis_past_the_member_axis(axis):
    """Both outputs (softmax, loss) per member, and the gradient op, for hard labels with and
    without their size-1 class axis and for soft labels."""
    defn = REGISTRY["softmax_with_cross_entropy"]
    assert batching.rule_of(defn) is batching.ROWS_ALONG_AXIS
    logits = [_r(3, 4) for _ in range(5)]
    classes = 3 if axis == 0 else 4
    hard = [RNG.integers(classes, size=(1, 4) if axis == 0 else (3, 1)) for _ in range(5)]
    if axis == -1:
        hard = [h[:, 0] for h in hard]  # (the class axis left out)
    soft = [np.abs(_r(3, 4)) for _ in range(5)]
    for soft_label, labels in ((False, hard), (True, soft)):
        attrs = defn.check_attrs({"axis": axis, "soft_label": soft_label})
        inputs = [(True, np.stack(logits)), (True, np.stack(labels))]
        softmax, loss = batching.ROWS_ALONG_AXIS.run(np, defn.kernel, attrs, inputs, 5, None)
        for i, (x, label) in enumerate(zip(logits, labels, strict=True)):
            want_softmax, want_loss = defn.kernel(np, attrs, x, label)
            np.testing.assert_allclose(softmax[i], want_softmax, rtol=1e-13)
            np.testing.assert_allclose(loss[i], want_loss, rtol=1e-13)
        gloss = [np.abs(_r(*want_loss.shape)) for _ in range(5)]
        members = [(label, p, g) for label, p, g in zip(labels, softmax, gloss, strict=True)]
        _members_equal("softmax_with_cross_entropy_grad", members, (None, None, None), dict(attrs))


def test_slice_rule_moves_axes_past_the_member_axis():
    cut = {"axes": [1], "starts": [1], "ends": [3]}
    _members_equal("slice", [(_r(2, 4),) for _ in range(3)], (None,), cut)
    _members_equal("slice", [(_r(2, 4),) for _ in range(3)], (None,), {**cut, "axes": [-1]})
    one = {"axes": [0], "starts": [1], "ends": [2], "decrease_axis": [0]}
    _members_equal("slice", [(_r(2, 4),) for _ in range(3)], (None,), one)
    _members_equal("slice_grad", [(_r(2, 4), _r(4)) for _ in range(3)], (None, None), one)


def test_list_rule_adds_the_members_lists_position_by_position():
    defn = REGISTRY["sum"]
    members = [[_r(2, 3) for _ in range(3)] for _ in range(4)]
    stacks = [(True, np.stack([m[j] for m in members])) for j in range(3)]
    got = batching.LIST.run(np, defn.kernel, {}, stacks, 4, (2, 3))
    for row, member in zip(got, members, strict=True):
        np.testing.assert_array_equal(row, defn.kernel(np, {}, member))  # same order: exact
    assert not batching.LIST.accepts({}, [(2, 3), (3,)], [True, True])


def test_gradient_sums_run_batched():
    with tape.lazy(compile=False):
        tape.reset_global_tape()
        w = _params()["w"]
        xs = [tape.Variable(np.full(DIM, i + 1.0)) for i in range(4)]
        hs = [ops.tanh(ops.matmul(x, w)) for x in xs]
        outs = [ops.sum([h, h * h]) for h in hs]  # (a list op, as backward's sums)
        tape.get_global_tape().realize(outs)
        assert "batched sum x4" in tape.explain()
        for x, out in zip(xs, outs, strict=True):
            h = np.tanh(x.numpy() @ w.numpy())
            np.testing.assert_allclose(out.numpy(), h + h * h, rtol=1e-13)


def test_ops_opt_in_beside_their_kernels():
    assert batching.rule_of(REGISTRY["tanh"]) is batching.ELEMENTWISE  # elementwise default
    assert batching.rule_of(REGISTRY["matmul"]) is batching.MATMUL
    assert batching.rule_of(REGISTRY["dropout"]) is None  # random: not elementwise-batched
    assert batching.rule_of(REGISTRY["concat"]) is batching.CONCAT


def test_an_op_recorded_into_one_of_its_inputs_is_run_in_order_not_batched():
    """add_op's ``outputs`` can bind an op's result to its own input (written in place): the
    batched first-sighting run refuses such a tape (``Tape.bound_outputs``), and the plain run
    gives eager mode's values."""
    interpret = importlib.import_module("tape.interpret")
    xs = [np.full(3, float(k)) for k in range(4)]
    results = {}
    for lazy in (False, True):
        tape.reset_global_tape()
        with tape.lazy(enabled=lazy, autobatch=True, compile=False):
            t = tape.get_global_tape()
            acc = [tape.Variable(x) * 1.0 for x in xs]
            for a in acc:
                t.add_op("sum", {"X": [a, a]}, outputs={"Out": [a]})
            assert t.bound_outputs
            if lazy:
                assert interpret.run_all_batched(t, "agenda") is False
            results[lazy] = [a.numpy().copy() for a in acc]
    for got, want in zip(results[True], results[False], strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(results[True][3], np.full(3, 6.0))
    tape.reset_global_tape()
    assert not tape.get_global_tape().bound_outputs
