"""Recurrent-cell ops: the fused LSTM step (lstm_cell) and its fused gradient (lstm_cell_grad).

An unrolled LSTM built from small ops records about 15 forward and 20 gradient ops per step, and
their per-op overhead and temporaries dominate at typical sizes; one op per step (as DyNet's
vanilla_lstm and PyTorch's fused LSTM cell) keeps the two projections as separate matmuls, so a
scheduler can still batch the input projections of all steps. Gates are in PyTorch's order
(i, f, g, o) along the last axis.
"""

from __future__ import annotations

import numpy as np

from ops.activation import sigmoid_grad, tanh, tanh_grad
from ops.compose import NO_ATTRS, mul
from ops.fill import fill_zeros_like
from ops.fusion_backends import lstm_grad_loop
from ops.infer import promoted_float
from ops.reduce import sum_to
from ops.registry import Attr, register
from ops.shape import concat, split
from ops.xp import promote
from tape.errors import ShapeError
from tape.tape import apply, state


def sigmoid_in_place(xp, z):
    """z <- 1 / (1 + exp(-z)). Where exp(-z) overflows to inf the result is 0, the right limit,
    so the overflow warning is silenced rather than the argument clamped (a clamp is a pass
    that costs as much as the exp)."""
    xp.negative(z, out=z)
    with np.errstate(over="ignore"):
        xp.exp(z, out=z)
    z += 1.0
    xp.divide(1.0, z, out=z)


