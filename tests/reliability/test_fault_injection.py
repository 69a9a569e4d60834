"""The promise under faults, checked at every kernel: a training step (eager, lazy, lazy on
threads; SGD with momentum and Adam) interrupted at its k-th kernel by an Exception, a
KeyboardInterrupt or a MemoryError leaves every parameter and optimizer state at its pre-step or
post-step value (never a mix), the next step raises nothing, and the steps after it give exactly
what an uninterrupted run gives. Files: a save failing at its k-th write leaves the previous
file intact and no temporary behind; a load failing at its k-th read changes nothing."""

import os
import zipfile

import numpy as np
import pytest

import layers
import optim
import tape
from tape import atomic
from tests.reliability.faults import FailingFile, Injector, kernels_injected

pytestmark = pytest.mark.usefixtures("lazy_tier")  # both lazy tiers

ERRORS = [RuntimeError("injected"), KeyboardInterrupt, MemoryError]
MODES = {"eager": dict(enabled=False), "lazy": dict(), "lazy-threads": dict(threads=2)}
OPTIMIZERS = {
    "momentum": lambda: optim.SGD(lr=0.1, momentum=0.9),
    "adam": lambda: optim.Adam(lr=0.05),
}


class Trainer:
    """A small classifier with dropout, trained one step at a time from a fixed start."""

    def __init__(self, optimizer):
        tape.seed(0)
        self.model = layers.Sequential(
            layers.Linear(4, 6, act="relu"), layers.Dropout(0.25), layers.Linear(6, 3)
        )
        self.loss_fn, self.opt = layers.CrossEntropyLoss(), OPTIMIZERS[optimizer]()
        rng = np.random.default_rng(1)
        self.x = rng.standard_normal((5, 4)).astype(np.float32)
        self.y = rng.integers(0, 3, 5)

    def step(self, number, mode):
        tape.seed(100 + number)  # each step draws its own dropout masks, whatever came before
        with tape.lazy(**MODES[mode]):
            tape.reset_global_tape()
            loss = self.loss_fn(self.model(tape.Variable(self.x)), tape.Variable(self.y))
            tape.backward(loss)
            self.opt(self.model.params())
            value = loss.numpy().item()
            tape.reset_global_tape()
        return value

    def snapshot(self):
        arrays = [p.numpy().copy() for p in self.model.params()]
        for state in self.opt._state.values():
            arrays += [var.numpy().copy() for _, var in sorted(state.vars.items())]
        steps = [state.step for state in self.opt._state.values()]
        return arrays, steps, self.opt.step_count


def _equal(a, b):
    return (
        a[1:] == b[1:]
        and len(a[0]) == len(b[0])
        and all(np.array_equal(x, y) for x, y in zip(a[0], b[0], strict=True))
    )


def _reference(optimizer, mode, steps=3):
    trainer = Trainer(optimizer)
    snapshots = [trainer.snapshot()]
    for number in range(steps):
        trainer.step(number, mode)
        snapshots.append(trainer.snapshot())
    return snapshots


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_step_failing_at_any_kernel_fails_alone(optimizer, mode):
    with kernels_injected() as injector:
        reference = _reference(optimizer, mode)
        counter = Trainer(optimizer)
        counter.step(0, mode)
        injector.disarm()
        counter.step(1, mode)
        kernels = injector.calls
        assert kernels > 10
        for at in range(1, kernels + 1):
            for error in ERRORS:
                trainer = Trainer(optimizer)
                trainer.step(0, mode)
                injector.arm(at, error)
                try:
                    trainer.step(1, mode)
                except (Exception, KeyboardInterrupt) as raised:  # noqa: B014 (both kinds)
                    assert injector.fired, f"kernel {at}: {raised!r} before the injection"
                injector.disarm()
                state = trainer.snapshot()
                where = f"{mode}, {optimizer}, kernel {at} of {kernels}, {error!r}"
                assert _equal(state, reference[1]) or _equal(state, reference[2]), where
                if _equal(state, reference[1]):  # failed before its commit: step again
                    trainer.step(1, mode)
                trainer.step(2, mode)  # raises nothing
                assert _equal(trainer.snapshot(), reference[3]), where


