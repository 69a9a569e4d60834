"""A repeated structure runs the faster tier, its compiled plan or the eager way, as measured;
a first sighting always runs the eager way and never compiles."""

import importlib

import numpy as np
import pytest

import ops
import tape
from tape import measured_choice, tier_choice
from tape.measured_choice import MARGIN, WINDOW, Measured

# (speculation has its own tests: test_eager_speculation)
pytestmark = pytest.mark.usefixtures("no_speculation", "structures_forgotten")

lazy_module = importlib.import_module("tape.lazy")  # (tape.lazy is the context manager)


class _Clock:
    """A clock the test moves: each step costs what the tier it ran costs."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _step(w, x, clock=None, costs=None, **options):
    """One lazy training step of a small chain; advances ``clock`` by the cost of the tier the
    step ran (``costs``: seconds of (the plan, the eager way)). Returns the gradient and
    whether the step ran the eager way (its forward ops left the tape with the backward)."""
    w.clear_grad()
    with tape.lazy(**options):
        t = tape.reset_global_tape()
        h = x
        for _ in range(3):
            h = ops.tanh(h @ w)
        tape.backward(h.sum())
        eager_way = getattr(t, "_eager_way", None) is not None
        grad = w.grad().numpy().copy()
    if clock is not None:
        clock.now += costs[eager_way]
    return grad, eager_way


def _inputs():
    rng = np.random.default_rng(0)
    w = tape.Variable(rng.standard_normal((4, 4)).astype(np.float32) / 2, requires_grad=True)
    return w, tape.Variable(rng.standard_normal((2, 4)).astype(np.float32))


def _eager_gradient(w, x):
    return _step(w, x, enabled=False)[0]


@pytest.mark.parametrize("autobatch", [False, True])  # (True: the eager way's forward batches)
@pytest.mark.parametrize("costs, settles_on_eager_way", [((1.2, 1.0), True), ((1.0, 1.2), False)])
def test_a_repeated_structure_settles_on_the_tier_that_measured_faster(
    monkeypatch, costs, settles_on_eager_way, autobatch
):
    clock = _Clock()
    monkeypatch.setattr(tier_choice, "clock", clock)
    w, x = _inputs()
    want = _eager_gradient(w, x)
    ways = []
    for _ in range(30):
        grad, eager_way = _step(w, x, clock, costs, autobatch=autobatch)
        ways.append(eager_way)
        np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-6)
    assert ways[:2] == [True, True]  # the first two sightings: nothing compiled yet
    assert ways[3] is False  # compiled on the fourth
    assert ways[-5:] == [settles_on_eager_way] * 5
    assert True in ways[4:] and False in ways[4:]  # both tiers were timed
    explained = tape.explain()
    if settles_on_eager_way:
        assert explained.startswith("the last step ran the eager way")
        assert "cheaper against its compiled plan" in explained
    else:
        assert explained.startswith("the last step ran whole at its backward")
        assert "\nops kept" in explained  # (the plan's account)


def test_a_step_of_another_structure_in_between_is_not_measured(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(tier_choice, "clock", clock)
    sketches = [("a",), ("b",)]
    for sketched in sketches:
        assert tier_choice.eager_way(sketched, 10)  # a sketch never seen: the eager way
    for _ in range(10):
        for sketched in sketches:  # alternating: no step ends where one of its kind began
            clock.now += 1.0
            tier_choice.eager_way(sketched, 10)
    assert tier_choice.costs_of(("a",)) == (None, None)


def test_cold_work_in_a_step_keeps_it_from_being_measured(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(tier_choice, "clock", clock)
    tier_choice.eager_way(("a",), 10)
    for _ in range(5):
        tier_choice.eager_way(("a",), 10)
        clock.now += 1.0
        tier_choice.cold()  # (a plan compiled, a run interpreted, a backward learnt)
    assert tier_choice.costs_of(("a",)) == (None, None)
    tier_choice.eager_way(("a",), 10)
    clock.now += 1.0
    tier_choice.eager_way(("a",), 10)
    assert tier_choice.costs_of(("a",)) == (0.1, None)  # (per op)


def test_a_first_sighting_batched_run_is_interpreted_not_compiled(monkeypatch):
    compiled = []
    compile_trace = lazy_module.compile_trace
    monkeypatch.setattr(
        lazy_module, "compile_trace", lambda *a: compiled.append(1) or compile_trace(*a)
    )
    w, x = _inputs()
    for _ in range(2):  # a new sketch, then a known sketch of a key never numbered
        _, eager_way = _step(w, x, autobatch=True)
        assert eager_way
    assert compiled == []


def test_one_slow_run_does_not_make_a_way_lose():
    """A way's cost is the lowest of its recent runs: noise only ever adds time."""
    choice = Measured()
    assert choice.choose() is False
    choice.measured(False, 1.0)
    assert choice.choose() is True
    choice.measured(True, 0.5)
    for _ in range(measured_choice.PROBE - 1):
        assert choice.choose() is True
        choice.measured(True, 0.5 if _ else 50.0)  # a page fault, the collector
    assert choice.other == 0.5 and choice.prefers_other()


