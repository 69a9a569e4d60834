"""Threaded execution: a plan run on the thread pool computes what program order computes, a
worker's failure reaches the user naming the op and the line that recorded it, and
``threads="auto"`` keeps small graphs in program order (``tape.passes.parallel``)."""

import math
import threading

import numpy as np
import pytest

import ops
import tape
from ops.registry import register, unregister
from tape.passes import execute, parallel
from tape.passes.plan import CACHE


def _branches(branches, layers, rows, width, seed=0):
    """Independent branches of tanh(h @ W_b) sharing nothing but the loss; with backward."""
    rng = np.random.default_rng(seed)
    hs = [rng.standard_normal((rows, width)) for _ in range(branches)]
    ws = [rng.standard_normal((width, width)) / np.sqrt(width) for _ in range(branches)]
    return hs, ws


def _run_branches(hs, ws, layers, mode):
    params = [tape.Variable(w.copy(), requires_grad=True) for w in ws]
    with tape.lazy(**mode) if mode is not None else tape.lazy(enabled=False):
        tape.reset_global_tape()
        total = None
        for h, w in zip(hs, params, strict=True):
            h = tape.Variable(h)
            for _ in range(layers):
                h = ops.tanh(h @ w)
            total = h.sum() if total is None else total + h.sum()
        tape.backward(total)
        result = [total.numpy().copy()] + [p.grad().numpy().copy() for p in params]
        tape.reset_global_tape()
    return result


def _run_mixed(seed, mode):
    """A branchy graph of mixed ops: a shared parameter read by several branches (gradient
    accumulation across them), diamonds, and branches of different lengths."""
    rng = np.random.default_rng(seed)
    p = tape.Variable(rng.uniform(0.5, 1.0, (5, 5)), requires_grad=True)
    q = tape.Variable(rng.uniform(-1.0, 1.0, (5, 5)), requires_grad=True)
    with tape.lazy(**mode) if mode is not None else tape.lazy(enabled=False):
        tape.reset_global_tape()
        x = tape.Variable(rng.standard_normal((3, 5)))
        values = [x]
        for step in range(24):
            a, b = (values[int(i)] for i in rng.integers(len(values), size=2))
            kind = step % 4
            if kind == 0:
                values.append(ops.tanh(a @ p))
            elif kind == 1:
                values.append(a * b + q[0])
            elif kind == 2:
                values.append(ops.sigmoid(a - b) @ q)
            else:
                values.append(ops.exp(-(a * a)))
        loss = sum((v * v).sum() for v in values[1:])
        tape.backward(loss)
        result = [loss.numpy().copy(), p.grad().numpy().copy(), q.grad().numpy().copy()]
        tape.reset_global_tape()
    return result


