"""The public contract of docs/design.md: the seed's training loop and its low-level add_op form."""

import numpy as np

import layers
import ops
import optim
import tape


def test_the_seed_training_loop_runs_as_written(capsys):
    l1, l2, mean = layers.Linear(3, 3, act="relu"), layers.Linear(3, 3, act="relu"), layers.Mean()
    sgd = optim.SGD(lr=0.001)
    losses = []
    for step in range(100):  # noqa: B007  (the loop exactly as docs/design.md writes it)
        tape.reset_global_tape()
        x = tape.Variable(np.random.rand(8, 3).astype(np.float32))
        loss = mean(l2(l1(x)))
        print(loss.value())
        losses.append(float(loss.value()))
        tape.backward(loss)
        sgd(l1.params() + l2.params())
    assert len(capsys.readouterr().out.splitlines()) == 100
    assert all(np.isfinite(losses))
    assert all(p.grad() is None for p in l1.params() + l2.params())  # consumed by the update
    assert l1.params()[0].dtype == np.float32


def _numpy_seed_step(w1, b1, w2, b2, x, lr):
    """One step of the seed's model by hand: relu(relu(x w1 + b1) w2 + b2), mean, SGD."""
    h1_pre = x @ w1 + b1
    h1 = np.maximum(h1_pre, 0)
    h2_pre = h1 @ w2 + b2
    h2 = np.maximum(h2_pre, 0)
    loss = h2.mean()
    g_h2 = np.full_like(h2, 1.0 / h2.size) * (h2_pre > 0)
    g_w2, g_b2 = h1.T @ g_h2, g_h2.sum(0)
    g_h1 = (g_h2 @ w2.T) * (h1_pre > 0)
    g_w1, g_b1 = x.T @ g_h1, g_h1.sum(0)
    return loss, [w1 - lr * g_w1, b1 - lr * g_b1, w2 - lr * g_w2, b2 - lr * g_b2]


def test_the_seed_loop_matches_a_hand_written_numpy_step():
    tape.seed(3)
    l1, l2 = layers.Linear(3, 4, act="relu"), layers.Linear(4, 2, act="relu")
    params = l1.params() + l2.params()
    rng = np.random.default_rng(0)
    for p in params:  # distinct values so every path carries a gradient
        p.set_value(rng.uniform(0.1, 1.0, p.shape).astype(np.float32))
    reference = [p.numpy().astype(np.float64) for p in params]
    sgd = optim.SGD(lr=0.1)
    for _ in range(5):
        x = rng.random((8, 3)).astype(np.float32)
        tape.reset_global_tape()
        loss = ops.mean(l2(l1(tape.Variable(x))))
        tape.backward(loss)
        sgd(params)
        ref_loss, reference = _numpy_seed_step(*reference, x.astype(np.float64), 0.1)
        np.testing.assert_allclose(float(loss.value()), ref_loss, rtol=1e-5)
    for p, ref in zip(params, reference):
        np.testing.assert_allclose(p.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_the_seeds_low_level_form_works_through_add_op():
    tape.reset_global_tape()
    t = tape.get_global_tape()
    w = tape.Variable(np.full((3, 3), 0.5, np.float32), requires_grad=True)
    b = tape.Variable(np.full((3,), -1.0, np.float32), requires_grad=True)
    x = tape.Variable(np.arange(6, dtype=np.float32).reshape(2, 3))
    pre_bias, pre_act, post_act = (tape.Variable(name="linear") for _ in range(3))
    t.add_op(
        "mul", {"X": [x], "Y": [w]}, {"Out": [pre_bias]}, {"x_num_col_dims": 1, "y_num_col_dims": 1}
    )
    t.add_op("elementwise_add", {"X": [pre_bias], "Y": [b]}, {"Out": [pre_act]}, {"axis": 1})
    t.add_op("relu", {"X": [pre_act]}, {"Out": [post_act]}, {})
    expected = np.maximum(x.numpy() @ w.numpy() + b.numpy(), 0)
    np.testing.assert_allclose(post_act.value(), expected)
    assert post_act.shape == (2, 3) and post_act.dtype == np.float32
    assert [op.type for op in t.ops] == ["mul", "elementwise_add", "relu"]
    assert t.ops[0].inputs == {"X": [x], "Y": [w]} and t.ops[0].outputs == {"Out": [pre_bias]}
    tape.backward(ops.mean(post_act))
    mask = (x.numpy() @ w.numpy() + b.numpy() > 0) / post_act.size
    np.testing.assert_allclose(w.grad().numpy(), x.numpy().T @ mask, rtol=1e-6)
    np.testing.assert_allclose(b.grad().numpy(), mask.sum(0), rtol=1e-6)


def test_the_seeds_init_tape_runs_fill_constant_once():
    layer = layers.Linear(3, 2, act="relu")
    weight, bias = layer.params()
    assert weight.shape == (3, 2) and bias.shape == (2,)
    assert weight.requires_grad and weight.persistable and weight.is_leaf
