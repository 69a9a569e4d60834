"""A known step is recognised by identity (tape.step_identity): a recipe learnt from one tape's
numbering matches another tape exactly when the numbering would give it the same structural key
(every way a step can differ is checked), gives its Variables in the numbering's order, and a
training loop so recognised never numbers its tape and computes eager mode's values."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layers
import ops
import tape
from ops.registry import REGISTRY
from tape import replay, step_program, structure, tier_choice
from tape.step_identity import Recipe
from tape.tape import record

pytestmark = pytest.mark.usefixtures("no_speculation", "structures_forgotten")

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4)).astype(np.float32)
P = RNG.uniform(0.5, 1.0, (3, 4)).astype(np.float32)


def _chain(x, p, variant=None):
    """The base step (``variant`` None) or one differing in one way; returns the loss."""
    h = x * p if variant != "swapped operands" else p * x
    first = h
    if variant == "no grad for one op":
        with tape.no_grad():
            h = h + p
    else:
        h = h + p
    h = ops.tanh(h if variant != "an earlier input" else first)
    if variant == "another attribute":
        return ops.reduce_sum(h, axis=0).sum()
    loss = ops.reduce_sum(h, axis=1).sum()
    return loss if variant != "another loss" else ops.reduce_sum(first, axis=1).sum()


def _recorded(variant=None, x=X, p=P, requires_grad=True, persistable=False):
    """A lazy tape of the step, not run: (tape, loss, the leaves)."""
    t = tape.reset_global_tape()
    xv, pv = tape.Variable(x), tape.Variable(p, requires_grad=requires_grad)
    pv.persistable = persistable
    return t, _chain(xv, pv, variant), (xv, pv)


def _key(t, loss):
    numbering, variables, _ = structure.numbered(t)
    slot = numbering.index[id(loss)]
    return replay.structural_key(numbering, variables, slot, False), numbering, variables, slot


@pytest.fixture
def base():
    """The base step's recipe and structural key."""
    with tape.lazy():
        t, loss, _ = _recorded()
        key, numbering, variables, slot = _key(t, loss)
        recipe = Recipe.learn(t._ops, numbering, variables, slot)
        tape.reset_global_tape()
    assert recipe is not None
    return recipe, key


VARIANTS = {
    "the same step": {},
    "swapped operands": {"variant": "swapped operands"},
    "an earlier input": {"variant": "an earlier input"},
    "another attribute": {"variant": "another attribute"},
    "another loss": {"variant": "another loss"},
    "no grad for one op": {"variant": "no grad for one op"},
    "a leaf of another shape": {"x": X[:2], "p": P[:2]},
    "a leaf of another dtype": {"x": X.astype(np.float64)},
    "a leaf without a gradient": {"requires_grad": False},
    "a persistable leaf": {"persistable": True},
}


@pytest.mark.parametrize("name", VARIANTS)
def test_a_recipe_matches_exactly_the_tapes_of_its_structural_key(base, name):
    recipe, key = base
    with tape.lazy():
        t, loss, _ = _recorded(**VARIANTS[name])
        variables = recipe.match(t._ops, loss)
        other_key, numbering, numbered, _ = _key(t, loss)
        assert (variables is not None) == (other_key == key)
        assert (variables is not None) == (name == "the same step")
        if variables is not None:  # the numbering's Variables, in its order
            assert len(variables) == len(numbered)
            assert all(a is b for a, b in zip(variables, numbered, strict=True))
            assert numbering.refs == recipe.refs
        del variables, numbered
        tape.reset_global_tape()


def test_a_recipe_does_not_match_an_input_used_twice_where_two_were_used():
    with tape.lazy():
        t = tape.reset_global_tape()
        x, y = tape.Variable(X), tape.Variable(X.copy())
        loss = (x * y).sum()
        key, numbering, variables, slot = _key(t, loss)
        recipe = Recipe.learn(t._ops, numbering, variables, slot)
        t = tape.reset_global_tape()
        x = tape.Variable(X)
        loss = (x * x).sum()
        assert recipe.match(t._ops, loss) is None
        assert _key(t, loss)[0] != key
        tape.reset_global_tape()


