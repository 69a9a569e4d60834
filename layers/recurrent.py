"""LSTM and GRU over a whole sequence (stacked layers, both directions), PyTorch's arguments,
parameter names and layouts, built from the fused cell ops of ``layers.rnn``.

Each (layer, direction) owns a cell (``LSTMCell`` / ``GRUCell``) whose parameters are registered
under PyTorch's names: ``weight_ih_l{k}`` (G*H, input), ``weight_hh_l{k}`` (G*H, H),
``bias_ih_l{k}`` and ``bias_hh_l{k}`` (G*H,), with a ``_reverse`` suffix for the backward
direction, gate blocks in PyTorch's order (LSTM: i, f, g, o; GRU: r, z, n) along the first axis.
A ``torch.nn.LSTM`` / ``GRU`` state dict therefore maps one to one, by name and shape, onto
``named_params()``: ``param.set_value(state_dict[name].numpy())``.

The input projections of all time steps are one matrix product per (layer, direction); each
step is then one ``h @ weight_hh^T`` product and one fused ``lstm_cell`` / ``gru_cell`` op.
"""

from __future__ import annotations

from layers.arguments import size
from layers.function import Function
from layers.rnn import GRUCell, LSTMCell
from ops.registry import REGISTRY
from ops.xp import array_module, default_module
from tape.errors import ShapeError, user_location
from tape.tape import apply
from tape.variable import Variable

_MATMUL = REGISTRY["matmul"]
_TRANSPOSE_Y = _MATMUL.check_attrs({"transpose_y": True})
_NO_ATTRS = {}


def _op(name, *args, **attrs):
    defn = REGISTRY[name]
    return apply(defn, args, defn.check_attrs(attrs) if attrs else defn.defaults)


class _Recurrent(Function):
    """Shared structure of LSTM and GRU; subclasses say which cell and how a step runs."""

    cell_class = None

    def __init__(
        self,
        input_size,
        hidden_size,
        num_layers=1,
        bias=True,
        batch_first=False,
        dropout=0.0,
        bidirectional=False,
        dtype="float32",
    ):
        super().__init__()
        size(input_size, "input_size"), size(hidden_size, "hidden_size")
        size(num_layers, "num_layers")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        self.num_layers, self.bias = int(num_layers), bool(bias)
        self.batch_first, self.dropout = bool(batch_first), float(dropout)
        self.bidirectional = bool(bidirectional)
        self.directions = 2 if bidirectional else 1
        cells = []
        for layer in range(self.num_layers):
            width = self.input_size if layer == 0 else self.hidden_size * self.directions
            for direction in range(self.directions):
                cell = self.cell_class(width, self.hidden_size, bias, dtype)
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    if getattr(cell, name) is not None:
                        setattr(self, name + suffix, getattr(cell, name))
                cells.append(cell)
        object.__setattr__(self, "_cells", cells)  # their parameters are registered above

    def forward(self, input, hx=None):
        x, unbatched = self._time_major(input)
        states = self._initial_states(x, hx, unbatched)
        finals = []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(self.directions):
                index = layer * self.directions + direction
                cell = self._cells[index]
                out, final = self._run(cell, x, states[index], reverse=direction == 1)
                outputs.append(out)
                finals.append(final)
            x = outputs[0] if len(outputs) == 1 else _op("concat", outputs, axis=-1)
            if self.dropout > 0.0 and self.training and layer < self.num_layers - 1:
                x, _ = _op("dropout", x, dropout_prob=self.dropout)
        return self._batch_layout(x, unbatched), self._final_states(finals, unbatched)

    def _run(self, cell, x, state, reverse):
        """One direction of one layer over time-major x (T, N, in): (outputs (T, N, H), final
        state), every state kept as (1, N, H) so that a step's output needs no reshape."""
        steps, batch = x.shape[0], x.shape[1]
        flat = _op("reshape", x, shape=(steps * batch, x.shape[2]))
        projected = apply(_MATMUL, (flat, cell.weight_ih), _TRANSPOSE_Y)
        projected = _op("reshape", projected, shape=(steps, batch, projected.shape[-1]))
        pieces = _op("split", projected, num=steps, axis=0) if steps > 1 else [projected]
        outputs = [None] * steps
        for t in reversed(range(steps)) if reverse else range(steps):
            state = self._step(cell, pieces[t], state)
            outputs[t] = self._hidden(state)
        out = outputs[0] if steps == 1 else _op("concat", outputs, axis=0)
        return out, state

    def _time_major(self, input):
        rank = len(input.shape)
        if rank not in (2, 3) or input.shape[-1] != self.input_size:
            layout = "(N, T, input_size)" if self.batch_first else "(T, N, input_size)"
            raise ShapeError(
                "matmul",
                f"{self!r} expects input {layout} or (T, input_size)",
                expected=f"input.shape[-1] == input_size == {self.input_size}",
                actual=f"input.shape={input.shape}",
                location=user_location(),
            )
        if rank == 2:
            x = _op("unsqueeze", input, axes=[1])
        elif self.batch_first:
            x = _op("transpose", input, perm=(1, 0, 2))
        else:
            x = input
        if x.shape[0] == 0:
            raise ShapeError(
                "matmul",
                f"{type(self).__name__} needs at least one time step",
                actual=f"input.shape={input.shape}",
                location=user_location(),
            )
        return x, rank == 2

    def _batch_layout(self, out, unbatched):
        if unbatched:
            return _op("squeeze", out, axes=[1])
        return _op("transpose", out, perm=(1, 0, 2)) if self.batch_first else out

    def _split_state(self, x, state, name, unbatched):
        """A user's (L*D, N, H) (or unbatched (L*D, H)) state as one (1, N, H) per cell."""
        count = self.num_layers * self.directions
        expected = (count,) + (() if unbatched else (x.shape[1],)) + (self.hidden_size,)
        if tuple(state.shape) != expected:
            raise ShapeError(
                "lstm_cell" if self.gates == 4 else "gru_cell",
                f"{type(self).__name__} initial state {name} does not match the input",
                expected=f"{name}.shape == {expected} (num_layers * directions, batch, hidden)",
                actual=f"{name}.shape={state.shape}",
                location=user_location(),
            )
        if unbatched:
            state = _op("unsqueeze", state, axes=[1])
        return _op("split", state, num=count, axis=0) if count > 1 else [state]

    def _zeros(self, x):
        value = x._value
        xp = array_module(value) if value is not None else default_module()
        return Variable(xp.zeros((1, x.shape[1], self.hidden_size), dtype=x.dtype))

    def _stack_states(self, finals, unbatched):
        stacked = finals[0] if len(finals) == 1 else _op("concat", finals, axis=0)
        return _op("squeeze", stacked, axes=[1]) if unbatched else stacked

    def __repr__(self):
        extra = "".join(
            f", {name}={getattr(self, name)!r}"
            for name, default in (
                ("num_layers", 1),
                ("bias", True),
                ("batch_first", False),
                ("dropout", 0.0),
                ("bidirectional", False),
            )
            if getattr(self, name) != default
        )
        return f"{type(self).__name__}({self.input_size}, {self.hidden_size}{extra})"


