"""Recurrent-cell ops, continued: the fused GRU step (gru_cell) and its fused gradient op.

As for the LSTM (ops/rnn.py), one op per step replaces the 14 small forward and 11 gradient
ops of a step composed from elementwise ops; the two projections stay separate matmuls. Gates
are in PyTorch's order (r, z, n) along the last axis. Unlike the LSTM's, the n gate needs the
hidden projection apart from the input one (it is scaled by r), so the op takes Gi and Gh rather
than their sum, and their gradients differ.

Arithmetic on one gate's strided slice of a (..., 3H) array costs up to twice as much as on a
contiguous array at typical sizes, so the kernels read Gi and Gh and write their gradients in
that layout once and keep everything else contiguous: the saved gates are two outputs, RZ
(..., 2H) and N (..., H), rather than one (..., 3H) array.
"""

from __future__ import annotations

from ops.activation import sigmoid_grad, tanh_grad
from ops.compose import NO_ATTRS, mul, sub
from ops.fill import fill_zeros_like
from ops.reduce import sum_to
from ops.registry import register
from ops.rnn import (
    check_cell_inputs,
    check_float,
    check_gate_axis,
    check_state,
    sigmoid_in_place,
)
from ops.shape import concat, split
from ops.xp import promote
from tape.tape import apply, state

GRU_GATES = ("r", "z", "n")
RZ_GATES = ("r", "z")


def _infer_gru(attrs, gi, gh, h, bias_ih, bias_hh):
    dtype = check_cell_inputs(gi, gh, "H", h, bias_ih, bias_hh, GRU_GATES)
    state_desc = (tuple(h.shape), dtype)
    return state_desc, (tuple(h.shape[:-1]) + (2 * h.shape[-1],), dtype), state_desc, state_desc


@register(
    "gru_cell",
    inputs=("Gi", "Gh", "H", "BiasIh?", "BiasHh?"),
    outputs=("Hout", "RZ", "N", "Ghn"),
    infer=_infer_gru,
    no_need_buffer=("Gi", "Gh", "BiasIh", "BiasHh"),
    returns=lambda results: results[0],
)
def gru_cell(xp, attrs, gi, gh, h, bias_ih, bias_hh):
    """One GRU step from the projections Gi = x W_ih^T and Gh = h W_hh^T, (..., 3H) each, and
    the state H (..., H); returns Hout, keeping RZ = [r, z], N = n and Ghn for the gradient:

        r = sigmoid(Gi_r + BiasIh_r + Gh_r + BiasHh_r);  z likewise (the biases are optional)
        Ghn = Gh_n + BiasHh_n;  n = tanh(Gi_n + BiasIh_n + r * Ghn)
        Hout = (1 - z) * n + z * H

    Gradient, with dn' = dHout (1 - z) (1 - n^2) (the gradient of n's argument):
        dr' = dn' Ghn r (1 - r);  dz' = dHout (H - n) z (1 - z)
        dGi = [dr', dz', dn'];  dGh = [dr', dz', dn' r];  dH = dHout z
        dBiasIh = dGi and dBiasHh = dGh summed over the leading axes
    one fused 'gru_cell_grad' op, or registered ops (split, sigmoid_grad, tanh_grad, mul,
    concat) when the gradient must itself be differentiable.

    >>> import numpy as np, tape, ops
    >>> zeros = tape.Variable(np.zeros((1, 6), np.float32))
    >>> ops.gru_cell(zeros, zeros, tape.Variable(np.ones((1, 2), np.float32))).numpy()
    array([[0.5, 0.5]], dtype=float32)
    """
    gi, gh, h, bias_ih, bias_hh = promote(gi, gh, h, bias_ih, bias_hh)
    hidden = h.shape[-1]
    two = 2 * hidden
    rz = xp.add(gi[..., :two], gh[..., :two])
    if bias_ih is not None and bias_hh is not None:
        rz += bias_ih[:two] + bias_hh[:two]  # one (2H,) add, not a second pass over the batch
    elif bias_ih is not None or bias_hh is not None:
        rz += (bias_ih if bias_ih is not None else bias_hh)[:two]
    sigmoid_in_place(xp, rz)
    if bias_hh is not None:
        ghn = xp.add(gh[..., two:], bias_hh[two:])
    else:
        ghn = xp.array(gh[..., two:])  # a copy: Ghn is an output of its own
    n = xp.multiply(rz[..., :hidden], ghn)
    n += gi[..., two:]
    if bias_ih is not None:
        n += bias_ih[two:]
    xp.tanh(n, out=n)
    hout = xp.subtract(h, n)  # Hout = n + z (H - n): one temporary fewer than (1 - z) n + z H
    hout *= rz[..., hidden:]
    hout += n
    return hout, rz, n, ghn


@gru_cell.gradient
def _(g):
    h = g.inputs[2]
    _, rz, n, ghn = g.outputs
    g_hout, *g_saved = g.gouts
    if state.grad_enabled or g_hout is None or any(gout is not None for gout in g_saved):
        g_gi, g_gh, g_h = _composed_grad(rz, n, ghn, h, g.gouts)
    else:
        g_gi, g_gh, g_h = apply(gru_cell_grad, (rz, n, ghn, h, g_hout), NO_ATTRS)
    width = (3 * h.shape[-1],)
    return (
        g_gi,
        g_gh,
        g_h,
        sum_to(g_gi, width) if g.needs(3) else None,
        sum_to(g_gh, width) if g.needs(4) else None,
    )


