"""Recurrent cells: LSTMCell and GRUCell, one time step per call, PyTorch's equations and layout.

Parameters follow PyTorch (``weight_ih`` (G*H, input_size), ``weight_hh`` (G*H, H), ``bias_ih``
and ``bias_hh`` (G*H,), gate blocks stacked along the first axis), so a PyTorch state dict loads
as it is. A step computes all gates with one matmul per input; few ops per step is what an
unrolled Python loop pays for. An LSTM step is then one fused ``lstm_cell`` op (biases, gates
and state update, and one fused gradient op), a GRU step one fused ``gru_cell`` op.
"""

from __future__ import annotations

import math

import numpy as np

from layers import init
from layers.arguments import size
from layers.function import Function
from ops.registry import REGISTRY
from ops.xp import array_module, default_module
from tape.errors import ShapeError, user_location
from tape.tape import apply
from tape.variable import Variable

_MATMUL = REGISTRY["matmul"]
_LSTM = REGISTRY["lstm_cell"]
_GRU = REGISTRY["gru_cell"]
_TRANSPOSE_Y = _MATMUL.check_attrs({"transpose_y": True})
_NO_ATTRS = {}


class _Cell(Function):
    """Shared parameters and checks of the cells; ``gates`` is 4 (LSTM) or 3 (GRU)."""

    gates = 0

    def __init__(self, input_size, hidden_size, bias=True, dtype="float32"):
        super().__init__()
        self.input_size = size(input_size, "input_size")
        self.hidden_size = size(hidden_size, "hidden_size")
        width = self.gates * self.hidden_size
        # PyTorch: every parameter U(-1/sqrt(hidden), 1/sqrt(hidden)).
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0.0
        uniform = init.uniform(-bound, bound)
        self.weight_ih = self.create_parameter(
            (width, self.input_size), uniform, dtype, name="weight_ih"
        )
        self.weight_hh = self.create_parameter(
            (width, self.hidden_size), uniform, dtype, name="weight_hh"
        )
        self.bias_ih = self.bias_hh = None
        if bias:
            self.bias_ih = self.create_parameter((width,), uniform, dtype, name="bias_ih")
            self.bias_hh = self.create_parameter((width,), uniform, dtype, name="bias_hh")

    def _projections(self, x, h):
        """(x @ weight_ih^T, h @ weight_hh^T): two matmuls, kept apart so that a scheduler can
        batch the input projections of all steps; the biases go to the fused cell op."""
        gi = apply(_MATMUL, (x, self.weight_ih), _TRANSPOSE_Y)
        gh = apply(_MATMUL, (h, self.weight_hh), _TRANSPOSE_Y)
        return gi, gh

    def _check_input(self, x):
        if not 1 <= len(x.shape) <= 2 or x.shape[-1] != self.input_size:
            raise ShapeError(
                "matmul",
                f"{self!r} expects input of shape (batch, "
                f"{self.input_size}) or ({self.input_size},)",
                expected=f"X.shape[-1] == input_size == {self.input_size}",
                actual=f"X.shape={x.shape}, weight_ih.shape={self.weight_ih.shape}",
                location=user_location(),
            )

    def _check_state(self, x, state, name):
        expected = tuple(x.shape[:-1]) + (self.hidden_size,)
        if tuple(state.shape) != expected:
            raise ShapeError(
                "matmul",
                f"{type(self).__name__} state {name} does not match the input",
                expected=f"{name}.shape == {expected}",
                actual=f"{name}.shape={state.shape}, X.shape={x.shape}",
                location=user_location(),
            )

    def _zeros(self, x):
        value = x._value
        xp = array_module(value) if value is not None else default_module()
        shape = tuple(x.shape[:-1]) + (self.hidden_size,)
        # The dtype the step computes in (float64 data with float32 weights: float64).
        dtype = np.result_type(x.dtype, self.weight_ih.dtype)
        return Variable(xp.zeros(shape, dtype=dtype))

    def __repr__(self):
        bias = "" if self.bias_ih is not None else ", bias=False"
        return f"{type(self).__name__}({self.input_size}, {self.hidden_size}{bias})"


class LSTMCell(_Cell):
    """One LSTM step: ``cell(x, (h, c)) -> (h, c)``; ``cell(x)`` starts from zero state.

    With gate blocks in PyTorch's order (i, f, g, o) along the rows of the weights::

        i, f, g, o = split(x @ weight_ih^T + bias_ih + h @ weight_hh^T + bias_hh, 4)
        c' = sigmoid(f) * c + sigmoid(i) * tanh(g)
        h' = sigmoid(o) * tanh(c')

    A step records three ops: the two projections (kept apart so that a scheduler can batch
    the input projections of all steps) and one ``lstm_cell`` for the rest.

    Args:
        input_size, hidden_size: feature sizes of x (batch, input_size) and of h and c.
        bias: whether to use ``bias_ih`` and ``bias_hh``.
        dtype: the parameters' dtype.

    >>> import numpy as np, tape, layers
    >>> cell = layers.LSTMCell(3, 5)
    >>> h, c = cell(tape.Variable(np.ones((2, 3), np.float32)))
    >>> h.shape, c.shape, [p.shape for p in cell.params()]
    ((2, 5), (2, 5), [(20, 3), (20, 5), (20,), (20,)])
    """

    gates = 4

    def forward(self, x, state=None):
        self._check_input(x)
        if state is None:
            h = c = self._zeros(x)
        else:
            h, c = state
            self._check_state(x, h, "h")
            self._check_state(x, c, "c")
        gi = apply(_MATMUL, (x, self.weight_ih), _TRANSPOSE_Y)
        gh = apply(_MATMUL, (h, self.weight_hh), _TRANSPOSE_Y)
        return apply(_LSTM, (gi, gh, c, self.bias_ih, self.bias_hh), _NO_ATTRS)


class GRUCell(_Cell):
    """One GRU step: ``cell(x, h) -> h``; ``cell(x)`` starts from a zero state.

    With gate blocks in PyTorch's order (r, z, n) along the rows of the weights::

        r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
        z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
        n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
        h' = (1 - z) * n + z * h

    A step records three ops: the two projections and one ``gru_cell`` for the rest (which
    needs ``W_hn h + b_hn`` apart from the input projection, so the two are not summed first).

    >>> import numpy as np, tape, layers
    >>> cell = layers.GRUCell(3, 5)
    >>> cell(tape.Variable(np.ones((2, 3), np.float32))).shape
    (2, 5)
    """

    gates = 3

    def forward(self, x, h=None):
        self._check_input(x)
        if h is None:
            h = self._zeros(x)
        else:
            self._check_state(x, h, "h")
        gi, gh = self._projections(x, h)
        return apply(_GRU, (gi, gh, h, self.bias_ih, self.bias_hh), _NO_ATTRS)


__all__ = ["LSTMCell", "GRUCell"]
