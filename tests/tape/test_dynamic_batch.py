"""Free batch axes: Programs with -1 in an input's shape run with any batch size."""

import numpy as np
import pytest

import layers
import ops
import tape
from tape.tape import state


def _recorded(batch=8):
    """A lazy tape recording softmax(tanh(x @ W + b)) for a batch of ``batch``."""
    t = tape.Tape(lazy=True)
    saved, state.tape = state.tape, t
    try:
        model = layers.Linear(3, 2, act="tanh")
        x = tape.Variable(np.ones((batch, 3), np.float32), name="x")
        out = ops.softmax(model(x))
        out.name = "out"
    finally:
        state.tape = saved
    return t, model, x


def _reference(model, x):
    weight, bias = (p.numpy() for p in model.params())
    h = np.exp(np.tanh(x @ weight + bias))
    return h / h.sum(axis=1, keepdims=True)


def test_a_program_from_a_tape_with_dynamic_batch_runs_any_batch_size():
    t, model, x = _recorded(batch=8)
    program = tape.Program.from_tape(t, dynamic_batch=True)
    assert program.global_block().vars["x"].shape == (-1, 3)
    executor = tape.Executor()
    rng = np.random.default_rng(0)
    for batch in (5, 13, 8, 5):
        data = rng.standard_normal((batch, 3)).astype(np.float32)
        (out,) = executor.run(program, feed={"x": data}, fetch_list=["out"])
        assert out.shape == (batch, 2)
        np.testing.assert_allclose(out, _reference(model, data), rtol=1e-5, atol=1e-6)
    # Variables are accepted as feed keys, as for fetch_list
    (out,) = executor.run(program, feed={x: np.zeros((2, 3), np.float32)}, fetch_list=["out"])
    assert out.shape == (2, 2)


def test_without_dynamic_batch_the_recorded_batch_size_is_required():
    t, _, _ = _recorded(batch=8)
    program = tape.Program.from_tape(t)
    with pytest.raises(tape.InputError, match="fed value for 'x' has the wrong shape"):
        tape.Executor().run(program, feed={"x": np.ones((5, 3), np.float32)}, fetch_list=["out"])


def test_a_program_built_with_minus_one_in_a_shape_runs_any_batch_size():
    program = tape.Program()
    block = program.global_block()
    block.create_var("x", (-1, 4), "float32")
    block.create_var("w", (4, 2), "float32", persistable=True)
    block.append_op("mul", {"X": ["x"], "Y": ["w"]}, {"Out": ["y"]})
    block.append_op("reduce_sum", {"X": ["y"]}, {"Out": ["total"]}, {"axis": [1]})
    weight = np.arange(8, dtype=np.float32).reshape(4, 2)
    for batch in (1, 6):
        data = np.full((batch, 4), 0.5, np.float32)
        (total,) = tape.Executor().run(
            program, feed={"x": data}, fetch_list=["total"], scope={"w": weight}
        )
        np.testing.assert_allclose(total, (data @ weight).sum(axis=1))


def test_a_free_axis_survives_the_text_format():
    t, model, _ = _recorded(batch=4)
    program = tape.Program.from_text(tape.Program.from_tape(t, dynamic_batch=True).to_text())
    assert program.global_block().vars["x"].shape == (-1, 3)
    block = program.global_block()
    names = [n for n, d in block.vars.items() if d.persistable]
    weight, bias = (p.numpy() for p in model.params())
    scope = {n: (weight if block.vars[n].shape == (3, 2) else bias) for n in names}
    data = np.ones((7, 3), np.float32)
    (out,) = tape.Executor().run(program, feed={"x": data}, fetch_list=["out"], scope=scope)
    np.testing.assert_allclose(out, _reference(model, data), rtol=1e-5, atol=1e-6)


def test_a_fixed_axis_of_a_free_input_must_still_match():
    t, _, _ = _recorded()
    program = tape.Program.from_tape(t, dynamic_batch=True)
    with pytest.raises(tape.InputError) as caught:
        tape.Executor().run(program, feed={"x": np.ones((5, 4), np.float32)}, fetch_list=["out"])
    text = str(caught.value)
    assert "fed value for 'x' has the wrong shape" in text
    assert "expected: (-1, 3) (-1: any size)" in text and "actual:   (5, 4)" in text


def test_an_op_whose_attributes_fix_the_batch_size_is_named():
    t = tape.Tape(lazy=True)
    saved, state.tape = state.tape, t
    try:
        x = tape.Variable(np.ones((8, 3), np.float32), name="x")
        flat = ops.reshape(x * 2.0, shape=[24])  # the batch size 8 is baked into the shape
        flat.name = "flat"
    finally:
        state.tape = saved
    program = tape.Program.from_tape(t, dynamic_batch=True)
    with pytest.raises(tape.ShapeError) as caught:
        tape.Executor().run(program, feed={"x": np.ones((5, 3), np.float32)}, fetch_list=["flat"])
    text = str(caught.value)
    assert text.startswith("op 'reshape'") and "cannot run with the fed shapes" in text
    assert "test_dynamic_batch.py" in text and "fixes it" in text


def test_dynamic_batch_needs_an_input_to_feed():
    t = tape.Tape(lazy=True)
    saved, state.tape = state.tape, t
    try:
        w = tape.Variable(np.ones((2, 2), np.float32), requires_grad=True)
        ops.tanh(w)
    finally:
        state.tape = saved
    with pytest.raises(tape.InputError, match="reads no input it must be fed"):
        tape.Program.from_tape(t, dynamic_batch=True)


def test_a_training_program_whose_gradients_fix_the_batch_size_says_so_at_the_op():
    """Gradient makers build constants from the recorded shapes (a mean's 1/n, broadcast
    shapes): another batch size is a located shape error, never a silently wrong gradient."""
    t = tape.Tape(lazy=True)
    saved, state.tape = state.tape, t
    try:
        model = layers.Linear(3, 1)
        x = tape.Variable(np.ones((8, 3), np.float32), name="x")
        loss = (model(x) ** 2.0).mean()
        loss.name = "loss"
        t.backward(loss)
    finally:
        state.tape = saved
    program = tape.Program.from_tape(t, dynamic_batch=True)
    executor = tape.Executor()
    (same,) = executor.run(program, feed={"x": np.ones((8, 3), np.float32)}, fetch_list=["loss"])
    assert np.isfinite(same)
    with pytest.raises(tape.ShapeError, match="record one program per batch size"):
        executor.run(program, feed={"x": np.ones((5, 3), np.float32)}, fetch_list=["loss"])
