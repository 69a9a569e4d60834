"""The fused LSTM step and its gradient as one compiled loop each, for non-exact lazy plans.

numpy's ``lstm_cell`` is ~12 passes over small arrays (the gate sums, the sigmoid's four, tanh,
the state's products) and ``lstm_cell_grad`` ~20; at a language model's batch 16 and hidden 128
each pass is mostly its call. Measured on (16, 512) float32 gates: the step 23 us in numpy
against 12 us here, its gradient 20 against 6; per step of ``lstm_lm`` (20 of them), in its
plan, 34 and 33 us in numpy.

Each loop walks a row's gates once per activation with ``vecmath``'s exp and tanh (LLVM
vectorises them), each inner loop writing arrays it does not read: one that activated the gates
in place stayed scalar (39 us). The float operations are numpy's kernels', in the same
order, so the values differ from numpy's only where ``vecmath``'s exp and tanh round otherwise
(within 1 ulp of the correctly rounded value, where numpy's float32 exp is within 2). So only a
kernel that may differ from eager mode by rounding uses them: ``lstm_cell`` and
``lstm_cell_grad`` with ``fast_exp``, which ``tape.passes.fast_kernels`` sets in lazy plans
unless ``exact``.

float32 only: ``vecmath``'s float64 tanh is the C library's, one element at a time, and the
loop lost to numpy there (61 us against 46). Where the loops do not apply (another dtype, other
than 2-D, a read-only array, a missing bias, an absent output gradient, numpy told to raise on
floating-point errors) or are not compiled yet, ``forward`` and ``backward`` return None and
the kernel runs numpy's passes. The loops compile in the compile process once the op has run
64 times, as fused kernels do (``compiled_loop``); a program never waits for a compile.
"""

from __future__ import annotations

import numpy as np

from ops.fusion_backends import compiled_loop

FORWARD = """\
def fused(gi, gh, c, bias, hout, cout, gates):
    hidden = c.shape[1]
    one = np.float32(1.0)
    for r in range(c.shape[0]):
        x = gi[r]
        y = gh[r]
        z = gates[r]
        for j in range(2 * hidden):
            z[j] = one / (one + np.exp(-((x[j] + y[j]) + bias[j])))
        for j in range(2 * hidden, 3 * hidden):
            z[j] = np.tanh((x[j] + y[j]) + bias[j])
        for j in range(3 * hidden, 4 * hidden):
            z[j] = one / (one + np.exp(-((x[j] + y[j]) + bias[j])))
        state = c[r]
        new = cout[r]
        out = hout[r]
        for j in range(hidden):
            value = z[j] * z[2 * hidden + j] + z[hidden + j] * state[j]
            new[j] = value
            out[j] = np.tanh(value) * z[3 * hidden + j]
    return 0
"""

BACKWARD = """\
def fused(gates, c, cout, g_hout, g_cout, gz, gc):
    hidden = c.shape[1]
    one = np.float32(1.0)
    for r in range(c.shape[0]):
        z = gates[r]
        d = gz[r]
        state = c[r]
        new = cout[r]
        gh = g_hout[r]
        gn = g_cout[r]
        gs = gc[r]
        for j in range(hidden):
            t = np.tanh(new[j])
            o = z[3 * hidden + j]
            d[3 * hidden + j] = (((one - o) * o) * gh[j]) * t
            gs[j] = (((one - t * t) * o) * gh[j]) + gn[j]
        for j in range(hidden):
            i = z[j]
            g = z[2 * hidden + j]
            s = gs[j]
            d[j] = (((one - i) * i) * g) * s
            d[2 * hidden + j] = ((one - g * g) * i) * s
        for j in range(hidden):
            f = z[hidden + j]
            s = gs[j]
            d[hidden + j] = (((one - f) * f) * state[j]) * s
            gs[j] = s * f
    return 0
"""

SOURCES = {"forward": FORWARD, "backward": BACKWARD}
_ARGUMENTS = {"forward": (2, 2, 2, 1, 2, 2, 2), "backward": (2,) * 7}  # (each one's ndim)
_FLOAT32 = np.dtype(np.float32)
_RAISES = frozenset(("raise", "call", "log"))  # (numpy error handlers a loop cannot honour)
_LOOPS = {}  # "forward" / "backward" -> compiled_loop.Loop


def loop(kind):
    """The loop ``kind`` ("forward" or "backward"), made at its first use; None where loops
    cannot be had."""
    return compiled_loop.loop(_LOOPS, kind, _make)


def _make(kind):
    arguments = [compiled_loop.array(_FLOAT32, ndim) for ndim in _ARGUMENTS[kind]]
    return compiled_loop.Loop(SOURCES[kind], arguments, imports=True)


def forward(gi, gh, c, bias_ih, bias_hh):
    """``(Hout, Cout, Gates)`` of ``lstm_cell``, or None where the loop does not apply or is
    not compiled yet (see the module docstring)."""
    if bias_ih is None or bias_hh is None:
        return None
    # (a projection ``h @ W_hh.T`` may come F-ordered: ``ops.matmul.product``; one copy)
    gi, gh = _c_ordered(gi), _c_ordered(gh)
    if not _plain(c, (gi, gh)):
        return None
    if not _plain_bias(bias_ih, gi) or not _plain_bias(bias_hh, gi):
        return None
    loops = _ready("forward")
    if loops is None:
        return None
    bias = bias_ih + bias_hh  # (numpy's kernel adds the biases first, too)
    hout, cout, gates = np.empty_like(c), np.empty_like(c), np.empty_like(gi)
    loops(gi, gh, c, bias, hout, cout, gates)
    return hout, cout, gates


def backward(gates, c, cout, g_hout, g_cout):
    """``(Z@GRAD, C@GRAD, Bias@GRAD)`` of ``lstm_cell_grad``, or None where the loop does not
    apply (an absent output gradient among them) or is not compiled yet."""
    if g_hout is None or g_cout is None or not _plain(c, (gates,), (cout, g_hout, g_cout)):
        return None
    loops = _ready("backward")
    if loops is None:
        return None
    gz, gc = np.empty_like(gates), np.empty_like(c)
    loops(gates, c, cout, g_hout, g_cout, gz, gc)
    return gz, gc, gz.sum(axis=0)


def _ready(kind):
    if not _RAISES.isdisjoint(np.geterr().values()):  # (numpy's passes raise where asked)
        return None
    found = loop(kind)
    return None if found is None else found.ready()


def _plain(state, gate_arrays, state_arrays=()):
    """Whether ``state`` and ``state_arrays`` are (rows, H) and ``gate_arrays`` (rows, 4H), all
    writeable C-contiguous float32 numpy arrays: the arrays the loops were compiled for
    (another type would compile in the program)."""
    if state.__class__ is not np.ndarray or state.ndim != 2:
        return False
    rows, hidden = shape = state.shape
    gates = (rows, 4 * hidden)
    for arrays, want in ((gate_arrays, gates), ((state, *state_arrays), shape)):
        for array in arrays:
            if array.__class__ is not np.ndarray or array.dtype != _FLOAT32 or array.shape != want:
                return False
            flags = array.flags  # (made at each access: once)
            if not (flags.c_contiguous and flags.writeable):
                return False
    return True


def _c_ordered(array):
    if array.__class__ is np.ndarray and array.ndim == 2 and not array.flags.c_contiguous:
        return np.ascontiguousarray(array)
    return array


def _plain_bias(bias, gates):
    return bias.__class__ is np.ndarray and bias.dtype == _FLOAT32 and bias.shape == gates.shape[1:]


__all__ = ["forward", "backward", "loop", "SOURCES"]
