"""Across fused groups: cheap values are recomputed by the groups reading them instead of being
materialised (rematerialise), independent groups streaming the same input run as one kernel
(sibling_fusion), and fused kernels read a broadcast_to's source instead of its stride-0 view
(broadcast_inputs). Results equal the unfused plan (bit for bit under exact=True), held values
stay materialised and correct, and the chain's step writes no full-size buffer but its
gradient."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ops
import tape
from tape.ir import Program
from tape.passes import (
    broadcast_inputs,
    fusion,
    pipeline,
    rematerialise,
    sibling_fusion,
)
from tape.passes.execute import run_reference
from tape.passes.plan import CACHE
from tape.passes.prune import prune

FUSED = "fused_elementwise"


@pytest.fixture(autouse=True)
def small_values_recomputed(monkeypatch):
    """These tests' values are small: recomputed here as a large value would be (the size
    rule has its own test)."""
    monkeypatch.setattr(rematerialise, "MIN_BYTES", 0)


def _run(build, exact=False, fused=True, monkeypatch=None):
    """(values, plan) of ``build()``'s outputs in a compiled lazy plan."""
    if monkeypatch is not None:
        monkeypatch.setattr(pipeline, "FUSION", fused)
    with tape.lazy(compile=True, exact=exact):
        t = tape.reset_global_tape()
        values = [o.numpy().copy() for o in build()]
        plan = t._last_plan
        tape.reset_global_tape()
    return values, plan


def _eager(build):
    with tape.lazy(enabled=False):
        tape.reset_global_tape()
        values = [o.numpy().copy() for o in build()]
        tape.reset_global_tape()
    return values


def _chain(x_value, a_value, b_value, hold=False):
    """The benchmark's chain: y = tanh(x*a+b)*sigmoid(x) - 0.5*x*x, loss = sum(y), gradients
    to x and the broadcast a, b (plus, with ``hold``, tanh(x*a+b) and sigmoid(x))."""

    def build():
        x, a, b = (tape.Variable(v, requires_grad=True) for v in (x_value, a_value, b_value))
        t, s = ops.tanh(x * a + b), ops.sigmoid(x)
        loss = (t * s - 0.5 * x * x).sum()
        tape.backward(loss)
        return [loss, x.grad(), a.grad(), b.grad()] + ([t, s] if hold else [])

    return build


def _chain_args(dtype, rows=48, cols=24, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((rows, cols)).astype(dtype),
        rng.uniform(0.5, 1.5, cols).astype(dtype),
        rng.uniform(-0.5, 0.5, cols).astype(dtype),
    )


def _fused(plan):
    return [op for op in plan.analysis.block.ops if op.type == FUSED]


def _full_writes(plan):
    """The full-size buffers the plan's fused kernels write (materialised step values)."""
    found = []
    for op in _fused(plan):
        expression = op.attrs["expression"]
        size = math.prod(expression.shape)
        for name, j in zip(op.outputs["Out"], expression.outputs):
            if math.prod(expression.step_shapes[j]) == size:
                found.append(name)
    return found


@pytest.fixture
def without_new_passes(monkeypatch):
    """The fusion pass alone: nothing recomputed, no siblings merged."""

    def disable():
        CACHE.clear()  # (plans compiled with the passes on)
        monkeypatch.setattr(rematerialise, "MAX_STEPS", 0)
        monkeypatch.setattr(sibling_fusion, "WINDOW", 0)
        monkeypatch.setattr(broadcast_inputs, "rewrite", lambda block: block)

    return disable


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 2e-5), (np.float64, 1e-12)])
def test_the_chain_equals_eager_and_the_unfused_plan_in_both_float_dtypes(dtype, rtol, monkeypatch):
    args = _chain_args(dtype)
    want = _eager(_chain(*args))
    unfused, _ = _run(_chain(*args), fused=False, monkeypatch=monkeypatch)
    got, plan = _run(_chain(*args), monkeypatch=monkeypatch)
    for value, eager, plain in zip(got, want, unfused, strict=True):
        assert value.dtype == eager.dtype == dtype and value.shape == eager.shape
        scale = float(np.abs(eager).max())
        np.testing.assert_allclose(value, eager, rtol=rtol, atol=rtol * scale)
        np.testing.assert_allclose(value, plain, rtol=rtol, atol=rtol * scale)
    assert len(_fused(plan)) == 2  # the forward kernel and one gradient kernel


