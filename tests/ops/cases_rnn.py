"""Cases for the fused LSTM and GRU steps (lstm_cell, gru_cell) and their gradient ops, against
plain-numpy references."""

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
    """(dz, dC, dBias) by the chain rule through Cout = f C + i g and Hout = o tanh(Cout)."""
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
    return gz, g_state * f, gz.reshape(-1, gz.shape[-1]).sum(axis=0)


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


def gru_cell_reference(gi, gh, h, bias_ih=None, bias_hh=None):
    """(Hout, RZ, N, Ghn) of one GRU step, written out gate by gate."""
    gi = gi if bias_ih is None else gi + bias_ih
    gh = gh if bias_hh is None else gh + bias_hh
    (i_r, i_z, i_n), (h_r, h_z, h_n) = np.split(gi, 3, axis=-1), np.split(gh, 3, axis=-1)
    r, z = _sigmoid(i_r + h_r), _sigmoid(i_z + h_z)  # PyTorch's gate order
    n = np.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h, np.concatenate([r, z], axis=-1), n, h_n


def gru_cell_returned(*inputs):
    """What ``ops.gru_cell`` returns: Hout."""
    return gru_cell_reference(*inputs)[0]


def gru_cell_grad_reference(rz, n, ghn, h, g_hout):
    """(dGi, dGh, dH) by the chain rule through n = tanh(Gi_n + r Ghn), Hout = (1 - z) n + z H."""
    r, z = np.split(rz, 2, axis=-1)
    g_n = g_hout * (1 - z) * (1 - n**2)
    g_r, g_z = g_n * ghn * r * (1 - r), g_hout * (h - n) * z * (1 - z)
    return (
        np.concatenate([g_r, g_z, g_n], axis=-1),
        np.concatenate([g_r, g_z, g_n * r], axis=-1),
        g_hout * z,
    )


def _gru_grad_case(name, lead, hidden):
    """RZ, N, Ghn, H of a real forward step (so the gates lie in the activations' ranges)."""
    rng = np.random.default_rng(6)
    shape = lead + (3 * hidden,)
    h = rng.standard_normal(lead + (hidden,))
    _, rz, n, ghn = gru_cell_reference(rng.standard_normal(shape), rng.standard_normal(shape), h)
    inputs = {"RZ": rz, "N": n, "Ghn": ghn, "H": h, "Hout@GRAD": lead + (hidden,)}
    return OpCase("gru_cell_grad", inputs, reference=gru_cell_grad_reference, grad=False, name=name)


def _gru_case(name, lead, hidden, biases=("BiasIh", "BiasHh"), **options):
    width = 3 * hidden
    inputs = {"Gi": lead + (width,), "Gh": lead + (width,), "H": lead + (hidden,)}
    inputs.update({slot: (width,) for slot in biases})
    return OpCase("gru_cell", inputs, reference=gru_cell_returned, name=name, **options)


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
    _gru_case("batch_bias", (2,), 3, double_grad=True),
    _gru_case("batch_no_bias", (2,), 2, biases=(), double_grad=True),
    _gru_case("vector_bias", (), 3, double_grad=True),
    _gru_case("vector_input_bias_only", (), 3, biases=("BiasIh",)),
    _gru_case("batch_hidden_bias_only", (2,), 2, biases=("BiasHh",)),
    _gru_case("two_leading_axes", (3, 2), 2),
    _gru_case("benchmark_size", (16,), 128),
    _gru_case("empty_batch", (0,), 2),
    # Saturated gates: r = 0 drops Ghn, z = 1 keeps H (exp(-z) overflows to inf).
    OpCase(
        "gru_cell",
        {"Gi": lambda rng, dt: np.array([[-1e3, 1e3, 0.5]], dt), "Gh": (1, 3), "H": (1, 1)},
        reference=gru_cell_returned,
        grad=False,
        name="saturated",
    ),
    _gru_grad_case("batch", (2,), 3),
    _gru_grad_case("vector", (), 4),
    _gru_grad_case("two_leading_axes", (3, 2), 2),
    _gru_grad_case("benchmark_size", (16,), 128),
    _gru_grad_case("empty_batch", (0,), 2),
]