def _by_gate(array):
    """A (..., 4, H) view of a (..., 4H) array: index [..., k, :] is gate k of (i, f, g, o)."""
    return array.reshape(array.shape[:-1] + (4, array.shape[-1] // 4))


def _gate_major(ndim):
    """The transpose of a (..., 4, H) array (``ndim`` axes) to (4, ..., H)."""
    return (ndim - 2, *range(ndim - 2), ndim - 1)


def check_float(slots):
    """Every given (slot, Variable) is floating point; returns their promoted dtype."""
    return promoted_float(slots)


LSTM_GATES = ("i", "f", "g", "o")
_FRACTION = {2: "half", 3: "a third", 4: "a quarter"}


def check_state(slot, var, gates_slot, gates, names=LSTM_GATES):
    """``var`` is (..., H) for ``gates`` (..., kH), k = len(names): the same leading axes."""
    count = len(names)
    lead, hidden = tuple(gates.shape[:-1]), gates.shape[-1] // count
    if tuple(var.shape[:-1]) != lead:
        raise ShapeError(
            None,
            f"the leading axes of {slot} and {gates_slot} differ",
            expected=f"{slot}.shape[:-1] == {gates_slot}.shape[:-1] == {lead}",
            actual=f"{slot}.shape={var.shape}, {gates_slot}.shape={gates.shape}",
        )
    if var.shape[-1] != hidden:
        raise ShapeError(
            None,
            f"the last axis of {slot} must be {_FRACTION[count]} of {gates_slot}'s "
            f"(one value per gate {', '.join(names)})",
            expected=f"{slot}.shape[-1] == {gates_slot}.shape[-1] / {count} == {hidden}",
            actual=f"{slot}.shape={var.shape}, {gates_slot}.shape={gates.shape}",
        )


def check_gate_axis(slot, gates, names=LSTM_GATES):
    count = len(names)
    if not gates.shape or gates.shape[-1] % count:
        raise ShapeError(
            None,
            f"the last axis of {slot} must hold {count} gates ({', '.join(names)})",
            expected=f"{slot}.shape == (..., {count} * H)",
            actual=f"{slot}.shape={gates.shape}",
        )


def check_cell_inputs(gi, gh, state_slot, state, bias_ih, bias_hh, names=LSTM_GATES):
    """The checks a fused cell's inputs share: float inputs, projections Gi and Gh of one shape
    (..., G*H), a state (..., H) and biases (G*H,) where given. Returns the promoted dtype."""
    dtype = check_float(
        [("Gi", gi), ("Gh", gh), (state_slot, state), ("BiasIh", bias_ih), ("BiasHh", bias_hh)]
    )
    if tuple(gi.shape) != tuple(gh.shape):
        raise ShapeError(
            None,
            "Gi and Gh must have the same shape",
            expected="Gi.shape == Gh.shape",
            actual=f"Gi.shape={gi.shape}, Gh.shape={gh.shape}",
        )
    check_gate_axis("Gi", gi, names)
    check_state(state_slot, state, "Gi", gi, names)
    for slot, bias in (("BiasIh", bias_ih), ("BiasHh", bias_hh)):
        if bias is not None and tuple(bias.shape) != (gi.shape[-1],):
            raise ShapeError(
                None,
                f"{slot} must hold one value per gate unit",
                expected=f"{slot}.shape == ({gi.shape[-1]},) (Gi.shape[-1])",
                actual=f"{slot}.shape={bias.shape}",
            )
    return dtype


def _infer_lstm(attrs, gi, gh, c, bias_ih, bias_hh):
    dtype = check_cell_inputs(gi, gh, "C", c, bias_ih, bias_hh)
    state_desc = (tuple(c.shape), dtype)
    return state_desc, state_desc, (tuple(gi.shape), dtype)


@register(
    "lstm_cell",
    inputs=("Gi", "Gh", "C", "BiasIh?", "BiasHh?"),
    outputs=("Hout", "Cout", "Gates"),
    infer=_infer_lstm,
    no_need_buffer=("Gi", "Gh", "BiasIh", "BiasHh"),
    returns=lambda results: results[:2],
)
def lstm_cell(xp, attrs, gi, gh, c, bias_ih, bias_hh):
    """One LSTM step from the projections Gi = x W_ih^T and Gh = h W_hh^T, (..., 4H) each, and
    the cell state C (..., H); returns (Hout, Cout), keeping Gates for the gradient:

        z = Gi + Gh + BiasIh + BiasHh (the biases are optional, (4H,))
        i, f, g, o = sigmoid(z_i), sigmoid(z_f), tanh(z_g), sigmoid(z_o);  Gates = [i, f, g, o]
        Cout = f * C + i * g;  Hout = o * tanh(Cout)

    Gradient, with dC' = dCout + dHout * o * (1 - tanh(Cout)^2):
        dz = [dC' g i (1 - i), dC' C f (1 - f), dC' i (1 - g^2), dHout tanh(Cout) o (1 - o)]
        dGi = dGh = dz;  dBiasIh = dBiasHh = dz summed over the leading axes;  dC = dC' * f
    one fused 'lstm_cell_grad' op, or registered ops (split, sigmoid_grad, tanh_grad, mul,
    concat) when the gradient must itself be differentiable.

    >>> import numpy as np, tape, ops
    >>> zeros = tape.Variable(np.zeros((1, 8), np.float32))
    >>> h, c = ops.lstm_cell(zeros, zeros, tape.Variable(np.ones((1, 2), np.float32)))
    >>> c.numpy(), h.numpy().round(4)
    (array([[0.5, 0.5]], dtype=float32), array([[0.2311, 0.2311]], dtype=float32))
    """
    gi, gh, c, bias_ih, bias_hh = promote(gi, gh, c, bias_ih, bias_hh)
    gates = xp.add(gi, gh)
    if bias_ih is not None and bias_hh is not None:
        gates += bias_ih + bias_hh  # one (4H,) add instead of a second pass over the batch
    elif bias_ih is not None or bias_hh is not None:
        gates += bias_ih if bias_ih is not None else bias_hh
    by_gate = _by_gate(gates)
    g = by_gate[..., 2, :]
    tanh_g = xp.tanh(g)
    sigmoid_in_place(xp, gates)  # one pass over all four gates; g is put back below
    g[...] = tanh_g
    i, f, o = by_gate[..., 0, :], by_gate[..., 1, :], by_gate[..., 3, :]
    hout = xp.multiply(f, c)
    cout = xp.multiply(i, g)
    cout += hout
    xp.tanh(cout, out=hout)  # hout's buffer served as f * C's temporary
    hout *= o
    return hout, cout, gates


@lstm_cell.gradient
def _(g):
    _, _, c, bias_ih, bias_hh = g.inputs
    _, cout, gates = g.outputs
    g_hout, g_cout, g_gates = g.gouts
    gbias = None
    if state.grad_enabled or g_gates is not None:
        gz, gc = _composed_grad(gates, c, cout, g_hout, g_cout, g_gates)
        if g.needs(3) or g.needs(4):
            gbias = sum_to(gz, (gates.shape[-1],))
    else:
        # The fused gradient sums dz for the biases too: one op per step fewer to record.
        gz, gc, gbias = apply(
            lstm_cell_grad, (gates, c, cout, g_hout, g_cout), lstm_cell_grad.defaults
        )
    # Both biases get this one Variable.
    return gz, gz, gc, gbias if g.needs(3) else None, gbias if g.needs(4) else None


def _composed_grad(gates, c, cout, g_hout, g_cout, g_gates):
    """(dz, dC) from registered ops, differentiable again: the formulas of lstm_cell_grad, plus
    the gradient of the Gates output (which a double backward reaches through this very graph)."""
    split4 = {"num": 4, "sections": (), "axis": len(gates.shape) - 1}
    i, f, g, o = apply(split, (gates,), split4)
    g_state, g_o = g_cout, None
    if g_hout is not None:
        tanh_c = apply(tanh, (cout,), NO_ATTRS)
        g_o = mul(g_hout, tanh_c)
        from_h = apply(tanh_grad, (tanh_c, mul(g_hout, o)), NO_ATTRS)
        g_state = from_h if g_state is None else g_state + from_h
    # Gradients of the activated gates i, f, g, o, before their activations' derivatives.
    activated = [None, None, None, g_o]
    if g_state is not None:
        activated[:3] = [mul(g_state, g), mul(g_state, c), mul(g_state, i)]
    if g_gates is not None:
        for k, piece in enumerate(apply(split, (g_gates,), split4)):
            activated[k] = piece if activated[k] is None else activated[k] + piece
    pieces = []
    for out, grad, derivative in zip(
        (i, f, g, o), activated, (sigmoid_grad, sigmoid_grad, tanh_grad, sigmoid_grad)
    ):
        pieces.append(
            apply(fill_zeros_like, (out,), NO_ATTRS)
            if grad is None
            else apply(derivative, (out, grad), NO_ATTRS)
        )
    gz = apply(concat, (pieces,), {"axis": len(gates.shape) - 1})
    return gz, None if g_state is None else mul(g_state, f)


def _infer_lstm_grad(attrs, gates, c, cout, g_hout, g_cout):
    dtype = check_float(
        [("Gates", gates), ("C", c), ("Cout", cout), ("Hout@GRAD", g_hout), ("Cout@GRAD", g_cout)]
    )
    check_gate_axis("Gates", gates)
    for slot, var in (("C", c), ("Cout", cout), ("Hout@GRAD", g_hout), ("Cout@GRAD", g_cout)):
        if var is not None:
            check_state(slot, var, "Gates", gates)
    return (tuple(gates.shape), dtype), (tuple(c.shape), dtype), ((gates.shape[-1],), dtype)


@register(
    "lstm_cell_grad",
    inputs=("Gates", "C", "Cout", "Hout@GRAD?", "Cout@GRAD?"),
    outputs=("Z@GRAD", "C@GRAD", "Bias@GRAD"),
    attrs={"fast_exp": Attr("bool", False)},
    infer=_infer_lstm_grad,
    differentiable=False,
)
def lstm_cell_grad(xp, attrs, gates, c, cout, g_hout, g_cout):
    """lstm_cell's gradient from its saved Gates [i, f, g, o], C and Cout (tanh(Cout) is
    recomputed); an absent Hout@GRAD or Cout@GRAD counts as zeros. With
    dC' = Cout@GRAD + Hout@GRAD * o * (1 - tanh(Cout)^2):

        Z@GRAD = [dC' g i (1 - i), dC' C f (1 - f), dC' i (1 - g^2), Hout@GRAD tanh(Cout) o (1 - o)]
        C@GRAD = dC' * f
        Bias@GRAD = Z@GRAD summed over the leading axes (the gradient of either bias)

    Not differentiable: a gradient that must be differentiated again is composed from
    registered ops instead (see lstm_cell).

    ``fast_exp`` (float32): the gradient as one compiled loop
    (``ops.fusion_backends.lstm_grad_loop``) where that applies, equal to the default within
    rounding; off by default, so eager mode keeps numpy's bits (lazy plans that may round
    differently turn it on).
    """
    if attrs["fast_exp"]:
        made = lstm_grad_loop.backward(gates, c, cout, g_hout, g_cout)
        if made is not None:
            return made
    # Arithmetic on a gate's strided slice of (..., 4H) costs several times as much as on a
    # contiguous array at LSTM sizes, so the gates are copied once into a gate-major block
    # (4, ..., H) and Z@GRAD is built in another, copied back at the end.
    gates, c, cout, g_hout, g_cout = promote(gates, c, cout, g_hout, g_cout)
    to_major = _gate_major(gates.ndim + 1)
    major = xp.ascontiguousarray(_by_gate(gates).transpose(to_major))
    i, f, g, o = major
    gz_major = xp.subtract(1.0, major)
    gz_major *= major  # sigmoid' = s (1 - s), right for i, f and o
    gz_i, gz_f, gz_g, gz_o = gz_major
    xp.multiply(g, g, out=gz_g)
    xp.subtract(1.0, gz_g, out=gz_g)  # tanh' = 1 - g^2
    g_state = _state_grad(xp, o, c, cout, g_hout, g_cout, gz_o)
    gz_i *= g
    gz_f *= c
    gz_g *= i
    gz_major[:3] *= g_state
    gz = xp.empty(gates.shape, gates.dtype)
    _by_gate(gz).transpose(to_major)[...] = gz_major
    gbias = gz.reshape(-1, gz.shape[-1]).sum(axis=0)
    # g_state is this kernel's own buffer when Hout@GRAD came, never Cout@GRAD's.
    return gz, xp.multiply(g_state, f, out=g_state if g_hout is not None else None), gbias


def _state_grad(xp, o, c, cout, g_hout, g_cout, gz_o):
    """dC' = Cout@GRAD + Hout@GRAD * o * (1 - tanh(Cout)^2); multiplies gz_o (holding
    o (1 - o)) by Hout@GRAD * tanh(Cout) on the way."""
    if g_hout is None:
        gz_o[...] = 0.0
        return g_cout if g_cout is not None else xp.zeros(c.shape, c.dtype)
    g_state = xp.tanh(cout)
    gz_o *= g_hout
    gz_o *= g_state
    # The state's gradient is built in tanh(Cout)'s buffer, after its last read above.
    xp.multiply(g_state, g_state, out=g_state)
    xp.subtract(1.0, g_state, out=g_state)
    g_state *= o
    g_state *= g_hout
    if g_cout is not None:
        g_state += g_cout
    return g_state
