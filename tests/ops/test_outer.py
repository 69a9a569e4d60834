"""outer: its shape check, and the one op it saves a layer applied to one example."""

import numpy as np
import pytest

import ops
import tape


def test_outer_of_a_matrix_is_refused_at_the_users_line_naming_the_shapes():
    x, y = tape.Variable(np.ones((2, 3))), tape.Variable(np.ones(4))
    with pytest.raises(tape.ShapeError) as raised:
        ops.outer(x, y)
    message = str(raised.value)
    assert "op 'outer'" in message and "both inputs must be vectors" in message
    assert "X.shape=(2, 3), Y.shape=(4,)" in message and "test_outer.py" in message


@pytest.mark.parametrize("transpose_y", [False, True])
def test_a_vector_times_a_matrix_records_two_gradient_ops(transpose_y):
    """x @ W for one example: dx is one product and dW one outer op (no unsqueezes)."""
    rng = np.random.default_rng(0)
    x = tape.Variable(rng.standard_normal(3), requires_grad=True)
    shape = (4, 3) if transpose_y else (3, 4)
    w = tape.Variable(rng.standard_normal(shape), requires_grad=True)
    with tape.lazy(compile=True):  # (a lazy backward that compiles records gradient ops)
        tape.reset_global_tape()
        out = ops.matmul(x, w, transpose_y=transpose_y)
        loss = (out * out).sum()
        recorded = len(tape.get_global_tape()._ops)
        tape.backward(loss)
        gradient_ops = [op.type for op in tape.get_global_tape()._ops[recorded:]]
        tape.get_global_tape().realize([x.grad(), w.grad()])
    assert gradient_ops.count("outer") == 1 and "unsqueeze" not in gradient_ops
    w_value = w.numpy().T if transpose_y else w.numpy()
    g = 2 * (x.numpy() @ w_value)
    np.testing.assert_allclose(x.grad().numpy(), w_value @ g, rtol=1e-12)
    want_w = np.outer(x.numpy(), g)
    np.testing.assert_allclose(w.grad().numpy(), want_w.T if transpose_y else want_w, rtol=1e-12)
