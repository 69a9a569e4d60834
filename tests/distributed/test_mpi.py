"""Data parallel under ``mpiexec``: N ranks at batch B/N train as one process at batch B (eager,
lazy and static, SGD/Momentum/Adam), the pserver split equals the all-reduce, checkpoints move
from 2 ranks to 1, and a failing or absent rank ends the job with its error instead of a hang."""

import time

import numpy as np
import pytest

import tape
from tests.distributed import launch, worker

STEPS = 20
OPTIMIZERS = ("sgd", "momentum", "adam")


def reference(opt_name, steps=STEPS):
    """One process (a world of one) at the global batch."""
    net, _ = worker.train_eager(opt_name, steps)
    return [p.numpy() for p in net.params()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """{mode: path} of 2-rank runs training every optimizer."""
    root = tmp_path_factory.mktemp("dp")
    paths = {}
    for mode in ("eager", "lazy", "static"):
        paths[mode] = str(root / mode)
        launch.check(launch.run(2, "train", ",".join(OPTIMIZERS), mode, STEPS, paths[mode]))
    return paths


@pytest.mark.parametrize("mode", ["eager", "lazy", "static"])
@pytest.mark.parametrize("opt_name", OPTIMIZERS)
def test_two_ranks_at_half_batch_equal_one_process(trained, mode, opt_name):
    expected = reference(opt_name)
    initial = [p.numpy() for p in worker.model().params()]
    for rank in (0, 1):
        got = launch.params(f"{trained[mode]}-{opt_name}", rank)
        for g, e, i in zip(got, expected, initial, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-13)
            assert np.abs(g - i).max() > 1e-3  # it trained
    rank0, rank1 = (launch.params(f"{trained[mode]}-{opt_name}", r) for r in (0, 1))
    for a, b in zip(rank0, rank1, strict=True):
        np.testing.assert_array_equal(a, b)  # the replicas agree bit for bit


def test_three_ranks_at_a_third_equal_one_process(tmp_path, monkeypatch):
    run = launch.run(3, "train", "momentum", "eager", 10, tmp_path / "three", env=BATCH_6)
    launch.check(run)
    monkeypatch.setattr(worker, "GLOBAL_BATCH", 6)
    expected = reference("momentum", 10)
    for rank in (0, 1, 2):
        for g, e in zip(launch.params(tmp_path / "three-momentum", rank), expected, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-13)


BATCH_6 = {"DP_GLOBAL_BATCH": "6"}  # 2 samples per rank; 48 samples make whole epochs


def test_pserver_mode_equals_the_all_reduce_for_sgd(trained, tmp_path):
    launch.check(launch.run(3, "pserver", STEPS, tmp_path / "ps"))
    collective = launch.params(f"{trained['eager']}-sgd", 0)
    for rank in (0, 1, 2):  # both trainers and the server hold the same parameters
        for g, e in zip(launch.params(tmp_path / "ps", rank), collective, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-13, atol=1e-14)


def test_a_checkpoint_from_two_ranks_continues_identically_in_one_process(tmp_path):
    half = STEPS // 2
    path = tmp_path / "ckpt.npz"
    launch.check(launch.run(2, "checkpoint", half, path, tmp_path / "two"))
    net, opt = worker.model(), worker.OPTIMIZERS["adam"]()
    tape.load(str(path), net, opt)
    net, _ = worker.train_eager("adam", half, model_=net, opt=opt, first_step=half)
    for g, e in zip(launch.params(tmp_path / "two", 0), net.params(), strict=True):
        np.testing.assert_allclose(g, e.numpy(), rtol=1e-12, atol=1e-13)


def test_an_exception_on_one_rank_ends_the_job_with_that_ranks_error():
    start = time.monotonic()
    done = launch.run(2, "raise", timeout=60)
    assert done.returncode != 0
    assert "[rank 1] ValueError: rank one failed on purpose" in done.stderr
    assert time.monotonic() - start < 30


def test_a_rank_that_never_arrives_is_reported_after_the_timeout():
    start = time.monotonic()
    done = launch.run(2, "absent", 2, timeout=60)
    assert done.returncode != 0
    assert "op 'c_allreduce_sum': did not complete within 2 s on rank 0 of 2" in done.stderr
    assert "CollectiveTimeout" in done.stderr and "a rank never arrived" in done.stderr
    assert time.monotonic() - start < 30


def test_a_parameter_used_on_some_ranks_only_is_an_error_on_every_rank():
    done = launch.run(2, "unused", timeout=60)
    assert done.returncode != 0
    message = "parameter '1.bias' received a gradient on 1 of 2 ranks"
    assert message in done.stderr, done.stderr


def test_train_digits_runs_data_parallel_and_rank_0_writes_the_checkpoint(tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    script = f"{launch.ROOT}/examples/train_digits.py"
    args = ["--distributed", "--quick", "--model", "mlp", "--out", tmp_path]
    done = launch.run(2, *args, script=script, timeout=120)
    launch.check(done)
    assert done.stdout.count("mlp: test accuracy") == 1  # rank 0 reports
    assert f"reloaded from {tmp_path}/mlp.npz" in done.stdout
    assert (tmp_path / "mlp.npz").stat().st_size > 0
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