def test_the_chain_writes_only_its_gradient_where_the_fusion_pass_alone_wrote_eight_buffers(
    without_new_passes,
):
    args = _chain_args(np.float32)
    _, plan = _run(_chain(*args))
    assert len(_full_writes(plan)) == 1  # dL/dx, which the user reads
    backward = _fused(plan)[-1]
    assert len(backward.attrs["expression"].reductions) == 2  # dL/da, dL/db: column sums
    steps = [step.op for step in backward.attrs["expression"].steps]
    assert steps.count("tanh") == steps.count("sigmoid") == 1  # recomputed once, not per use
    explained = pipeline.explain(plan)
    assert explained.count(" + ") >= 1  # the merged gradient kernels

    without_new_passes()
    _, before = _run(_chain(*args))
    assert len(_fused(before)) == 5 and len(_full_writes(before)) == 8
    CACHE.clear()


def test_values_the_user_holds_stay_materialised_and_correct(without_new_passes):
    """Holding tanh(x*a+b) and sigmoid(x): the forward kernel still writes both (the user reads
    them), every value equals eager mode's, and the gradient kernels recompute the rest."""
    args = _chain_args(np.float32, seed=1)
    want = _eager(_chain(*args, hold=True))
    got, plan = _run(_chain(*args, hold=True))
    for value, eager in zip(got, want, strict=True):
        np.testing.assert_allclose(value, eager, rtol=2e-5, atol=2e-5 * float(np.abs(eager).max()))
    forward = _fused(plan)[0]
    assert len(_full_writes(plan)[:2]) == 2 and len(forward.output_names()) == 3  # t, s, loss
    without_new_passes()
    _, before = _run(_chain(*args, hold=True))
    CACHE.clear()
    assert len(_full_writes(plan)) < len(_full_writes(before))


def test_exact_plans_recompute_and_merge_and_stay_bit_for_bit_with_eager():
    """exact=True fuses no reduction (the column sums stay ops of their own, reading
    materialised values), but still recomputes values fused groups read and merges siblings:
    the same kernels on the same inputs give the same bits."""
    args = _chain_args(np.float64, seed=2)
    want = _eager(_chain(*args))
    got, plan = _run(_chain(*args), exact=True)
    for value, eager in zip(got, want, strict=True):
        np.testing.assert_array_equal(value, eager)
    assert not any(op.attrs["expression"].reductions for op in _fused(plan))
    recomputed = [
        op for op in _fused(plan)[1:] if "tanh" in [s.op for s in op.attrs["expression"].steps]
    ]
    assert recomputed  # a gradient kernel recomputes tanh(x*a+b) instead of reading it


def _block(**shapes):
    block = Program().global_block()
    for name, shape in shapes.items():
        block.create_var(name, shape, "float64")
    return block


def _rewritten(block, keep):
    fused = fusion.rewrite(block, keep)
    return sibling_fusion.rewrite(rematerialise.rewrite(broadcast_inputs.rewrite(fused), keep))


def _values(block, seed=0):
    """Random values of the variables no op creates (an in-place update's Param included)."""
    rng = np.random.default_rng(seed)
    created = {n for op in block.ops for n in op.output_names() if n not in op.input_names()}
    return {n: rng.standard_normal(v.shape) for n, v in block.vars.items() if n not in created}


def _check_same(block, rewritten, names):
    values = _values(block)
    want = run_reference(block, dict(values))
    got = run_reference(rewritten, dict(values))
    for name in names:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-13, err_msg=name)


