"""PyTorch's optimizer form (parameters at construction, step, zero_grad) beside the seed's
opt(params): the same transactional update, the same trajectory."""

import numpy as np
import pytest

import layers
import optim
import tape


def _model(seed):
    tape.seed(seed)
    return layers.Sequential(layers.Linear(3, 4, act="tanh"), layers.Linear(4, 1))


def _loss(model, step):
    x = np.random.default_rng(step).standard_normal((5, 3)).astype(np.float32)
    return (model(x) ** 2.0).mean()


@pytest.mark.parametrize(
    "make",
    [
        lambda params: optim.SGD(params, lr=0.1),
        lambda params: optim.Momentum(params, lr=0.1, momentum=0.5),
        lambda params: optim.Adam(params),
        lambda params: optim.AdamW(params=params, lr=0.01),
        lambda params: optim.RMSProp(params, 0.01),
        lambda params: optim.Adagrad(params),
    ],
)
def test_step_equals_calling_the_optimizer_on_the_parameters(make):
    pytorch_style, seed_style = _model(0), _model(0)
    opt = make(pytorch_style.parameters())
    reference = make([])  # the same hyper-parameters, used the seed's way
    for step in range(3):
        tape.reset_global_tape()
        opt.zero_grad()
        _loss(pytorch_style, step).backward()
        opt.step()
        tape.backward(_loss(seed_style, step))
        reference(seed_style.params())
    for mine, theirs in zip(pytorch_style.params(), seed_style.params()):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


def test_zero_grad_drops_gradients_and_step_with_a_closure_returns_its_loss():
    model = _model(1)
    opt = optim.SGD(model.params(), lr=0.1)
    _loss(model, 0).backward()
    assert all(p.grad() is not None for p in model.params())
    opt.zero_grad()
    assert all(p.grad() is None for p in model.params())

    def closure():
        loss = _loss(model, 1)
        loss.backward()
        return loss

    before = [p.numpy().copy() for p in model.params()]
    loss = opt.step(closure)
    assert isinstance(loss, tape.Variable) and loss.shape == ()
    assert all(not np.array_equal(b, p.numpy()) for b, p in zip(before, model.params()))


def test_the_seed_form_still_takes_a_positional_learning_rate():
    w = tape.Variable(np.ones(2), requires_grad=True)
    opt = optim.SGD(0.5)
    (w * w).sum().backward()
    opt([w])
    np.testing.assert_array_equal(w.numpy(), [0.0, 0.0])
    with pytest.raises(tape.InputError) as info:
        opt.step()
    assert "SGD.step() needs the parameters given at construction" in str(info.value)
    assert "optim.SGD(model.params(), ...)" in str(info.value)


@pytest.mark.parametrize(
    "call", [lambda opt, m: opt(m), lambda opt, m: optim.SGD(m, lr=0.1)], ids=["call", "init"]
)
def test_a_layer_instead_of_its_parameters_says_what_to_pass(call):
    model = _model(2)
    with pytest.raises(tape.InputError) as info:
        call(optim.SGD(lr=0.1), model)
    message = str(info.value)
    assert message.startswith("SGD: got a layer (Sequential) instead of its parameters")
    assert "pass model.params() (or model.parameters())" in message
    assert "recorded at: test_binding.py:" in message


def test_a_generator_of_parameters_is_read_once_and_kept():
    model = _model(3)
    opt = optim.SGD((p for p in model.params()), lr=0.1)
    _loss(model, 0).backward()
    opt.step()
    _loss(model, 1).backward()
    opt.step()  # still all of them
    assert all(p.grad() is None for p in model.params())


@pytest.mark.parametrize("kind", [optim.SGD, optim.Momentum, optim.Adam, optim.AdamW])
def test_parameters_given_as_the_learning_rate_are_refused_briefly(kind):
    model = _model(4)
    with pytest.raises(tape.AttrError) as info:
        kind(lr=model.params())
    message = str(info.value)
    assert f"{kind.__name__}: hyper-parameter 'lr' must be a number" in message
    assert "list of 4 (Variable)" in message and "value=" not in message