def test_a_tape_whose_ops_share_an_argument_tuple_is_numbered_not_matched():
    """The numbering counts a shared tuple's references once (those counts tell what the user
    holds): no recipe is learnt from such a tape, and a recipe does not match one."""
    mul, add = REGISTRY["elementwise_mul"], REGISTRY["elementwise_add"]

    def recorded(shared):
        t = tape.reset_global_tape()
        x, p = tape.Variable(X), tape.Variable(P, requires_grad=True)
        args = (x, p)
        a = record(t, mul, args, mul.defaults)
        b = record(t, add, args if shared else (x, p), add.defaults)
        return t, (a + b).sum()

    with tape.lazy():
        t, loss = recorded(shared=True)
        _, numbering, variables, slot = _key(t, loss)
        assert Recipe.learn(t._ops, numbering, variables, slot) is None
        t, loss = recorded(shared=False)
        _, numbering, variables, slot = _key(t, loss)
        recipe = Recipe.learn(t._ops, numbering, variables, slot)
        assert recipe is not None
        del variables
        t, loss = recorded(shared=True)
        assert recipe.match(t._ops, loss) is None
        tape.reset_global_tape()


def _cell_step(steps=2, stacked=True):
    """An LSTM-like step: ops with several outputs (softmax cross-entropy, dropout) and a list
    input (stack) of ``steps`` entries; returns (tape, loss)."""
    t = tape.reset_global_tape()
    x, p = tape.Variable(X), tape.Variable(P, requires_grad=True)
    hs = []
    h = x
    for _ in range(steps):
        h = ops.tanh(h * p)
        hs.append(ops.dropout(h, dropout_prob=0.25)[0])
    joined = ops.stack(hs, axis=0) if stacked else ops.concat(hs, axis=0)
    label = tape.Variable(np.zeros((3 * steps, 1), np.int64))
    _, loss = ops.softmax_with_cross_entropy(joined.reshape(-1, 4), label)
    return t, ops.mean(loss)


def test_a_recipe_covers_ops_with_several_outputs_and_list_inputs():
    """Softmax cross-entropy's and dropout's two outputs, a stack's list: the recipe matches the
    same step, giving the numbering's Variables, and not a step whose list is longer or whose
    list op is another."""
    with tape.lazy():
        t, loss = _cell_step()
        key, numbering, variables, slot = _key(t, loss)
        recipe = Recipe.learn(t._ops, numbering, variables, slot)
        assert recipe is not None
        del variables
        for steps, stacked in ((2, True), (3, True), (2, False)):
            t, loss = _cell_step(steps, stacked)
            matched = recipe.match(t._ops, loss)
            other, numbering, numbered, _ = _key(t, loss)
            assert (matched is not None) == (other == key) == (steps == 2 and stacked)
            if matched is not None:
                assert all(a is b for a, b in zip(matched, numbered, strict=True))
                assert numbering.refs == recipe.refs
            del matched, numbered
        tape.reset_global_tape()


def test_no_recipe_is_learnt_where_an_op_updates_an_input_in_place():
    """A batch norm layer's running statistics are outputs bound to its inputs (not new
    Variables): the check covers new outputs only, so such a step is numbered."""
    norm = layers.BatchNorm(4)
    with tape.lazy():
        t = tape.reset_global_tape()
        loss = norm(tape.Variable(X, requires_grad=True)).sum()
        _, numbering, variables, slot = _key(t, loss)
        assert Recipe.learn(t._ops, numbering, variables, slot) is None
        tape.reset_global_tape()


@pytest.fixture
def _plan_tier(monkeypatch):
    """The plan tier every step (the eager way never measures cheaper, and is not tried: its
    one trial after the plan's warm steps would land on a step of the test as the timing of
    the machine moves it)."""
    monkeypatch.setattr(tier_choice, "MARGIN", 0.0)
    monkeypatch.setattr(tier_choice, "PATIENCE", 10**6)


def _training_step(p, x, held=None):
    tape.reset_global_tape()
    h = ops.tanh(tape.Variable(x) * p + p)
    if held is not None:
        held.append(h)
    loss = ops.reduce_sum(h * h, axis=1).sum()
    p.clear_grad()
    tape.backward(loss)
    return loss.numpy().copy(), p.grad().numpy().copy()


@pytest.mark.usefixtures("_plan_tier")
def test_a_training_loop_is_recognised_without_numbering_and_gives_eager_values(monkeypatch):
    p = tape.Variable(P, requires_grad=True)
    want = _training_step(p, X)
    numberings = []
    monkeypatch.setattr(replay, "numbered", lambda t: numberings.append(1) or structure.numbered(t))
    with tape.lazy():
        for _ in range(6):
            got = _training_step(p, X)
            np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
            np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
        assert len(step_program._KNOWN) == 1
        numberings.clear()
        held = []
        for _ in range(3):
            got = _training_step(p, X, held)
            np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
        assert numberings == []
        assert "recognised by its recipe" in tape.explain()
        # The intermediate the user held has its value, as eager mode's.
        expected = np.tanh(X * P + P)
        for h in held:
            np.testing.assert_allclose(h.numpy(), expected, rtol=1e-6)


