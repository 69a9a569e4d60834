"""tape.save / tape.load: atomic, checksummed .npz checkpoints loaded by name, all or nothing."""

import io
import json
import os
import zipfile

import numpy as np
import pytest

import layers
import optim
import tape
from tape.checkpoint import CheckpointError


class Net(layers.Function):
    """Two linear layers and a non-parameter buffer (like batch norm's running mean)."""

    def __init__(self):
        super().__init__()
        self.first = layers.Linear(3, 4)
        self.second = layers.Linear(4, 2)
        running = tape.Variable(np.zeros(4, np.float32))
        running.persistable = True
        self.running = running

    def forward(self, x):
        return self.second(self.first(x))


def values(named):
    return {
        name: var.numpy().copy() for name, var in tape.checkpoint.named_variables(named).items()
    }


def assert_values(named, expected):
    got = values(named)
    assert sorted(got) == sorted(expected)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def scrambled(net):
    for _, var in tape.checkpoint.named_variables(net).items():
        var.set_value(np.full(var.shape, 7.0, var.dtype))


@pytest.fixture
def path(tmp_path):
    return tmp_path / "model.ckpt"


def test_layer_round_trip_with_parameters_and_buffers(path):
    net = Net()
    net.running.set_value(np.arange(4, dtype=np.float32))
    saved = values(net)
    assert sorted(saved) == [
        "first.bias",
        "first.weight",
        "running",
        "second.bias",
        "second.weight",
    ]
    tape.save(path, net)
    scrambled(net)
    tape.load(path, net)
    assert_values(net, saved)


def test_loading_matches_by_name_not_order(path):
    rng = np.random.default_rng(0)
    w, b = tape.Variable(rng.standard_normal((2, 3))), tape.Variable(rng.standard_normal(3))
    tape.save(path, {"w": w, "b": b})
    w2, b2 = tape.Variable(np.zeros((2, 3))), tape.Variable(np.zeros(3))
    tape.load(path, {"b": b2, "w": w2})
    np.testing.assert_array_equal(w2.numpy(), w.numpy())
    np.testing.assert_array_equal(b2.numpy(), b.numpy())


def test_lists_use_names_when_all_are_named_and_positions_otherwise(path):
    a, b = tape.Variable(np.ones(2), name="a"), tape.Variable(np.zeros(3), name="b")
    tape.save(path, [a, b])
    a2, b2 = tape.Variable(np.zeros(2), name="a"), tape.Variable(np.ones(3), name="b")
    tape.load(path, [b2, a2])  # reordered: names decide
    np.testing.assert_array_equal(a2.numpy(), np.ones(2))
    tape.save(path, [tape.Variable(np.ones(2)), tape.Variable(np.zeros(3))])
    manifest = read_manifest(path)
    assert [entry["name"] for entry in manifest["params"]] == ["0", "1"]


def test_manifest_records_names_shapes_dtypes_and_sha256(path):
    net = Net()
    tape.save(path, net)
    manifest = read_manifest(path)
    assert manifest["format"] == "fluidtape-checkpoint" and manifest["version"] == 2
    by_name = {e["name"]: manifest["arrays"][e["key"]] for e in manifest["params"]}
    assert by_name["first.weight"]["shape"] == [3, 4]
    assert by_name["first.weight"]["dtype"] == "float32"
    assert len(by_name["first.weight"]["sha256"]) == 64


def test_optimizer_state_round_trips_and_training_resumes_exactly(path):
    def step(net, opt, seed):
        tape.reset_global_tape()
        x = tape.Variable(np.random.default_rng(seed).standard_normal((5, 3)).astype(np.float32))
        tape.backward((net(x) * net(x)).mean())
        opt(net.params())

    net, opt = Net(), optim.Adam(lr=0.01, grad_clip=optim.ClipGradByGlobalNorm(1.0))
    for seed in range(3):
        step(net, opt, seed)
    tape.save(path, net, opt)
    net2, opt2 = Net(), optim.Adam(lr=0.01, grad_clip=optim.ClipGradByGlobalNorm(1.0))
    tape.load(path, net2, opt2)
    assert opt2.step_count == 3
    for seed in range(3, 6):
        step(net, opt, seed)
        step(net2, opt2, seed)
    assert_values(net2, values(net))


def test_a_crash_while_writing_leaves_the_old_file_and_no_temporary_files(path, monkeypatch):
    net = Net()
    tape.save(path, net)
    old = path.read_bytes()

    def crash(file, **arrays):
        file.write(b"PK\x03\x04 half an archive")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(OSError, match="disk full"):
        tape.save(path, net)
    assert path.read_bytes() == old
    assert os.listdir(path.parent) == [path.name]


def test_a_failed_rename_removes_the_temporary_file(path, monkeypatch):
    def refuse(src, dst):
        raise PermissionError("read-only")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PermissionError):
        tape.save(path, Net())
    assert os.listdir(path.parent) == []


def test_truncated_file_is_an_error_and_changes_nothing(path):
    net = Net()
    tape.save(path, net)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    before = values(net)
    with pytest.raises(
        CheckpointError,
        match=r"checkpoint '.*model.ckpt' is truncated or "
        r"corrupted\n  actual:   BadZipFile",
    ):
        tape.load(path, net)
    assert_values(net, before)