def _producers(block):
    return {n: op for op in block.ops for n in op.output_names()}


def test_a_value_a_non_fused_op_reads_stays_materialised():
    block = _block(x=(4, 3), w=(3, 2))
    block.append_op("tanh", {"X": ["x"]}, {"Out": ["t"]})
    block.append_op("matmul", {"X": ["t"], "Y": ["w"]}, {"Out": ["m"]})
    block.append_op("sum", {"X": ["m"]}, {"Out": ["m2"]})  # (a group of its own)
    block.append_op("relu", {"X": ["x"]}, {"Out": ["r"]})
    block.append_op("elementwise_mul", {"X": ["t"], "Y": ["r"]}, {"Out": ["y"]})
    rewritten = _rewritten(block, keep={"m", "y"})
    assert "t" in _producers(rewritten)  # matmul reads it
    _check_same(block, rewritten, ["m", "y"])


def test_a_value_whose_inputs_are_written_in_between_is_not_recomputed():
    """An SGD update writes w in place between the group computing tanh(w*x) and the one
    reading it: recomputing there would use the new w."""
    block = _block(x=(4, 3), w=(4, 3), g=(4, 3), lr=(1,), v=(3, 5))
    block.vars["w"].persistable = True
    block.append_op("elementwise_mul", {"X": ["w"], "Y": ["x"]}, {"Out": ["p"]})
    block.append_op("tanh", {"X": ["p"]}, {"Out": ["t"]})
    block.append_op(
        "sgd", {"Param": ["w"], "Grad": ["g"], "LearningRate": ["lr"]}, {"ParamOut": ["w"]}
    )
    block.append_op("matmul", {"X": ["x"], "Y": ["v"]}, {"Out": ["m"]})
    block.append_op("reduce_sum", {"X": ["m"]}, {"Out": ["q"]}, {"axis": [1], "keepdim": True})
    block.append_op("elementwise_mul", {"X": ["t"], "Y": ["q"]}, {"Out": ["u"]})
    block.append_op("exp", {"X": ["u"]}, {"Out": ["y"]})
    rewritten = _rewritten(block, keep={"y"})
    assert "t" in _producers(rewritten)
    _check_same(block, rewritten, ["y"])


def test_the_cost_rule_keeps_a_value_with_too_many_transcendentals():
    """exp(exp(exp(x))) costs three libm calls per element to recompute (more than MAX_LIBM):
    the reading group reads it from memory instead."""
    assert rematerialise.MAX_LIBM < 3
    block = _block(x=(8, 4), v=(4, 4))
    block.append_op("exp", {"X": ["x"]}, {"Out": ["e1"]})
    block.append_op("exp", {"X": ["e1"]}, {"Out": ["e2"]})
    block.append_op("scale", {"X": ["e2"]}, {"Out": ["e3"]}, {"scale": 0.01})
    block.append_op("exp", {"X": ["e3"]}, {"Out": ["e4"]})
    block.append_op("matmul", {"X": ["x"], "Y": ["v"]}, {"Out": ["m"]})
    block.append_op("elementwise_add", {"X": ["e4"], "Y": ["m"]}, {"Out": ["y"]})
    block.append_op("tanh", {"X": ["y"]}, {"Out": ["z"]})
    rewritten = _rewritten(block, keep={"z"})
    assert "e4" in _producers(rewritten)
    _check_same(block, rewritten, ["z"])