@pytest.mark.usefixtures("_plan_tier")
def test_a_step_of_the_same_sketch_but_another_structure_is_numbered_and_correct(monkeypatch):
    """Same ops and shapes (the sketch), another wiring: the recipe does not match and the
    step takes the numbered way, with its own values."""
    p = tape.Variable(P, requires_grad=True)
    matches = []
    match = Recipe.match
    monkeypatch.setattr(
        Recipe, "match", lambda *args: matches.append(match(*args) is not None) or match(*args)
    )

    def step(swap):
        tape.reset_global_tape()
        h = tape.Variable(X) * p if not swap else p * p
        loss = ops.reduce_sum(ops.tanh(h + p), axis=1).sum()
        p.clear_grad()
        tape.backward(loss)
        return p.grad().numpy().copy()

    eager = [step(False), step(True)]
    with tape.lazy():
        for i in range(15):
            np.testing.assert_allclose(step(i % 5 == 4), eager[i % 5 == 4], rtol=1e-6)
    assert True in matches and False in matches


# -- random steps -------------------------------------------------------------------------------

_STEPS = ("add", "mul", "tanh", "square", "sum rows", "sum cols", "no grad add", "stack", "dropout")


def _random_program(draw):
    """A random step: leaves (shape, dtype, requires_grad) and ops (kind, operand choices)."""
    leaves = draw(
        st.lists(
            st.tuples(
                st.sampled_from([(2, 3), (3,), (1, 3)]),
                st.sampled_from([np.float32, np.float64]),
                st.booleans(),
            ),
            min_size=1,
            max_size=3,
        )
    )
    ops_ = draw(
        st.lists(
            st.tuples(st.sampled_from(_STEPS), st.integers(0, 99), st.integers(0, 99)),
            min_size=1,
            max_size=8,
        )
    )
    return leaves, ops_


def _record_program(program):
    """Records ``program`` on a fresh lazy global tape: (tape, loss)."""
    leaves, steps = program
    t = tape.reset_global_tape()
    values = [
        tape.Variable(np.ones(shape, dtype), requires_grad=grad) for shape, dtype, grad in leaves
    ]
    for kind, a, b in steps:
        x, y = values[a % len(values)], values[b % len(values)]
        if kind in ("add", "mul", "no grad add", "stack") and x.shape != y.shape:
            y = x
        if kind == "add":
            values.append(x + y)
        elif kind == "mul":
            values.append(x * y)
        elif kind == "tanh":
            values.append(ops.tanh(x))
        elif kind == "square":
            values.append(x * x)
        elif kind == "no grad add":
            with tape.no_grad():
                values.append(x + y)
        elif kind == "stack":  # (a list input: one entry or two)
            values.append(ops.stack([x] if a == b else [x, y], axis=0))
        elif kind == "dropout":  # (two outputs)
            values.append(ops.dropout(x, dropout_prob=0.5)[a % 2])
        else:
            values.append(ops.reduce_sum(x, axis=0 if kind == "sum cols" else -1, keepdim=True))
    return t, values[-1].sum()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_random_steps_match_their_recipe_exactly_where_their_keys_are_equal(data):
    """For a random step and a second step -- the same program or another -- the recipe of the
    first matches the second exactly when their structural keys are equal."""
    first = _random_program(data.draw)
    second = first if data.draw(st.booleans()) else _random_program(data.draw)
    with tape.lazy():
        t, loss = _record_program(first)
        key, numbering, variables, slot = _key(t, loss)
        recipe = Recipe.learn(t._ops, numbering, variables, slot)
        assert recipe is not None  # (new outputs, Variable or list inputs, plain attributes)
        del variables
        t, loss = _record_program(second)
        matched = recipe.match(t._ops, loss)
        other, _, numbered, _ = _key(t, loss)
        assert (matched is not None) == (other == key)
        if second is first:
            assert matched is not None and all(
                a is b for a, b in zip(matched, numbered, strict=True)
            )
        del matched, numbered
        tape.reset_global_tape()
