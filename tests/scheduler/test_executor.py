"""The static API: Executor.run with feeds and fetches, training through it, the plan cache, and
saving an inference program that a fresh process loads and runs."""

import os
import subprocess
import sys

import numpy as np
import pytest

import layers
import tape
from tape.passes.plan import PlanCache
from tests.scheduler.programs import seed_feed, seed_forward, seed_scope, seed_training


def _numpy_seed_step(scope, feed):
    """One step of the seed's program written out in numpy (Adam as ops/optimizer.py states)."""
    w, b = scope["linear_0.w_0"], scope["linear_0.b_0"]
    diff = feed["x"] @ w + b - feed["label"]
    loss = np.mean(np.square(diff))
    g_diff = 2.0 * (np.broadcast_to(np.float32(1.0) * (1.0 / 16), diff.shape) * diff)
    return loss, {"linear_0.w_0": feed["x"].T @ g_diff, "linear_0.b_0": g_diff.sum(axis=0)}


def _updates(program):
    return [op for op in program.global_block().ops if op.type == "adam"]


def test_run_fetches_the_loss_and_updates_the_scope():
    scope, feed = seed_scope(), seed_feed()
    expected_loss, grads = _numpy_seed_step(seed_scope(), feed)
    before = {k: v.copy() for k, v in scope.items()}
    program = seed_training()
    (loss,) = tape.Executor().run(
        program, feed=feed, fetch_list=["mean_0.tmp_0"], targets=_updates(program), scope=scope
    )
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-6)
    for name, grad in grads.items():
        step = before[name] - scope[name]
        assert np.all(np.sign(step) == np.sign(grad))  # Adam's first step: lr * sign(grad)
        np.testing.assert_allclose(np.abs(step), 0.01, rtol=1e-3)
    np.testing.assert_allclose(scope["linear_0.w_0_beta1_pow_acc_0"], [0.81])


def test_only_what_the_fetches_and_targets_need_runs():
    scope, program = seed_scope(), seed_training()
    tape.Executor().run(program, feed=seed_feed(), fetch_list=["mean_0.tmp_0"], scope=scope)
    np.testing.assert_array_equal(scope["linear_0.w_0"], seed_scope()["linear_0.w_0"])
    # Fetch ops come last, so fetching a parameter sees (and so runs) the update writing it.
    (w,) = tape.Executor().run(program, feed=seed_feed(), fetch_list=["linear_0.w_0"], scope=scope)
    assert not np.array_equal(w, seed_scope()["linear_0.w_0"])
    np.testing.assert_array_equal(w, scope["linear_0.w_0"])
    tape.Executor().run(program, feed=seed_feed(), targets=_updates(program), scope=scope)
    assert not np.array_equal(w, scope["linear_0.w_0"])  # a fetched value is a copy


def test_threads_and_sequential_agree_bit_for_bit():
    results = []
    for threads in (0, 2):
        scope, program = seed_scope(), seed_training()
        loss = tape.Executor(threads=threads).run(
            program,
            feed=seed_feed(),
            fetch_list=["mean_0.tmp_0"],
            targets=_updates(program),
            scope=scope,
        )
        results.append((loss[0], scope["linear_0.w_0"], scope["linear_0.b_0"]))
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_plan_is_cached_by_structure_and_feed_fetch_names():
    cache = PlanCache()
    executor = tape.Executor(cache=cache)
    for _ in range(3):
        executor.run(
            seed_training(), feed=seed_feed(), fetch_list=["mean_0.tmp_0"], scope=seed_scope()
        )
    assert (cache.hits, cache.misses) == (2, 1)
    executor.run(
        seed_training(), feed=seed_feed(), fetch_list=["linear_1.tmp_1"], scope=seed_scope()
    )
    assert cache.misses == 2
    assert "plan cache: 3 hits, 2 misses, 2 plans" in executor.explain(
        seed_training(), feed=["x", "label"], fetch_list=["mean_0.tmp_0"]
    )


def test_explain_lists_kept_ops_edges_and_frees():
    text = tape.Executor(cache=PlanCache()).explain(
        seed_forward(), feed=["x", "label"], fetch_list=["linear_1.tmp_1"]
    )
    assert text.splitlines()[0] == "ops kept: 4 of 8"
    assert "  feed_0 -> matmul_2" in text
    assert (
        "  linear_1.tmp_0: used by matmul_2, elementwise_add_3; freed after "
        "elementwise_add_3" in text
    )
    assert "  linear_0.w_0: used by matmul_2; kept" in text