def test_flipped_byte_in_an_array_is_detected(path):
    w = tape.Variable(np.linspace(1.0, 2.0, 64), name="w")
    tape.save(path, [w])
    data = bytearray(path.read_bytes())
    offset = bytes(data).index(w.numpy().tobytes())
    data[offset + 100] ^= 0x01
    path.write_bytes(bytes(data))
    target = tape.Variable(np.zeros(64), name="w")
    with pytest.raises(CheckpointError, match="corrupted"):
        tape.load(path, [target])
    np.testing.assert_array_equal(target.numpy(), np.zeros(64))


def test_checksum_mismatch_names_the_parameter(path):
    """An array replaced with valid zip CRCs is still caught by the manifest's SHA-256."""
    w, b = tape.Variable(np.ones(3), name="w"), tape.Variable(np.ones(2), name="b")
    tape.save(path, [w, b])
    key = next(e["key"] for e in read_manifest(path)["params"] if e["name"] == "b")
    replace_member(path, key + ".npy", npy_bytes(np.array([1.0, 1.5])))
    w.set_value(np.zeros(3))
    with pytest.raises(
        CheckpointError,
        match=r"is corrupted: checksum mismatch for parameter "
        r"'b'\n  expected: SHA-256 [0-9a-f]{64}",
    ):
        tape.load(path, [w, b])
    np.testing.assert_array_equal(w.numpy(), np.zeros(3))


def test_missing_name_is_an_error_and_changes_nothing(path):
    w = tape.Variable(np.ones(3))
    tape.save(path, {"w": w})
    target = {"w": tape.Variable(np.zeros(3)), "b": tape.Variable(np.zeros(2))}
    with pytest.raises(
        CheckpointError,
        match=r"parameter 'b' is missing from checkpoint .*\n"
        r"  expected: names \['b', 'w'\]\n"
        r"  actual:   names \['w'\]",
    ):
        tape.load(path, target)
    np.testing.assert_array_equal(target["w"].numpy(), np.zeros(3))


def test_unexpected_name_is_an_error_unless_not_strict(path):
    tape.save(path, {"w": tape.Variable(np.ones(3)), "extra": tape.Variable(np.ones(1))})
    target = {"w": tape.Variable(np.zeros(3))}
    with pytest.raises(
        CheckpointError, match="has parameter 'extra', which is not among the parameters"
    ):
        tape.load(path, target)
    np.testing.assert_array_equal(target["w"].numpy(), np.zeros(3))
    tape.load(path, target, strict=False)
    np.testing.assert_array_equal(target["w"].numpy(), np.ones(3))


def test_shape_mismatch_names_the_parameter_and_both_shapes(path):
    tape.save(path, {"w": tape.Variable(np.ones((2, 3))), "b": tape.Variable(np.ones(3))})
    target = {"b": tape.Variable(np.zeros(3)), "w": tape.Variable(np.zeros((3, 2)))}
    with pytest.raises(
        CheckpointError,
        match=r"parameter 'w' does not match checkpoint .*\n"
        r"  expected: shape \(3, 2\), dtype float64 "
        r"\(the parameter\)\n  actual:   shape \(2, 3\), "
        r"dtype float64 \(the checkpoint\)",
    ):
        tape.load(path, target)
    np.testing.assert_array_equal(target["b"].numpy(), np.zeros(3))


def test_dtype_mismatch_is_an_error(path):
    tape.save(path, {"w": tape.Variable(np.ones(3, np.float64))})
    with pytest.raises(CheckpointError, match=r"dtype float32 \(the parameter\)"):
        tape.load(path, {"w": tape.Variable(np.zeros(3, np.float32))})


def test_bad_optimizer_state_changes_no_parameter(path):
    net, opt = Net(), optim.SGD(lr=0.1, momentum=0.9)
    tape.reset_global_tape()
    tape.backward(net(tape.Variable(np.ones((1, 3), np.float32))).sum())
    opt(net.params())
    tape.save(path, net, opt)
    other = Net()
    before = values(other)
    with pytest.raises(CheckpointError, match="optimizer state is for a different optimizer"):
        tape.load(path, other, optim.Adam())
    assert_values(other, before)


def test_loading_optimizer_state_from_a_file_without_it(path):
    tape.save(path, Net())
    with pytest.raises(CheckpointError, match="holds no optimizer state"):
        tape.load(path, Net(), optim.SGD(lr=0.1))


def test_files_that_are_not_checkpoints(path):
    np.savez(path.open("wb"), w=np.ones(3))
    with pytest.raises(CheckpointError, match="is not a fluidtape checkpoint"):
        tape.load(path, {"w": tape.Variable(np.zeros(3))})
    np.save(path.open("wb"), np.array([{"a": 1}], dtype=object))  # pickled data: never loaded
    with pytest.raises(CheckpointError, match="truncated or corrupted"):
        tape.load(path, {"w": tape.Variable(np.zeros(3))})


def test_two_variables_with_one_name_are_rejected(path):
    class Twice(layers.Function):
        def buffers(self, prefix=""):
            yield "w", tape.Variable(np.ones(1))
            yield "w", tape.Variable(np.ones(1))

    with pytest.raises(tape.InputError, match="two different Variables are both named 'w'"):
        tape.save(path, Twice())
    assert not path.exists()


# -- helpers that edit archives ----------------------------------------------------------------


def read_manifest(path):
    with np.load(path, allow_pickle=False) as archive:
        return json.loads(archive["__manifest__"].tobytes().decode("utf-8"))


def npy_bytes(array):
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def replace_member(path, member, data):
    with zipfile.ZipFile(path) as source:
        members = {name: source.read(name) for name in source.namelist()}
    members[member] = data
    with zipfile.ZipFile(path, "w") as target:
        for name, content in members.items():
            target.writestr(name, content)