@pytest.mark.parametrize("threads", [2, 3, "auto"])
def test_independent_branches_give_program_orders_values_and_gradients_bit_for_bit(threads):
    hs, ws = _branches(branches=6, layers=3, rows=4, width=8)
    want = _run_branches(hs, ws, 3, {"threads": 0, "compile": True})
    for _ in range(2):  # (the second run: the cached plan)
        got = _run_branches(hs, ws, 3, {"threads": threads, "compile": True})
        for a, b in zip(want, got, strict=True):
            np.testing.assert_array_equal(a, b)
    eager = _run_branches(hs, ws, 3, None)
    for a, b in zip(eager, got, strict=True):  # (the rewrites may reassociate sums)
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_random_branchy_graphs_agree_on_the_pool_and_in_order(seed):
    want = _run_mixed(seed, {"threads": 0, "compile": True})
    got = _run_mixed(seed, {"threads": 2})
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(a, b)
    eager = _run_mixed(seed, None)
    for a, b in zip(eager, got, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.fixture
def fails_on_a_helper_thread():
    """An op whose two instances must run at the same time (a barrier), so one of them runs on
    a pool thread; that one fails."""
    barrier = threading.Barrier(2, timeout=10)

    @register("rendezvous_for_test", inputs=("X",), infer=lambda attrs, x: (x.shape, x.dtype))
    def rendezvous(xp, attrs, x):
        """Out = X once both instances have started; fails off the calling thread."""
        barrier.wait()
        if threading.current_thread() is not threading.main_thread():
            raise ValueError("failed on a helper thread")
        return x

    yield rendezvous
    unregister("rendezvous_for_test")


def test_a_failure_on_a_worker_names_the_op_and_the_line_that_recorded_it(
    fails_on_a_helper_thread,
):
    CACHE.clear()
    with tape.lazy(threads=2):
        t = tape.reset_global_tape()
        x = tape.Variable(np.ones(3, np.float32))
        parts = [fails_on_a_helper_thread(ops.exp(x * k)) for k in (1.0, 2.0)]  # recorded here
        with pytest.raises(tape.ExecutionError) as info:
            (parts[0] + parts[1]).numpy()
        assert t._pending_ops == []  # the run is rolled back, nothing left half-done
    message = str(info.value)
    assert message.startswith("op 'rendezvous_for_test' (rendezvous_for_test_")
    assert "kernel failed: ValueError: failed on a helper thread" in message
    assert "recorded at: test_threads.py:" in message
    assert isinstance(info.value.__cause__, ValueError)
    line = int(message.split("recorded at: test_threads.py:")[1].split()[0].rstrip(":,)"))
    source = open(__file__).read().splitlines()[line - 1]
    assert "# recorded here" in source


def test_an_interrupt_on_a_worker_is_raised_as_such(monkeypatch):
    barrier = threading.Barrier(2, timeout=10)

    @register("interrupt_for_test", inputs=("X",), infer=lambda attrs, x: (x.shape, x.dtype))
    def interrupt(xp, attrs, x):
        barrier.wait()
        if threading.current_thread() is not threading.main_thread():
            raise KeyboardInterrupt
        return x

    try:
        with tape.lazy(threads=2):
            tape.reset_global_tape()
            x = tape.Variable(np.ones(3, np.float32))
            parts = [interrupt(ops.exp(x * k)) for k in (1.0, 2.0)]
            with pytest.raises(KeyboardInterrupt):
                (parts[0] + parts[1]).numpy()
    finally:
        unregister("interrupt_for_test")


def _plan_of(record, **options):
    with tape.lazy(compile=True, **options):
        tape.reset_global_tape()
        held = record()  # leaving the block runs them all as one plan
    assert all(v.numpy() is not None for v in held)
    return tape.get_global_tape()._last_plan


def test_auto_runs_a_small_graph_in_program_order_without_timing_it(monkeypatch):
    def refuse(*args):
        raise AssertionError("a small graph went to the thread pool")

    monkeypatch.setattr(execute, "run_threaded", refuse)
    x = tape.Variable(np.ones((4, 4), np.float32), requires_grad=True)

    def record():
        parts = [ops.tanh(x * float(k)) for k in range(8)]  # independent, but tiny
        tape.backward(sum(p.sum() for p in parts))
        return x.grad().numpy()

    for _ in range(4):  # (the plan is compiled on the fourth sighting: see tape.replay)
        with tape.lazy():  # (threads="auto", the default)
            tape.reset_global_tape()
            x.clear_grad()
            grad = record()
    want = sum(k * (1 - np.tanh(np.float32(k)) ** 2) for k in range(8))  # d/dx of sum tanh(kx)
    np.testing.assert_allclose(grad, np.full((4, 4), want), rtol=1e-5)
    choice = parallel.choose(tape.get_global_tape()._last_plan, workers=2)
    assert not choice.candidate and choice.next() == (0, False)


def test_the_model_nominates_wide_independent_products_but_not_a_chain_of_them():
    ws = [tape.Variable(np.ones((192, 192), np.float32) / 192) for _ in range(8)]

    def branches():  # (each its own W: nothing for batch_products to merge)
        ends = []
        for w in ws:
            h = tape.Variable(np.ones((64, 192), np.float32))
            for _ in range(6):
                h = ops.tanh(h @ w)
            ends.append(h)
        return ends

    def chain():
        h = tape.Variable(np.ones((64, 192), np.float32))
        for w in ws * 6:
            h = ops.tanh(h @ w)
        return [h]

    wide, deep = _plan_of(branches), _plan_of(chain)
    sequential, threaded = parallel.estimate(wide, 2)
    assert threaded < parallel.MARGIN * sequential
    assert parallel.choose(wide, workers=2).candidate
    sequential, threaded = parallel.estimate(deep, 2)  # the critical path is all the work
    assert threaded >= sequential and not parallel.choose(deep, workers=2).candidate


class _Clock:
    """A clock the test moves by hand (``Choice`` reads it to let BLAS threads go quiet)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _round(choice, clock, seconds):
    """Runs one round of trials, each run taking ``seconds[workers]``: the (workers, timed)
    sequence of the round after its settling runs."""
    for _ in range(parallel.SETTLE):
        assert choice.next() == (0, False)
        clock.now += seconds[0]
    order = []
    while len(choice.times[choice.workers]) < parallel.TRIALS:
        workers, trial = choice.next()
        order.append((workers, trial))
        clock.now += seconds[workers]
        if trial:
            choice.record(workers, seconds[workers])
    return order


def test_a_nominated_plan_keeps_the_faster_way_its_trials_measured():
    clock = _Clock()
    choice = parallel.Choice(2, candidate=True, clock=clock)
    for seconds in {0: 0.010, 2: 0.006}, {0: 0.010, 2: 0.015}:
        order = _round(choice, clock, seconds)
        faster = min(seconds, key=seconds.get)
        for _ in range(choice.retry):  # the chosen way, untimed, until the next round
            assert choice.next() == (faster, False)
        # In order first, then the pool untimed until the BLAS threads the runs in order woke
        # have gone quiet (not interleaved: they spin into the next runs), then the pool timed.
        trials, quiet = parallel.TRIALS, math.ceil(parallel.QUIET_SECONDS / seconds[2])
        assert order == [(0, True)] * trials + [(2, False)] * quiet + [(2, True)] * trials


def test_the_pool_runs_untimed_at_least_once_even_after_a_pause():
    clock = _Clock()
    choice = parallel.Choice(2, candidate=True, clock=clock)
    for _ in range(parallel.SETTLE + parallel.TRIALS):
        workers, trial = choice.next()
        if trial:
            choice.record(workers, 0.01)
    clock.now += 10.0  # (the user paused: nothing spins any more)
    assert choice.next() == (2, False)  # (the pool's own first run: waking its threads)
    assert choice.next() == (2, True)


def test_trials_come_back_less_often_while_their_verdict_holds():
    clock = _Clock()
    choice = parallel.Choice(2, candidate=True, clock=clock)
    in_order_wins = {0: 0.010, 2: 0.015}
    _round(choice, clock, in_order_wins)
    assert choice.retry == parallel.RETRY  # (the first verdict: program order, as before)
    waits = []
    for _ in range(3):
        for _ in range(choice.retry):
            choice.next()
        _round(choice, clock, in_order_wins)
        waits.append(choice.retry)
    assert waits == [2 * parallel.RETRY, 4 * parallel.RETRY, 8 * parallel.RETRY]
    for _ in range(choice.retry):
        choice.next()
    _round(choice, clock, {0: 0.010, 2: 0.005})  # the load changed: the pool wins now
    assert choice.chosen == 2 and choice.retry == parallel.RETRY


def test_the_pool_must_win_its_trials_clearly():
    clock = _Clock()
    choice = parallel.Choice(2, candidate=True, clock=clock)
    in_order = 0.010
    _round(choice, clock, {0: in_order, 2: 0.96 * in_order})
    assert choice.next() == (0, False)  # 4% faster: within the trials' noise, kept in order


class _Trying:
    """A Choice stand-in whose chosen way is ``chosen`` and whose next run is ``way``."""

    def __init__(self, chosen, way):
        self.chosen, self.way = chosen, way

    def next(self):
        return self.way, False


@pytest.mark.parametrize(
    "chosen, way, timed_for_its_tier",
    [(0, 0, True), (2, 2, True), (0, 2, False), (2, 0, False)],
)
def test_a_trial_of_the_way_not_chosen_is_not_timed_as_the_plans_tier(
    monkeypatch, chosen, way, timed_for_its_tier
):
    """A step whose plan ran the other way for ``threads="auto"``'s trials is not what a warm
    step of the plan costs: it must not make the plan look dearer than the eager way
    (``tape.tier_choice``). The plan's chosen way is its steady state and is timed."""
    from tape import tier_choice

    x = tape.Variable(np.ones((4, 4), np.float32))
    plan = _plan_of(lambda: [x @ x, (x * 2.0) @ x])  # (instructions the pool could share)
    ran = []
    monkeypatch.setattr(parallel, "choose", lambda plan: _Trying(chosen, way))
    monkeypatch.setattr(execute, "run_sequential", lambda plan, vals: ran.append(0))
    monkeypatch.setattr(execute, "run_threaded", lambda plan, vals, n: ran.append(n))
    before = tier_choice._COLD[0]
    execute.run(plan, [], "auto")
    assert ran == [way]
    assert (tier_choice._COLD[0] == before) is timed_for_its_tier


def test_threads_must_be_a_count_or_auto_which_is_the_default():
    with pytest.raises(ValueError):
        tape.lazy(threads="many")
    assert tape.lazy(threads="auto").settings[0] == "auto"
    assert tape.lazy().settings[0] == "auto"  # the cost model decides unless told otherwise
