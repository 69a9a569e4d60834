"""A small training problem shared by the optimizer tests, with its gradient in plain numpy.

loss(p) = sum_i sum(c_i * p_i**2 + d_i * p_i + e_i * tanh(p_i)) over parameters of different
shapes; per-element coefficients make adaptive optimizers differ from plain SGD, and tanh makes
the gradient nonlinear in p.
"""

import numpy as np

import ops
import tape

SHAPES = [(3, 4), (5,), (1, 2, 2)]


def coefficients(seed=0):
    rng = np.random.default_rng(seed)
    return [
        (rng.uniform(0.1, 1.0, s), rng.standard_normal(s), rng.standard_normal(s)) for s in SHAPES
    ]


def initial_values(seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in SHAPES]


def numpy_grad(p, coeff):
    c, d, e = coeff
    return 2 * c * p + d + e * (1 - np.tanh(p) ** 2)


def tape_loss(params, coeffs):
    total = None
    for p, (c, d, e) in zip(params, coeffs, strict=True):
        c, d, e = (tape.Variable(a.astype(p.dtype)) for a in (c, d, e))
        term = (c * p * p + d * p + e * ops.tanh(p)).sum()
        total = term if total is None else total + term
    return total


def trajectories(make_optimizer, reference_step, steps=60, dtype=np.float64, schedule=None):
    """Yields (step, fluidtape params, reference params) after each of ``steps`` updates.

    ``reference_step(p, g, state, t)`` is the published rule in numpy (float64), with t = 1, 2,
    ...; ``schedule`` (if given) is stepped after every update, like an epoch-level schedule.
    """
    coeffs = coefficients()
    start = initial_values()
    params = [tape.Variable(v.astype(dtype), requires_grad=True) for v in start]
    reference = [v.copy() for v in start]
    states = [{} for _ in start]
    optimizer = make_optimizer()
    for t in range(1, steps + 1):
        tape.reset_global_tape()
        tape.backward(tape_loss(params, coeffs))
        optimizer(params)
        grads = [numpy_grad(p, c) for p, c in zip(reference, coeffs, strict=True)]
        reference = reference_step(reference, grads, states, t)
        if schedule is not None:
            schedule.step()
        yield t, params, reference


def assert_follows(
    make_optimizer, reference_step, steps=60, dtype=np.float64, rtol=1e-9, atol=1e-12, schedule=None
):
    """The optimizer's parameters equal the numpy reference after every one of ``steps``."""
    for t, params, reference in trajectories(
        make_optimizer, reference_step, steps, dtype, schedule
    ):
        for i, (p, r) in enumerate(zip(params, reference, strict=True)):
            assert p.dtype == dtype, f"parameter {i} changed dtype to {p.dtype}"
            assert p.grad is None, "the update must consume the gradient"
            np.testing.assert_allclose(
                p.numpy(), r, rtol=rtol, atol=atol, err_msg=f"parameter {i} after step {t}"
            )
