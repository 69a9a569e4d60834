"""Whole training steps on the strict emulated GPU (tape.testing_device) equal the CPU's.

The op sweep runs every kernel there (test_registry_sweep); this runs what sits around the
kernels: layers creating parameters on the device, eager and lazy backward, optimizer updates
and checkpoints. ``tests/test_gpu.py`` does the same on a real device where cupy finds one.
"""

import contextlib

import numpy as np
import pytest

import layers
import ops
import optim
import tape
from ops.xp import to_numpy
from tape.testing_device import DeviceArray, EmulatedDevice, installed


def _model():
    tape.seed(0)
    return {
        "embed": layers.Embedding(10, 6),
        "conv": layers.Conv2D(1, 2, 3, padding=1),
        "norm": layers.LayerNorm(6),
        "cell": layers.LSTMCell(6, 4),
        "gru": layers.GRUCell(4, 4),
        "head": layers.Linear(4 + 2 * 16, 3, act="relu"),
        "bn": layers.BatchNorm(3),
    }


def _params(model):
    return [p for layer in model.values() for p in layer.params()]


def _step(model, optimizer, data, upload, lazy):
    ids, image, labels = (upload(a) for a in data)
    with tape.lazy() if lazy else contextlib.nullcontext():
        tape.reset_global_tape()
        x = model["norm"](model["embed"](tape.Variable(ids)))
        h, c = model["cell"](x)
        h = model["gru"](h)
        features = model["conv"](tape.Variable(image)).reshape((4, 32))
        joined = ops.concat([h, features], axis=1)
        logits = model["bn"](model["head"](joined))
        loss = layers.CrossEntropyLoss()(logits, tape.Variable(labels))
        tape.backward(loss)
        optimizer(_params(model))
        value = loss.value()
    tape.reset_global_tape()
    return value


def _data(step):
    rng = np.random.default_rng(step)
    return (
        rng.integers(0, 10, 4),
        rng.standard_normal((4, 1, 4, 4)).astype(np.float32),
        rng.integers(0, 3, 4),
    )


def _train(optimizer_class, lazy, device=None):
    upload = (lambda a: a) if device is None else device.asarray
    model = _model()
    optimizer = optimizer_class(lr=0.01)
    losses = [float(to_numpy(_step(model, optimizer, _data(s), upload, lazy))) for s in range(3)]
    return losses, [to_numpy(p.value()) for p in _params(model)], _params(model)


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("optimizer", [optim.SGD, optim.Adam], ids=["sgd", "adam"])
def test_training_on_the_emulated_gpu_equals_the_cpu(optimizer, lazy):
    cpu_losses, cpu_params, _ = _train(optimizer, lazy)
    device = EmulatedDevice()
    with installed(device), tape.device("gpu"):
        gpu_losses, gpu_params, handles = _train(optimizer, lazy, device)
        assert all(isinstance(p.value(), DeviceArray) for p in handles)
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=1e-5)
    for gpu, cpu in zip(gpu_params, cpu_params, strict=True):
        assert gpu.dtype == cpu.dtype == np.float32
        np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-6)


def test_checkpoints_round_trip_through_the_emulated_gpu(tmp_path):
    device = EmulatedDevice()
    with installed(device), tape.device("gpu"):
        model = _model()
        path = str(tmp_path / "model.ckpt")
        tape.save(path, _params(model))
        saved = [to_numpy(p.value()).copy() for p in _params(model)]
        for p in _params(model):
            p.set_value(device.zeros(p.shape, p.dtype))
        tape.load(path, _params(model))
        for p, value in zip(_params(model), saved, strict=True):
            assert isinstance(p.value(), DeviceArray)
            np.testing.assert_array_equal(to_numpy(p.value()), value)


@pytest.mark.parametrize(
    "options",
    [{}, {"compile": True, "autobatch": False}, {"compile": True}],
    ids=["default", "compiled", "compiled-batched"],
)
def test_a_lazy_structure_learnt_on_the_cpu_runs_on_the_gpu_after_it(options):
    """Gradient recipes remembered on the CPU (tape.grad_memo) made host constants; the same
    structure run on the GPU afterwards in the same process must not replay them there. With
    ``compile=True`` and autobatching the plan batches the examples (tape/passes/batch_groups),
    on the GPU as on the CPU."""
    batches = options == {"compile": True}

    def run(device=None):
        upload = (lambda a: a) if device is None else device.asarray
        rng = np.random.default_rng(0)
        w = tape.Variable(upload((rng.standard_normal((4, 4)) * 0.5).astype(np.float32)))
        w.requires_grad = True
        xs = [upload(rng.standard_normal((1, 4)).astype(np.float32)) for _ in range(12)]
        with tape.lazy(**options):
            for _ in range(6):
                tape.reset_global_tape()
                total = ops.sum([(ops.tanh(tape.Variable(x) @ w) ** 2).sum() for x in xs])
                w.clear_grad()
                tape.backward(total)
        if batches:
            assert "ops batched" in tape.explain()
        return total.value(), w.grad().value()

    cpu_total, cpu_grad = run()
    device = EmulatedDevice()
    with installed(device), tape.device("gpu"):
        gpu_total, gpu_grad = run(device)
        assert isinstance(gpu_grad, DeviceArray)
        np.testing.assert_allclose(to_numpy(gpu_total), to_numpy(cpu_total), rtol=1e-5)
        np.testing.assert_allclose(to_numpy(gpu_grad), to_numpy(cpu_grad), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("autobatch", [True, False], ids=["batched", "alone"])
def test_traced_calls_on_the_emulated_gpu_equal_the_cpu(autobatch):
    """tape.traced programs read their constants on the device and run vectorised there: a
    forest of traced node calls (a tree's results passed on packed), with an embedding table's
    and a weight's gradients summed over each group in one call."""

    def run(device=None):
        upload = (lambda a: a) if device is None else device.asarray
        rng = np.random.default_rng(0)
        table = tape.Variable(upload(rng.standard_normal((7, 4)).astype(np.float32)))
        w = tape.Variable(upload((rng.standard_normal((8, 8)) * 0.5).astype(np.float32)))
        table.requires_grad = w.requires_grad = True
        scale = tape.Variable(upload(np.full(4, 0.5, np.float32)))  # (a constant it reads)

        @tape.traced
        def leaf(word):
            x = ops.lookup_table(table, word)
            return ops.tanh(x) * scale, x

        @tape.traced
        def node(hl, cl, hr, cr):
            z = ops.tanh(ops.matmul(ops.concat([hl, hr]), w))
            return z[:4] * cl, z[4:] + cr

        with tape.lazy(autobatch=autobatch, compile=False):
            tape.reset_global_tape()
            roots = []
            for words in ([1, 2, 3, 4], [5, 6, 0, 1], [2, 2, 3, 6]):
                leaves = [leaf(upload(np.array(k))) for k in words]
                left, right = node(*leaves[0], *leaves[1]), node(*leaves[2], *leaves[3])
                roots.append(node(*left, *right))
            loss = ops.stack([(h * c).sum() for h, c in roots]).sum()
            tape.backward(loss)
            return loss.value(), table.grad().value(), w.grad().value()

    cpu = run()
    device = EmulatedDevice()
    with installed(device), tape.device("gpu"):
        gpu = run(device)
        assert all(isinstance(value, DeviceArray) for value in gpu)
        for got, want in zip(gpu, cpu, strict=True):
            np.testing.assert_allclose(to_numpy(got), to_numpy(want), rtol=1e-5, atol=1e-6)
