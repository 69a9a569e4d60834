"""Autobatching inside compiled plans (tape/passes/batch_groups.py): which groups it batches,
how it gathers their operands, what it leaves alone, and that the lazy steps it runs equal
eager mode within the rounding of a product over more rows."""

import numpy as np
import pytest
from hypothesis import given, settings

import ops
import tape
from tape.errors import FluidError
from tape.ir import Program
from tape.passes import batch_groups
from tape.passes.execute import run_reference
from tests.scheduler.test_autobatch import _forest, _forests, assert_forest_close


def _per_example_block(examples=6, terms=1):
    """Per example ``tanh(x_i @ W)``, with W a parameter (shared), then their sum."""
    block = Program().global_block()
    block.create_var("W", (4, 4), "float64", persistable=True)
    for i in range(examples):
        block.create_var(f"x{i}", (1, 4), "float64")
    for i in range(examples):
        block.append_op("matmul", {"X": [f"x{i}"], "Y": ["W"]}, {"Out": [f"y{i}"]})
    for i in range(examples):
        block.append_op("tanh", {"X": [f"y{i}"]}, {"Out": [f"t{i}"]})
    block.append_op("sum", {"X": [f"t{i}" for i in range(examples)]}, {"Out": ["total"]})
    return block


def _values(block, seed=0):
    rng = np.random.default_rng(seed)
    written = {n for op in block.ops for n in op.output_names()}
    return {n: rng.standard_normal(v.shape) for n, v in block.vars.items() if n not in written}


def _assert_same(block, batched, names):
    values = _values(block)
    want, got = run_reference(block, dict(values)), run_reference(batched, dict(values))
    for name in names:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, err_msg=name)


def test_independent_ops_of_one_signature_become_one_call_each():
    block = _per_example_block()
    batched = batch_groups.rewrite(block)
    calls = [op for op in batched.ops if op.type == "batched_call"]
    assert [(op.attrs["op"], op.attrs["count"]) for op in calls] == [("matmul", 6), ("tanh", 6)]
    assert calls[0].attrs["each"] == (True, False)  # (W is shared: read as it is)
    _assert_same(block, batched, ["total", *[f"t{i}" for i in range(6)]])


def test_a_group_reads_an_earlier_groups_rows_without_gathering_them():
    batched = batch_groups.rewrite(_per_example_block())
    types = [op.type for op in batched.ops]
    assert types.count("gather_rows") == 1  # the x_i, once; tanh reads the product's result
    tanh = [op for op in batched.ops if op.type == "batched_call"][1]
    product = [op for op in batched.ops if op.type == "batched_call"][0]
    assert tanh.inputs["X"] == product.outputs["Batched"]


def _scheduled(block, keep):
    from tape.passes import pipeline

    program = Program()
    program.blocks[0] = block
    return pipeline.schedule(pipeline.analyse(program, keep), keep, batch="agenda")


def _slots(compiled):
    """A plan's slot per variable (the pruned block's order, as ``pipeline.schedule`` numbers)."""
    return {
        n: i for i, n in enumerate(compiled.analysis.analysis.pruned.program.global_block().vars)
    }


def _squared_block(examples=8):
    """``_per_example_block`` with each tanh squared (a second group, which reads the tanh's
    rows as a whole) and the squares summed into ``squares``."""
    block = _per_example_block(examples=examples)
    for i in range(examples):
        block.append_op("elementwise_mul", {"X": [f"t{i}"], "Y": [f"t{i}"]}, {"Out": [f"u{i}"]})
    block.append_op("sum", {"X": [f"u{i}" for i in range(examples)]}, {"Out": ["squares"]})
    return block


