"""tape.memory_report: live buffers by the op and line that made them (lines collected while
tape.track_memory() is open), what is held across iterations, the last lazy plan's peak."""

import numpy as np
import pytest

import layers
import ops
import tape
from tape.memory import predicted_peak
from tape.passes import pipeline


def _step(model, x):
    return (model(x) ** 2.0).mean()


def test_buffers_are_listed_by_op_and_line_while_tracked():
    model = layers.Linear(100, 50)
    tape.reset_global_tape()
    with tape.track_memory():
        loss = _step(model, np.ones((20, 100), np.float32))
    report = tape.memory_report()
    row = report.row_for("mul")  # the Linear's product, (20, 50) float32
    assert row.count == 1 and row.bytes == 20 * 50 * 4
    assert row.line.startswith("test_memory_report.py:") and row.line.endswith("in _step")
    weights = [r for r in report.rows if r.op == "parameter or state" and r.line == "LinearWeight"]
    assert weights and weights[0].bytes >= 100 * 50 * 4
    assert report.total_bytes == sum(r.bytes for r in report.rows)
    text = str(report)
    assert "mul" in text and "in _step" in text
    # the ops kept for backward got their line, so errors can name it too
    assert all(op.location is not None for op in tape.get_global_tape().ops)
    del loss


def test_an_eager_backwards_gradient_buffers_are_listed_by_their_op_while_tracked():
    tape.reset_global_tape()
    x = tape.Variable(np.ones((30, 40), np.float32))
    w = tape.Variable(np.ones((30, 40), np.float32), requires_grad=True)
    with tape.track_memory():
        tape.backward((x * w).sum())
    row = tape.memory_report().row_for("elementwise_mul")  # w's gradient, dOut * X
    assert row is not None and row.bytes >= 30 * 40 * 4
    assert row.line.startswith("test_memory_report.py:")


def test_without_tracking_buffers_are_counted_by_kind():
    tape.reset_global_tape()
    x = tape.Variable(np.ones(1000), requires_grad=True)
    y = ops.tanh(x)
    (y * 1.0).sum().backward()
    report = tape.memory_report()
    kinds = {row.op for row in report.rows}
    assert {"Variable(...)", "gradient", "op output"} <= kinds
    assert report.row_for("gradient").bytes >= 8000


def test_values_held_across_iterations_are_reported_with_their_line():
    model = layers.Linear(10, 10)
    kept = []
    with tape.track_memory():
        for _ in range(3):
            tape.reset_global_tape()
            kept.append(model(np.ones((4, 10))))  # each (4, 10) float64 output
    report = tape.memory_report()
    held = [
        row
        for row in report.held
        if row.op == "elementwise_add" and "test_memory_report.py" in (row.line or "")
    ]
    assert held and held[0].count == 2 and held[0].bytes == 2 * 4 * 10 * 8
    assert "test_memory_report.py" in held[0].line
    assert "held across iterations" in str(report)


def _lazy_chain(x):
    return ops.tanh(x * 2.0).sum()


@pytest.fixture
def unfused(monkeypatch):
    """Plans of separate ops (fusion would turn the chain into one op with no intermediates)."""
    monkeypatch.setattr(pipeline, "FUSION", False)


def test_the_predicted_peak_follows_the_memory_plan(unfused):
    x = tape.Variable(np.ones(1000))  # 8000 bytes, held by the user
    with tape.lazy(compile=True):
        t = tape.reset_global_tape()
        total = _lazy_chain(x)
        total.numpy()
        peak, after, before, count = predicted_peak(t._last_plan)
    # inputs: x and the 0-d constant 2.0; x * 2 and its tanh are both alive after tanh, then
    # the product is freed before the sum
    assert before == 8000 + 8
    assert (peak, count) == (8000 + 8 + 8000 + 8000, 3)
    assert after.startswith("tanh")
    report = tape.memory_report(t)
    assert report.plan_peak[0] == peak
    assert "last lazy plan (3 ops): predicted peak" in str(report)


def test_the_last_plan_of_a_reset_tape_is_reported(unfused):
    x = tape.Variable(np.ones(500))
    with tape.lazy(compile=True):
        tape.reset_global_tape()
        _lazy_chain(x).numpy()
        tape.reset_global_tape()
    assert tape.memory_report().plan_peak[0] == 500 * 8 * 3 + 8
