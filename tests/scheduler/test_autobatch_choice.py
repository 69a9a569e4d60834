"""autobatch="auto": each model's interpreted runs autobatch only where that measured faster."""

import math
import sys

import numpy as np
import pytest

import ops
import tape
from tape import autobatch_choice, interpret
from tape.autobatch_choice import MAX_INTERVAL, PROBE, WARM_RUNS
from tape.measured_choice import PROBE_SHARE
from tape.passes.plan import CACHE

DIM = 6


def _settle(key, batched_cost, plain_cost):
    """The first runs of a new model: WARM_RUNS batched, then one not, measured at these
    costs."""
    for _ in range(WARM_RUNS):
        assert autobatch_choice.choose(key) is True
        autobatch_choice.measured(key, True, batched_cost, 1)
    assert autobatch_choice.choose(key) is False
    autobatch_choice.measured(key, False, plain_cost, 1)


def _modes(key, runs, batched_cost, plain_cost):
    """The modes ``runs`` more runs take when batching costs ``batched_cost`` per op."""
    taken = []
    for _ in range(runs):
        batched = autobatch_choice.choose(key)
        autobatch_choice.measured(key, batched, batched_cost if batched else plain_cost, 1)
        taken.append(batched)
    return taken


def test_a_new_model_runs_batched_warm_then_unbatched_then_the_cheaper():
    _settle("m", batched_cost=1.0, plain_cost=2.0)
    assert _modes("m", PROBE - 1, 1.0, 2.0) == [True] * (PROBE - 1)
    autobatch_choice.reset()
    _settle("m", batched_cost=2.0, plain_cost=1.0)
    assert _modes("m", PROBE - 1, 2.0, 1.0) == [False] * (PROBE - 1)


def test_a_losing_mode_is_probed_ever_less_often():
    _settle("m", batched_cost=1.2, plain_cost=1.0)
    taken = _modes("m", 1000, 1.2, 1.0)
    probes = [run + 1 for run, batched in enumerate(taken) if batched]
    gaps = np.diff([0] + probes).tolist()
    assert gaps[:5] == [PROBE, 2 * PROBE, 4 * PROBE, 8 * PROBE, 16 * PROBE]
    assert max(gaps) == MAX_INTERVAL  # a settled choice still looks again now and then
    assert len(probes) <= 1000 // MAX_INTERVAL + 5


@pytest.mark.parametrize("slower", [2.0, 3.0, 40.0])
def test_a_mode_far_slower_is_probed_seldom_enough_to_cost_a_bounded_share(slower):
    # each probe costs (slower - 1) extra: the gaps keep that under PROBE_SHARE of the runs
    _settle("m", batched_cost=slower, plain_cost=1.0)
    taken = _modes("m", 1000, slower, 1.0)
    probes = [run + 1 for run, batched in enumerate(taken) if batched]
    gaps = np.diff([0] + probes).tolist()
    least = min(MAX_INTERVAL, math.ceil((slower - 1) / PROBE_SHARE))
    assert gaps[0] == max(PROBE, least)
    assert all(gap >= least for gap in gaps)
    assert gaps[1:4] == [min(MAX_INTERVAL, gaps[0] << k) for k in (1, 2, 3)]
    # (the share, or one probe in MAX_INTERVAL runs where even that costs more)
    share = max(PROBE_SHARE, (slower - 1) / MAX_INTERVAL)
    assert len(probes) * (slower - 1) <= share * 1000 + slower


def test_a_probe_asked_for_takes_the_way_not_preferred_and_is_measured_as_one():
    assert autobatch_choice.choose("m", probe=True) is True  # (a new model: as choose)
    autobatch_choice.measured("m", True, 2.0, 1)
    autobatch_choice.measured("m", False, 1.0, 1)
    assert autobatch_choice.choose("m", probe=True) is True
    autobatch_choice.measured("m", True, 0.5, 1)  # the probe won: its old runs are forgotten
    assert autobatch_choice.prefers_batching("m")
    assert autobatch_choice.choose("m", probe=True) is False


def test_a_probe_that_wins_switches_the_choice():
    _settle("m", batched_cost=1.2, plain_cost=1.0)
    taken = _modes("m", PROBE, 1.2, 1.0)
    assert taken == [False] * (PROBE - 1) + [True]
    # the model changed (longer vectors, say): batching is now cheaper
    taken = _modes("m", 40, 0.85, 1.0)
    assert sum(taken[-16:]) == 15  # batched, but for one probe of the other mode
    assert autobatch_choice.prefers_batching("m")


def test_models_are_measured_apart_and_few_are_remembered():
    _settle("slow", batched_cost=2.0, plain_cost=1.0)
    _settle("fast", batched_cost=1.0, plain_cost=2.0)
    assert not autobatch_choice.prefers_batching("slow")
    assert autobatch_choice.prefers_batching("fast")
    for key in range(autobatch_choice.LIMIT):
        autobatch_choice.choose(key)
    assert autobatch_choice.costs_of("slow") == (None, None)  # least recently used: dropped