def test_feed_errors_name_the_variable():
    with pytest.raises(tape.InputError, match="fed value for 'x' has the wrong shape"):
        tape.Executor().run(
            seed_training(),
            feed={"x": np.ones((3, 16)), "label": np.ones((16, 1))},
            fetch_list=["mean_0.tmp_0"],
            scope=seed_scope(),
        )
    with pytest.raises(
        tape.InputError, match="cannot feed 'linear_1.tmp_0': op 'matmul_2' computes it"
    ):
        tape.Executor().run(
            seed_training(), feed={"linear_1.tmp_0": np.ones((16, 1))}, fetch_list=["mean_0.tmp_0"]
        )
    with pytest.raises(tape.InputError, match="no value was fed for 'label'"):
        tape.Executor().run(
            seed_training(),
            feed={"x": seed_feed()["x"]},
            fetch_list=["mean_0.tmp_0"],
            scope=seed_scope(),
        )


def test_a_failing_op_is_named_with_where_it_was_recorded():
    program = seed_training()
    scope = seed_scope()
    scope["linear_0.w_0"] = np.ones((15, 1), np.float32)  # a wrong buffer behind a right desc
    with pytest.raises(tape.ExecutionError) as info:
        tape.Executor().run(program, feed=seed_feed(), fetch_list=["mean_0.tmp_0"], scope=scope)
    assert str(info.value).startswith("op 'matmul' (matmul_2): kernel failed: ValueError")


_RUN_SAVED = """
import sys, numpy as np, tape
program, feeds, fetches, scope = tape.load_inference_program(sys.argv[1])
x = np.load(sys.argv[2])
(out,) = tape.Executor().run(program, feed={feeds[0]: x}, fetch_list=fetches, scope=scope)
np.save(sys.argv[3], out)
print(feeds, fetches)
"""


def test_saved_inference_program_runs_the_same_in_a_fresh_process(tmp_path):
    tape.seed(3)
    model = layers.Sequential(layers.Linear(6, 8, act="tanh"), layers.Linear(8, 3))
    recording = tape.Tape(lazy=True)
    previous, tape.tape.state.tape = tape.tape.state.tape, recording
    try:
        x = tape.Variable(np.zeros((5, 6), np.float32), name="image")
        probs = model(x)
        probs.name = "scores"
        loss = probs.sum()
        tape.backward(loss)
    finally:
        tape.tape.state.tape = previous
    program = tape.Program.from_tape(recording)
    batch = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    (expected,) = tape.Executor().run(program, feed={"image": batch}, fetch_list=[probs])
    tape.save_inference_program(str(tmp_path / "model"), program, ["image"], [probs])
    saved = tape.Program.from_text((tmp_path / "model" / "program.json").read_text())
    assert [op.type for op in saved.global_block().ops] == [
        "feed",
        "mul",
        "elementwise_add",
        "tanh",
        "mul",
        "elementwise_add",
        "fetch",
    ]
    np.save(tmp_path / "x.npy", batch)
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _RUN_SAVED,
            str(tmp_path / "model"),
            str(tmp_path / "x.npy"),
            str(tmp_path / "out.npy"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['image'] ['scores']"
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected)


def test_feed_accepts_the_variables_themselves_as_keys():
    t = tape.Tape(lazy=True)
    x = tape.Variable(np.zeros((2, 2), np.float32), name="x")
    y = t.add_op("relu", {"X": [x]})
    program = tape.Program.from_tape(t)
    data = np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32)
    by_variable = tape.Executor().run(program, feed={x: data}, fetch_list=[y])[0]
    by_name = tape.Executor().run(program, feed={"x": data}, fetch_list=[y])[0]
    np.testing.assert_array_equal(by_variable, np.maximum(data, 0))
    np.testing.assert_array_equal(by_variable, by_name)
    stranger = tape.Variable(np.zeros(2))
    with pytest.raises(tape.GraphError, match="is not used by this program"):
        tape.Executor().run(program, feed={stranger: np.zeros(2)}, fetch_list=[y])
