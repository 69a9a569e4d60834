"""The memory plan: the seed's last-user (GC) table before and after shrinking, reference counts,
what is never freed, and reads that need no buffer."""

from tape.ir import Program
from tape.passes import dependencies, memory_plan
from tests.scheduler.programs import seed_forward, seed_training

# The seed's worked example (linear layer + mean-squared error), CPU: no memcpy_d2h before the
# fetch. variable -> (users before shrinking, users after shrinking).
SEED_FORWARD_TABLE = {
    "x": (["feed_0", "matmul_2"], ["matmul_2"]),
    "label": (["feed_1", "elementwise_sub_4"], ["elementwise_sub_4"]),
    "linear_0.b_0": (["elementwise_add_3"], ["elementwise_add_3"]),
    "linear_0.w_0": (["matmul_2"], ["matmul_2"]),
    "linear_1.tmp_0": (["matmul_2", "elementwise_add_3"], ["elementwise_add_3"]),
    "linear_1.tmp_1": (["elementwise_add_3", "elementwise_sub_4"], ["elementwise_sub_4"]),
    "elementwise_sub_0": (["elementwise_sub_4", "square_5"], ["square_5"]),
    "square_0.tmp_0": (["square_5", "reduce_mean_6"], ["reduce_mean_6"]),
    "mean_0.tmp_0": (["reduce_mean_6", "fetch_7"], ["fetch_7"]),
}

# The same program after minimize (backward by hand, then Adam): the forward activations now
# live until the gradient ops that read them, and two values have two concurrent last users.
SEED_TRAINING_TABLE = {
    "x": (["feed_0", "matmul_2", "matmul_13"], ["matmul_13"]),
    "label": (["feed_1", "elementwise_sub_4"], ["elementwise_sub_4"]),
    "linear_0.w_0": (["matmul_2", "adam_14"], ["adam_14"]),
    "linear_0.b_0": (["elementwise_add_3", "adam_15"], ["adam_15"]),
    "linear_1.tmp_0": (["matmul_2", "elementwise_add_3"], ["elementwise_add_3"]),
    "linear_1.tmp_1": (["elementwise_add_3", "elementwise_sub_4"], ["elementwise_sub_4"]),
    "elementwise_sub_0": (
        ["elementwise_sub_4", "square_5", "elementwise_mul_10"],
        ["square_5", "elementwise_mul_10"],
    ),
    "square_0.tmp_0": (["square_5", "reduce_mean_6"], ["reduce_mean_6"]),
    "mean_0.tmp_0": (["reduce_mean_6", "fetch_16"], ["fetch_16"]),
    "mean_0.tmp_0@GRAD": (["fill_constant_7", "scale_8"], ["scale_8"]),
    "mean_0.tmp_0@GRAD@SCALED": (["scale_8", "broadcast_to_9"], ["broadcast_to_9"]),
    "square_0.tmp_0@GRAD": (["broadcast_to_9", "elementwise_mul_10"], ["elementwise_mul_10"]),
    "square_0.tmp_0@GRAD@X": (["elementwise_mul_10", "scale_11"], ["scale_11"]),
    "elementwise_sub_0@GRAD": (
        ["scale_11", "reduce_sum_12", "matmul_13"],
        ["reduce_sum_12", "matmul_13"],
    ),
    "linear_0.b_0@GRAD": (["reduce_sum_12", "adam_15"], ["adam_15"]),
    "linear_0.w_0@GRAD": (["matmul_13", "adam_14"], ["adam_14"]),
    "learning_rate_0": (["adam_14", "adam_15"], ["adam_15"]),
}


def _plan(program, keep=()):
    block = program.global_block()
    deps = dependencies.analyse(block)
    return memory_plan.plan_memory(block, deps, keep), block


def _table(memory, block):
    return {var: (before, after) for var, before, after, _ in memory_plan.table(memory, block)}


def test_seed_forward_table_before_and_after_shrinking():
    from tests.scheduler.programs import add_fetch

    memory, block = _plan(add_fetch(seed_forward(), "mean_0.tmp_0"))
    table = _table(memory, block)
    assert {var: table[var] for var in SEED_FORWARD_TABLE} == SEED_FORWARD_TABLE
    assert table["feed@x"] == (["feed_0"], ["feed_0"])


