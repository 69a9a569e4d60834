"""Comparing a layer with its torch.nn module: the same parameters copied over, the same input,
then outputs and every gradient (input and parameters) checked against each other."""

import numpy as np
import pytest

import tape


def torch_module(layer, module):
    """``module`` (a torch.nn module) with ``layer``'s parameters copied in by name, in float64."""
    torch = pytest.importorskip("torch")
    module = module.double()
    with torch.no_grad():
        for name, param in layer.named_params():
            getattr(module, name).copy_(torch.from_numpy(param.numpy().astype(np.float64)))
    return module


def assert_matches_torch(layer, module, x0, *, call=None, torch_call=None, rtol=1e-10, atol=1e-12):
    """Forward values and the gradients of the input and of each parameter equal torch's."""
    torch = pytest.importorskip("torch")
    module = torch_module(layer, module)
    module.zero_grad()
    for param in layer.params():
        param.clear_grad()
    tape.reset_global_tape()
    x = tape.Variable(x0, requires_grad=True)
    tx = torch.tensor(x0, requires_grad=True)
    out = (call or layer)(x)
    expected = (torch_call or module)(tx)
    assert out.shape == tuple(expected.shape)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=rtol, atol=atol)
    cotangent = np.random.default_rng(1).standard_normal(out.shape)
    tape.backward(out, grad=cotangent)
    expected.backward(torch.from_numpy(cotangent))
    np.testing.assert_allclose(x.grad().numpy(), tx.grad.numpy(), rtol=rtol, atol=atol)
    for name, param in layer.named_params():
        np.testing.assert_allclose(
            param.grad().numpy(),
            getattr(module, name).grad.numpy(),
            rtol=rtol,
            atol=atol,
            err_msg=f"gradient of {name}",
        )
