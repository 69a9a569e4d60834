"""Loaded files never act: checkpoints and programs are validated completely before anything
changes, a forged size cannot make the reader allocate, and a loaded program writes no file
unless the caller lets it, and then only inside one directory."""

import io
import json
import os
import zipfile

import numpy as np
import pytest

import layers
import ops
import optim
import tape
from tape.checkpoint import CheckpointError
from tape.ir_text import ProgramFormatError


def _model_and_optimizer(schedule=True):
    model = layers.Linear(3, 2)
    lr = optim.lr_scheduler.StepDecay(0.1, 2) if schedule else 0.1
    opt = optim.SGD(lr=lr, momentum=0.9)
    tape.reset_global_tape()
    tape.backward(model(tape.Variable(np.ones((2, 3), np.float32))).sum())
    opt(model.params())
    return model, opt


def _rewrite_manifest(path, change):
    """Rewrites the checkpoint at ``path`` with ``change(manifest)`` applied (a forged file:
    the manifest's own checksum is recomputed so only the forged values are wrong). Other
    members are copied as raw bytes, never read as arrays."""
    import hashlib

    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    manifest = json.loads(np.load(io.BytesIO(members["__manifest__.npy"])).tobytes())
    change(manifest)
    raw = json.dumps(manifest).encode()
    for name, payload in (
        ("__manifest__.npy", np.frombuffer(raw, np.uint8)),
        ("__manifest_sha256__.npy", np.frombuffer(hashlib.sha256(raw).hexdigest().encode(), "u1")),
    ):
        buffer = io.BytesIO()
        np.save(buffer, payload)
        members[name] = buffer.getvalue()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def _state(model, opt):
    return [p.numpy().copy() for p in model.params()], opt.state_dict()


@pytest.mark.parametrize(
    "forge",
    [
        lambda m: m["optimizer"]["scheduler"].update(last_epoch="x"),
        lambda m: m["optimizer"]["scheduler"].pop("base_lr"),
        lambda m: m["optimizer"]["scheduler"].update(base_lr=-5.0),
        lambda m: m["optimizer"]["scheduler"].update(base_lr=float("nan")),
        lambda m: m["optimizer"]["scheduler"].update(last_lr=float("inf")),
    ],
)
def test_a_bad_schedule_entry_is_refused_before_anything_changes(tmp_path, forge):
    model, opt = _model_and_optimizer()
    tape.save(tmp_path / "c.npz", model, opt)
    _rewrite_manifest(tmp_path / "c.npz", forge)
    fresh, fresh_opt = _model_and_optimizer()
    before = _state(fresh, fresh_opt)
    with pytest.raises(CheckpointError, match="schedule"):
        tape.load(tmp_path / "c.npz", fresh, fresh_opt)
    after = _state(fresh, fresh_opt)
    for a, b in zip(before[0], after[0], strict=True):
        np.testing.assert_array_equal(a, b)
    assert before[1]["scheduler"] == after[1]["scheduler"]


def test_a_negative_or_nan_rate_is_refused_like_the_constructor_refuses_it(tmp_path):
    with pytest.raises(tape.AttrError):
        optim.SGD(lr=float("nan"))
    model, opt = _model_and_optimizer(schedule=False)
    tape.save(tmp_path / "c.npz", model, opt)
    _rewrite_manifest(tmp_path / "c.npz", lambda m: m["optimizer"].update(lr=-5.0))
    with pytest.raises(CheckpointError, match="hyper-parameters are invalid"):
        tape.load(tmp_path / "c.npz", model, opt)


def test_the_manifest_has_its_own_checksum(tmp_path):
    model, opt = _model_and_optimizer()
    tape.save(tmp_path / "c.npz", model, opt)
    with np.load(tmp_path / "c.npz", allow_pickle=False) as archive:
        members = {k: archive[k] for k in archive.files}
    raw = members["__manifest__"].tobytes().replace(b'"step": 1', b'"step": 7')
    members["__manifest__"] = np.frombuffer(raw, np.uint8)
    np.savez(tmp_path / "c.npz", **members)
    with pytest.raises(CheckpointError, match="the manifest's checksum does not match"):
        tape.load(tmp_path / "c.npz", model, opt)