def test_a_cheap_value_read_by_two_later_groups_is_recomputed_by_both():
    block = _block(x=(8, 4), v=(4, 4), w=(4, 4))
    block.append_op("scale", {"X": ["x"]}, {"Out": ["h"]}, {"scale": 3.0, "bias": 1.0})
    block.append_op("tanh", {"X": ["h"]}, {"Out": ["t"]})
    block.append_op("matmul", {"X": ["x"], "Y": ["v"]}, {"Out": ["m"]})
    block.append_op("elementwise_mul", {"X": ["t"], "Y": ["m"]}, {"Out": ["p1"]})
    block.append_op("exp", {"X": ["p1"]}, {"Out": ["y1"]})
    block.append_op("matmul", {"X": ["x"], "Y": ["w"]}, {"Out": ["n"]})
    block.append_op("elementwise_add", {"X": ["t"], "Y": ["n"]}, {"Out": ["p2"]})
    block.append_op("relu", {"X": ["p2"]}, {"Out": ["y2"]})
    rewritten = _rewritten(block, keep={"y1", "y2"})
    producers = _producers(rewritten)
    assert "t" not in producers  # never materialised
    assert all(
        "tanh" in [s.op for s in producers[y].attrs["expression"].steps] for y in ("y1", "y2")
    )
    _check_same(block, rewritten, ["y1", "y2"])


def test_siblings_reading_one_input_run_as_one_kernel_with_all_their_outputs():
    """Two reductions of x and a full-size value of x, apart (a matmul between them), become one
    kernel; a group reading another's output is not merged into it."""
    block = _block(x=(6, 5), v=(5, 5))
    block.append_op("tanh", {"X": ["x"]}, {"Out": ["t1"]})
    block.append_op("reduce_sum", {"X": ["t1"]}, {"Out": ["s1"]}, {"axis": [0]})
    block.append_op("matmul", {"X": ["x"], "Y": ["v"]}, {"Out": ["m"]})
    block.append_op("sigmoid", {"X": ["x"]}, {"Out": ["t2"]})
    block.append_op("reduce_sum", {"X": ["t2"]}, {"Out": ["s2"]}, {"axis": [1]})
    block.append_op("tanh", {"X": ["x"]}, {"Out": ["t3"]})
    block.append_op("elementwise_mul", {"X": ["t3"], "Y": ["m"]}, {"Out": ["y"]})
    rewritten = _rewritten(block, keep={"s1", "s2", "y", "m"})
    fused = [op for op in rewritten.ops if op.type == FUSED]
    assert len(fused) == 1 and set(fused[0].output_names()) == {"s1", "s2", "y"}
    assert [s.op for s in fused[0].attrs["expression"].steps].count("tanh") == 1
    _check_same(block, rewritten, ["s1", "s2", "y"])


def test_a_broadcast_input_is_read_through_its_source_unless_a_step_needs_the_full_shape():
    block = _block(x=(6, 5), b=(5,), g=(6, 5))
    block.append_op("broadcast_to", {"X": ["b"]}, {"Out": ["bb"]}, {"shape": [6, 5]})
    block.append_op("elementwise_mul", {"X": ["x"], "Y": ["bb"]}, {"Out": ["y"]})
    block.append_op("exp", {"X": ["y"]}, {"Out": ["z"]})
    block.append_op("broadcast_to", {"X": ["b"]}, {"Out": ["cc"]}, {"shape": [6, 5]})
    block.append_op("tanh_grad", {"Out": ["g"], "Out@GRAD": ["cc"]}, {"Out": ["d"]})
    block.append_op("scale", {"X": ["d"]}, {"Out": ["e"]}, {"scale": 2.0})
    rewritten = _rewritten(block, keep={"z", "e"})
    producers = _producers(rewritten)
    assert "b" in producers["z"].inputs["X"] and "bb" not in producers["z"].inputs["X"]
    assert "cc" in producers["e"].inputs["X"]  # tanh_grad needs Out@GRAD of Out's shape
    _check_same(block, rewritten, ["z", "e"])