def test_seed_training_table_with_backward_and_adam():
    memory, block = _plan(seed_training(), keep={"fetch@mean_0.tmp_0"})
    table = _table(memory, block)
    assert {var: table[var] for var in SEED_TRAINING_TABLE} == SEED_TRAINING_TABLE
    assert memory.refcount["elementwise_sub_0"] == 2
    assert memory.refcount["elementwise_sub_0@GRAD"] == 2
    assert memory.refcount["x"] == 1


def test_parameters_are_in_the_table_but_never_freed():
    """As in the seed: parameters and optimizer state have last users, and the check skips them."""
    memory, block = _plan(seed_training(), keep={"fetch@mean_0.tmp_0"})
    persistable = {name for name, var in block.vars.items() if var.persistable}
    assert {"linear_0.w_0", "linear_0.b_0", "learning_rate_0"} <= persistable
    assert persistable <= set(memory.last_users)
    assert persistable <= memory.kept
    assert not persistable & set(memory.refcount)
    assert "fetch@mean_0.tmp_0" in memory.kept
    assert all(
        name not in memory.kept for name in SEED_TRAINING_TABLE if not block.vars[name].persistable
    )


def test_gc_lists_name_each_variable_after_each_last_user():
    memory, block = _plan(seed_training(), keep={"fetch@mean_0.tmp_0"})
    index = {op.name: i for i, op in enumerate(block.ops)}
    assert "elementwise_sub_0" in memory.gc_after[index["square_5"]]
    assert "elementwise_sub_0" in memory.gc_after[index["elementwise_mul_10"]]
    assert "x" in memory.gc_after[index["matmul_13"]]
    assert "x" not in memory.gc_after[index["matmul_2"]]
    # In program order a variable goes after the latest of its last users.
    assert "elementwise_sub_0" in memory.free_after[index["elementwise_mul_10"]]
    assert "elementwise_sub_0" not in memory.free_after[index["square_5"]]
    assert "linear_0.w_0" not in memory.gc_after[index["adam_14"]]
    for name, count in memory.refcount.items():
        assert count == sum(name in gc for gc in memory.gc_after)
        assert sum(name in free for free in memory.free_after) == 1


def test_keep_protects_a_variable():
    memory, _ = _plan(seed_training(), keep={"fetch@mean_0.tmp_0", "linear_1.tmp_1"})
    assert "linear_1.tmp_1" in memory.kept
    assert "linear_1.tmp_1" not in memory.refcount
    assert not any("linear_1.tmp_1" in gc for gc in memory.gc_after)


def _shape_only_program():
    program = Program()
    block = program.global_block()
    block.create_var("x", (3, 4), "float32")
    block.append_op("tanh", {"X": ["x"]}, {"Out": ["h"]})
    block.append_op("elementwise_mul", {"X": ["h"], "Y": ["h"]}, {"Out": ["y"]})
    block.append_op("fill_zeros_like", {"X": ["h"]}, {"Out": ["zeros"]})
    block.append_op("elementwise_add", {"X": ["y"], "Y": ["zeros"]}, {"Out": ["out"]})
    return program


def test_reads_that_need_only_a_shape_do_not_extend_a_lifetime():
    """fill_zeros_like reads h's shape and dtype only: h goes after its last real reader."""
    memory, block = _plan(_shape_only_program(), keep={"out"})
    assert memory.buffer_free_reads == {(2, "h")}
    assert _table(memory, block)["h"] == (["tanh_0", "elementwise_mul_1"], ["elementwise_mul_1"])
    assert memory.free_after[1] == ("h",)


def test_a_stand_in_replaces_a_freed_buffer_in_a_shape_only_read():
    import numpy as np

    from tape import Executor

    program = _shape_only_program()
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    (out,) = Executor().run(program, feed={"x": x}, fetch_list=["out"])
    np.testing.assert_array_equal(out, np.tanh(x) * np.tanh(x))