def test_the_alternative_must_win_by_the_margin():
    choice = Measured()
    choice.choose()
    choice.measured(False, 1.0)
    choice.choose()
    choice.measured(True, (1 + MARGIN) / 2)  # cheaper, but not by the margin
    assert not choice.prefers_other()
    choice.measured(True, MARGIN / 2)
    assert choice.prefers_other()


def test_a_cost_from_long_ago_is_replaced_when_its_way_is_taken_again():
    """The other way's cheap cost, measured a phase of the machine ago, wins it one run, not a
    window: its next run starts its costs afresh."""
    choice = Measured()
    choice.choose()
    choice.measured(False, 1.0)
    choice.choose()
    choice.measured(True, 0.95)  # cheaper, but not by the margin: the usual way stays
    while choice.choose() is False:  # until a probe of the alternative, which loses
        choice.measured(False, 1.0)
    choice.measured(True, 0.95)
    for _ in range(WINDOW + 1):  # (the next probe comes later still)
        assert choice.choose() is False
        choice.measured(False, 1.0)
    for _ in range(WINDOW):  # a busy phase: every run slower, the usual way's first
        assert choice.choose() is False
        choice.measured(False, 1.2)
    assert choice.choose() is True  # (0.95 from the quiet phase, against 1.2)
    choice.measured(True, 1.3)  # taken again, the alternative is as slowed
    assert choice.runs_of[1] == [1.3]
    assert choice.choose() is False


def test_a_cost_measured_recently_stays_in_its_window():
    choice = Measured()
    choice.choose()
    choice.measured(False, 1.0)
    for cost in (0.5, 0.6):
        assert choice.choose() is True
        choice.measured(True, cost)
    assert choice.runs_of[1] == [0.5, 0.6]


def test_a_way_never_measured_is_set_aside_and_tried_again_ever_less_often():
    # (its runs all did work a warm run does not: taken for good, it would never be timed)
    choice = Measured()
    assert choice.choose() is False
    choice.measured(False, 1.0)
    taken = [choice.choose() for _ in range(200)]  # the alternative is never measured
    tries = [run for run, way in enumerate(taken) if way]
    assert tries[: measured_choice.UNMEASURED] == list(range(measured_choice.UNMEASURED))
    gaps = np.diff(tries[measured_choice.UNMEASURED - 1 :: measured_choice.UNMEASURED])
    assert all(later >= earlier for earlier, later in zip(gaps, gaps[1:]))  # ever rarer
    assert len(tries) < 200 // 4
    choice.measured(True, 0.5)  # once measured, it competes as usual
    assert choice.prefers_other() and choice.choose() is True


def test_patience_times_the_first_way_before_the_other():
    choice = Measured(patience=3)
    taken = []
    for cost in [1.0] * 5:
        way = choice.choose()
        taken.append(way)
        choice.measured(way, cost)
    assert taken == [False, False, False, True, False]
    assert len(choice.runs_of[0]) == min(4, WINDOW)
