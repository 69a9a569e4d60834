"""The fusion pass: elementwise chains in lazy plans become fused_elementwise ops, with results
equal to the unfused plan (bit for bit under exact=True; within reassociation rounding where a
trailing sum is fused), held and fetched intermediates kept, errors naming the original op."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes

import ops
import tape
from tape.passes import fusion, pipeline


def _fused_ops(plan):
    return [op for op in plan.analysis.block.ops if op.type == "fused_elementwise"]


def _run(build, lazy, exact=False, fused=True, monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.setattr(pipeline, "FUSION", fused)
    with tape.lazy(enabled=lazy, compile=True, exact=exact):
        t = tape.reset_global_tape()
        outputs = build()
        values = [o.numpy().copy() for o in outputs]
        plan = getattr(t, "_last_plan", None)
        tape.reset_global_tape()
    return values, plan


def _chain_step(x_value, a_value, b_value, hold=False):
    x = tape.Variable(x_value, requires_grad=True)
    a = tape.Variable(a_value, requires_grad=True)
    b = tape.Variable(b_value, requires_grad=True)

    def build():
        inner = x * a + b
        y = ops.tanh(inner) * ops.sigmoid(x) - 0.5 * x * x
        loss = y.sum()
        tape.backward(loss)
        held = [inner] if hold else []
        return [loss, x.grad(), a.grad(), b.grad()] + held

    return build


def test_the_issue_chain_fuses_forward_and_backward_and_equals_the_unfused_plan(monkeypatch):
    rng = np.random.default_rng(0)
    args = (
        rng.standard_normal((64, 32)).astype(np.float32),
        rng.standard_normal(32).astype(np.float32),
        rng.standard_normal(32).astype(np.float32),
    )
    want, _ = _run(_chain_step(*args), lazy=False)
    unfused, _ = _run(_chain_step(*args), lazy=True, fused=False, monkeypatch=monkeypatch)
    got, plan = _run(_chain_step(*args), lazy=True, fused=True, monkeypatch=monkeypatch)
    groups = _fused_ops(plan)
    assert len(groups) >= 2  # the forward chain and the gradient chains
    assert sum(len(g.attrs["expression"].steps) for g in groups) >= 10
    assert "fused" in pipeline.explain(plan) and "tanh" in pipeline.explain(plan)
    for a, b, c in zip(want, unfused, got, strict=True):
        np.testing.assert_allclose(c, b, rtol=2e-5, atol=1e-5 * np.abs(b).max())
        np.testing.assert_allclose(c, a, rtol=2e-5, atol=1e-5 * np.abs(a).max())


def test_exact_fusion_equals_eager_bit_for_bit(monkeypatch):
    rng = np.random.default_rng(1)
    args = (
        rng.standard_normal((16, 8)),
        rng.standard_normal(8),
        rng.standard_normal(8),
    )
    want, _ = _run(_chain_step(*args), lazy=False)
    got, plan = _run(_chain_step(*args), lazy=True, exact=True, monkeypatch=monkeypatch)
    assert _fused_ops(plan)
    assert not any(g.attrs["expression"].reductions for g in _fused_ops(plan))
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(b, a)


def test_an_intermediate_the_user_holds_is_materialised(monkeypatch):
    rng = np.random.default_rng(2)
    args = (rng.standard_normal((8, 4)), rng.standard_normal(4), rng.standard_normal(4))
    want, _ = _run(_chain_step(*args, hold=True), lazy=False)
    got, plan = _run(_chain_step(*args, hold=True), lazy=True, exact=True, monkeypatch=monkeypatch)
    np.testing.assert_array_equal(got[-1], want[-1])  # x * a + b, read by the user
    names = {n for g in _fused_ops(plan) for n in g.output_names()}
    assert names  # (the held value is one of the fused ops' outputs, not recomputed)


def test_an_error_inside_a_fused_group_names_the_original_op_and_line():
    x = tape.Variable(np.arange(1, 5, dtype=np.int64))
    zero = tape.Variable(np.zeros(4, np.int64))
    with tape.lazy(compile=True):
        tape.reset_global_tape()
        y = (x + 1) // zero + x  # integer division by zero, inside an elementwise chain
        with pytest.raises(tape.ExecutionError) as info:
            y.numpy()
        tape.reset_global_tape()
    message = str(info.value)
    assert message.startswith("op 'floor_divide'")
    assert "fused_elementwise" not in message.splitlines()[0]
    assert "recorded at: test_fusion.py:" in message


def test_groups_stay_convex_and_shapes_broadcast():
    """Two gradients of different shapes scaled by one shared coefficient: the coefficient's
    chain fuses, each scaled gradient starts its own group (shapes that do not broadcast)."""
    g1 = tape.Variable(np.ones((3, 4), np.float32))
    g2 = tape.Variable(np.ones((1, 2, 2), np.float32))
    norm = tape.Variable(np.array(4.0, np.float32))
    with tape.lazy(compile=True):
        t = tape.reset_global_tape()
        coef = ops.minimum(1.0 / (norm + 1e-6), 1.0)
        outs = [(g1 * coef) * 2.0, (g2 * coef) * 3.0]
        values = [o.numpy() for o in outs]
        plan = t._last_plan
    np.testing.assert_allclose(values[0], np.full((3, 4), 0.5), rtol=1e-6)
    np.testing.assert_allclose(values[1], np.full((1, 2, 2), 0.75), rtol=1e-6)
    for group in _fused_ops(plan):
        expression = group.attrs["expression"]
        assert all(
            np.broadcast_shapes(s, expression.shape) == expression.shape
            for s in expression.step_shapes
        )


UNARY = ["tanh", "exp", "sigmoid", "relu", "neg", "square", "abs"]
BINARY = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b, ops.maximum]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_elementwise_graphs_fused_equal_unfused_with_gradients(data):
    """Random graphs of unary and binary elementwise ops over broadcasting inputs of mixed
    float dtypes, with some intermediates held and a random op in between: the fused plan gives
    the unfused plan's values and gradients within rounding."""
    base = data.draw(array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    dtypes = [data.draw(st.sampled_from([np.float32, np.float64])) for _ in range(3)]
    leaves_values = []
    for dtype in dtypes:
        cut = data.draw(st.integers(0, len(base)))  # a trailing part: broadcasts
        leaves_values.append(rng.uniform(-1, 1, base[cut:]).astype(dtype))
    plan_ops = [
        (data.draw(st.sampled_from(["u", "b", "drop"])), data.draw(st.integers(0, 99)))
        for _ in range(data.draw(st.integers(2, 9)))
    ]
    holds = data.draw(st.lists(st.integers(0, 8), max_size=2))

    def build():
        tape.seed(7)
        leaves = [tape.Variable(v, requires_grad=True) for v in leaves_values]
        pool = list(leaves)
        for kind, pick in plan_ops:
            a = pool[pick % len(pool)]
            if kind == "u":
                pool.append(getattr(ops, UNARY[pick % len(UNARY)])(a))
            elif kind == "b":
                b = pool[(pick // 7) % len(pool)]
                pool.append(BINARY[pick % len(BINARY)](a, b))
            else:
                pool.append(ops.dropout(a, dropout_prob=0.25)[0] * 1.0)
        loss = sum(((p * float(i + 1)).sum() for i, p in enumerate(pool[3:])), pool[-1].sum())
        tape.backward(loss)
        held = [pool[3 + h] for h in holds if 3 + h < len(pool)]
        return [loss] + [leaf.grad() for leaf in leaves if leaf.grad() is not None] + held

    unfused = _with_fusion(False, build)
    fused = _with_fusion(True, build)
    for a, b in zip(unfused, fused, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        scale = max(1.0, float(np.abs(a).max(initial=0.0)))
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4 * scale)


def _with_fusion(enabled, build):
    previous = pipeline.FUSION
    pipeline.FUSION = enabled
    try:
        with np.errstate(all="ignore"):
            values, _ = _run(build, lazy=True)
    finally:
        pipeline.FUSION = previous
    return values


def test_the_cap_limits_a_group():
    assert fusion.MAX_STEPS >= 8 and fusion.MAX_INPUTS >= 4
    x = tape.Variable(np.ones(4, np.float32))
    with tape.lazy(compile=True):
        t = tape.reset_global_tape()
        h = x
        for _ in range(fusion.MAX_STEPS + 10):
            h = h * 1.0001
        h.numpy()
        plan = t._last_plan
    assert all(len(g.attrs["expression"].steps) <= fusion.MAX_STEPS for g in _fused_ops(plan))
    assert len(_fused_ops(plan)) >= 2
