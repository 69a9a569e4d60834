"""Hand-built programs shared by the scheduler tests: the seed's worked example (a linear layer,
mean-squared error and Adam, named as in the seed) and random recorded tapes."""

import numpy as np

import ops
import tape
from tape.ir import Program

BATCH, FEATURES = 16, 16


def seed_forward():
    """The seed's main program up to the loss: feed x and label, linear, MSE, fetch the mean."""
    program = Program()
    block = program.global_block()
    for name, shape in (
        ("feed@x", (BATCH, FEATURES)),
        ("x", (BATCH, FEATURES)),
        ("feed@label", (BATCH, 1)),
        ("label", (BATCH, 1)),
    ):
        block.create_var(name, shape, "float32")
    block.create_var("linear_0.w_0", (FEATURES, 1), "float32", persistable=True, requires_grad=True)
    block.create_var("linear_0.b_0", (1,), "float32", persistable=True, requires_grad=True)
    block.append_op("feed", {"X": ["feed@x"]}, {"Out": ["x"]}, {"name": "x"})
    block.append_op("feed", {"X": ["feed@label"]}, {"Out": ["label"]}, {"name": "label"})
    block.append_op("matmul", {"X": ["x"], "Y": ["linear_0.w_0"]}, {"Out": ["linear_1.tmp_0"]})
    block.append_op(
        "elementwise_add",
        {"X": ["linear_1.tmp_0"], "Y": ["linear_0.b_0"]},
        {"Out": ["linear_1.tmp_1"]},
    )
    block.append_op(
        "elementwise_sub", {"X": ["linear_1.tmp_1"], "Y": ["label"]}, {"Out": ["elementwise_sub_0"]}
    )
    block.append_op("square", {"X": ["elementwise_sub_0"]}, {"Out": ["square_0.tmp_0"]})
    block.append_op("reduce_mean", {"X": ["square_0.tmp_0"]}, {"Out": ["mean_0.tmp_0"]})
    return program


def add_fetch(program, name):
    block = program.global_block()
    block.append_op(
        "fetch", {"X": [name]}, {"Out": [f"fetch@{name}"]}, {"name": name}, is_target=True
    )
    return program


def seed_training():
    """The seed's program after ``minimize``: the forward pass, gradient ops written out by hand
    (d mean, d square, d sub, d add, d matmul), one Adam op per parameter, then the fetch."""
    program = seed_forward()
    block = program.global_block()
    for param, shape in (("linear_0.w_0", (FEATURES, 1)), ("linear_0.b_0", (1,))):
        for slot in ("moment1_0", "moment2_0"):
            block.create_var(f"{param}_{slot}", shape, "float32", persistable=True)
        for slot in ("beta1_pow_acc_0", "beta2_pow_acc_0"):
            block.create_var(f"{param}_{slot}", (1,), "float64", persistable=True)
    block.create_var("learning_rate_0", (1,), "float32", persistable=True)
    block.append_op(
        "fill_constant",
        {},
        {"Out": ["mean_0.tmp_0@GRAD"]},
        {"shape": [], "value": 1.0, "dtype": "float32"},
    )
    block.append_op(
        "scale",
        {"X": ["mean_0.tmp_0@GRAD"]},
        {"Out": ["mean_0.tmp_0@GRAD@SCALED"]},
        {"scale": 1.0 / BATCH},
    )
    block.append_op(
        "broadcast_to",
        {"X": ["mean_0.tmp_0@GRAD@SCALED"]},
        {"Out": ["square_0.tmp_0@GRAD"]},
        {"shape": [BATCH, 1]},
    )
    block.append_op(
        "elementwise_mul",
        {"X": ["square_0.tmp_0@GRAD"], "Y": ["elementwise_sub_0"]},
        {"Out": ["square_0.tmp_0@GRAD@X"]},
    )
    block.append_op(
        "scale",
        {"X": ["square_0.tmp_0@GRAD@X"]},
        {"Out": ["elementwise_sub_0@GRAD"]},
        {"scale": 2.0},
    )
    block.append_op(
        "reduce_sum",
        {"X": ["elementwise_sub_0@GRAD"]},
        {"Out": ["linear_0.b_0@GRAD"]},
        {"axis": [0]},
    )
    block.append_op(
        "matmul",
        {"X": ["x"], "Y": ["elementwise_sub_0@GRAD"]},
        {"Out": ["linear_0.w_0@GRAD"]},
        {"transpose_x": True},
    )
    for param in ("linear_0.w_0", "linear_0.b_0"):
        state = [
            f"{param}_{s}" for s in ("moment1_0", "moment2_0", "beta1_pow_acc_0", "beta2_pow_acc_0")
        ]
        block.append_op(
            "adam",
            {
                "Param": [param],
                "Grad": [f"{param}@GRAD"],
                "Moment1": [state[0]],
                "Moment2": [state[1]],
                "LearningRate": ["learning_rate_0"],
                "Beta1Pow": [state[2]],
                "Beta2Pow": [state[3]],
            },
            {
                "ParamOut": [param],
                "Moment1Out": [state[0]],
                "Moment2Out": [state[1]],
                "Beta1PowOut": [state[2]],
                "Beta2PowOut": [state[3]],
            },
        )
    return add_fetch(program, "mean_0.tmp_0")


def seed_scope(seed=0):
    """Parameter and optimizer-state values for the seed's programs."""
    rng = np.random.default_rng(seed)
    scope = {
        "linear_0.w_0": rng.standard_normal((FEATURES, 1)).astype(np.float32),
        "linear_0.b_0": np.zeros(1, np.float32),
        "learning_rate_0": np.array([0.01], np.float32),
    }
    for param in ("linear_0.w_0", "linear_0.b_0"):
        for slot in ("moment1_0", "moment2_0"):
            scope[f"{param}_{slot}"] = np.zeros_like(scope[param])
        scope[f"{param}_beta1_pow_acc_0"] = np.array([0.9])
        scope[f"{param}_beta2_pow_acc_0"] = np.array([0.999])
    return scope


def seed_feed(seed=1):
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((BATCH, FEATURES)).astype(np.float32),
        "label": rng.standard_normal((BATCH, 1)).astype(np.float32),
    }


def recorded_step(layers_module, optim_module, checkpoint_path, save_before_update=True):
    """A lazy tape holding a forward pass (Linear + MSE), its backward, SGD updates and a save
    op checkpointing the parameters; returns (tape, loss, layer)."""
    recording = tape.Tape(lazy=True)
    previous = tape.tape.state.tape
    tape.tape.state.tape = recording
    try:
        layer = layers_module.Linear(FEATURES, 1)
        x = tape.Variable(seed_feed()["x"], name="x")
        label = tape.Variable(seed_feed()["label"], name="label")
        diff = layer(x) - label
        loss = (diff * diff).mean()
        loss.name = "loss"
        tape.backward(loss)
        params = layer.params()
        if save_before_update:
            ops.save(params, path=checkpoint_path, names=["w", "b"])
        optim_module.SGD(lr=0.1)(params)
        if not save_before_update:
            ops.save(params, path=checkpoint_path, names=["w", "b"])
    finally:
        tape.tape.state.tape = previous
    return recording, loss, layer
