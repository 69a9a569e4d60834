"""The IR: Programs from tapes and by hand, the structural hash, the text format and validation."""

import json

import numpy as np
import pytest

import ops
import tape
from tape.ir import Program
from tape.ir_text import ProgramFormatError
from tests.scheduler.programs import seed_training


def _record(shape=(4, 3), names=("x", "w"), transpose=False, scale=2.0):
    t = tape.Tape(lazy=True)
    x = tape.Variable(np.ones(shape, np.float32), name=names[0])
    w = tape.Variable(
        np.ones((shape[1], 5) if not transpose else (5, shape[1]), np.float32),
        requires_grad=True,
        name=names[1],
    )
    previous, tape.tape.state.tape = tape.tape.state.tape, t
    try:
        h = ops.matmul(x, w, transpose_y=transpose)
        ops.relu(ops.scale(h, scale=scale)).sum()
    finally:
        tape.tape.state.tape = previous
    return Program.from_tape(t)


def test_from_tape_converts_ops_slots_and_attributes():
    block = _record().global_block()
    assert [op.type for op in block.ops] == ["matmul", "scale", "relu", "reduce_sum"]
    matmul = block.ops[0]
    assert matmul.inputs == {"X": ["x"], "Y": ["w"]}
    assert matmul.attrs == {"transpose_x": False, "transpose_y": False}
    assert block.vars["w"].requires_grad and block.vars["w"].shape == (3, 5)
    assert block.vars[block.ops[-1].output_names()[0]].shape == ()
    assert matmul.location.startswith("test_ir.py:")


def test_equal_names_stay_distinct_variables():
    block = _record(names=("same", "same")).global_block()
    assert block.ops[0].inputs == {"X": ["same"], "Y": ["same_1"]}


def test_structural_hash_ignores_names_and_sees_shapes_attributes_and_wiring():
    base = _record().structural_hash()
    assert _record(names=("a", "b")).structural_hash() == base
    assert _record(shape=(5, 3)).structural_hash() != base
    assert _record(scale=3.0).structural_hash() != base
    assert _record(transpose=True).structural_hash() != base
    rewired = _record()
    ops_ = rewired.global_block().ops
    ops_[2].inputs = {"X": ops_[0].output_names()}  # relu now reads the matmul, not the scale
    assert rewired.structural_hash() != base


def test_text_round_trips_exactly():
    program = seed_training()
    text = program.to_text()
    again = Program.from_text(text)
    assert again == program
    assert again.to_text() == text
    assert json.loads(text)["format"] == "fluidtape-program"
    recorded = _record()
    assert Program.from_text(recorded.to_text()) == recorded


def test_text_is_one_variable_or_op_per_line():
    lines = seed_training().to_text().splitlines()
    assert lines[0] == '{"format": "fluidtape-program", "version": 1, "blocks": ['
    assert any(line.startswith('  {"type": "adam", "name": "adam_14"') for line in lines)
    assert any(line.startswith('  {"name": "linear_0.w_0", "shape": [16, 1]') for line in lines)


def _edit(mutate):
    doc = json.loads(seed_training().to_text())
    mutate(doc["blocks"][0])
    return json.dumps(doc)


def _load_error(mutate):
    with pytest.raises(ProgramFormatError) as info:
        Program.from_text(_edit(mutate))
    return str(info.value)


def test_unknown_op_is_reported_with_a_suggestion():
    message = _load_error(lambda b: b["ops"][5].update(type="sqaure"))
    assert message.startswith("op 'sqaure' (square_5): unknown op type")
    assert "did you mean square" in message


def test_bad_attribute_is_reported():
    message = _load_error(lambda b: b["ops"][2]["attrs"].update(transpose_x="yes"))
    assert message.startswith("op 'matmul' (matmul_2): attribute 'transpose_x' has the wrong type")
    message = _load_error(lambda b: b["ops"][2]["attrs"].update(alpha=1.0))
    assert "unknown attribute 'alpha'" in message


def test_dangling_variable_is_reported():
    def drop(block):
        block["vars"] = [v for v in block["vars"] if v["name"] != "linear_1.tmp_0"]

    message = _load_error(drop)
    assert message.startswith(
        "op 'matmul' (matmul_2): output 'Out' names variable "
        "'linear_1.tmp_0', which the block does not declare"
    )


def test_slot_and_shape_errors_are_reported():
    message = _load_error(lambda b: b["ops"][2]["inputs"].update(Z=["x"]))
    assert "unknown input slot 'Z'" in message
    message = _load_error(lambda b: b["ops"][2]["inputs"].pop("Y"))
    assert "missing input 'Y'" in message

    def reshape(block):
        next(v for v in block["vars"] if v["name"] == "linear_1.tmp_0")["shape"] = [16, 2]

    message = _load_error(reshape)
    assert "output 'linear_1.tmp_0' is declared with another shape or dtype" in message
    assert "expected: (16, 1) float32" in message and "actual:   (16, 2) float32" in message


def test_malformed_documents_are_rejected_without_evaluating_anything():
    with pytest.raises(ProgramFormatError, match="invalid JSON"):
        Program.from_text("__import__('os').system('true')")
    with pytest.raises(ProgramFormatError, match="not a program text"):
        Program.from_text('{"format": "pickle"}')
    message = _load_error(lambda b: b["vars"][0].update(dtype="object"))
    assert "unknown dtype" in message
    message = _load_error(lambda b: b["ops"][0].update(extra=1))
    assert "op #0: unknown field 'extra'" in message


def test_append_op_infers_outputs_and_checks_inputs():
    program = Program()
    block = program.global_block()
    block.create_var("x", (2, 3), "float32")
    op = block.append_op("reduce_sum", {"X": ["x"]}, {"Out": ["s"]}, {"axis": 1})
    assert op.attrs == {"axis": (1,), "keepdim": False}
    assert block.vars["s"].shape == (2,) and block.vars["s"].dtype == "float32"
    with pytest.raises(tape.GraphError, match="block 0 has no variable 'nope'"):
        block.append_op("relu", {"X": ["nope"]}, {"Out": ["y"]})
