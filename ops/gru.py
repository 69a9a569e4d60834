"""Recurrent-cell ops, continued: the fused GRU step (gru_cell) and its fused gradient op.

As for the LSTM (ops/rnn.py), one op per step replaces about 12 small forward and 15 gradient
ops; the two projections stay separate matmuls. Gates are in PyTorch's order (r, z, n) along the
last axis. Unlike the LSTM's, the n gate needs the hidden projection apart from the input one
(it is scaled by r), so the op takes Gi and Gh rather than their sum, and their gradients differ.
"""

from __future__ import annotations

from ops.activation import sigmoid_grad, tanh_grad
from ops.compose import NO_ATTRS, mul, sub
from ops.fill import fill_zeros_like
from ops.reduce import sum_to
from ops.registry import register
from ops.rnn import check_float, check_gate_axis, check_state, sigmoid_in_place
from ops.shape import concat, split
from tape.errors import ShapeError
from tape.tape import apply, state

GRU_GATES = ("r", "z", "n")


def _infer_gru(attrs, gi, gh, h, bias_ih, bias_hh):
    check_float([("Gi", gi), ("Gh", gh), ("H", h), ("BiasIh", bias_ih), ("BiasHh", bias_hh)])
    if tuple(gi.shape) != tuple(gh.shape):
        raise ShapeError(
            None,
            "Gi and Gh must have the same shape",
            expected="Gi.shape == Gh.shape",
            actual=f"Gi.shape={gi.shape}, Gh.shape={gh.shape}",
        )
    check_gate_axis("Gi", gi, GRU_GATES)
    check_state("H", h, "Gi", gi, GRU_GATES)
    for slot, bias in (("BiasIh", bias_ih), ("BiasHh", bias_hh)):
        if bias is not None and tuple(bias.shape) != (gi.shape[-1],):
            raise ShapeError(
                None,
                f"{slot} must hold one value per gate unit",
                expected=f"{slot}.shape == ({gi.shape[-1]},) (Gi.shape[-1])",
                actual=f"{slot}.shape={bias.shape}",
            )
    state_desc = (tuple(h.shape), gi.dtype)
    return state_desc, (tuple(gi.shape), gi.dtype), state_desc