def test_unreferenced_or_forged_huge_arrays_are_never_read(tmp_path):
    model = layers.Linear(3, 2)
    path = tmp_path / "c.npz"
    tape.save(path, model)
    # An extra member whose .npy header declares 2**40 floats but holds 16 bytes.
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (2**40,)}
    )
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("huge.npy", b"\x93NUMPY\x01\x00" + header.getvalue()[8:] + b"\0" * 16)
    tape.load(path, model)  # unreferenced: not read
    _rewrite_manifest(
        path,
        lambda m: (
            m["arrays"].update(huge={"shape": [2**40], "dtype": "float64", "sha256": "0" * 64}),
            m["params"][0].update(key="huge"),
        ),
    )
    with pytest.raises(CheckpointError, match="does not match the manifest"):
        tape.load(path, model, strict=False)
    # The manifest declares 2 floats, the member's header 2**40: refused before reading.
    _rewrite_manifest(path, lambda m: m["arrays"]["huge"].update(shape=[2]))
    with pytest.raises(CheckpointError, match="is not what the manifest says"):
        tape.load(path, model, strict=False)


def _damaged_variants(data):
    """Truncations and byte flips of a file's bytes (deterministic)."""
    rng = np.random.default_rng(0)
    for cut in (0, 1, 10, len(data) // 3, len(data) // 2, len(data) - 1):
        yield data[:cut]
    for _ in range(40):
        damaged = bytearray(data)
        for position in rng.integers(0, len(data), 3):
            damaged[position] ^= int(rng.integers(1, 256))
        yield bytes(damaged)


def test_every_damaged_checkpoint_is_a_checkpoint_error_and_changes_nothing(tmp_path):
    model, opt = _model_and_optimizer()
    tape.save(tmp_path / "c.npz", model, opt)
    good = (tmp_path / "c.npz").read_bytes()
    before = _state(model, opt)
    for damaged in _damaged_variants(good):
        (tmp_path / "d.npz").write_bytes(damaged)
        try:
            tape.load(tmp_path / "d.npz", model, opt)
        except CheckpointError:
            pass  # the only error a damaged file may give
        after = _state(model, opt)
        for a, b in zip(before[0], after[0], strict=True):
            np.testing.assert_array_equal(a, b)


def _inference_dir(tmp_path, activation=ops.relu):
    recording = tape.Tape(lazy=True)
    x = tape.Variable(np.ones((2, 3), np.float32), name="x")
    layer = layers.Linear(3, 2)
    with tape.lazy():
        previous = tape.tape.state.tape
        tape.tape.state.tape = recording
        try:
            y = activation(layer(x))
            y.name = "y"
        finally:
            tape.tape.state.tape = previous
    program = tape.Program.from_tape(recording)
    tape.save_inference_program(tmp_path / "m", program, ["x"], ["y"])
    return tmp_path / "m"


def test_every_damaged_program_file_is_a_format_error(tmp_path):
    directory = _inference_dir(tmp_path)
    good = (directory / "program.json").read_bytes()
    for damaged in _damaged_variants(good):
        (directory / "program.json").write_bytes(damaged)
        with pytest.raises((ProgramFormatError, CheckpointError)):
            tape.load_inference_program(directory)


def test_a_program_file_with_a_save_op_writes_nothing_unless_allowed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    t = tape.Tape(lazy=True)
    w = tape.Variable(np.ones(2, np.float32), name="w")
    t.add_op("save", {"X": [w]}, attrs={"path": str(victim)})
    text = tape.Program.from_tape(t).to_text().replace('"is_target": false', '"is_target": true')
    program = tape.Program.from_text(text)
    with pytest.raises(tape.GraphError, match="wants to write files"):
        tape.Executor().run(program, scope={"w": np.ones(2, np.float32)})
    with pytest.raises(tape.GraphError, match="outside the directory"):
        tape.Executor(write_dir=tmp_path / "out").run(program, scope={"w": np.ones(2, "f4")})
    assert victim.read_text() == "precious"
    inside = tape.Program.from_text(text.replace(str(victim), "ckpt.npz"))
    (tmp_path / "out").mkdir()
    tape.Executor(write_dir=tmp_path / "out").run(inside, scope={"w": np.ones(2, np.float32)})
    assert (tmp_path / "out" / "ckpt.npz").exists()


def test_inference_parameters_must_match_the_declared_shapes(tmp_path):
    directory = _inference_dir(tmp_path)
    with np.load(directory / "params.npz", allow_pickle=False) as data:
        members = {k: data[k] for k in data.files}
    index = [str(n) for n in members["names"]].index(
        next(n for n in map(str, members["names"]) if "Bias" in n or "bias" in n)
    )
    members[str(index)] = members[str(index)][:1]  # a (1,) bias for a declared (2,)
    np.savez(directory / "params.npz", **members)
    with pytest.raises(CheckpointError, match="does not match the program"):
        tape.load_inference_program(directory)


def test_programs_and_parameters_from_different_saves_are_refused(tmp_path):
    first = _inference_dir(tmp_path / "a")
    second = _inference_dir(tmp_path / "b", ops.tanh)
    os.replace(second / "params.npz", first / "params.npz")
    with pytest.raises(CheckpointError, match="was not saved with"):
        tape.load_inference_program(first)