def test_the_model_is_named_by_the_first_parameter_its_run_reads():
    w = tape.Variable(np.ones((DIM, DIM)), requires_grad=True)
    with tape.lazy(compile=False):
        tape.reset_global_tape()
        x = tape.Variable(np.ones(DIM))
        ops.tanh(ops.matmul(ops.relu(x), w))
        pending = tape.get_global_tape()._pending_ops
        assert autobatch_choice.model_key(pending) == id(w)
        tape.reset_global_tape()
        ops.tanh(tape.Variable(np.ones(DIM)))
        assert autobatch_choice.model_key(tape.get_global_tape()._pending_ops) is None


@pytest.fixture
def batching_costs(monkeypatch):
    """Interpreted runs cost ``costs[batched]`` seconds per pending op on a fake clock."""
    costs, now = {True: 1.0, False: 1.0}, [0.0]
    monkeypatch.setattr(autobatch_choice, "clock", lambda: now[0])
    run = interpret.run

    def timed(tape_, scan, autobatch=None):
        now[0] += costs[autobatch is not None] * len(scan.pending)
        return run(tape_, scan, autobatch)

    monkeypatch.setattr(interpret, "run", timed)
    return costs


def _forest_step(w, rows=5):
    tape.reset_global_tape()
    outs = [ops.relu(ops.matmul(tape.Variable(np.full(DIM, i + 1.0)), w)) for i in range(rows)]
    tape.get_global_tape().realize(outs)
    return [o.numpy().copy() for o in outs], tape.explain()


def test_auto_batches_a_model_only_while_batching_measures_faster(batching_costs):
    w = tape.Variable(np.linspace(-1, 1, DIM * DIM).reshape(DIM, DIM), requires_grad=True)
    want = [np.maximum((i + 1.0) * w.numpy().sum(axis=0), 0) for i in range(5)]
    batching_costs[True] = 1.2  # batching is the slower mode
    accounts = []
    warm = WARM_RUNS
    with tape.lazy(compile=False):
        for _ in range(PROBE + warm + 1):
            outs, text = _forest_step(w)
            accounts.append(text)
            for got, expected in zip(outs, want, strict=True):
                np.testing.assert_allclose(got, expected, rtol=1e-13)
    batched = [text.startswith("interpreted run, autobatched") for text in accounts]
    assert batched[: warm + 1] == [True] * warm + [False]
    assert batched[warm + 1 : PROBE + warm] == [False] * (PROBE - 1)  # until the probe
    assert batched[PROBE + warm]  # the probe
    assert "did not batch this run" in accounts[warm]
    assert "unbatched 1000000.00 us, batched 1200000.00 us" in accounts[warm]  # per op


def test_auto_keeps_batching_a_model_where_batching_measures_faster(batching_costs):
    w = tape.Variable(np.ones((DIM, DIM)), requires_grad=True)
    batching_costs[False] = 3.0
    with tape.lazy(compile=False):
        texts = [_forest_step(w)[1] for _ in range(PROBE)]
    batched = [text.startswith("interpreted run, autobatched") for text in texts]
    assert batched == [True] * WARM_RUNS + [False] + [True] * (PROBE - WARM_RUNS - 1)


@pytest.mark.parametrize("options", [{"autobatch": True}, {"autobatch": False}, {"exact": True}])
def test_explicit_choices_and_exact_mode_measure_nothing(options, batching_costs):
    w = tape.Variable(np.ones((DIM, DIM)), requires_grad=True)
    batching_costs[True] = 5.0
    with tape.lazy(compile=False, **options):
        texts = [_forest_step(w)[1] for _ in range(3)]
    assert autobatch_choice.costs_of(id(w)) == (None, None)
    batches = options == {"autobatch": True}
    assert all(t.startswith("interpreted run, autobatched") == batches for t in texts)


def test_auto_is_the_default_and_unknown_choices_are_refused():
    assert tape.lazy().settings[-1] == "auto"
    with pytest.raises(ValueError, match="'auto', True, False"):
        tape.lazy(autobatch="sometimes")


def test_a_structure_that_batched_well_is_compiled_once_batching_measures_slower(batching_costs):
    lazy_module = sys.modules["tape.lazy"]
    for remembered in (lazy_module._SEEN, lazy_module._BATCHED, CACHE):  # a first sighting
        remembered.clear()
    w = tape.Variable(np.ones((DIM, DIM)), requires_grad=True)
    batching_costs[True] = 2.0
    with tape.lazy():  # (compile=None: a repeated structure may compile)
        texts = [_forest_step(w)[1] for _ in range(WARM_RUNS + 2)]
    for text in texts[:WARM_RUNS]:  # batched well: kept interpreted
        assert text.startswith("interpreted run, autobatched"), text
    assert texts[WARM_RUNS].startswith("interpreted run, not autobatched")  # the other, measured
    assert texts[-1].startswith("ops kept")  # plain is faster: a compiled plan, as unbatched


def test_batching_must_win_clearly_as_not_batching_is_the_baseline():
    close = autobatch_choice.MARGIN + (1 - autobatch_choice.MARGIN) / 2  # a little cheaper
    _settle("m", batched_cost=close, plain_cost=1.0)
    assert _modes("m", PROBE - 1, close, 1.0) == [False] * (PROBE - 1)
    autobatch_choice.reset()
    clear = autobatch_choice.MARGIN / 2
    _settle("m", batched_cost=clear, plain_cost=1.0)
    assert _modes("m", PROBE - 1, clear, 1.0) == [True] * (PROBE - 1)
