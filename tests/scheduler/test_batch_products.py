"""The batch_products rewrite: which products it joins, which it must leave alone, and that lazy
programs it rewrites equal eager mode within reassociation rounding (bit for bit with exact=True).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layers
import ops
import tape
from tape.ir import OpDesc, Program
from tape.passes import pipeline
from tape.passes.batch_products import MIN_GROUP, rewrite
from tape.passes.block_edits import remove_dead
from tape.passes.execute import run_reference
from tests.scheduler.test_properties import _chooser, _record, _replay

STEPS = MIN_GROUP + 1


def _block(leaves):
    program = Program()
    block = program.global_block()
    for name, shape in leaves.items():
        block.create_var(name, shape, "float64")
    return block


def _values(block, seed=0):
    rng = np.random.default_rng(seed)
    written = {n for op in block.ops for n in op.output_names()}
    return {
        name: rng.standard_normal(var.shape)
        for name, var in block.vars.items()
        if name not in written
    }


def _types(block):
    return [op.type for op in block.ops]


def _assert_same_values(block, batched, names):
    """``batched`` computes ``names`` as ``block`` does (within float64 reassociation)."""
    values = _values(block)
    want, got = run_reference(block, dict(values)), run_reference(batched, dict(values))
    for name in names:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, err_msg=name)


def _weight_gradient(steps=STEPS, rows=3):
    """sum_t dZ_t^T @ X_t, accumulated the way backward records it (nested sums)."""
    block = _block(
        {
            **{f"dz{t}": (rows, 5) for t in range(steps)},
            **{f"x{t}": (rows, 2) for t in range(steps)},
        }
    )
    for t in range(steps):
        block.append_op(
            "matmul", {"X": [f"dz{t}"], "Y": [f"x{t}"]}, {"Out": [f"g{t}"]}, {"transpose_x": True}
        )
    half = steps // 2
    block.append_op("sum", {"X": [f"g{t}" for t in range(half)]}, {"Out": ["acc"]})
    block.append_op(
        "sum", {"X": ["acc"] + [f"g{t}" for t in range(half, steps)]}, {"Out": ["grad"]}
    )
    return block


def test_a_sum_of_products_becomes_one_product_of_joined_operands():
    block = _weight_gradient()
    batched = rewrite(block, keep={"grad"})
    assert _types(batched) == ["concat", "concat", "matmul"]
    matmul = batched.ops[-1]
    assert matmul.outputs == {"Out": ["grad"]} and matmul.attrs["transpose_x"]
    assert [batched.vars[n].shape for n in matmul.input_names()] == [(3 * STEPS, 5), (3 * STEPS, 2)]
    assert batched.vars["grad"].shape == (5, 2)
    _assert_same_values(block, batched, ["grad"])


def test_other_terms_stay_in_the_sum():
    block = _weight_gradient()
    block.create_var("old", (5, 2), "float64")
    block.append_op("sum", {"X": ["grad", "old"]}, {"Out": ["total"]})
    batched = rewrite(block, keep={"total"})
    assert _types(batched) == ["concat", "concat", "matmul", "sum"]
    assert set(batched.ops[-1].inputs["X"]) == {"old", batched.ops[2].outputs["Out"][0]}
    _assert_same_values(block, batched, ["total"])


def test_reductions_over_a_leading_axis_are_joined_too():
    block = _block({f"dz{t}": (2, 4) for t in range(STEPS)})
    for t in range(STEPS):
        block.append_op("sum_to_shape", {"X": [f"dz{t}"]}, {"Out": [f"b{t}"]}, {"shape": [4]})
    block.append_op("sum", {"X": [f"b{t}" for t in range(STEPS)]}, {"Out": ["grad"]})
    batched = rewrite(block, keep={"grad"})
    assert _types(batched) == ["concat", "sum_to_shape"]
    _assert_same_values(block, batched, ["grad"])


def test_few_products_are_left_alone():
    block = _weight_gradient(steps=MIN_GROUP - 1)
    assert rewrite(block, keep={"grad"}) is block


def test_a_product_someone_keeps_is_not_folded_away():
    block = _weight_gradient()
    batched = rewrite(block, keep={"grad", "g0"})
    assert "g0" in {n for op in batched.ops for n in op.output_names()}
    _assert_same_values(block, batched, ["grad", "g0"])


def test_an_operand_overwritten_between_product_and_sum_blocks_the_join():
    block = _weight_gradient()
    block.create_var("lr", (1,), "float64")
    block.create_var("grad_x0", (3, 2), "float64")
    # An in-place update of x0 after its product and before the sum: x0 must be read before it.
    block.ops.insert(
        STEPS,
        OpDesc(
            "sgd",
            {"Param": ["x0"], "Grad": ["grad_x0"], "LearningRate": ["lr"]},
            {"ParamOut": ["x0"]},
            {},
        ),
    )
    batched = rewrite(block, keep={"grad"})
    assert "g0" in batched.ops[-1].input_names()
    assert _types(batched).count("matmul") == 2  # g0's own product, and the other steps joined


def _projections(recurrent):
    """x_t @ W^T for every step; with ``recurrent`` each x_t is the previous result's tanh."""
    block = _block({"x0": (3, 4), "w": (4, 4), **{f"x{t}": (3, 4) for t in range(1, STEPS)}})
    for t in range(STEPS):
        x = f"x{t}" if not recurrent or t == 0 else f"h{t - 1}"
        block.append_op("matmul", {"X": [x], "Y": ["w"]}, {"Out": [f"p{t}"]}, {"transpose_y": True})
        block.append_op("tanh", {"X": [f"p{t}"]}, {"Out": [f"h{t}"]})
    return block


