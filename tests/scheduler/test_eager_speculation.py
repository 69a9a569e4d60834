"""A model whose graph is new at every step (tape.eager_speculation): after a streak of new
structures whose forward ran unbatched, the next global tape of the lazy block records eagerly
and gives eager mode's values bit for bit; a structure that repeats, a probe, or options that
batch or compile send steps back to lazy recording."""

import numpy as np
import pytest

import layers
import ops
import tape
from tape import autobatch_choice, eager_speculation, tier_choice

pytestmark = pytest.mark.usefixtures("structures_forgotten")

DIM = 4


def _model():
    tape.seed(0)
    return layers.Linear(DIM, DIM, act="tanh"), layers.Linear(DIM, 1)


def _step(model, length, lazy=True, **options):
    """One step over a sequence of ``length`` (a new structure for every new length) in this
    function's lazy block: the loss, the gradients and the step's tape."""
    with tape.lazy(lazy, **options):
        return _body(model, length)


def _body(model, length):
    """A step in the lazy block around it."""
    cell, head = model
    params = cell.params() + head.params()
    for param in params:
        param.clear_grad()
    x = np.linspace(-1, 1, DIM, dtype=np.float32)
    t = tape.reset_global_tape()
    h = tape.Variable(x)
    for _ in range(length):
        h = cell(h) + h
    loss = head(h).sum()
    tape.backward(loss)
    grads = [p.grad().numpy().copy() for p in params]
    return loss.numpy(), grads, t


def _speculated(t):
    return t.speculated  # (recorded eagerly: every tape is eager once its block has ended)


def test_after_a_streak_of_new_structures_a_step_records_eagerly_with_eager_results():
    model = _model()
    tapes = []
    for length in range(1, 8):
        want_loss, want, _ = _step(model, length, lazy=False)
        loss, grads, t = _step(model, length, autobatch=False)
        np.testing.assert_array_equal(loss, want_loss)
        for got, expected in zip(grads, want, strict=True):
            np.testing.assert_array_equal(got, expected)
        tapes.append(t)
    streak = eager_speculation.STREAK
    assert [_speculated(t) for t in tapes] == [False] * streak + [True] * (7 - streak)
    assert "recorded eagerly" in tape.explain(tapes[-1])


def test_a_structure_that_repeats_ends_the_speculation(monkeypatch):
    monkeypatch.setattr(eager_speculation, "SKETCH_EVERY", 1)
    model = _model()
    for length in range(1, eager_speculation.STREAK + 2):  # (the last is speculated)
        _step(model, length, autobatch=False)
    _, _, repeated = _step(model, 1, autobatch=False)  # its sketch is known: the streak ends
    assert _speculated(repeated)
    _, _, after = _step(model, 3, autobatch=False)
    assert not _speculated(after)


def test_a_repeat_is_noticed_by_every_few_speculated_steps_sketch(monkeypatch):
    sketched = []
    seen = tier_choice.seen
    monkeypatch.setattr(tier_choice, "seen", lambda s: sketched.append(s) or seen(s))
    model = _model()
    for length in range(1, eager_speculation.STREAK + 2):  # (the last is speculated)
        _step(model, length, autobatch=False)
    repeats = 0  # speculated steps of the repeated structure before one records lazily
    while _speculated(_step(model, 1, autobatch=False)[2]):
        repeats += 1
        assert repeats <= eager_speculation.SKETCH_EVERY
    assert len(sketched) == 1  # (one sketch in SKETCH_EVERY speculated steps: the repeat's)


def _never_batching(monkeypatch):
    """autobatch="auto" measured unbatched runs cheaper for every model."""
    monkeypatch.setattr(autobatch_choice, "choose", lambda key, probe=False: False)
    monkeypatch.setattr(autobatch_choice, "prefers_batching", lambda key: False)


def test_probes_record_lazily_at_intervals_that_double(monkeypatch):
    monkeypatch.setattr(eager_speculation, "PROBE", 2)
    monkeypatch.setattr(eager_speculation, "MAX_INTERVAL", 4)
    _never_batching(monkeypatch)
    model = _model()
    tapes = [_step(model, length)[2] for length in range(1, 16)]
    streak = eager_speculation.STREAK
    assert not any(_speculated(t) for t in tapes[:streak])
    # the streak made, probes come after 2, then 4 (twice the last), then 4 (the cap) steps
    probes = [i for i, t in enumerate(tapes[streak:]) if not _speculated(t)]
    assert probes == [1, 5, 9, 13]


def test_a_probe_asks_autobatching_for_the_way_it_does_not_prefer(monkeypatch):
    monkeypatch.setattr(eager_speculation, "PROBE", 2)
    _never_batching(monkeypatch)
    asked = []
    monkeypatch.setattr(autobatch_choice, "choose", lambda key, probe=False: asked.append(probe))
    model = _model()
    tapes = [_step(model, length)[2] for length in range(1, 6)]
    lazy = [t for t in tapes if not _speculated(t)]
    assert [t.probe for t in lazy] == [False] * eager_speculation.STREAK + [True]
    assert asked == [False] * eager_speculation.STREAK + [True]


def test_a_probe_whose_batching_lost_keeps_the_speculation(monkeypatch):
    monkeypatch.setattr(eager_speculation, "PROBE", 2)
    monkeypatch.setattr(autobatch_choice, "prefers_batching", lambda key: False)
    model = _model()
    tapes = [_step(model, length)[2] for length in range(1, 12)]
    probes = [t for t in tapes if t.probe]
    assert probes and all(t._last_autobatch is not None for t in probes)  # (they batched)
    after = tapes[tapes.index(probes[0]) + 1]
    assert _speculated(after)
    assert eager_speculation.interval() == 2 << len(probes)  # (each probe doubled it)


