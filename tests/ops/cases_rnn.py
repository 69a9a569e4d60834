"""Cases for the fused LSTM step (lstm_cell) and its gradient op, against plain-numpy references."""

import numpy as np

from tape.testing import OpCase


def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # no overflow for saturated gates


def _activated_gates(z):
    i, f, g, o = np.split(z, 4, axis=-1)  # PyTorch's gate order
    return _sigmoid(i), _sigmoid(f), np.tanh(g), _sigmoid(o)


def lstm_cell_reference(gi, gh, c, bias_ih=None, bias_hh=None):
    """(Hout, Cout, Gates) of one LSTM step, written out gate by gate."""
    z = gi + gh
    for bias in (bias_ih, bias_hh):
        if bias is not None:
            z = z + bias
    i, f, g, o = _activated_gates(z)
    c_next = f * c + i * g
    return o * np.tanh(c_next), c_next, np.concatenate([i, f, g, o], axis=-1)


def lstm_cell_returned(*inputs):
    """What ``ops.lstm_cell`` returns: (Hout, Cout)."""
    return lstm_cell_reference(*inputs)[:2]


def lstm_cell_grad_reference(gates, c, cout, g_hout=None, g_cout=None):
    """(dz, dC) by the chain rule through Cout = f C + i g and Hout = o tanh(Cout)."""
    i, f, g, o = np.split(gates, 4, axis=-1)
    g_hout = np.zeros_like(c) if g_hout is None else g_hout
    g_cout = np.zeros_like(c) if g_cout is None else g_cout
    tanh_c = np.tanh(cout)
    g_state = g_cout + g_hout * o * (1 - tanh_c**2)
    gz = np.concatenate(
        [
            g_state * g * i * (1 - i),
            g_state * c * f * (1 - f),
            g_state * i * (1 - g**2),
            g_hout * tanh_c * o * (1 - o),
        ],
        axis=-1,
    )
    return gz, g_state * f


def _saved(lead, hidden):
    """Gates, C, Cout of a real forward step (so Gates lie in the activations' ranges)."""
    rng = np.random.default_rng(5)
    shape = lead + (4 * hidden,)
    c = rng.standard_normal(lead + (hidden,))
    _, cout, gates = lstm_cell_reference(rng.standard_normal(shape), rng.standard_normal(shape), c)
    return {"Gates": gates, "C": c, "Cout": cout}


def _grad_case(name, lead, hidden, with_hout=True, with_cout=True):
    inputs = _saved(lead, hidden)
    if with_hout:
        inputs["Hout@GRAD"] = lead + (hidden,)
    if with_cout:
        inputs["Cout@GRAD"] = lead + (hidden,)
    return OpCase(
        "lstm_cell_grad", inputs, reference=lstm_cell_grad_reference, grad=False, name=name
    )


CASES = [
    OpCase(
        "lstm_cell",
        {"Gi": (2, 12), "Gh": (2, 12), "C": (2, 3), "BiasIh": (12,), "BiasHh": (12,)},
        reference=lstm_cell_returned,
        double_grad=True,
        name="batch_bias",
    ),
    OpCase(
        "lstm_cell",
        {"Gi": (2, 8), "Gh": (2, 8), "C": (2, 2)},
        reference=lstm_cell_returned,
        double_grad=True,
        name="batch_no_bias",
    ),
    OpCase(
        "lstm_cell",
        {"Gi": (8,), "Gh": (8,), "C": (2,), "BiasIh": (8,), "BiasHh": (8,)},
        reference=lstm_cell_returned,
        double_grad=True,
        name="vector_bias",
    ),
    OpCase(
        "lstm_cell",
        {"Gi": (12,), "Gh": (12,), "C": (3,), "BiasHh": (12,)},
        reference=lstm_cell_returned,
        name="vector_one_bias",
    ),
    OpCase(
        "lstm_cell",
        {"Gi": (3, 2, 8), "Gh": (3, 2, 8), "C": (3, 2, 2), "BiasIh": (8,), "BiasHh": (8,)},
        reference=lstm_cell_returned,
        name="two_leading_axes",
    ),
    OpCase(
        "lstm_cell",
        {"Gi": (16, 512), "Gh": (16, 512), "C": (16, 128), "BiasIh": (512,), "BiasHh": (512,)},
        reference=lstm_cell_returned,
        name="benchmark_size",
    ),
    OpCase(
        "lstm_cell",
        {"Gi": (0, 8), "Gh": (0, 8), "C": (0, 2)},
        reference=lstm_cell_returned,
        name="empty_batch",
    ),
    # Saturated gates: sigmoid reaches its limits 0 and 1 (exp(-z) overflows to inf).
    OpCase(
        "lstm_cell",
        {"Gi": lambda rng, dt: np.array([[-1e3, 1e3, 0.5, -1e3]], dt), "Gh": (1, 4), "C": (1, 1)},
        reference=lstm_cell_returned,
        grad=False,
        name="saturated",
    ),
    _grad_case("both", (2,), 3),
    _grad_case("hout_only", (2,), 3, with_cout=False),
    _grad_case("cout_only", (), 4, with_hout=False),
    _grad_case("vector_none", (), 2, with_hout=False, with_cout=False),
    _grad_case("two_leading_axes", (3, 2), 2),
    _grad_case("benchmark_size", (16,), 128),
]