def test_products_sharing_an_operand_are_computed_at_once_and_split():
    block = _projections(recurrent=False)
    batched = rewrite(block, keep={f"h{t}" for t in range(STEPS)})
    assert _types(batched) == ["concat", "matmul", "split"] + ["tanh"] * STEPS
    assert batched.ops[2].outputs == {"Out": [f"p{t}" for t in range(STEPS)]}
    _assert_same_values(block, batched, [f"h{t}" for t in range(STEPS)])


def test_a_product_of_a_joined_product_is_left_out_of_the_join():
    """q = p0 @ W reads p0 = x0 @ W directly: p0 can join the others, q cannot."""
    block = _block({"w": (3, 3), **{f"x{t}": (2, 3) for t in range(STEPS)}})
    block.append_op("matmul", {"X": ["x0"], "Y": ["w"]}, {"Out": ["p0"]})
    block.append_op("matmul", {"X": ["p0"], "Y": ["w"]}, {"Out": ["q"]})
    for t in range(1, STEPS):
        block.append_op("matmul", {"X": [f"x{t}"], "Y": ["w"]}, {"Out": [f"p{t}"]})
    kept = ["q"] + [f"p{t}" for t in range(STEPS)]
    batched = rewrite(block, keep=set(kept))
    assert _types(batched) == ["concat", "matmul", "split", "matmul"]
    assert batched.ops[3].inputs["X"] == ["p0"]
    _assert_same_values(block, batched, kept)


def test_a_recurrence_is_not_batched():
    block = _projections(recurrent=True)
    assert rewrite(block, keep={f"h{STEPS - 1}"}) is block


@pytest.mark.parametrize("exact", [False, True])
def test_the_executor_batches_a_static_program_unless_exact(exact):
    block = _projections(recurrent=False)
    program = Program([block])
    values = _values(block)
    fetch = [f"h{t}" for t in range(STEPS)]
    got = tape.Executor(exact=exact).run(program, feed=values, fetch_list=fetch)
    want = run_reference(block, dict(values))
    for name, value in zip(fetch, got, strict=True):
        if exact:
            np.testing.assert_array_equal(value, want[name])
        else:
            np.testing.assert_allclose(value, want[name], rtol=1e-12)
    explained = tape.Executor(exact=exact).explain(program, feed=values, fetch_list=fetch)
    assert ("batched matmul" in explained) != exact


def _unrolled(steps, dtype, exact=None, validate=False, seed=0, threads=0):
    """Loss and parameter gradients of an LSTM unrolled ``steps`` steps (eager if exact is
    None), and the last lazy plan (compiled on a first sighting too: the rewrites are tested)."""
    tape.seed(seed)
    cell = layers.LSTMCell(3, 4, dtype=dtype)
    xs = np.random.default_rng(seed).standard_normal((steps, 2, 3)).astype(dtype)
    lazy = (
        tape.lazy(exact=bool(exact), validate=validate, threads=threads, compile=True)
        if exact is not None
        else tape.lazy(False)
    )
    with lazy:
        t = tape.reset_global_tape()
        h = c = None
        for x in xs:
            h, c = cell(tape.Variable(x)) if h is None else cell(tape.Variable(x), (h, c))
        loss = h.sum()
        tape.backward(loss)
        grads = [p.grad().numpy() for p in cell.params()]
    return loss.numpy(), grads, getattr(t, "_last_plan", None)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_lazy_lstm_equals_eager_mode_within_reassociation_rounding(dtype):
    loss, grads, _ = _unrolled(2 * STEPS, dtype)
    lazy_loss, lazy_grads, plan = _unrolled(2 * STEPS, dtype, exact=False, validate=True)
    assert _batched(plan)
    assert "batched matmul" in pipeline.explain(plan)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(lazy_loss, loss, rtol=64 * eps)
    for got, want in zip(lazy_grads, grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=64 * eps * np.abs(want).max())