class LSTM(_Recurrent):
    """A multi-layer, optionally bidirectional LSTM over a sequence, as ``torch.nn.LSTM``:
    ``lstm(input, (h0, c0)) -> (output, (h_n, c_n))``; without the state it starts from zeros.

    Args:
        input_size, hidden_size: feature sizes of the input and of h and c.
        num_layers: stacked layers; layer k > 0 reads layer k-1's output.
        bias: whether the cells have ``bias_ih`` and ``bias_hh``.
        batch_first: input and output (N, T, features) instead of (T, N, features).
        dropout: dropout on each layer's output except the last's, in training mode.
        bidirectional: a second cell per layer reads the sequence backwards; outputs are
            concatenated [forward, backward] on the feature axis.
        dtype: the parameters' dtype.

    ``output`` is (T, N, D*H) (or batch-first, or (T, D*H) for an unbatched (T, input) input);
    h0, c0, h_n and c_n are (num_layers * D, N, H), ordered layer by layer, forward first.

    >>> import numpy as np, tape, layers
    >>> lstm = layers.LSTM(3, 5, num_layers=2, bidirectional=True, batch_first=True)
    >>> out, (h, c) = lstm(tape.Variable(np.ones((2, 7, 3), np.float32)))
    >>> out.shape, h.shape, c.shape
    ((2, 7, 10), (4, 2, 5), (4, 2, 5))
    >>> [name for name, _ in lstm.named_params()][:5]
    ['weight_ih_l0', 'weight_hh_l0', 'bias_ih_l0', 'bias_hh_l0', 'weight_ih_l0_reverse']
    """

    cell_class = LSTMCell
    gates = 4

    def _initial_states(self, x, hx, unbatched):
        count = self.num_layers * self.directions
        if hx is None:
            zeros = self._zeros(x)
            return [(zeros, zeros)] * count
        h0, c0 = hx
        hs = self._split_state(x, h0, "h0", unbatched)
        cs = self._split_state(x, c0, "c0", unbatched)
        return list(zip(hs, cs, strict=True))

    def _step(self, cell, gi, state):
        h, c = state
        gh = apply(_MATMUL, (h, cell.weight_hh), _TRANSPOSE_Y)
        return tuple(apply(REGISTRY["lstm_cell"], (gi, gh, c, cell.bias_ih, cell.bias_hh), {}))

    @staticmethod
    def _hidden(state):
        return state[0]

    def _final_states(self, finals, unbatched):
        h = self._stack_states([f[0] for f in finals], unbatched)
        c = self._stack_states([f[1] for f in finals], unbatched)
        return h, c


class GRU(_Recurrent):
    """A multi-layer, optionally bidirectional GRU over a sequence, as ``torch.nn.GRU``:
    ``gru(input, h0) -> (output, h_n)``; arguments and shapes as ``LSTM`` (without c).

    >>> import numpy as np, tape, layers
    >>> gru = layers.GRU(3, 4, num_layers=2)
    >>> out, h = gru(tape.Variable(np.ones((6, 2, 3), np.float32)))
    >>> out.shape, h.shape
    ((6, 2, 4), (2, 2, 4))
    """

    cell_class = GRUCell
    gates = 3

    def _initial_states(self, x, hx, unbatched):
        if hx is None:
            return [self._zeros(x)] * (self.num_layers * self.directions)
        return self._split_state(x, hx, "h0", unbatched)

    def _step(self, cell, gi, h):
        gh = apply(_MATMUL, (h, cell.weight_hh), _TRANSPOSE_Y)
        return apply(REGISTRY["gru_cell"], (gi, gh, h, cell.bias_ih, cell.bias_hh), _NO_ATTRS)

    @staticmethod
    def _hidden(state):
        return state

    def _final_states(self, finals, unbatched):
        return self._stack_states(finals, unbatched)


__all__ = ["LSTM", "GRU"]
