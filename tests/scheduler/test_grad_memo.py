"""Gradient makers remembered per op form (tape.grad_memo): a lazy backward that records its
gradient ops (a tape made by hand, or plans compiled for every structure) over a graph that
changes every step records what the makers would, asking each maker once per form. (A global
tape's first sighting of a structure computes its gradients eagerly: tape.backward.)"""

import numpy as np
import pytest

import ops
import tape
from ops.registry import REGISTRY
from tape import grad_memo, replay

DIM = 5


@pytest.fixture(autouse=True)
def _fresh():
    grad_memo.clear()
    replay.forget()
    yield
    grad_memo.clear()


@pytest.fixture
def tanh_makers(monkeypatch):
    """How many times tanh's gradient maker ran."""
    defn = REGISTRY["tanh"]
    maker, calls = defn.grad_maker, []

    def counting(g):
        calls.append(g.op.index)
        return maker(g)

    monkeypatch.setattr(defn, "grad_maker", counting)
    return calls


def _params():
    rng = np.random.default_rng(0)
    w = tape.Variable(rng.standard_normal((DIM, DIM)) / DIM, requires_grad=True)
    b = tape.Variable(rng.standard_normal(DIM), requires_grad=True)
    return w, b


def _chain_lengths(lengths, w, b, lazy):
    """Sum over sequences of the given lengths of a tanh recurrence; gradients of w and b (a
    graph of a new structure for every new list of lengths)."""
    with tape.lazy(lazy, exact=True, compile=True):
        tape.reset_global_tape()
        w.clear_grad()
        b.clear_grad()
        losses = []
        for n, length in enumerate(lengths):
            h = tape.Variable(np.full(DIM, 0.1 * (n + 1)))
            for _ in range(length):
                h = ops.tanh(ops.matmul(h, w) + b)
            losses.append((h * h).mean())  # mean's maker makes a constant (1 / n)
        tape.backward(ops.sum(losses))
        return w.grad().numpy().copy(), b.grad().numpy().copy()


def test_fresh_graphs_get_eager_modes_gradients_bit_for_bit_with_makers_asked_once_per_form(
    tanh_makers,
):
    w, b = _params()
    for lengths in ([2, 3], [4, 1, 2], [3, 3, 1, 5], [1, 6]):  # a new structure every step
        tanh_makers.clear()
        want = _chain_lengths(lengths, w, b, lazy=False)
        eager_calls = len(tanh_makers)
        tanh_makers.clear()
        got = _chain_lengths(lengths, w, b, lazy=True)
        for a, e in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, e)
    # the tanh form was seen twice in the first lazy step: from then on its recipe is replayed
    assert eager_calls == 7 and tanh_makers == []


def test_replayed_gradient_ops_equal_what_the_maker_records(tanh_makers):
    w, b = _params()

    def gradient_ops():
        with tape.lazy(exact=True, compile=True):
            t = tape.reset_global_tape()
            w.clear_grad()
            b.clear_grad()
            h = ops.tanh(ops.matmul(tape.Variable(np.ones(DIM)), w) + b)
            start = len(t._ops)
            tape.backward(h.sum())
            ops_ = [
                (
                    op.type,
                    dict(op.attrs),
                    [v.shape for v in op.input_vars()],
                    [(v.shape, v.dtype, v.requires_grad) for v in op.output_vars()],
                    op.location,
                )
                for op in t._ops[start:]
            ]
            t._pending_ops.clear()
            return ops_

    first, second = gradient_ops(), gradient_ops()  # seen, learnt
    replay.forget()  # (not the whole-tape replay: the recipes)
    tanh_makers.clear()
    replayed = gradient_ops()
    assert tanh_makers == [] and replayed == first == second


def test_one_and_the_same_input_twice_is_its_own_form():
    x = tape.Variable(np.linspace(0.5, 1.5, DIM), requires_grad=True)
    y = tape.Variable(np.linspace(-1, 1, DIM), requires_grad=True)

    def grad_of_x(same):
        with tape.lazy():
            tape.reset_global_tape()
            x.clear_grad()
            y.clear_grad()
            tape.backward((x * (x if same else y)).sum())
            return x.grad().numpy().copy()

    for _ in range(3):  # x * y learnt and replayed
        np.testing.assert_array_equal(grad_of_x(False), y.numpy())
    for _ in range(3):  # x * x must not reuse x * y's recipe: d/dx x*x = 2x
        np.testing.assert_allclose(grad_of_x(True), 2 * x.numpy(), rtol=1e-15)


def test_forms_differ_by_shape_so_constants_follow_the_shape():
    x = tape.Variable(np.ones(8), requires_grad=True)
    for size in (2, 4, 2, 4, 8, 2, 8, 8):  # mean's constant 1/n per size
        with tape.lazy():
            tape.reset_global_tape()
            x.clear_grad()
            tape.backward(x[:size].mean())
            want = np.where(np.arange(8) < size, 1.0 / size, 0.0)
            np.testing.assert_allclose(x.grad().numpy(), want, rtol=1e-15)


def test_recipes_are_few_and_bounded():
    w, b = _params()
    for lengths in ([2, 3], [4, 1], [3, 3, 1]):
        _chain_lengths(lengths, w, b, lazy=True)
    assert 0 < len(grad_memo._RECIPES) <= 12  # forms, not ops
    assert grad_memo.LIMIT >= 1024
