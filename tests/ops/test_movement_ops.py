"""Movement ops and re-arranging functions against PyTorch: values and gradients of pad (every
mode, random pads and shapes), flip, roll, tile/repeat, repeat_interleave, tril/triu, diagonal,
permute, movedim, expand, flatten, unflatten, chunk, unbind and meshgrid, through the functions
and the Variable methods; and the errors they raise."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ops
import tape


def _compare(fn, torch_fn, *arrays):
    """fn(Variables) equals torch_fn(tensors), and so do the gradients of <w, out>."""
    tape.reset_global_tape()
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    expected = torch_fn(*tensors)
    xs = [tape.Variable(a, requires_grad=True) for a in arrays]
    out = fn(*xs)
    outs, wanted = (out, expected) if isinstance(out, (list, tuple)) else ([out], [expected])
    assert len(outs) == len(wanted)
    loss, torch_loss = None, 0
    for k, (o, e) in enumerate(zip(outs, wanted)):
        assert o.shape == tuple(e.shape)
        np.testing.assert_allclose(o.numpy(), e.detach().numpy(), rtol=1e-12)
        w = np.random.default_rng(k).standard_normal(o.shape)
        term = (o * tape.Variable(w)).sum()
        loss = term if loss is None else loss + term
        torch_loss = torch_loss + (e * torch.tensor(w)).sum()
    grads = tape.grad(loss, xs)
    torch_grads = torch.autograd.grad(torch_loss, tensors, allow_unused=True)
    for g, t in zip(grads, torch_grads):
        np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=1e-12, atol=1e-12)


@st.composite
def _padding(draw):
    """A shape, PyTorch pads (negative ones crop) and a mode, within PyTorch's limits."""
    mode = draw(st.sampled_from(["constant", "reflect", "replicate", "circular"]))
    pairs = draw(st.integers(1, 3))
    shape = (2,) + tuple(draw(st.integers(1, 4)) for _ in range(pairs))
    pad = [draw(st.integers(-3, 4)) for _ in range(2 * pairs)]
    for k, n in enumerate(reversed(shape[1:])):
        before, after = pad[2 * k], pad[2 * k + 1]
        width = n + min(before, 0) + min(after, 0)
        assume(n + before + after >= 1 and width >= 1)
        assume(mode != "reflect" or max(before, after) < n)
        assume(mode != "circular" or max(before, after) <= width)
    return shape, pad, mode


@settings(max_examples=80, deadline=None)
@given(_padding())
def test_pad_matches_torch(problem):
    shape, pad, mode = problem
    x = np.random.default_rng(0).standard_normal(shape)
    value = 0.5 if mode == "constant" else 0.0
    batch = (1,) if mode != "constant" else ()  # torch's non-constant modes want a batch axis

    def torch_pad(t):
        out = F.pad(t.reshape(batch + t.shape), tuple(pad), mode=mode, value=value)
        return out.reshape(out.shape[len(batch) :])

    _compare(lambda v: ops.pad(v, pad=pad, mode=mode, value=value), torch_pad, x)


def test_movement_ops_and_methods_match_torch():
    x = np.random.default_rng(1).standard_normal((2, 3, 4))
    cases = [
        (lambda v: v.flip(0, 2), lambda t: t.flip(0, 2)),
        (lambda v: v.roll(2, 1), lambda t: t.roll(2, 1)),
        (lambda v: v.roll((1, -3), (0, 2)), lambda t: t.roll((1, -3), (0, 2))),
        (lambda v: v.roll(5), lambda t: t.roll(5)),
        (lambda v: v.repeat(2, 1, 1, 2), lambda t: t.repeat(2, 1, 1, 2)),
        (lambda v: v.tile((2,)), lambda t: t.tile((2,))),
        (lambda v: v.repeat_interleave(2, dim=1), lambda t: t.repeat_interleave(2, dim=1)),
        (
            lambda v: v.repeat_interleave(tape.Variable(np.array([0, 2, 1])), dim=1),
            lambda t: t.repeat_interleave(torch.tensor([0, 2, 1]), dim=1),
        ),
        (lambda v: v.repeat_interleave(3), lambda t: t.repeat_interleave(3)),
        (lambda v: v.tril(-1), lambda t: t.tril(-1)),
        (lambda v: v.triu(1), lambda t: t.triu(1)),
        (lambda v: v.diagonal(1, 2, 1), lambda t: t.diagonal(1, 2, 1)),
        (lambda v: v.permute(2, 0, 1), lambda t: t.permute(2, 0, 1)),
        (lambda v: v.movedim((0, 1), (2, 0)), lambda t: t.movedim((0, 1), (2, 0))),
        (lambda v: v[:, :1].expand(4, -1, 3, -1), lambda t: t[:, :1].expand(4, -1, 3, -1)),
        (lambda v: v.flatten(1), lambda t: t.flatten(1)),
        (lambda v: v.flatten(), lambda t: t.flatten()),
        (lambda v: v.unflatten(2, (2, -1)), lambda t: t.unflatten(2, (2, -1))),
        (lambda v: v.chunk(3, 2), lambda t: t.chunk(3, 2)),
        (lambda v: v.chunk(2, 1), lambda t: t.chunk(2, 1)),
        (lambda v: v.unbind(1), lambda t: t.unbind(1)),
    ]
    for fn, torch_fn in cases:
        _compare(fn, torch_fn, x)