def test_a_joined_product_read_whole_leaves_no_split_and_stores_no_unread_rows():
    """x_i @ W joined into one product (batch_products) whose result the batched tanh reads
    whole: the split into the y_i is dropped; and the tanh's rows, which only the next group
    reads (as a whole), are never stored."""
    block = _squared_block()
    compiled = _scheduled(block, ["squares"])
    types = [op.type for op in compiled.analysis.block.ops]
    assert "split" not in types and "matmul" in types
    slot_of = _slots(compiled)
    calls = [ins for ins in compiled.instructions if ins[2].get("op") == "tanh"]
    ((_, _, _, _, (whole, rows), _),) = calls
    assert whole is not None and rows == (None,) * 8  # (read whole by the squares' group)
    values = _values(block)
    vals = [None] * compiled.slots
    for name, value in values.items():
        if name in slot_of:
            vals[slot_of[name]] = value
    from tape.passes.execute import run

    run(compiled, vals)
    want = run_reference(block, dict(values))
    np.testing.assert_allclose(vals[slot_of["squares"]], want["squares"], rtol=1e-12)


def test_rows_the_caller_keeps_are_stored():
    block = _squared_block()
    compiled = _scheduled(block, ["squares", "t3"])
    slot_of = _slots(compiled)
    ((_, _, _, _, (_, rows), _),) = [
        ins for ins in compiled.instructions if ins[2].get("op") == "tanh"
    ]
    assert rows[3] == slot_of["t3"] and rows.count(None) == 7


def test_a_join_of_earlier_groups_rows_is_one_gather_of_them():
    """concat along axis 0 of 64 rows of two groups and 2 loose arrays: one gather from the
    two groups' results and the loose arrays, reshaped to the concat's result (a concat of
    66 pieces costs more, by the module's model, than a gather from 4 sources)."""
    block = _per_example_block(examples=64)
    for i in range(32):
        block.append_op("elementwise_mul", {"X": [f"t{i}"], "Y": [f"t{i}"]}, {"Out": [f"u{i}"]})
    block.create_var("loose0", (1, 4), "float64")
    block.create_var("loose1", (1, 4), "float64")
    pieces = [f"u{i}" for i in range(32)] + [f"t{i}" for i in range(32, 64)]
    pieces += ["loose0", "loose1"]
    block.append_op("concat", {"X": pieces}, {"Out": ["joined"]}, {"axis": 0})
    batched = batch_groups.rewrite(block)
    assert "concat" not in [op.type for op in batched.ops]
    (reshape,) = [op for op in batched.ops if op.outputs.get("Out") == ["joined"]]
    assert reshape.type == "reshape"
    (gather,) = [op for op in batched.ops if op.outputs["Out"] == reshape.inputs["X"]]
    assert gather.type == "gather_rows" and len(gather.inputs["X"]) == 4  # 2 results, 2 loose
    _assert_same(block, batched, ["joined", "total"])


def test_a_join_of_loose_arrays_stays_a_concat():
    block = Program().global_block()
    for i in range(16):
        block.create_var(f"x{i}", (1, 4), "float64")
    block.append_op("concat", {"X": [f"x{i}" for i in range(16)]}, {"Out": ["joined"]})
    assert batch_groups.rewrite(block) is block


def test_rows_in_another_order_are_gathered_in_one_copy():
    block = _per_example_block(examples=8)
    # (y_i + y_(i+3): one operand's rows cannot be consecutive in the group's order)
    for i in range(8):
        block.append_op(
            "elementwise_add", {"X": [f"y{i}"], "Y": [f"y{(i + 3) % 8}"]}, {"Out": [f"u{i}"]}
        )
    batched = batch_groups.rewrite(block)
    gathers = [op for op in batched.ops if op.type == "gather_rows"]
    product = next(op for op in batched.ops if op.type == "batched_call")
    assert len(gathers) in (2, 3)  # the x_i, then the adds' operands not in the group's order
    for gather in gathers[1:]:
        assert gather.inputs["X"] == product.outputs["Batched"]  # one copy from one result
        ((_, positions, rows),) = gather.attrs["pieces"]
        assert sorted(rows) == list(range(8)) and list(positions) == list(range(8))
    assert any(list(g.attrs["pieces"][0][2]) != list(range(8)) for g in gathers[1:])
    _assert_same(block, batched, ["total", *[f"u{i}" for i in range(8)]])


