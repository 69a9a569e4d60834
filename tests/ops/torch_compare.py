"""Comparing an op with PyTorch: values, gradients and gradients of gradients, in float64.

Shared by the torch tests of the elementwise-math and activation families. A gradient that does
not exist (None here, an unused input in PyTorch) counts as zeros on both sides, as does the
derivative of a gradient that does not depend on the inputs.
"""

from __future__ import annotations

import numpy as np

import tape


def _directions(shapes, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) for shape in shapes]


def ours(fn, arrays, weight, directions):
    """(value, [d<w, out>/dx], [d<v, grad>/dx]) of ``fn`` on Variables; None for second order
    when ``directions`` is None."""
    tape.reset_global_tape()
    xs = [tape.Variable(a, requires_grad=True) for a in arrays]
    out = fn(*xs)
    loss = (out * tape.Variable(weight)).sum()
    grads = tape.grad(loss, xs, create_graph=directions is not None)
    firsts = [np.zeros(a.shape) if g is None else g.numpy() for g, a in zip(grads, arrays)]
    if directions is None:
        return out.numpy(), firsts, None
    terms = [(g * tape.Variable(v)).sum() for g, v in zip(grads, directions) if g is not None]
    terms = [t for t in terms if t.requires_grad]
    if not terms:
        return out.numpy(), firsts, [np.zeros(a.shape) for a in arrays]
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    seconds = tape.grad(total, xs)
    seconds = [np.zeros(a.shape) if h is None else h.numpy() for h, a in zip(seconds, arrays)]
    return out.numpy(), firsts, seconds


def theirs(torch, fn, arrays, weight, directions):
    """The same triple from PyTorch."""
    xs = [torch.from_numpy(np.array(a)).requires_grad_() for a in arrays]
    out = fn(*xs)
    loss = (out * torch.from_numpy(weight)).sum()
    grads = torch.autograd.grad(loss, xs, create_graph=directions is not None, allow_unused=True)
    firsts = [np.zeros(a.shape) if g is None else g.detach().numpy() for g, a in zip(grads, arrays)]
    if directions is None:
        return out.detach().numpy(), firsts, None
    terms = [
        (g * torch.from_numpy(v)).sum()
        for g, v in zip(grads, directions)
        if g is not None and g.requires_grad
    ]
    if not terms:
        return out.detach().numpy(), firsts, [np.zeros(a.shape) for a in arrays]
    seconds = torch.autograd.grad(sum(terms), xs, allow_unused=True)
    return (
        out.detach().numpy(),
        firsts,
        [np.zeros(a.shape) if h is None else h.numpy() for h, a in zip(seconds, arrays)],
    )


def assert_matches_torch(torch, our_fn, torch_fn, arrays, double=True, rtol=1e-10, label=""):
    """Values, gradients and (with ``double``) second-order gradients equal PyTorch's; NaNs
    and infinities must sit at the same places."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    shape = tuple(torch_fn(*[torch.from_numpy(np.array(a)) for a in arrays]).shape)
    weight = np.random.default_rng(1).standard_normal(shape)
    directions = _directions([a.shape for a in arrays], 2) if double else None
    (value, firsts, seconds) = ours(our_fn, arrays, weight, directions)
    (value_ref, firsts_ref, seconds_ref) = theirs(torch, torch_fn, arrays, weight, directions)

    def close(got, want, what):
        np.testing.assert_allclose(
            got, want, rtol=rtol, atol=1e-12, equal_nan=True, err_msg=f"{label}: {what}"
        )

    close(value, value_ref, "value")
    for i, (got, want) in enumerate(zip(firsts, firsts_ref)):
        close(got, want, f"gradient of input {i}")
    for i, (got, want) in enumerate(zip(seconds or (), seconds_ref or ())):
        close(got, want, f"second-order gradient of input {i}")