def _composed_grad(rz, n, ghn, h, gouts):
    """(dGi, dGh, dH) from registered ops, differentiable again: the formulas of gru_cell_grad,
    plus the gradients of the hidden RZ, N and Ghn outputs (which a double backward reaches
    through this very graph)."""
    g_hout, g_rz, g_n, g_ghn = gouts
    axis = len(rz.shape) - 1
    halves = {"num": 2, "sections": (), "axis": axis}
    r, z = apply(split, (rz,), halves)
    # Gradients of the activated r, z, n, before their activations' derivatives.
    g_r = g_z = g_h = None
    if g_hout is not None:
        g_h = mul(g_hout, z)
        g_z = mul(g_hout, sub(h, n))
        g_n = _plus(g_n, sub(g_hout, g_h))  # dHout (1 - z)
    if g_rz is not None:
        piece_r, piece_z = apply(split, (g_rz,), halves)
        g_r, g_z = _plus(g_r, piece_r), _plus(g_z, piece_z)
    if g_n is not None:
        g_n = apply(tanh_grad, (n, g_n), NO_ATTRS)  # now the gradient of n's argument
        g_ghn = _plus(g_ghn, mul(g_n, r))
        g_r = _plus(g_r, mul(g_n, ghn))
    g_r, g_z = (
        _or_zeros(None if grad is None else apply(sigmoid_grad, (out, grad), NO_ATTRS), out)
        for out, grad in ((r, g_r), (z, g_z))
    )
    g_n, g_ghn = _or_zeros(g_n, n), _or_zeros(g_ghn, ghn)
    g_gi = apply(concat, ([g_r, g_z, g_n],), {"axis": axis})
    g_gh = apply(concat, ([g_r, g_z, g_ghn],), {"axis": axis})
    return g_gi, g_gh, g_h


def _plus(x, y):
    """x + y where either may be None (no gradient)."""
    return y if x is None else x if y is None else x + y


def _or_zeros(grad, like):
    """``grad``, or zeros shaped like ``like`` where no gradient came (concat needs a piece)."""
    return apply(fill_zeros_like, (like,), NO_ATTRS) if grad is None else grad


def _infer_gru_grad(attrs, rz, n, ghn, h, g_hout):
    dtype = check_float([("RZ", rz), ("N", n), ("Ghn", ghn), ("H", h), ("Hout@GRAD", g_hout)])
    check_gate_axis("RZ", rz, RZ_GATES)
    for slot, var in (("N", n), ("Ghn", ghn), ("H", h), ("Hout@GRAD", g_hout)):
        check_state(slot, var, "RZ", rz, RZ_GATES)
    gates_desc = (tuple(h.shape[:-1]) + (3 * h.shape[-1],), dtype)
    return gates_desc, gates_desc, (tuple(h.shape), dtype)


@register(
    "gru_cell_grad",
    inputs=("RZ", "N", "Ghn", "H", "Hout@GRAD"),
    outputs=("Gi@GRAD", "Gh@GRAD", "H@GRAD"),
    infer=_infer_gru_grad,
    differentiable=False,
)
def gru_cell_grad(xp, attrs, rz, n, ghn, h, g_hout):
    """gru_cell's gradient from its saved RZ = [r, z], N = n and Ghn and its input H. With
    dn' = Hout@GRAD (1 - z) (1 - n^2):

        Gi@GRAD = [dn' Ghn r (1 - r), Hout@GRAD (H - n) z (1 - z), dn']
        Gh@GRAD = Gi@GRAD with its n block replaced by dn' r;  H@GRAD = Hout@GRAD z

    Not differentiable: a gradient that must be differentiated again is composed from
    registered ops instead (see gru_cell).
    """
    rz, n, ghn, h, g_hout = promote(rz, n, ghn, h, g_hout)
    hidden = h.shape[-1]
    two = 2 * hidden
    r, z = rz[..., :hidden], rz[..., hidden:]
    g_gi = xp.empty(h.shape[:-1] + (3 * hidden,), h.dtype)
    g_gh = xp.empty(g_gi.shape, h.dtype)
    g_h = xp.multiply(g_hout, z)
    g_n = xp.subtract(g_hout, g_h)
    scratch = xp.multiply(n, n)
    xp.subtract(1.0, scratch, out=scratch)
    g_n *= scratch  # tanh' = 1 - n^2
    slope = xp.subtract(1.0, rz)
    slope *= rz  # sigmoid' = s (1 - s) for r and z in one pass
    # The last product of each gate block is written straight into its strided place.
    xp.multiply(g_n, ghn, out=scratch)
    xp.multiply(scratch, slope[..., :hidden], out=g_gi[..., :hidden])
    xp.subtract(h, n, out=scratch)
    scratch *= g_hout
    xp.multiply(scratch, slope[..., hidden:], out=g_gi[..., hidden:two])
    g_gi[..., two:] = g_n
    g_gh[..., :two] = g_gi[..., :two]
    xp.multiply(g_n, r, out=g_gh[..., two:])
    return g_gi, g_gh, g_h