def test_a_probe_that_batched_spaces_the_next_one_anew(monkeypatch):
    monkeypatch.setattr(eager_speculation, "PROBE", 2)
    _never_batching(monkeypatch)
    model = _model()
    for length in range(1, 5):  # (a probe at the second speculated step: the next after 4)
        _step(model, length)
    assert eager_speculation.interval() == 4
    eager_speculation.lazy_step(False)  # (not a probe: the interval stays)
    assert eager_speculation.interval() == 4
    eager_speculation._block().probing = True
    eager_speculation.lazy_step(False)  # a probe whose run batched (or repeated)
    assert eager_speculation.interval() == 2


@pytest.mark.parametrize("options", [{"autobatch": False}, {"exact": True}])
def test_with_nothing_to_measure_no_step_probes(monkeypatch, options):
    monkeypatch.setattr(eager_speculation, "PROBE", 2)
    model = _model()
    tapes = [_step(model, length, **options)[2] for length in range(1, 10)]
    streak = eager_speculation.STREAK
    assert [_speculated(t) for t in tapes] == [False] * streak + [True] * (9 - streak)


@pytest.mark.parametrize(
    "options", [{"autobatch": True}, {"compile": True}, {"threads": 2}, {"validate": True}]
)
def test_options_that_batch_or_compile_never_speculate(options):
    model = _model()
    tapes = [_step(model, length, **options)[2] for length in range(1, 7)]
    assert not any(_speculated(t) for t in tapes)


def test_a_model_that_batches_faster_is_not_speculated(monkeypatch):
    monkeypatch.setattr(autobatch_choice, "prefers_batching", lambda key: True)
    model = _model()
    tapes = [_step(model, length, autobatch="auto")[2] for length in range(1, 7)]
    assert not any(_speculated(t) for t in tapes)


def test_a_speculated_step_leaves_the_block_lazy_for_the_next_tape():
    model = _model()
    for length in range(1, 6):
        with tape.lazy(autobatch=False):
            if length < 5:
                _body(model, length)
                continue
            t = tape.reset_global_tape()  # (speculated: records eagerly)
            y = ops.relu(tape.Variable(np.array([-1.0, 2.0], np.float32)))
            assert _speculated(t) and y._pending is None
            eager_speculation.reset()
            t = tape.reset_global_tape()
            y = ops.relu(tape.Variable(np.array([-1.0, 2.0], np.float32)))
            assert t.lazy and y._pending is t
            np.testing.assert_array_equal(y.numpy(), [0.0, 2.0])


def _forget_everything():
    from tape import replay

    replay.forget()
    eager_speculation.reset()
    autobatch_choice.reset()


def test_a_streak_in_one_block_does_not_speculate_another_blocks_steps():
    # a fixed model's loop in its own block, alone and alternating with a loop over new
    # structures in another: its steps are speculated alike (until its sketch repeats), and
    # then stay lazy, on the way to its compiled plan
    def fixed_steps(changing=None):
        _forget_everything()
        fixed, tapes = _model(), []
        for length in range(1, 11):
            if changing is not None:
                _step(changing, length, autobatch=False)
            with tape.lazy(autobatch=False):
                tapes.append(_speculated(_body(fixed, 3)[2]))
        return tapes

    alone = fixed_steps()
    assert alone == fixed_steps(_model())
    assert not any(alone[-4:])
    changing = _model()  # (its own block still speculates)
    assert all(_speculated(_step(changing, n, autobatch=False)[2]) for n in range(20, 23))


def test_a_streak_made_with_other_options_does_not_speculate_steps_that_always_batch():
    model = _model()
    for length in range(1, 4):  # (a streak: these steps are new and unbatched)
        _step(model, length, autobatch=False)
    assert eager_speculation.streak() >= eager_speculation.STREAK
    tapes = [_step(model, length, autobatch=True)[2] for length in range(4, 7)]
    assert not any(_speculated(t) for t in tapes)


def test_a_model_autobatching_never_measured_ends_another_models_streak(monkeypatch):
    first = _model()  # (measured: its unbatched runs are cheaper; the other is not measured)
    measured = id(first[0].params()[0])
    choose, prefers = autobatch_choice.choose, autobatch_choice.prefers_batching
    monkeypatch.setattr(
        autobatch_choice,
        "choose",
        lambda key, probe=False: False if key == measured else choose(key, probe),
    )
    monkeypatch.setattr(
        autobatch_choice, "prefers_batching", lambda key: key != measured and prefers(key)
    )
    for length in range(1, 4):  # (in the block the other model's steps use)
        _step(first, length)
    other = _model()  # (new parameters: a model autobatch="auto" has not measured)
    tapes = [_step(other, length)[2] for length in range(1, 4)]
    assert _speculated(tapes[0])  # (the streak was there when its first step began)
    assert not any(_speculated(t) for t in tapes[1:])  # its backward ended it


def test_a_speculated_step_is_timed_as_its_models_unbatched_way(monkeypatch):
    _never_batching(monkeypatch)
    timed = []
    monkeypatch.setattr(autobatch_choice, "measured", lambda *args: timed.append(args))
    model = _model()
    tapes = [_step(model, length)[2] for length in range(1, 5)]
    speculated = [t for t in tapes if _speculated(t)]
    assert speculated
    key = id(model[0].params()[0])  # (the first parameter its steps read)
    assert len(timed) == len(tapes)  # (the lazy steps timed by their run, the others so)
    for got_key, batched, seconds, ops_count in timed:
        assert (got_key, batched) == (key, False)
        assert seconds > 0 and ops_count > 0
