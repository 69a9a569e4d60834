"""safetensors checkpoints: round trips with optimizer state, the .npz guarantees (a bad file
changes nothing, no code runs, sizes checked before reading), and PyTorch state dicts both
ways."""

import json
import os
import struct

import numpy as np
import pytest

import layers
import ops
import optim
import tape
from tape.checkpoint import CheckpointError

safetensors = pytest.importorskip("safetensors", reason="the safetensors package is not installed")
torch = pytest.importorskip("torch", reason="torch is the reference for the interop tests")
from safetensors.numpy import load_file as np_load_file  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402


class Net(layers.Function):
    """One of each layer the issue names, under PyTorch's attribute names."""

    def __init__(self):
        super().__init__()
        self.embed = layers.Embedding(10, 6)
        self.cell = layers.LSTMCell(6, 8)
        self.norm = layers.LayerNorm(8)
        self.fc = layers.Linear(8, 4)
        self.conv = layers.Conv2D(1, 2, 3)
        self.bn = layers.BatchNorm(2)

    def forward(self, ids, image):
        h, c = self.cell(self.embed(ids), None)
        out = self.fc(self.norm(h))
        return out, self.bn(self.conv(image))


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 6)
        self.cell = torch.nn.LSTMCell(6, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.fc = torch.nn.Linear(8, 4)
        self.conv = torch.nn.Conv2d(1, 2, 3)
        self.bn = torch.nn.BatchNorm2d(2, track_running_stats=True)

    def forward(self, ids, image):
        h, c = self.cell(self.embed(ids))
        return self.fc(self.norm(h)), self.bn(self.conv(image))


IDS = np.array([1, 4, 9], np.int64)
IMAGE = np.random.default_rng(0).standard_normal((3, 1, 5, 5)).astype(np.float32)


def _run(model):
    tape.reset_global_tape()
    model.eval()
    with tape.no_grad():
        out, conv = model(tape.Variable(IDS), tape.Variable(IMAGE))
    return out.numpy(), conv.numpy()


def _torch_run(model):
    model.eval()
    with torch.no_grad():
        out, conv = model(torch.from_numpy(IDS), torch.from_numpy(IMAGE))
    return out.numpy(), conv.numpy()


def _snapshot(model):
    return {name: var.numpy().copy() for name, var in model.named_params()}


def _assert_unchanged(model, before):
    for name, var in model.named_params():
        np.testing.assert_array_equal(var.numpy(), before[name], err_msg=name)


@pytest.fixture
def torch_model():
    torch.manual_seed(0)
    model = TorchNet()
    with torch.no_grad():  # non-trivial statistics and affine parameters
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
        model.norm.weight.uniform_(0.5, 1.5)
    return model


def _torch_state(model):
    """The state dict less num_batches_tracked, which fluidtape's BatchNorm does not keep."""
    return {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}


def test_torch_state_dict_loads_and_gives_torchs_outputs(tmp_path, torch_model):
    path = tmp_path / "torch.safetensors"
    save_file(_torch_state(torch_model), str(path))
    model = Net()
    tape.load(path, model, layout="torch")
    for ours, theirs in zip(_run(model), _torch_run(torch_model)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_fluidtape_model_loads_into_torch(tmp_path, torch_model):
    model = Net()
    model.bn.running_mean.set_value(np.array([0.3, -0.2], np.float32))
    path = tmp_path / "ours.safetensors"
    tape.save(path, model, format="safetensors", layout="torch")
    fresh = TorchNet()
    fresh.load_state_dict(load_file(str(path)), strict=True)  # every name, every shape
    for ours, theirs in zip(_run(model), _torch_run(fresh)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_names_are_named_params_and_layouts_documented(tmp_path):
    model = Net()
    path = tmp_path / "m.safetensors"
    tape.save(path, model)  # the extension picks the format
    stored = np_load_file(str(path))
    names = [n for n, _ in model.named_params()] + [n for n, _ in model.buffers()]
    assert sorted(stored) == sorted(names)
    np.testing.assert_array_equal(stored["fc.weight"], model.fc.weight.numpy())  # (in, out)
    tape.save(path, model, layout="torch")
    np.testing.assert_array_equal(np_load_file(str(path))["fc.weight"], model.fc.weight.numpy().T)


def test_round_trip_with_optimizer_state_continues_identically(tmp_path):
    def train(model, opt, steps):
        for _ in range(steps):
            tape.reset_global_tape()
            out, conv = model(tape.Variable(IDS), tape.Variable(IMAGE))
            tape.backward((out * out).mean() + conv.mean())
            opt(model.params())

    tape.seed(1)
    model, opt = Net(), optim.Adam(lr=0.01)
    train(model, opt, 2)
    path = tmp_path / "ckpt.safetensors"
    tape.save(path, model, opt)
    tape.seed(2)
    copy, copy_opt = Net(), optim.Adam(lr=0.01)
    tape.load(path, copy, copy_opt)
    train(model, opt, 2)
    train(copy, copy_opt, 2)
    for (name, a), (_, b) in zip(model.named_params(), copy.named_params()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


def test_format_detected_by_header_whatever_the_name(tmp_path):
    w = tape.Variable(np.arange(4.0, dtype=np.float32), name="w")
    path = tmp_path / "weights.bin"
    tape.save(path, {"w": w}, format="safetensors")
    w.set_value(np.zeros(4, np.float32))
    tape.load(path, {"w": w})
    np.testing.assert_array_equal(w.numpy(), np.arange(4.0))


def _write_raw(path, header, data):
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


@pytest.mark.parametrize(
    "damage, message",
    [
        ("truncate", "not a valid safetensors file"),
        ("flip", "checksum mismatch for 'fc.weight'"),
        ("huge", "not a valid safetensors file"),
    ],
)
def test_a_damaged_file_changes_nothing(tmp_path, damage, message):
    model = Net()
    path = tmp_path / "m.safetensors"
    tape.save(path, model)
    raw = bytearray(path.read_bytes())
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    if damage == "truncate":
        raw = raw[:-7]
    elif damage == "flip":
        begin, _ = header["fc.weight"]["data_offsets"]
        raw[8 + length + begin] ^= 0xFF
    else:  # a header declaring far more data than the file holds
        header["fc.weight"]["shape"] = [1 << 20, 1 << 20]
        begin, _ = header["fc.weight"]["data_offsets"]
        header["fc.weight"]["data_offsets"] = [begin, begin + (1 << 42)]
        _write_raw(path, header, bytes(raw[8 + length :]))
        raw = path.read_bytes()
    path.write_bytes(bytes(raw))
    target = Net()
    before = _snapshot(target)
    with pytest.raises(CheckpointError, match=message):
        tape.load(path, target)
    _assert_unchanged(target, before)


def test_mismatches_name_the_entry_and_change_nothing(tmp_path, torch_model):
    path = tmp_path / "torch.safetensors"
    save_file(_torch_state(torch_model), str(path))
    model = Net()
    before = _snapshot(model)
    with pytest.raises(CheckpointError, match="parameter 'fc.weight' does not match") as err:
        tape.load(path, model)  # torch's (out, in) Linear weight without layout="torch"
    assert "layout='torch'" in str(err.value)
    _assert_unchanged(model, before)
    with pytest.raises(CheckpointError, match="holds no optimizer state"):
        tape.load(path, model, optim.Adam(lr=0.1), layout="torch")
    _assert_unchanged(model, before)
    save_file({"fc.weight": torch.zeros(4, 8)}, str(path))
    with pytest.raises(CheckpointError, match="missing from checkpoint"):
        tape.load(path, model, layout="torch")
    _assert_unchanged(model, before)


def test_no_code_runs_and_dtypes_must_match(tmp_path):
    w = tape.Variable(np.zeros(2, np.float32))
    path = tmp_path / "w.safetensors"
    _write_raw(path, {"w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}}, bytes(16))
    with pytest.raises(CheckpointError, match="dtype float64"):
        tape.load(path, {"w": w})
    _write_raw(path, {"__metadata__": {"fluidtape.sha256": "not json"}}, b"")
    with pytest.raises(CheckpointError, match="missing from checkpoint"):
        tape.load(path, {"w": w})


def test_layout_is_refused_where_it_means_nothing(tmp_path):
    w = tape.Variable(np.zeros(2, np.float32))
    with pytest.raises(tape.InputError, match="layout applies to safetensors checkpoints only"):
        tape.save(tmp_path / "w.npz", {"w": w}, layout="torch")
    with pytest.raises(tape.InputError, match='layout="torch" needs the model'):
        tape.save(tmp_path / "w.safetensors", {"w": w}, layout="torch")
    with pytest.raises(tape.InputError, match="unknown checkpoint format"):
        tape.save(tmp_path / "w.x", {"w": w}, format="pickle")
    assert not os.listdir(tmp_path)


def test_npz_behaviour_is_unchanged(tmp_path):
    model = Net()
    path = tmp_path / "m.npz"
    tape.save(path, model)
    assert path.read_bytes()[:2] == b"PK"
    copy = Net()
    tape.load(path, copy)
    for (name, a), (_, b) in zip(model.named_params(), copy.named_params()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


def test_ops_read_loaded_values(tmp_path):
    w = tape.Variable(np.ones(3, np.float32))
    path = tmp_path / "w.safetensors"
    tape.save(path, {"w": tape.Variable(np.arange(3.0, dtype=np.float32))})
    tape.load(path, {"w": w})
    assert float(ops.reduce_sum(w).numpy()) == 3.0
