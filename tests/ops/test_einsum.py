"""einsum against torch.einsum on random equations: any number of operands, repeated labels
(diagonals and traces), labels summed within one operand, '...' with broadcasting, extent-1
broadcasting of labels, implicit and explicit outputs; values and gradients must agree."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ops
import tape

_LABELS = "abcdAB"


@st.composite
def _problem(draw):
    """(equation, operand shapes)."""
    sizes = {c: draw(st.integers(1, 3)) for c in _LABELS}
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    use_ellipsis = draw(st.booleans())
    terms, shapes = [], []
    for _ in range(draw(st.integers(1, 3))):
        labels = draw(st.lists(st.sampled_from(_LABELS), max_size=3))
        shape = []
        for c in labels:  # a label repeated within an operand keeps its extent there
            broadcast = labels.count(c) == 1 and draw(st.integers(0, 4)) == 0
            shape.append(1 if broadcast else sizes[c])
        term = "".join(labels)
        if use_ellipsis and draw(st.booleans()):
            at = draw(st.integers(0, len(labels)))
            mine = batch[draw(st.integers(0, len(batch))) :]
            mine = [1 if draw(st.integers(0, 3)) == 0 else n for n in mine]
            term, shape = term[:at] + "..." + term[at:], shape[:at] + mine + shape[at:]
        terms.append(term)
        shapes.append(tuple(shape))
    equation = ",".join(terms)
    if draw(st.booleans()):
        used = sorted(set("".join(terms).replace(".", "")))
        out = draw(st.permutations(used))[: draw(st.integers(0, len(used)))]
        ellipsis = "..." if "..." in equation and draw(st.booleans()) else ""
        at = draw(st.integers(0, len(out)))
        equation += "->" + "".join(out[:at]) + ellipsis + "".join(out[at:])
    return equation, shapes


@settings(max_examples=200, deadline=None)
@given(_problem(), st.integers(0, 2**31 - 1))
def test_einsum_matches_torch_with_gradients(problem, seed):
    equation, shapes = problem
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    expected = torch.einsum(equation, *tensors)
    tape.reset_global_tape()
    xs = [tape.Variable(a, requires_grad=True) for a in arrays]
    out = ops.einsum(xs, equation=equation)
    assert out.shape == tuple(expected.shape), equation
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    weight = rng.standard_normal(out.shape)
    wanted = torch.autograd.grad(expected, tensors, torch.tensor(weight), allow_unused=True)
    got = tape.grad((out * tape.Variable(weight)).sum(), xs)
    for g, w, x in zip(got, wanted, xs):
        assert g is not None and g.shape == x.shape, equation
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-10, atol=1e-12, err_msg=equation)


def test_float32_stays_float32_and_gradients_keep_each_operands_dtype():
    a = tape.Variable(np.ones((2, 3), np.float32), requires_grad=True)
    b = tape.Variable(np.ones((3,), np.float64), requires_grad=True)
    same = ops.einsum([a, a], equation="ij,ij->")
    assert same.dtype == np.float32
    mixed = ops.einsum([a, b], equation="ij,j->i")
    assert mixed.dtype == np.float64  # numpy's promotion
    ga, gb = tape.grad(mixed.sum(), [a, b])
    assert (ga.dtype, gb.dtype) == (np.float32, np.float64)


def test_second_derivative_of_a_trace_product():
    # f(A) = trace(A @ A): df/dA = 2 A^T, so the Hessian-vector product with V is 2 V^T.
    a = tape.Variable(np.arange(4.0).reshape(2, 2), requires_grad=True)
    (grad,) = tape.grad(ops.einsum([a, a], equation="ij,ji->"), [a], create_graph=True)
    np.testing.assert_allclose(grad.numpy(), 2 * a.numpy().T)
    v = np.array([[1.0, 2.0], [3.0, 4.0]])
    (hvp,) = tape.grad((grad * tape.Variable(v)).sum(), [a])
    np.testing.assert_allclose(hvp.numpy(), 2 * v.T)


def _error(equation, *shapes):
    xs = [tape.Variable(np.zeros(s)) for s in shapes]
    with pytest.raises(ValueError) as info:
        ops.einsum(xs, equation=equation)
    assert "op 'einsum'" in str(info.value) and "recorded at: test_einsum.py:" in str(info.value)
    return str(info.value)


def test_bad_equations_say_why():
    assert "2 operand term(s) but 1 operand(s)" in _error("ij,jk", (2, 3))
    assert "something other than letters" in _error("i j-k", (2, 3))
    assert "operand 0 has 3 axes but its term 'ij' labels 2" in _error("ij", (2, 3, 4))
    assert "label 'j' has extent 4 in operand 1 but 3 before" in _error("ij,jk", (2, 3), (4, 5))
    assert "label 'i' repeats in operand 0 over axes of different extents" in _error("ii", (2, 3))
    assert "'...' axis -1 has extent 3 in operand 1 but 2 before" in _error(
        "...i,...i", (2, 4), (3, 4)
    )
    assert "output label 'k' labels no operand axis" in _error("ij->k", (2, 3))