def test_a_group_of_few_members_with_a_gather_each_stays_unbatched():
    """Four products of per-example rows: a gather and a call cost more than four products."""
    block = _per_example_block(examples=4)
    assert batch_groups.rewrite(block) is block  # (so its tanh ops read loose arrays too)


def test_groups_too_small_to_pay_for_their_gathers_stay_unbatched():
    """Three sums of eight per-example terms: eight gathers cost more than three sums."""
    block = Program().global_block()
    for member in range(3):
        for term in range(8):
            block.create_var(f"g{member}_{term}", (2, 2), "float64")
    for member in range(3):
        names = [f"g{member}_{term}" for term in range(8)]
        block.append_op("sum", {"X": names}, {"Out": [f"s{member}"]})
    assert batch_groups.rewrite(block) is block


def test_a_write_over_a_variable_read_before_is_a_barrier():
    block = _per_example_block(examples=8)
    # y1, read by a tanh, is written again after the sum: no op may move across that write
    block.append_op("scale", {"X": ["total"]}, {"Out": ["y1"]}, {"scale": 2.0})
    for i in range(8):
        block.append_op("tanh", {"X": ["y1"]}, {"Out": [f"late{i}"]})
    batched = batch_groups.rewrite(block)
    position = next(i for i, op in enumerate(batched.ops) if op.type == "scale")
    before = {n for op in batched.ops[:position] for n in op.output_names()}
    assert {f"t{i}" for i in range(8)} <= before
    assert not any(n.startswith("late") for n in before)
    _assert_same(block, batched, ["total", "t1", "late7"])


# -- lazy steps -----------------------------------------------------------------------------


def _model(seed=0, examples=6):
    rng = np.random.default_rng(seed)
    w = tape.Variable(rng.standard_normal((4, 4)) * 0.5, requires_grad=True)
    b = tape.Variable(rng.standard_normal((1, 4)) * 0.1, requires_grad=True)
    xs = [rng.standard_normal((1, 4)) for _ in range(examples)]

    def step(inputs=xs):
        tape.reset_global_tape()
        total = None
        for x in inputs:
            h = ops.tanh(tape.Variable(x) @ w + b)
            loss = (h * h).sum()
            total = loss if total is None else total + loss
        w.clear_grad()
        b.clear_grad()
        tape.backward(total)
        return total.numpy().copy(), w.grad().numpy().copy(), b.grad().numpy().copy()

    return step, xs


def test_a_repeated_per_example_step_runs_batched_and_equals_eager():
    step, _ = _model()
    want = step()
    with tape.lazy(compile=True):  # (the plan every step: tier_choice may take the eager way)
        for _ in range(8):
            got = step()
    explained = tape.explain()
    assert "ops batched" in explained, explained
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("options", [{"autobatch": False}, {"exact": True}])
def test_autobatch_false_and_exact_leave_the_plan_unbatched(options):
    step, _ = _model()
    want = step()
    with tape.lazy(compile=True, **options):
        for _ in range(8):
            got = step()
    assert "ops batched" not in tape.explain()
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_an_error_in_a_batched_group_names_the_member_that_failed():
    rng = np.random.default_rng(1)
    w = tape.Variable(np.abs(rng.standard_normal((4, 4))) + 0.1, requires_grad=True)

    def step(inputs):
        tape.reset_global_tape()
        total = None
        for x in inputs:
            h = ops.log(tape.Variable(x) @ w)  # the line an error must name
            total = h.sum() if total is None else total + h.sum()
        w.clear_grad()
        tape.backward(total)
        return total.numpy()

    good = [np.abs(rng.standard_normal((1, 4))) + 0.1 for _ in range(6)]
    bad = [x.copy() for x in good]
    bad[3][...] = 0.0  # log(0 @ w) = log(0): fails under errstate(divide="raise")
    with tape.lazy(compile=True), np.errstate(divide="raise"):
        for _ in range(8):
            step(good)
        assert "ops batched" in tape.explain()
        with pytest.raises(FluidError) as caught:
            step(bad)
        assert np.isfinite(step(good))  # the failed step left nothing behind
    message = str(caught.value)
    assert "(log_12)" in message and "test_batch_groups.py" in message, message  # example 4
    assert "the line an error must name" in open(__file__).read()


