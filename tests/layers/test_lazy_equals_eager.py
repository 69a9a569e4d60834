"""A model using every layer here gives the same loss and gradients in lazy and eager mode."""

import numpy as np
import pytest

import layers
import ops
import tape

pytestmark = pytest.mark.usefixtures("lazy_tier")  # both lazy tiers


def test_lazy_mode_reproduces_eager_losses_and_gradients():
    tape.seed(0)
    emb = layers.Embedding(10, 4, padding_idx=0)
    lstm, gru = layers.LSTMCell(4, 5), layers.GRUCell(4, 5)
    head = layers.Sequential(
        layers.Linear(5, 6), layers.GELU(), layers.Dropout(0.3), layers.Linear(6, 3)
    )
    modules = (emb, lstm, gru, head)
    ids, labels = np.array([[1, 0, 3], [4, 4, 9]]), np.array([0, 2])

    def step():
        tape.seed(1)  # the same dropout mask in both modes
        tape.reset_global_tape()
        xs = emb(ids)
        state = hidden = None
        for t in range(ids.shape[1]):
            state = lstm(xs[:, t], state)
            hidden = gru(xs[:, t], hidden)
        logits = head(state[0] + hidden)
        loss = (
            layers.CrossEntropyLoss(label_smoothing=0.1)(logits, labels)
            + layers.NLLLoss()(ops.log_softmax(logits, axis=-1), labels)
            + layers.BCEWithLogitsLoss(pos_weight=2.0)(logits, np.ones((2, 3)))
            + layers.MSELoss()(logits, np.zeros((2, 3)))
        )
        tape.backward(loss)
        grads = [p.grad().numpy() for m in modules for p in m.params()]
        for m in modules:
            for p in m.params():
                p.clear_grad()
        return loss.numpy(), grads

    eager_loss, eager_grads = step()
    with tape.lazy():
        lazy_loss, lazy_grads = step()
    np.testing.assert_allclose(lazy_loss, eager_loss, rtol=1e-6)
    for lazy_grad, eager_grad in zip(lazy_grads, eager_grads, strict=True):
        np.testing.assert_allclose(lazy_grad, eager_grad, rtol=1e-5, atol=1e-7)
