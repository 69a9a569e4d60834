"""Values and gradients of the public functions equal PyTorch's, in float64, on random inputs.

An independent reference beside the numpy references of the registry sweep: each row gives the
fluidtape expression and the PyTorch expression of the same function.
"""

import numpy as np
import pytest

import ops
import tape

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _pos(shape):
    return ("pos", shape)


def _ints(high, shape):
    return ("ints", high, shape)


ROWS = [
    ("add", lambda x, y: x + y, lambda x, y: x + y, [(3, 1, 4), (2, 4)]),
    ("sub", lambda x, y: x - y, lambda x, y: x - y, [(3, 4), (4,)]),
    ("mul", lambda x, y: x * y, lambda x, y: x * y, [(2, 3), (2, 1)]),
    ("div", lambda x, y: x / y, lambda x, y: x / y, [(2, 3), _pos((3,))]),
    ("pow", lambda x, y: x**y, lambda x, y: x**y, [_pos((2, 3)), (2, 3)]),
    ("maximum", ops.maximum, torch.maximum, [(3, 4), (3, 4)]),
    ("minimum", ops.minimum, torch.minimum, [(3, 4), (4,)]),
    ("exp", ops.exp, torch.exp, [(3, 4)]),
    ("log", ops.log, torch.log, [_pos((3, 4))]),
    ("sqrt", ops.sqrt, torch.sqrt, [_pos((3, 4))]),
    ("abs", ops.abs, torch.abs, [(3, 4)]),
    ("square", ops.square, torch.square, [(3, 4)]),
    ("tanh", ops.tanh, torch.tanh, [(3, 4)]),
    ("sigmoid", ops.sigmoid, torch.sigmoid, [(3, 4)]),
    ("relu", ops.relu, torch.relu, [(3, 4)]),
    ("leaky_relu", ops.leaky_relu, F.leaky_relu, [(3, 4)]),
    ("elu", ops.elu, F.elu, [(3, 4)]),
    ("gelu", ops.gelu, F.gelu, [(3, 4)]),
    (
        "gelu_tanh",
        lambda x: ops.gelu(x, approximate=True),
        lambda x: F.gelu(x, approximate="tanh"),
        [(3, 4)],
    ),
    ("softplus", ops.softplus, F.softplus, [(3, 4)]),
    ("sin", ops.sin, torch.sin, [(3, 4)]),
    ("cos", ops.cos, torch.cos, [(3, 4)]),
    ("clip", lambda x: ops.clip(x, min=-0.5, max=0.7), lambda x: x.clamp(-0.5, 0.7), [(3, 4)]),
    ("matmul", lambda x, y: x @ y, lambda x, y: x @ y, [(2, 1, 3, 4), (5, 4, 2)]),
    (
        "matmul_tt",
        lambda x, y: ops.matmul(x, y, transpose_x=True, transpose_y=True),
        lambda x, y: x.transpose(-1, -2) @ y.transpose(-1, -2),
        [(2, 4, 3), (5, 4)],
    ),
    ("matmul_vec", lambda x, y: x @ y, lambda x, y: x @ y, [(4,), (3, 4, 2)]),
    (
        "mul_seed",
        lambda x, y: ops.mul(x, y, x_num_col_dims=2),
        lambda x, y: (x.reshape(6, 4) @ y).reshape(2, 3, 5),
        [(2, 3, 4), (4, 5)],
    ),
    ("reduce_sum", lambda x: ops.reduce_sum(x, axis=[0, 2]), lambda x: x.sum((0, 2)), [(2, 3, 4)]),
    (
        "reduce_mean",
        lambda x: ops.reduce_mean(x, axis=-1, keepdim=True),
        lambda x: x.mean(-1, keepdim=True),
        [(2, 3, 4)],
    ),
    ("reduce_max", lambda x: ops.reduce_max(x, axis=1), lambda x: x.amax(1), [(2, 3, 4)]),
    ("reduce_min", lambda x: ops.reduce_min(x), lambda x: x.amin(), [(2, 3, 4)]),
    ("logsumexp", lambda x: ops.logsumexp(x, axis=1), lambda x: x.logsumexp(1), [(2, 3, 4)]),
    ("mean", ops.mean, torch.mean, [(2, 3, 4)]),
    ("softmax", lambda x: ops.softmax(x, axis=1), lambda x: x.softmax(1), [(2, 3, 4)]),
    ("log_softmax", ops.log_softmax, lambda x: x.log_softmax(-1), [(2, 3, 4)]),
    (
        "cross_entropy",
        lambda x, t: ops.softmax_with_cross_entropy(x, t)[1],
        lambda x, t: F.cross_entropy(x, t.reshape(-1), reduction="none").reshape(-1, 1),
        [(5, 7), _ints(7, (5, 1))],
    ),
    (
        "bce_logits",
        ops.sigmoid_cross_entropy_with_logits,
        lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction="none"),
        [(4, 3), ("unit", (4, 3))],
    ),
    ("mse", ops.mse, F.mse_loss, [(4, 3), (4, 3)]),
    ("transpose", lambda x: x.T, lambda x: x.permute(2, 1, 0), [(2, 3, 4)]),
    ("reshape", lambda x: x.reshape(4, -1), lambda x: x.reshape(4, -1), [(2, 3, 4)]),
    (
        "concat",
        lambda x, y: ops.concat([x, y], axis=1),
        lambda x, y: torch.cat([x, y], 1),
        [(2, 3), (2, 5)],
    ),
    (
        "stack",
        lambda x, y: ops.stack([x, y], axis=0),
        lambda x, y: torch.stack([x, y]),
        [(2, 3), (2, 3)],
    ),
    ("split", lambda x: ops.split(x, num=2, axis=1)[1], lambda x: x.chunk(2, 1)[1], [(3, 4)]),
    (
        "slicing",
        lambda x: x[1:, ::-2, None, 2],
        lambda x: x[1:].flip(1)[:, ::2, None, 2],
        [(3, 5, 4)],
    ),
    ("gather", lambda x, i: x[i], lambda x, i: x[i], [(5, 3), _ints(5, (7,))]),
    (
        "where",
        lambda x, y: ops.where(x > y, x, y),
        lambda x, y: torch.where(x > y, x, y),
        [(3, 4), (4,)],
    ),
    (
        "broadcast_to",
        lambda x: ops.broadcast_to(x, shape=(2, 3, 4)),
        lambda x: x.expand(2, 3, 4),
        [(3, 1)],
    ),
    ("squeeze", lambda x: ops.squeeze(x, axes=[1]), lambda x: x.squeeze(1), [(3, 1, 4)]),
    (
        "unsqueeze",
        lambda x: ops.unsqueeze(x, axes=[0, 3]),
        lambda x: x.unsqueeze(0).unsqueeze(3),
        [(3, 4)],
    ),
]