UNARY = ["tanh", "sigmoid", "relu", "neg", "exp", "square"]
BINARY = ["elementwise_mul", "elementwise_add", "elementwise_sub"]
KINDS = ["u", "u", "b", "b", "b", "cut", "cut", "bcast", "sgd", "sum"]


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_random_blocks_rewritten_compute_what_the_original_computes(data):
    """Random blocks of elementwise ops cut by products, broadcasts, sums and in-place SGD
    updates of a parameter that elementwise ops read, with random values kept: the three passes
    after fusion change no kept value (float64, within reassociation of the fused sums)."""
    block = _block(x=(4, 3), b=(3,), w=(4, 3), g=(4, 3), lr=(1,), eye=(3, 3))
    block.vars["w"].persistable = True
    pool = ["x", "b", "w"]

    def recent(names):  # (mostly recent values: chains that fusion groups, then cuts)
        return data.draw(st.sampled_from(names[-4:] if data.draw(st.booleans()) else names))

    for i in range(data.draw(st.integers(3, 20))):
        kind = data.draw(st.sampled_from(KINDS))
        full = [n for n in pool if block.vars[n].shape == (4, 3)]
        name = f"v{i}"
        if kind == "u":
            op = data.draw(st.sampled_from(UNARY))
            block.append_op(op, {"X": [recent(pool)]}, {"Out": [name]})
        elif kind == "b":
            x, y = recent(pool), recent(pool)
            op = data.draw(st.sampled_from(BINARY))
            block.append_op(op, {"X": [x], "Y": [y]}, {"Out": [name]})
        elif kind == "cut":
            block.append_op("matmul", {"X": [recent(full)], "Y": ["eye"]}, {"Out": [name]})
        elif kind == "bcast":
            small = [n for n in pool if block.vars[n].shape == (3,)]
            source = data.draw(st.sampled_from(small))
            block.append_op("broadcast_to", {"X": [source]}, {"Out": [name]}, {"shape": [4, 3]})
        elif kind == "sum":
            x = data.draw(st.sampled_from(full))
            block.append_op("reduce_sum", {"X": [x]}, {"Out": [name]}, {"axis": [0]})
        else:
            block.append_op(
                "sgd", {"Param": ["w"], "Grad": ["g"], "LearningRate": ["lr"]}, {"ParamOut": ["w"]}
            )
            continue
        pool.append(name)
    if len(pool) == 3:  # (only updates were drawn)
        block.append_op("tanh", {"X": ["w"]}, {"Out": ["last"]})
        pool.append("last")
    created = pool[3:]
    kept = set(data.draw(st.lists(st.sampled_from(created), max_size=3))) | {created[-1]}
    program = Program([block])
    block = prune(program, sorted(kept | {"w"})).program.global_block()  # (as the pipeline does)
    rewritten = _rewritten(block, keep=kept)
    values = _values(block, data.draw(st.integers(0, 2**16)))
    with np.errstate(all="ignore"):
        want = run_reference(block, dict(values))
        got = run_reference(rewritten, dict(values))
    for name in sorted(kept | {"w"}):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12, err_msg=name)


def test_values_smaller_than_the_cache_stay_materialised(monkeypatch):
    """A value under MIN_BYTES round-trips through the cache, cheaper than recomputing it."""
    block = _block(x=(8, 4), v=(4, 4))
    block.append_op("tanh", {"X": ["x"]}, {"Out": ["t"]})
    block.append_op("scale", {"X": ["t"]}, {"Out": ["h"]}, {"scale": 2.0})
    block.append_op("matmul", {"X": ["x"], "Y": ["v"]}, {"Out": ["m"]})
    block.append_op("elementwise_mul", {"X": ["h"], "Y": ["m"]}, {"Out": ["p"]})
    block.append_op("exp", {"X": ["p"]}, {"Out": ["y"]})
    assert "h" not in _producers(_rewritten(block, keep={"y"}))
    monkeypatch.setattr(rematerialise, "MIN_BYTES", 8 * 4 * 8 + 1)  # (h: 256 bytes)
    rewritten = _rewritten(block, keep={"y"})
    assert "h" in _producers(rewritten)
    _check_same(block, rewritten, ["y"])