@register(
    "gru_cell",
    inputs=("Gi", "Gh", "H", "BiasIh?", "BiasHh?"),
    outputs=("Hout", "Gates", "Ghn"),
    infer=_infer_gru,
    no_need_buffer=("Gi", "Gh", "BiasIh", "BiasHh"),
    returns=lambda results: results[0],
)
def gru_cell(xp, attrs, gi, gh, h, bias_ih, bias_hh):
    """One GRU step from the projections Gi = x W_ih^T and Gh = h W_hh^T, (..., 3H) each, and
    the state H (..., H); returns Hout, keeping Gates = [r, z, n] and Ghn for the gradient:

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
    hidden = h.shape[-1]
    rz, split_at = slice(0, 2 * hidden), 2 * hidden
    gates = xp.empty(gi.shape, gi.dtype)
    xp.add(gi[..., rz], gh[..., rz], out=gates[..., rz])
    ghn = xp.array(gh[..., split_at:])  # a copy: Ghn is an output of its own
    if bias_hh is not None:
        ghn += bias_hh[split_at:]
    r, z, n = gates[..., :hidden], gates[..., hidden:split_at], gates[..., split_at:]
    if bias_ih is not None and bias_hh is not None:
        gates[..., rz] += bias_ih[rz] + bias_hh[rz]  # one (2H,) add, not a second batch pass
    elif bias_ih is not None or bias_hh is not None:
        gates[..., rz] += (bias_ih if bias_ih is not None else bias_hh)[rz]
    sigmoid_in_place(xp, gates[..., rz])
    xp.multiply(r, ghn, out=n)
    n += gi[..., split_at:]
    if bias_ih is not None:
        n += bias_ih[split_at:]
    xp.tanh(n, out=n)
    hout = xp.subtract(h, n)  # Hout = n + z (H - n): one temporary fewer than (1 - z) n + z H
    hout *= z
    hout += n
    return hout, gates, ghn


@gru_cell.gradient
def _(g):
    _, _, h, bias_ih, bias_hh = g.inputs
    _, gates, ghn = g.outputs
    g_hout, g_gates, g_ghn = g.gouts
    if state.grad_enabled or g_hout is None or g_gates is not None or g_ghn is not None:
        g_gi, g_gh, g_h = _composed_grad(gates, ghn, h, g_hout, g_gates, g_ghn)
    else:
        g_gi, g_gh, g_h = apply(gru_cell_grad, (gates, ghn, h, g_hout), NO_ATTRS)
    width = (gates.shape[-1],)
    return (
        g_gi,
        g_gh,
        g_h,
        sum_to(g_gi, width) if g.needs(3) else None,
        sum_to(g_gh, width) if g.needs(4) else None,
    )


def _composed_grad(gates, ghn, h, g_hout, g_gates, g_ghn):
    """(dGi, dGh, dH) from registered ops, differentiable again: the formulas of gru_cell_grad,
    plus the gradients of the hidden Gates and Ghn outputs (which a double backward reaches
    through this very graph)."""
    axis = len(gates.shape) - 1
    r, z, n = apply(split, (gates,), {"num": 3, "sections": (), "axis": axis})
    # Gradients of the activated r, z, n, before their activations' derivatives.
    activated, g_h = [None, None, None], None
    if g_hout is not None:
        g_h = mul(g_hout, z)
        activated[1:] = [mul(g_hout, sub(h, n)), sub(g_hout, g_h)]  # dHout (H - n), dHout (1 - z)
    if g_gates is not None:
        pieces = apply(split, (g_gates,), {"num": 3, "sections": (), "axis": axis})
        activated = [p if a is None else a + p for a, p in zip(activated, pieces)]
    g_n = None if activated[2] is None else apply(tanh_grad, (n, activated[2]), NO_ATTRS)
    g_ghn_total = g_ghn
    if g_n is not None:
        from_n = mul(g_n, r)
        g_ghn_total = from_n if g_ghn_total is None else g_ghn_total + from_n
        from_n = mul(g_n, ghn)
        activated[0] = from_n if activated[0] is None else activated[0] + from_n
    g_r, g_z = (
        apply(fill_zeros_like, (out,), NO_ATTRS)
        if grad is None
        else apply(sigmoid_grad, (out, grad), NO_ATTRS)
        for out, grad in zip((r, z), activated[:2])
    )
    g_n = apply(fill_zeros_like, (n,), NO_ATTRS) if g_n is None else g_n
    if g_ghn_total is None:
        g_ghn_total = apply(fill_zeros_like, (ghn,), NO_ATTRS)
    g_gi = apply(concat, ([g_r, g_z, g_n],), {"axis": axis})
    g_gh = apply(concat, ([g_r, g_z, g_ghn_total],), {"axis": axis})
    return g_gi, g_gh, g_h


def _infer_gru_grad(attrs, gates, ghn, h, g_hout):
    check_float([("Gates", gates), ("Ghn", ghn), ("H", h), ("Hout@GRAD", g_hout)])
    check_gate_axis("Gates", gates, GRU_GATES)
    for slot, var in (("Ghn", ghn), ("H", h), ("Hout@GRAD", g_hout)):
        check_state(slot, var, "Gates", gates, GRU_GATES)
    gates_desc = (tuple(gates.shape), gates.dtype)
    return gates_desc, gates_desc, (tuple(h.shape), h.dtype)


@register(
    "gru_cell_grad",
    inputs=("Gates", "Ghn", "H", "Hout@GRAD"),
    outputs=("Gi@GRAD", "Gh@GRAD", "H@GRAD"),
    infer=_infer_gru_grad,
    differentiable=False,
)
def gru_cell_grad(xp, attrs, gates, ghn, h, g_hout):
    """gru_cell's gradient from its saved Gates [r, z, n] and Ghn and its input H. With
    dn' = Hout@GRAD (1 - z) (1 - n^2):

        Gi@GRAD = [dn' Ghn r (1 - r), Hout@GRAD (H - n) z (1 - z), dn']
        Gh@GRAD = Gi@GRAD with its n block replaced by dn' r;  H@GRAD = Hout@GRAD z

    Not differentiable: a gradient that must be differentiated again is composed from
    registered ops instead (see gru_cell).
    """
    hidden = h.shape[-1]
    rz, split_at = slice(0, 2 * hidden), 2 * hidden
    r, z, n = gates[..., :hidden], gates[..., hidden:split_at], gates[..., split_at:]
    g_gi, g_gh = xp.empty(gates.shape, gates.dtype), xp.empty(gates.shape, gates.dtype)
    gi_r, gi_z, gi_n = g_gi[..., :hidden], g_gi[..., hidden:split_at], g_gi[..., split_at:]
    gh_n = g_gh[..., split_at:]  # a scratch buffer until its value, dn' r, is written last
    xp.subtract(1.0, gates[..., rz], out=g_gi[..., rz])
    g_gi[..., rz] *= gates[..., rz]  # sigmoid' = s (1 - s) for r and z in one pass
    xp.subtract(h, n, out=gh_n)
    gh_n *= g_hout
    gi_z *= gh_n
    g_h = xp.multiply(g_hout, z)
    xp.subtract(g_hout, g_h, out=gi_n)
    xp.multiply(n, n, out=gh_n)
    xp.subtract(1.0, gh_n, out=gh_n)
    gi_n *= gh_n  # tanh' = 1 - n^2
    gi_r *= ghn
    gi_r *= gi_n
    g_gh[..., rz] = g_gi[..., rz]
    xp.multiply(gi_n, r, out=gh_n)
    return g_gi, g_gh, g_h
