"""Embedding: rows looked up by id, N(0, 1) init, a frozen zero padding row, sparse-row grads."""

import numpy as np
import pytest

import layers
import ops
import optim
import tape
from tests.layers.numeric import check_layer_gradients

IDS = np.array([[1, 4, 1], [0, 4, 6]])


@pytest.mark.parametrize("ids", [np.array(3), np.array([2, 2, 5]), IDS, np.zeros((0, 2), int)])
def test_forward_returns_the_rows_of_the_ids(ids):
    emb = layers.Embedding(7, 3)
    out = emb(tape.Variable(ids))
    assert out.shape == ids.shape + (3,) and out.dtype == np.float32
    np.testing.assert_array_equal(out.numpy(), emb.weight.numpy()[ids])


def test_ids_may_be_lists_arrays_or_variables_of_any_integer_dtype():
    emb = layers.Embedding(5, 2)
    expected = emb.weight.numpy()[[1, 3]]
    for ids in ([1, 3], np.array([1, 3], np.int32), tape.Variable(np.array([1, 3], np.uint8))):
        np.testing.assert_array_equal(emb(ids).numpy(), expected)


def test_weight_is_initialised_from_a_standard_normal():
    tape.seed(0)
    weight = layers.Embedding(1000, 64).weight.numpy()
    assert abs(weight.mean()) < 0.01 and abs(weight.std() - 1) < 0.01
    emb = layers.Embedding(3, 2)
    assert emb.params() == [emb.weight] and emb.weight.shape == (3, 2)


def test_repeated_ids_accumulate_their_gradients_and_unused_rows_get_zero():
    emb = layers.Embedding(7, 3)
    tape.reset_global_tape()
    out = emb(IDS)
    weight = np.random.default_rng(0).standard_normal(out.shape).astype(np.float32)
    tape.backward((out * tape.Variable(weight)).sum())
    expected = np.zeros((7, 3), np.float32)
    np.add.at(expected, IDS.reshape(-1), weight.reshape(-1, 3))
    np.testing.assert_allclose(emb.weight.grad().numpy(), expected, rtol=1e-6)
    assert emb.weight.grad().dtype == np.float32


def test_gradients_match_finite_differences():
    emb = layers.Embedding(7, 3, dtype="float64")
    check_layer_gradients(emb, emb, [IDS])


def test_the_padding_row_starts_at_zero_is_read_as_stored_and_gets_no_gradient():
    emb = layers.Embedding(7, 3, padding_idx=4)
    np.testing.assert_array_equal(emb.weight.numpy()[4], 0)
    table = emb.weight.numpy().copy()
    table[4] = 5.0  # a loaded table may hold anything there
    emb.weight.set_value(table)
    tape.reset_global_tape()
    out = emb(IDS)
    np.testing.assert_array_equal(out.numpy()[0, 1], 5.0)
    tape.backward(out.sum())
    grad = emb.weight.grad().numpy()
    np.testing.assert_array_equal(grad[4], 0)
    np.testing.assert_array_equal(grad[1], 2)  # id 1 appears twice


def test_negative_padding_idx_counts_from_the_end():
    emb = layers.Embedding(7, 3, padding_idx=-1)
    assert emb.padding_idx == 6 and repr(emb) == "Embedding(7, 3, padding_idx=6)"
    with pytest.raises(
        ValueError, match="padding_idx must be within num_embeddings \\(7\\), got 7"
    ):
        layers.Embedding(7, 3, padding_idx=7)


def test_training_leaves_the_padding_row_at_zero():
    emb = layers.Embedding(5, 2, padding_idx=0)
    sgd = optim.SGD(lr=0.5)
    for _ in range(3):
        tape.reset_global_tape()
        tape.backward(ops.mean(emb(np.array([0, 1, 0, 2]))))
        sgd(emb.params())
    np.testing.assert_array_equal(emb.weight.numpy()[0], 0)


def test_out_of_range_ids_name_the_op_and_the_range():
    emb = layers.Embedding(5, 2)
    with pytest.raises(IndexError) as info:
        emb(np.array([0, 5]))
    message = str(info.value)
    assert "op 'lookup_table'" in message and "id 5 is outside the table's rows [0, 5)" in message
    assert "test_embedding.py" in message
    with pytest.raises(IndexError, match="id -1 is outside"):
        emb(np.array([-1]))


def test_float_ids_are_rejected():
    emb = layers.Embedding(5, 2)
    with pytest.raises(TypeError, match="(?s)Ids must hold integer row indices.*float32"):
        emb(tape.Variable(np.array([1.0], np.float32)))


def test_outputs_and_gradients_match_torch_with_padding_idx():
    torch = pytest.importorskip("torch")
    ours = layers.Embedding(7, 3, padding_idx=1, dtype="float64")
    theirs = torch.nn.Embedding(7, 3, padding_idx=1).double()
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(ours.weight.numpy()))
    weight = np.random.default_rng(1).standard_normal(IDS.shape + (3,))
    expected = theirs(torch.from_numpy(IDS))
    (expected * torch.from_numpy(weight)).sum().backward()
    tape.reset_global_tape()
    out = ours(IDS)
    tape.backward((out * tape.Variable(weight)).sum())
    np.testing.assert_array_equal(out.numpy(), expected.detach().numpy())
    np.testing.assert_allclose(ours.weight.grad().numpy(), theirs.weight.grad.numpy(), rtol=1e-12)