def _count_writes(monkeypatch, injector):
    original = os.fdopen

    def fdopen(fd, *args, **kwargs):
        return FailingFile(original(fd, *args, **kwargs), injector)

    monkeypatch.setattr(atomic.os, "fdopen", fdopen)


def _leftovers(directory):
    return [name for name in os.listdir(directory) if name.endswith(".tmp")]


@pytest.mark.parametrize("error", ERRORS)
def test_a_save_failing_at_any_write_leaves_the_previous_file(tmp_path, monkeypatch, error):
    trainer = Trainer("adam")
    trainer.step(0, "eager")
    path = tmp_path / "model.npz"
    tape.save(path, trainer.model, trainer.opt)
    previous = path.read_bytes()
    trainer.step(1, "eager")
    injector = Injector()
    _count_writes(monkeypatch, injector)
    tape.save(tmp_path / "count.npz", trainer.model, trainer.opt)
    writes = injector.calls
    assert writes > 3
    for at in range(1, writes + 1):
        injector.arm(at, error)
        with pytest.raises((type(error) if isinstance(error, BaseException) else error)):
            tape.save(path, trainer.model, trainer.opt)
        injector.disarm()
        assert path.read_bytes() == previous and _leftovers(tmp_path) == []


@pytest.mark.parametrize("error", ERRORS)
def test_an_inference_save_failing_at_any_write_leaves_loadable_files(tmp_path, monkeypatch, error):
    import ops

    def record(activation):
        recording = tape.Tape(lazy=True)
        x = tape.Variable(np.ones((2, 4), np.float32), name="x")
        layer = layers.Linear(4, 3)
        previous, tape.tape.state.tape = tape.tape.state.tape, recording
        try:
            y = activation(layer(x))
            y.name = "y"
        finally:
            tape.tape.state.tape = previous
        return tape.Program.from_tape(recording)

    directory = tmp_path / "m"
    tape.save_inference_program(directory, record(ops.relu), ["x"], ["y"])
    injector = Injector()
    _count_writes(monkeypatch, injector)
    tape.save_inference_program(tmp_path / "count", record(ops.tanh), ["x"], ["y"])
    writes = injector.calls
    for at in range(1, writes + 1):
        injector.arm(at, error)
        with pytest.raises((type(error) if isinstance(error, BaseException) else error)):
            tape.save_inference_program(directory, record(ops.tanh), ["x"], ["y"])
        injector.disarm()
        try:  # the old pair, or (a crash between the files) a refusal: never a wrong pair
            program, feeds, fetches, scope = tape.load_inference_program(directory)
        except tape.checkpoint.CheckpointError as refused:
            assert "was not saved with" in str(refused)
        else:
            assert [op.type for op in program.global_block().ops].count("relu") == 1
        assert _leftovers(directory) == []


@pytest.mark.parametrize("error", ERRORS)
def test_a_load_failing_at_any_read_changes_nothing(tmp_path, monkeypatch, error):
    trainer = Trainer("adam")
    trainer.step(0, "eager")
    path = tmp_path / "model.npz"
    tape.save(path, trainer.model, trainer.opt)
    trainer.step(1, "eager")
    before = trainer.snapshot()
    injector = Injector()
    original = zipfile.ZipExtFile.read

    def read(self, *args):
        injector.tick()
        return original(self, *args)

    monkeypatch.setattr(zipfile.ZipExtFile, "read", read)
    tape.load(path, trainer.model, trainer.opt)
    reads = injector.calls
    tape.load(tmp_path / "model.npz", Trainer("adam").model)  # (warm: nothing to compare)
    assert reads > 3
    for at in range(1, reads + 1):
        trainer = Trainer("adam")
        trainer.step(0, "eager")
        trainer.step(1, "eager")
        injector.arm(at, error)
        with pytest.raises(
            (type(error) if isinstance(error, BaseException) else error, tape.FluidError)
        ):
            tape.load(path, trainer.model, trainer.opt)
        injector.disarm()
        assert _equal(trainer.snapshot(), before)
