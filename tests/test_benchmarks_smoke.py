"""Smoke test of benchmarks/: each implementation runs once at a tiny size and agrees with numpy.

This guards the benchmark code itself (every implementation must compute the same loss and
gradients as the hand-written numpy floor); it never times anything.
"""

import importlib

import numpy as np
import pytest

from benchmarks import WORKLOADS, bench_lazy, harness, report
from benchmarks.common import Unavailable, to_numpy

MODULES = {name: importlib.import_module(f"benchmarks.{name}") for name in WORKLOADS}
CASES = [
    (name, impl)
    for name, module in MODULES.items()
    for impl in module.IMPLEMENTATIONS
    if impl != "numpy"
]


LAZY = [
    (name, impl)
    for name, module in MODULES.items()
    for impl in bench_lazy.implementations(module, exact=True)
    if impl.startswith("fluidtape-")
]


def run_once(workload, impl, setups=None):
    """Loss and gradients after one step; a training step's gradients come from its update."""
    config = workload.TINY
    data = workload.make_data(config)
    try:
        step = (setups or workload.IMPLEMENTATIONS)[impl](config, data)
    except Unavailable as why:
        pytest.skip(str(why))
    loss, arrays = step()
    loss, arrays = float(to_numpy(loss)), [to_numpy(a) for a in arrays]
    if workload.TRAINING:
        pairs = zip(data["params"], arrays, strict=True)
        arrays = [(before - after) / config["lr"] for before, after in pairs]
    return loss, arrays


@pytest.mark.parametrize("name, impl", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_implementation_matches_numpy_floor(name, impl):
    workload = MODULES[name]
    floor = getattr(workload, "FLOORS", {}).get(impl)  # (a variant computing other structures)
    setups = None if floor is None else {**workload.IMPLEMENTATIONS, "numpy": floor}
    expected_loss, expected_grads = run_once(workload, "numpy", setups)
    loss, grads = run_once(workload, impl)
    assert loss == pytest.approx(expected_loss, rel=1e-4, abs=1e-5)
    assert len(grads) == len(expected_grads) == len(workload.make_data(workload.TINY)["params"])
    for index, (grad, expected) in enumerate(zip(grads, expected_grads, strict=True)):
        assert grad.shape == expected.shape, f"gradient {index}"
        np.testing.assert_allclose(
            grad,
            expected,
            rtol=1e-3,
            atol=1e-5 * np.abs(expected).max(),
            err_msg=f"gradient {index} of {name}/{impl}",
        )


@pytest.mark.parametrize("name, impl", LAZY, ids=[f"{n}-{i}" for n, i in LAZY])
def test_lazy_variant_matches_eager_fluidtape(name, impl):
    workload = MODULES[name]
    expected_loss, expected_grads = run_once(workload, "fluidtape")
    loss, grads = run_once(workload, impl, bench_lazy.implementations(workload, exact=True))
    if impl == "fluidtape-exact":  # bit for bit
        assert loss == expected_loss
        for grad, expected in zip(grads, expected_grads, strict=True):
            np.testing.assert_array_equal(grad, expected)
        return
    assert loss == pytest.approx(expected_loss, rel=1e-6)  # within reassociation rounding
    for grad, expected in zip(grads, expected_grads, strict=True):
        np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-6 * np.abs(expected).max())


@pytest.mark.parametrize("name", WORKLOADS)
def test_numpy_floor_keeps_float32(name):
    workload = MODULES[name]
    config = workload.TINY
    loss, arrays = workload.IMPLEMENTATIONS["numpy"](config, workload.make_data(config))()
    assert np.asarray(loss).dtype == np.float32
    assert all(np.asarray(a).dtype == np.float32 for a in arrays)


def test_measure_and_table_report_every_implementation():
    steps = {"numpy": lambda: None, "fluidtape": lambda: None}
    options = harness.Options(reps=2, block=0.0, warmup=0.0, pause=0.0)
    measurements = harness.measure(steps, options)
    assert [(m.name, len(m.times)) for m in measurements] == [("numpy", 2), ("fluidtape", 2)]
    table = report.rows(MODULES["mlp"], MODULES["mlp"].TINY, measurements)
    text = report.format_table(table)
    peer, ratio = MODULES["mlp"].TARGET
    assert "fluidtape" in text and f"<= {ratio:g}x {peer}" in text
    assert report.format_table(table, markdown=True).startswith("| workload | implementation |")


def test_kernel_timer_counts_calls_and_restores_the_kernels():
    import collections

    from benchmarks import kernels
    from ops.registry import REGISTRY

    workload = MODULES["overhead"]
    step = workload.setup_fluidtape(workload.TINY, workload.make_data(workload.TINY))
    before = REGISTRY["tanh"].kernel
    totals, counts = collections.defaultdict(float), collections.defaultdict(int)
    with kernels.timed_kernels(totals, counts):
        step()
    assert counts["tanh"] == workload.TINY["n_ops"] // 3 and totals["tanh"] > 0
    assert REGISTRY["tanh"].kernel is before