def test_meshgrid_matches_torch():
    a, b, c = (np.random.default_rng(k).standard_normal(n) for k, n in enumerate((2, 3, 4)))
    for indexing in ("ij", "xy"):
        _compare(
            lambda *vs, indexing=indexing: ops.meshgrid(*vs, indexing=indexing),
            lambda *ts, indexing=indexing: torch.meshgrid(*ts, indexing=indexing),
            a,
            b,
            c,
        )
    _compare(lambda v: ops.meshgrid([v]), lambda t: torch.meshgrid([t], indexing="ij"), a)


def test_size0_and_0d_edge_cases_match_torch():
    empty = np.zeros((0, 3))
    _compare(lambda v: v.chunk(2, 0), lambda t: t.chunk(2, 0), empty)
    _compare(lambda v: v.flip(0), lambda t: t.flip(0), empty)
    _compare(lambda v: ops.flatten(v), lambda t: t.flatten(), np.array(2.0))
    assert ops.unbind(tape.Variable(empty), 0) == ()


@settings(max_examples=60, deadline=None)
@given(hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=3), st.data())
def test_flatten_and_unflatten_round_trip(shape, data):
    start = data.draw(st.integers(0, len(shape) - 1))
    end = data.draw(st.integers(start, len(shape) - 1))
    x = tape.Variable(np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape))
    flat = ops.flatten(x, start, end)
    assert flat.shape == tuple(torch.zeros(shape).flatten(start, end).shape)
    back = ops.unflatten(flat, start, shape[start : end + 1])
    np.testing.assert_array_equal(back.numpy(), x.numpy())


def _error(fn, *args, **kwargs):
    with pytest.raises(ValueError) as info:
        fn(*args, **kwargs)
    assert "recorded at: test_movement_ops.py:" in str(info.value)
    return str(info.value)


def test_errors_name_the_op_and_the_problem():
    x = tape.Variable(np.zeros((2, 3)))
    assert "reflect pads must be smaller than the extent 3 of axis 1" in _error(
        ops.pad, x, pad=[3, 0], mode="reflect"
    )
    assert "circular pads cannot exceed the extent 3" in _error(
        ops.pad, x, pad=[0, 4], mode="circular"
    )
    assert "(before, after) pairs" in _error(ops.pad, x, pad=[1, 1, 1])
    assert "an axis of extent other than 1 can only keep its extent" in _error(ops.expand, x, 4, 4)
    assert "new leading axes cannot be -1" in _error(ops.expand, x, -1, 2, 3)
    assert "repeat needs a count for every axis" in _error(ops.repeat, x, 2)
    assert "do not multiply to the axis's extent" in _error(ops.unflatten, x, 1, (2, 2))
    assert "start_axis comes after end_axis" in _error(ops.flatten, x, 1, 0)
    assert "source and destination must be distinct" in _error(ops.movedim, x, (0, 0), (1, 0))
    assert "one count >= 0, or one per element" in _error(
        ops.repeat_interleave, x, repeats=[1, 2], axis=1
    )
    assert "X must have at least 2 axes" in _error(ops.tril, tape.Variable(np.zeros(3)))
    assert "axis1 and axis2 must be different axes" in _error(ops.diagonal, x, axis1=1, axis2=-1)
    assert "axis 2 is out of range" in _error(ops.flip, x, axis=[2])


def test_lazy_mode_equals_eager_for_the_movement_ops():
    def run():
        tape.reset_global_tape()
        x = tape.Variable(np.arange(24.0).reshape(2, 3, 4) / 7, requires_grad=True)
        y = ops.pad(x, pad=[1, 2, 1, 0], mode="reflect").flip(0).roll(1, 2)
        y = ops.einsum([y.tile((1, 2, 1))[..., :4], x], equation="ijk,ilk->jl").tril()
        z = ops.repeat_interleave(y, repeats=[1, 2, 0], axis=1).diagonal()
        loss = (z * z).sum() + ops.flatten(ops.permute(x, 2, 0, 1), 1).chunk(2)[1].sum()
        tape.backward(loss)
        return loss.numpy(), x.grad().numpy()

    eager = run()
    with tape.lazy():
        lazy = run()
    np.testing.assert_allclose(lazy[0], eager[0], rtol=1e-12)
    np.testing.assert_allclose(lazy[1], eager[1], rtol=1e-12)