@pytest.mark.parametrize("producer", ["tanh", "matmul"])
def test_elementwise_ops_reading_what_elementwise_ops_make_are_left_to_fusion(producer):
    """Terms h_i * p of a chain h_(i+1) = f(h_i): after tanh they fuse into the chain's kernels
    (cheaper than gathering them); after products they batch."""
    block = Program().global_block()
    block.create_var("h0", (1, 4), "float64")
    block.create_var("W", (4, 4), "float64", persistable=True)
    block.create_var("p", (1, 4), "float64", persistable=True)
    for i in range(8):
        inputs = {"X": [f"h{i}"]} if producer == "tanh" else {"X": [f"h{i}"], "Y": ["W"]}
        block.append_op(producer, inputs, {"Out": [f"h{i + 1}"]})
    for i in range(8):
        block.append_op("elementwise_mul", {"X": [f"h{i + 1}"], "Y": ["p"]}, {"Out": [f"g{i}"]})
    batched = batch_groups.rewrite(block)
    if producer == "tanh":
        assert batched is block
    else:
        calls = [op.attrs["op"] for op in batched.ops if op.type == "batched_call"]
        assert calls == ["elementwise_mul"]
        _assert_same(block, batched, [f"g{i}" for i in range(8)])


# -- random forests (the interpreted tier's property test, run as compiled plans) -----------


@settings(max_examples=30, deadline=None)  # (about a third form batched groups)
@given(_forests())
def test_a_compiled_forest_batched_equals_eager_mode(examples):
    """Random per-example programs over shared parameters, with held intermediates: a plan
    that autobatches computes eager mode's values and gradients within rounding."""
    assert_forest_close(_forest(examples, {"compile": True}), _forest(examples, "eager"))


def _split_block(rewrite_source=False):
    """Products joined into one and split again (as ``batch_products`` leaves them), then a
    tanh of each piece; optionally the joined product is written again in between."""
    block = Program().global_block()
    block.create_var("x", (8, 4), "float64")
    block.create_var("W", (4, 4), "float64", persistable=True)
    block.append_op("matmul", {"X": ["x"], "Y": ["W"]}, {"Out": ["joined"]})
    pieces = [f"piece{i}" for i in range(8)]
    block.append_op("split", {"X": ["joined"]}, {"Out": pieces}, {"sections": (1,) * 8})
    if rewrite_source:
        block.append_op("scale", {"X": ["x"]}, {"Out": ["joined"]}, {"scale": 3.0})
    for i, piece in enumerate(pieces):
        block.append_op("tanh", {"X": [piece]}, {"Out": [f"t{i}"]})
    return block


def test_the_pieces_of_a_split_are_read_as_rows_of_its_input():
    block = _split_block()
    batched = batch_groups.rewrite(block)
    types = [op.type for op in batched.ops]
    assert "gather_rows" not in types and "reshape" in types  # (the input seen as 8 rows)
    _assert_same(block, batched, [f"t{i}" for i in range(8)])


def test_a_split_input_written_again_is_not_read_as_rows():
    block = _split_block(rewrite_source=True)
    batched = batch_groups.rewrite(block)
    assert "reshape" not in [op.type for op in batched.ops]
    _assert_same(block, batched, [f"t{i}" for i in range(8)])