def test_tiny_sizes_give_no_verdict():
    steps = {"numpy": lambda: None, "fluidtape": lambda: None}
    options = harness.Options(reps=2, block=0.0, warmup=0.0, pause=0.0)
    measurements = harness.measure(steps, options)
    table = report.rows(MODULES["mlp"], MODULES["mlp"].TINY, measurements, tiny=True)
    text = report.format_table(table)
    assert "(tiny: no verdict)" in text and "met" not in text and "MISSED" not in text


def test_isolated_workers_time_each_implementation_in_a_process_of_its_own():
    from benchmarks import isolated

    options = harness.Options(reps=2, block=0.01, warmup=0.01, pause=0.0)
    measured, notes = isolated.measure(
        "mlp", MODULES["mlp"].TINY, ["numpy", "fluidtape-lazy"], True, options, threads=1
    )
    assert notes == []
    assert [m.name for m in measured] == ["numpy", "fluidtape-lazy"]
    assert all(len(m.times) == 2 and min(m.times) > 0 for m in measured)


def test_an_isolated_worker_that_fails_names_its_implementation():
    from benchmarks import isolated

    options = harness.Options(reps=1, block=0.01, warmup=0.01, pause=0.0)
    broken = dict(MODULES["mlp"].TINY, sizes=(3, 4))  # (make_data cannot build it)
    with pytest.raises(RuntimeError, match="'numpy' failed"):
        isolated.measure("mlp", broken, ["numpy"], False, options, threads=1)


@pytest.mark.parametrize(
    "impl", ["fluidtape", "fluidtape-miss", "fluidtape-compile", "fluidtape-hit"]
)
def test_scaling_tree_model_matches_numpy_floor(impl):
    """The tree RNN of the scaling workload (its TINY covers the chain): every variant computes
    the numpy floor's loss and gradients on the same first batch of random trees (the miss
    variant on trees of its own, against its floor)."""
    workload = MODULES["scaling"]
    config = workload.TINY_TREES
    floor = workload.FLOORS.get(impl, workload.IMPLEMENTATIONS["numpy"])
    results = []
    for setup in (floor, workload.IMPLEMENTATIONS[impl]):
        loss, grads = setup(config, workload.make_data(config))()
        results.append((float(to_numpy(loss)), [to_numpy(g) for g in grads]))
    (want_loss, want), (loss, got) = results
    assert loss == pytest.approx(want_loss, rel=1e-5)
    assert [g.shape for g in got] == [w.shape for w in want] == [(4, 4)] * 3 + [(1, 4)]
    for grad, expected in zip(got, want, strict=True):
        np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-6)


def test_scaling_trees_are_fresh_every_step_and_binary():
    workload = MODULES["scaling"]
    rng = np.random.default_rng(0)
    first, second = (workload.random_trees(rng, workload.TINY_TREES) for _ in range(2))
    assert [m for _, m in first] != [m for _, m in second]
    for leaves, merges in first:
        n = len(leaves)
        assert len(merges) == n - 1  # a binary tree over n leaves
        used = [i for pair in merges for i in pair]
        assert sorted(used) == list(range(2 * n - 2))  # every node but the root is a child once


@pytest.mark.parametrize("name", ["tree_rnn", "treelstm", "tagger"])
def test_per_example_batches_are_new_every_step_and_the_same_for_every_implementation(name):
    from benchmarks import per_example

    data = MODULES[name].make_data(MODULES[name].DEFAULT)
    size = len(data["batches"][0])
    draws, again = per_example.sampling(data), per_example.sampling(data)
    seen = set()
    for _ in range(20):
        examples, labels = draws()
        assert len(examples) == len(labels) == size
        seen.add(repr(examples))  # (the batch, in order: the tape's structure)
        assert repr(again()) == repr((examples, labels))  # one sequence for every implementation
    assert len(seen) == 20


@pytest.mark.parametrize("name", ["tree_rnn", "treelstm", "tagger"])
def test_a_lazy_per_example_step_meets_its_batch_for_the_first_time_after_another_ran_it(name):
    """Two lazy implementations draw the same batches: the second still meets each structure
    as a first sighting (its backward differentiates eagerly: no gradient op on the tape), not
    as a repeat the first one taught lazy mode (which records them)."""
    import tape

    workload = MODULES[name]
    config = workload.TINY
    for impl in ("fluidtape-lazy", "fluidtape-lazy"):
        step = workload.IMPLEMENTATIONS[impl](config, workload.make_data(config))
        step()
        recorded = [op.type for op in tape.get_global_tape().ops]
        assert not any(kind.endswith("_grad") for kind in recorded), recorded
