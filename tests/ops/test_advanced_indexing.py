"""Advanced indexing and assignment, as a specification: for any mix of integer arrays, boolean
masks, ints, slices, None and ``...``, ``x[index]`` equals numpy's ``array[index]`` and its
gradient scatter-adds the weights at the selected positions; ``x[index] = v`` equals numpy's
assignment, rebinds ``x`` out of place (earlier uses keep the old value), and sends gradients to
the old ``x`` (where not overwritten) and to ``v``."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ops
import tape


def _data(shape):
    return np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) * 0.5 - 3.0


def _positions(shape, index):
    """The flat position of every element ``array[index]`` selects (any numpy index)."""
    return np.arange(int(np.prod(shape))).reshape(shape)[index]


def _scatter(shape, positions, weight):
    grad = np.zeros(int(np.prod(shape)))
    np.add.at(grad, positions.ravel(), np.broadcast_to(weight, positions.shape).ravel())
    return grad.reshape(shape)


@st.composite
def _index(draw, shape, allow_none=True):
    """A numpy index for ``shape`` mixing integer arrays (broadcast together), at most one
    boolean mask, ints, slices, None and a trailing ``...``."""
    common = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3))
    items, axis, has_mask, has_array = [], 0, False, False
    while axis < len(shape) and draw(st.integers(0, 4)):
        n = shape[axis]
        kind = draw(st.sampled_from(["array", "int", "slice", "mask"]))
        if kind == "mask" and not has_mask and not has_array:
            k = draw(st.integers(1, len(shape) - axis))
            items.append(draw(hnp.arrays(np.bool_, shape[axis : axis + k])))
            axis, has_mask = axis + k, True
            continue
        if kind == "array" and n and not has_mask:
            dims = common[len(common) - draw(st.integers(0, len(common))) :]
            dims = tuple(d if draw(st.booleans()) else 1 for d in dims)
            items.append(draw(hnp.arrays(np.int64, dims, elements=st.integers(-n, n - 1))))
            has_array = True
        elif kind == "int" and n:
            items.append(draw(st.integers(-n, n - 1)))
        else:
            bound = st.none() | st.integers(-n - 1, n + 1)
            items.append(
                slice(draw(bound), draw(bound), draw(st.none() | st.sampled_from([-2, 1, 3])))
            )
        axis += 1
        if allow_none and draw(st.integers(0, 3)) == 0:
            items.insert(draw(st.integers(0, len(items))), None)
    items += [slice(None)] * (len(shape) - axis)
    return _with_ellipsis(draw, items)


def _full(item):
    return isinstance(item, slice) and item == slice(None)


def _with_ellipsis(draw, items):
    """Sometimes a run of full slices (possibly empty, anywhere) replaced by '...'."""
    if not draw(st.booleans()):
        return tuple(items)
    start = draw(st.integers(0, len(items)))
    stop = start
    while stop < len(items) and _full(items[stop]) and draw(st.booleans()):
        stop += 1
    return tuple(items[:start]) + (Ellipsis,) + tuple(items[stop:])


def _mixed(shape, index):
    """The index as a user may write it: arrays as lists or integer Variables."""
    out = []
    for k, item in enumerate(index):
        if isinstance(item, np.ndarray) and item.dtype.kind == "i" and k % 2:
            item = tape.Variable(item)
        out.append(item)
    return tuple(out)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_mixed_index_matches_numpy_with_its_gradient(data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=4))
    index = data.draw(_index(shape))
    array = _data(shape)
    expected = array[index]
    tape.reset_global_tape()
    x = tape.Variable(array, requires_grad=True)
    out = x[_mixed(shape, index)]
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out.numpy(), expected)
    weight = np.random.default_rng(0).standard_normal(expected.shape)
    (grad,) = tape.grad((out * tape.Variable(weight)).sum(), [x])
    np.testing.assert_allclose(grad.numpy(), _scatter(shape, _positions(shape, index), weight))


def test_several_arrays_follow_numpy_placement():
    array = _data((3, 4, 5, 6))
    x = tape.Variable(array)
    i, j = np.array([0, 2]), np.array([[1], [3]])
    for index in [
        (0, slice(None), i),  # separated by a slice: the broadcast axes go first
        (slice(None), i, j),  # adjacent: in place
        (i, None, i),  # None separates them too
        (Ellipsis, i, j),  # adjacent, after the ellipsis
    ]:
        assert x[index].shape == array[index].shape
        np.testing.assert_array_equal(x[index].numpy(), array[index])


def test_boolean_mask_variable_selects_like_numpy_and_masked_select():
    array = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]])
    x = tape.Variable(array, requires_grad=True)
    mask = x > 0
    out = x[mask]
    np.testing.assert_array_equal(out.numpy(), array[array > 0])
    tape.backward(out.sum())
    np.testing.assert_array_equal(x.grad().numpy(), (array > 0).astype(float))
    rows = x[np.array([True, False])]
    np.testing.assert_array_equal(rows.numpy(), array[[0]])


def test_lazy_mode_realizes_the_mask_when_recording():
    array = np.array([[1.0, -2.0], [3.0, -4.0]], np.float32)
    with tape.lazy():
        tape.reset_global_tape()
        x = tape.Variable(array, requires_grad=True)
        doubled = x * 2.0
        mask = doubled > 1.0
        assert mask._pending is not None
        picked = doubled[mask]  # needs the mask's count: it runs the ops the mask needs
        assert mask._pending is None and picked.shape == (2,)
        loss = (picked * picked).sum()
        tape.backward(loss)
        np.testing.assert_allclose(loss.numpy(), 4.0 + 36.0)
        np.testing.assert_allclose(x.grad().numpy(), [[8.0, 0.0], [24.0, 0.0]])


def _assign_reference(array, index, value):
    out = array.copy()
    out[index] = value
    return out


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_assignment_matches_numpy_and_rebinds_out_of_place(data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    index = data.draw(_index(shape, allow_none=False))
    array = _data(shape)
    target = array[index].shape
    value_shape = target[data.draw(st.integers(0, len(target))) :]
    value_shape = tuple(d if data.draw(st.booleans()) else 1 for d in value_shape)
    value = np.random.default_rng(1).standard_normal(value_shape)
    tape.reset_global_tape()
    x0 = tape.Variable(array, requires_grad=True)
    x = x0 * 1.0
    before = x * 1.0  # recorded before the assignment: reads the old values
    v = tape.Variable(value, requires_grad=True)
    x[_mixed(shape, index)] = v
    np.testing.assert_array_equal(x.numpy(), _assign_reference(array, index, value))
    np.testing.assert_array_equal(before.numpy(), array)
    weight = np.random.default_rng(2).standard_normal(shape)
    loss = (x * tape.Variable(weight)).sum() + before.sum()
    gx0, gv = tape.grad(loss, [x0, v])
    positions = _positions(shape, index)
    written = np.zeros(array.size, bool)
    written[positions.ravel()] = True
    np.testing.assert_allclose(gx0.numpy(), np.where(written.reshape(shape), 0.0, weight) + 1.0)
    if len(np.unique(positions)) == positions.size:  # a repeated target keeps one write
        picked = np.broadcast_to(weight.reshape(-1)[positions], positions.shape)
        expected = picked.sum(axis=tuple(range(len(target) - len(value_shape))))
        keep = tuple(k for k, d in enumerate(value_shape) if d == 1)
        np.testing.assert_allclose(gv.numpy(), expected.sum(axis=keep, keepdims=True))


def test_augmented_assignment_and_chained_updates():
    x = tape.Variable(np.zeros((2, 3)))
    x[0] = 1.0
    x[:, 1] += tape.Variable(np.array([2.0, 3.0]))
    x[[1, 1], [0, 2]] = 7.0
    np.testing.assert_array_equal(x.numpy(), [[1.0, 3.0, 1.0], [7.0, 3.0, 7.0]])
    assert x.dtype == np.float64


def test_assignment_gradients_in_lazy_mode_equal_eager():
    def run():
        tape.reset_global_tape()
        w = tape.Variable(np.arange(6.0).reshape(2, 3), requires_grad=True)
        h = w * w
        first = h.sum()
        h[1, [0, 2]] = w[0, :2] * 3.0
        loss = (h * h).sum() + first
        tape.backward(loss)
        return loss.numpy(), w.grad().numpy()

    eager = run()
    with tape.lazy():
        lazy = run()
    np.testing.assert_allclose(lazy[0], eager[0])
    np.testing.assert_allclose(lazy[1], eager[1])


def test_assignment_into_a_parameter_is_refused():
    w = tape.Variable(np.zeros(3), requires_grad=True, name="w")
    with pytest.raises(tape.GraphError) as info:
        w[0] = 1.0
    message = str(info.value)
    assert "variable 'w' is a leaf that requires a gradient" in message
    assert "hint: assign into a copy (y = x * 1; y[i] = v)" in message
    assert "recorded at: test_advanced_indexing.py:" in message


def test_index_put_accumulates_repeats_and_its_gradients_match_torch():
    torch = pytest.importorskip("torch")
    array = np.random.default_rng(3).standard_normal((4, 3))
    values = np.random.default_rng(4).standard_normal((3, 3))
    rows = np.array([0, 2, 0])
    x, v = tape.Variable(array, requires_grad=True), tape.Variable(values, requires_grad=True)
    out = ops.index_put(x, [rows], v, accumulate=True)
    tx = torch.tensor(array, requires_grad=True)
    tv = torch.tensor(values, requires_grad=True)
    expected = tx.index_put((torch.tensor(rows),), tv, accumulate=True)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy())
    weight = np.random.default_rng(5).standard_normal((4, 3))
    (expected * torch.tensor(weight)).sum().backward()
    gx, gv = tape.grad((out * tape.Variable(weight)).sum(), [x, v])
    np.testing.assert_allclose(gx.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(gv.numpy(), tv.grad.numpy())


@pytest.mark.parametrize(
    "index, text",
    [
        ((np.array([0, 3]), 0), "op 'index'"),
        ((np.array([0, 3]), 0), "index 3 is out of range for axis 0 of extent 3"),
        ((slice(None), np.array([4])), "index 4 is out of range for axis 1 of extent 4"),
        ((np.array([0, 1]), np.array([0, 1, 2])), "cannot be broadcast together"),
        ((0, np.array([True, False])), "a boolean index must match the axes it covers"),
        ((np.array([0]), 5), "index 5 is out of range for axis 1 of extent 4"),
    ],
)
def test_bad_advanced_indices_say_why_at_the_users_line(index, text):
    x = tape.Variable(np.zeros((3, 4)), name="x")
    with pytest.raises((IndexError, ValueError)) as info:
        x[index]
    assert text in str(info.value)
    assert "recorded at: test_advanced_indexing.py:" in str(info.value)
