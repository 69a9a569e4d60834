"""The profiler: per-op wall time of eager, backward and lazy ops, as a table and a Chrome trace."""

import inspect
import json

import numpy as np
import pytest

import ops
import tape
import tape.tape as engine


def _here(offset=0):
    """'test_profile.py:<line> in <function>' for the caller's line plus ``offset``."""
    frame = inspect.currentframe().f_back
    return f"test_profile.py:{frame.f_lineno + offset} in {frame.f_code.co_name}"


def _weights():
    return tape.Variable(np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5), requires_grad=True)


def test_eager_ops_are_counted_timed_and_sized_per_op_type():
    tape.reset_global_tape()
    w = _weights()
    with tape.profile() as prof:
        for _ in range(3):
            h = ops.tanh(w)
            ops.exp(h)
    rows = {row.key: row for row in prof.table().rows}
    assert set(rows) == {"tanh", "exp"}
    for row in rows.values():
        assert row.count == 3
        assert row.bytes == 3 * 4 * 5 * 4  # three float32 (4, 5) outputs
        assert row.mean == pytest.approx(row.total / row.count)
    table = prof.table()
    assert sum(row.percent for row in table.rows) == pytest.approx(100.0)
    assert table.total == pytest.approx(sum(e.seconds for e in prof.events))
    assert len(prof.events) == 6 and all(e.end >= e.start for e in prof.events)


def test_the_table_prints_one_line_per_group_with_the_columns():
    tape.reset_global_tape()
    w = _weights()
    with tape.profile() as prof:
        ops.exp(ops.tanh(w))
    text = str(prof.table(sort_by="key"))
    header, rule, first, second, total = text.splitlines()
    assert header.split() == ["op", "count", "total", "ms", "mean", "us", "%", "time", "bytes"]
    assert first.split()[0] == "exp" and second.split()[0] == "tanh"
    assert first.split()[1] == "1" and first.split()[-2:] == ["80", "B"]
    assert total.startswith("total:") and total.endswith("in 2 ops")


def test_rows_sort_by_the_column_asked_for():
    tape.reset_global_tape()
    w = _weights()
    with tape.profile() as prof:
        ops.tanh(w)
        for _ in range(4):
            ops.exp(w)
    by_count = prof.table(sort_by="count").rows
    assert [row.key for row in by_count] == ["exp", "tanh"]
    assert [row.key for row in prof.table(sort_by="count", limit=1).rows] == ["exp"]
    totals = [row.total for row in prof.table(sort_by="total").rows]
    assert totals == sorted(totals, reverse=True)
    with pytest.raises(ValueError, match="sort_by must be one of"):
        prof.table(sort_by="time")
    with pytest.raises(ValueError, match="group_by must be one of"):
        prof.table(group_by="layer")


def test_backward_ops_are_marked_and_grouped_under_their_forward_line():
    tape.reset_global_tape()
    w = _weights()
    with tape.profile() as prof:
        loss = ops.tanh(w).sum()
        forward_line = _here(-1)
        tape.backward(loss)
    by_op = {row.key: row.count for row in prof.table(group_by="op").rows}
    assert by_op["tanh"] == 1 and by_op["tanh_grad (backward)"] == 1
    by_line = {row.key: row.count for row in prof.table(group_by="line").rows}
    assert by_line[forward_line] == 2  # tanh and the sum
    # every gradient op of tanh and of the sum counts under the line that recorded them
    assert by_line[forward_line + " (backward)"] >= 2
    grads = [e.info for e in prof.events if e.info.type == "tanh_grad"]
    assert grads[0].backward and grads[0].forward[0] == "tanh"
    assert grads[0].forward[2] == forward_line


def test_lazy_runs_are_profiled_in_both_tiers(lazy_tier):
    tape.reset_global_tape()
    w = _weights()
    with tape.profile() as prof:
        with tape.lazy():
            tape.reset_global_tape()
            loss = (ops.tanh(w) * 2.0).sum()
            line = _here(-1)
            tape.backward(loss)
            w.grad.numpy()
    assert prof.events, "the lazy run's kernels were timed"
    kinds = {e.info.type for e in prof.events}
    if lazy_tier == "interpreted":
        assert {"tanh", "elementwise_mul", "reduce_sum", "tanh_grad"} <= kinds
    forward = [e.info for e in prof.events if not e.info.backward]
    backward = [e.info for e in prof.events if e.info.backward]
    assert forward and backward
    assert all(info.location == line for info in forward)
    assert any(info.forward is not None and info.forward[2] == line for info in backward)
    assert sum(e.bytes for e in prof.events) > 0


def test_nothing_is_observed_outside_a_profile_block():
    tape.reset_global_tape()
    w = _weights()
    with tape.profile() as prof:
        ops.tanh(w)
    assert engine._HOOK is None
    ops.tanh(w)
    assert len(prof.events) == 1


def test_nested_profiles_both_see_the_inner_ops():
    tape.reset_global_tape()
    w = _weights()
    with tape.profile() as outer:
        ops.tanh(w)
        with tape.profile() as inner:
            ops.exp(w)
    assert [e.info.type for e in outer.events] == ["tanh", "exp"]
    assert [e.info.type for e in inner.events] == ["exp"]


def test_the_chrome_trace_is_json_with_one_event_per_op_and_gradient_flows(tmp_path):
    tape.reset_global_tape()
    w = _weights()
    with tape.profile() as prof:
        loss = ops.exp(ops.tanh(w)).sum()
        tape.backward(loss)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    trace = json.loads(path.read_text())
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(prof.events)
    assert [e["name"] for e in complete] == [e.info.type for e in prof.events]
    for event in complete:
        assert event["dur"] >= 0 and event["ts"] >= 0 and {"pid", "tid"} <= set(event)
        assert event["cat"] in ("forward", "backward")
    names = {e["args"]["name"]: e for e in complete if e["cat"] == "forward"}
    tanh_grad = next(e for e in complete if e["name"] == "tanh_grad")
    assert tanh_grad["cat"] == "backward"
    assert names[tanh_grad["args"]["forward_op"]]["name"] == "tanh"
    starts = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "s"}
    finishes = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "f"}
    assert starts and set(starts) == set(finishes)
    # the arrow to tanh_grad leaves from tanh's event
    flow = next(i for i, f in finishes.items() if f["ts"] == tanh_grad["ts"])
    assert starts[flow]["ts"] == names[tanh_grad["args"]["forward_op"]]["ts"]


def test_a_plan_run_on_threads_is_profiled_with_each_kernel_once():
    tape.reset_global_tape()
    a = tape.Variable(np.ones((64, 64), np.float32), requires_grad=True)
    b = tape.Variable(np.full((64, 64), 0.5, np.float32), requires_grad=True)
    with tape.profile() as prof, tape.lazy(threads=2):
        tape.reset_global_tape()
        left, right = ops.matmul(a, a), ops.matmul(b, b)  # independent: may overlap
        total = (left + right).sum()
        value = total.numpy()
    assert value == pytest.approx(64 * 64 * (64 + 16))
    kinds = [e.info.type for e in prof.events]
    assert kinds.count("matmul") == 2
    assert all(e.end >= e.start and e.bytes > 0 for e in prof.events)
