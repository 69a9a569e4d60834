"""Prune (seed "Prune"): an op is kept when it is a target or writes what a kept op reads."""

import numpy as np
import pytest

import layers
import optim
import tape
from tape.ir import Program
from tape.passes.prune import prune
from tests.scheduler.programs import recorded_step, seed_feed, seed_training


def _names(pruned):
    return [op.name for op in pruned.program.global_block().ops]


def _diamond():
    """a -> (b, c) -> d, and an unrelated e from a."""
    program = Program()
    block = program.global_block()
    block.create_var("a", (2, 2), "float32")
    block.append_op("tanh", {"X": ["a"]}, {"Out": ["b"]})
    block.append_op("exp", {"X": ["a"]}, {"Out": ["c"]})
    block.append_op("elementwise_add", {"X": ["b"], "Y": ["c"]}, {"Out": ["d"]})
    block.append_op("neg", {"X": ["a"]}, {"Out": ["e"]})
    return program


def test_variable_targets_keep_exactly_their_ancestors():
    assert _names(prune(_diamond(), ["d"])) == ["tanh_0", "exp_1", "elementwise_add_2"]
    assert _names(prune(_diamond(), ["b"])) == ["tanh_0"]
    assert _names(prune(_diamond(), ["e", "c"])) == ["exp_1", "neg_3"]
    assert prune(_diamond(), ["d"]).kept == (0, 1, 2)


def test_no_target_keeps_nothing_and_variables_are_cut_to_those_used():
    pruned = prune(_diamond(), [])
    assert pruned.kept == ()
    pruned = prune(_diamond(), ["b"])
    assert list(pruned.program.global_block().vars) == ["a", "b"]


def test_op_targets_are_kept_with_what_they_read():
    program = _diamond()
    program.global_block().ops[3].is_target = True
    assert _names(prune(program, [])) == ["neg_3"]
    assert _names(prune(program, ["b"])) == ["tanh_0", "neg_3"]


def test_an_overwritten_value_does_not_keep_its_earlier_writer():
    program = Program()
    block = program.global_block()
    block.create_var("a", (2,), "float32")
    block.append_op("tanh", {"X": ["a"]}, {"Out": ["v"]})
    block.append_op("exp", {"X": ["a"]}, {"Out": ["v"]})  # overwrites v without reading it
    block.append_op("neg", {"X": ["v"]}, {"Out": ["w"]})
    assert _names(prune(program, ["w"])) == ["exp_1", "neg_2"]


def test_an_in_place_update_keeps_the_producers_of_what_it_updates():
    pruned = prune(seed_training(), [])  # the fetch op is the only target
    assert _names(pruned) == [
        "feed_0",
        "feed_1",
        "matmul_2",
        "elementwise_add_3",
        "elementwise_sub_4",
        "square_5",
        "reduce_mean_6",
        "fetch_16",
    ]
    program = seed_training()
    program.global_block().ops[14].is_target = True  # adam for w reads w's gradient
    assert "adam_15" not in _names(prune(program, []))
    assert {"matmul_13", "scale_11", "fill_constant_7"} <= set(_names(prune(program, [])))


# The seed's three cases on one program holding forward, backward, updates and a checkpoint.


@pytest.fixture
def step(tmp_path):
    recording, loss, layer = recorded_step(layers, optim, str(tmp_path / "ckpt.npz"))
    return tape.Program.from_tape(recording), loss, layer, tmp_path / "ckpt.npz"


def _kinds(program, **run):
    kept = tape.Executor().explain(program, **run).split("dependency edges")[0]
    return [line.split(": ")[1] for line in kept.splitlines()[1:]]


FORWARD = ["mul", "elementwise_add", "elementwise_sub", "elementwise_mul", "mean"]


def test_case_1_target_cost_runs_only_the_forward_ops(step):
    program, loss, layer, path = step
    assert _kinds(program, fetch_list=[loss]) == FORWARD + ["fetch"]
    before = layer.weight.numpy().copy()
    (cost,) = tape.Executor().run(program, feed=seed_feed(), fetch_list=[loss])
    assert np.isfinite(cost) and cost.shape == ()
    np.testing.assert_array_equal(layer.weight.numpy(), before)
    assert not path.exists()


def test_case_2_targets_cost_and_updates_run_forward_backward_and_update(step):
    program, loss, layer, path = step
    updates = [op for op in program.global_block().ops if op.type == "sgd"]
    kinds = _kinds(program, fetch_list=[loss] + updates)
    assert kinds[: len(FORWARD)] == FORWARD
    assert kinds.count("sgd") == 2 and "save" not in kinds
    assert {"fill_ones_like", "matmul", "sum_to_shape"} <= set(kinds)
    before = layer.weight.numpy().copy()
    (cost,) = tape.Executor().run(program, feed=seed_feed(), fetch_list=[loss] + updates)
    assert not np.array_equal(layer.weight.numpy(), before)
    assert not path.exists()


def test_case_3_target_checkpoint_runs_only_the_save_op(step):
    program, loss, layer, path = step
    (checkpoint,) = [op for op in program.global_block().ops if op.type == "save"]
    assert _kinds(program, targets=[checkpoint]) == ["save"]
    tape.Executor().run(program, targets=[checkpoint])
    with np.load(path, allow_pickle=False) as saved:
        np.testing.assert_array_equal(saved["w"], layer.weight.numpy())
        np.testing.assert_array_equal(saved["b"], layer.bias.numpy())


def test_a_checkpoint_after_the_updates_needs_the_whole_step(tmp_path):
    recording, loss, layer = recorded_step(
        layers, optim, str(tmp_path / "ckpt.npz"), save_before_update=False
    )
    program = tape.Program.from_tape(recording)
    (checkpoint,) = [op for op in program.global_block().ops if op.type == "save"]
    kinds = _kinds(program, targets=[checkpoint])
    assert kinds[: len(FORWARD)] == FORWARD and kinds[-3:] == ["sgd", "sgd", "save"]
    before = layer.weight.numpy().copy()
    tape.Executor().run(program, feed=seed_feed(), targets=[checkpoint])
    with np.load(tmp_path / "ckpt.npz", allow_pickle=False) as saved:
        np.testing.assert_array_equal(saved["w"], layer.weight.numpy())
        assert not np.array_equal(saved["w"], before)