def test_a_rewritten_plan_on_the_thread_pool_equals_program_order():
    loss, grads, _ = _unrolled(2 * STEPS, "float32", exact=False)
    pool_loss, pool_grads, plan = _unrolled(2 * STEPS, "float32", exact=False, threads=2)
    assert _batched(plan)
    np.testing.assert_array_equal(pool_loss, loss)
    for got, want in zip(pool_grads, grads, strict=True):
        np.testing.assert_array_equal(got, want)


def test_exact_lazy_mode_equals_eager_mode_bit_for_bit():
    loss, grads, _ = _unrolled(2 * STEPS, "float32")
    lazy_loss, lazy_grads, plan = _unrolled(2 * STEPS, "float32", exact=True, validate=True)
    assert not _batched(plan)
    np.testing.assert_array_equal(lazy_loss, loss)
    for got, want in zip(lazy_grads, grads, strict=True):
        np.testing.assert_array_equal(got, want)


@settings(max_examples=25, deadline=None)
@given(
    steps=st.integers(1, MIN_GROUP + 3),
    rows=st.lists(st.integers(0, 3), min_size=1),
    n_in=st.integers(1, 3),
    n_out=st.integers(1, 3),
    transpose=st.booleans(),
    dtype=st.sampled_from(["float32", "float64"]),
)
def test_shared_weight_gradients_match_eager_mode(steps, rows, n_in, n_out, transpose, dtype):
    """A weight used by many products of varying row counts (size-0 and size-1 included): lazy
    gradients equal eager ones; the plan is rewritten exactly when there are enough products."""
    rng = np.random.default_rng(steps)
    w_value = rng.standard_normal((n_out, n_in) if transpose else (n_in, n_out)).astype(dtype)
    xs = [rng.standard_normal((rows[t % len(rows)], n_in)).astype(dtype) for t in range(steps)]

    def run(lazy):
        with tape.lazy(lazy, compile=True):
            t = tape.reset_global_tape()
            w = tape.Variable(w_value, requires_grad=True)
            loss = None
            for x in xs:
                y = ops.matmul(tape.Variable(x), w, transpose_y=transpose)
                term = (y * y).sum()
                loss = term if loss is None else loss + term
            tape.backward(loss)
            return w.grad().numpy(), getattr(t, "_last_plan", None)

    want, _ = run(False)
    got, plan = run(True)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(got, want, rtol=0, atol=256 * eps * max(np.abs(want).max(), 1))
    assert _batched(plan) == (steps >= MIN_GROUP)


def test_dead_code_removal_keeps_what_is_kept_read_or_has_effects():
    block = _block({"x": (2,), "lr": (1,), "grad": (2,)})
    block.vars["x"].persistable = True
    block.append_op("tanh", {"X": ["x"]}, {"Out": ["unread"]})
    block.append_op("exp", {"X": ["x"]}, {"Out": ["kept"]})
    block.append_op("square", {"X": ["x"]}, {"Out": ["read"]})
    block.append_op(
        "sgd", {"Param": ["x"], "Grad": ["read"], "LearningRate": ["lr"]}, {"ParamOut": ["x"]}
    )
    assert _types(remove_dead(block, keep={"kept"})) == ["exp", "square", "sgd"]


def test_a_failure_after_a_batched_product_keeps_what_the_run_computed():
    from ops.registry import unregister
    from tests.scheduler.test_lazy import _register_boom

    boom = _register_boom()
    try:
        with tape.lazy():
            t = tape.reset_global_tape()
            w = tape.Variable(np.eye(3, dtype=np.float32))
            outs = [
                ops.tanh(ops.matmul(tape.Variable(np.full((2, 3), -1.0, np.float32)), w))
                for _ in range(STEPS)
            ]
            bad = boom(ops.sum(outs))
            with pytest.raises(tape.ExecutionError, match="boom_for_test"):
                bad.numpy()
            # The failed run's ops are dropped; the values it computed (the tanh outputs, from
            # the batched product) are kept.
            assert t._pending_ops == []
            assert all(out._value is not None for out in outs)
    finally:
        unregister("boom_for_test")


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_random_tapes_run_through_the_rewrite_and_equal_eager_mode_within_rounding(data):
    """Random registry tapes in the default (rewriting) lazy mode: the rewrite scans every plan
    and must leave each value equal to eager mode's up to float64 reassociation."""
    log = []
    eager, _ = _record(_chooser(data, log), lazy=False)
    lazy, _ = _record(_replay(log), lazy=True, exact=False)
    assert len(eager) == len(lazy)
    for want, got in zip(eager, lazy, strict=True):
        assert want.shape == got.shape and want.dtype == got.dtype
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max(initial=0))


def _batched(plan):
    """Whether batch_products rewrote the plan (fusion may rewrite it too)."""
    return any("/batched_" in (op.name or "") for op in plan.analysis.block.ops)