def _make(spec, rng):
    if isinstance(spec, tuple) and spec and spec[0] == "pos":
        return rng.uniform(0.5, 2.0, spec[1])
    if isinstance(spec, tuple) and spec and spec[0] == "unit":
        return rng.uniform(0.0, 1.0, spec[1])
    if isinstance(spec, tuple) and spec and spec[0] == "ints":
        return rng.integers(0, spec[1], spec[2])
    return rng.standard_normal(spec)


@pytest.mark.parametrize("name, ours, theirs, specs", ROWS, ids=[r[0] for r in ROWS])
def test_values_and_gradients_equal_pytorch(name, ours, theirs, specs):
    rng = np.random.default_rng(7)
    arrays = [_make(spec, rng) for spec in specs]
    tape.reset_global_tape()
    ins = [tape.Variable(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    out = ours(*ins)
    t_ins = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    t_out = theirs(*t_ins)
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), rtol=1e-10, atol=1e-12)
    weight = rng.standard_normal(out.shape)
    tape.backward((out * weight).sum())
    (t_out * torch.tensor(weight)).sum().backward()
    for var, t_var in zip(ins, t_ins):
        if var.requires_grad:
            np.testing.assert_allclose(
                var.grad().numpy(),
                t_var.grad.numpy(),
                rtol=1e-9,
                atol=1e-12,
                err_msg=f"gradient of {name}",
            )
