"""Each optimizer follows its published update rule, written here in numpy, for 60 steps."""

import numpy as np
import pytest

import optim
from tests.optim.problem import assert_follows


def per_param(rule):
    def step(params, grads, states, t):
        return [rule(p, g, s, t) for p, g, s in zip(params, grads, states, strict=True)]

    return step


def sgd_rule(lr, momentum=0.0, nesterov=False, weight_decay=0.0):
    """torch.optim.SGD (dampening 0): buf = g at t = 1, then momentum * buf + g."""

    def rule(p, g, state, t):
        g = g + weight_decay * p
        if momentum:
            buf = g if t == 1 else momentum * state["buf"] + g
            state["buf"] = buf
            g = g + momentum * buf if nesterov else buf
        return p - lr * g

    return rule


def adam_rule(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=0.0):
    """Kingma & Ba with PyTorch's bias correction; ``decoupled`` is AdamW's weight decay."""
    beta1, beta2 = betas

    def rule(p, g, state, t):
        p = p * (1 - lr * decoupled)
        g = g + weight_decay * p
        m = beta1 * state.get("m", 0) + (1 - beta1) * g
        v = beta2 * state.get("v", 0) + (1 - beta2) * g * g
        state["m"], state["v"] = m, v
        m_hat, v_hat = m / (1 - beta1**t), v / (1 - beta2**t)
        return p - lr * m_hat / (np.sqrt(v_hat) + eps)

    return rule


def rmsprop_rule(lr, alpha=0.99, eps=1e-8, momentum=0.0, centered=False, weight_decay=0.0):
    """torch.optim.RMSprop."""

    def rule(p, g, state, t):
        g = g + weight_decay * p
        sq = alpha * state.get("sq", 0) + (1 - alpha) * g * g
        state["sq"] = sq
        if centered:
            mean = alpha * state.get("mean", 0) + (1 - alpha) * g
            state["mean"] = mean
            avg = np.sqrt(sq - mean * mean) + eps
        else:
            avg = np.sqrt(sq) + eps
        if momentum:
            state["buf"] = momentum * state.get("buf", 0) + g / avg
            return p - lr * state["buf"]
        return p - lr * g / avg

    return rule


def adagrad_rule(lr, lr_decay=0.0, eps=1e-10, initial=0.0, weight_decay=0.0):
    """torch.optim.Adagrad."""

    def rule(p, g, state, t):
        g = g + weight_decay * p
        clr = lr / (1 + (t - 1) * lr_decay)
        state["sum"] = state.get("sum", initial) + g * g
        return p - clr * g / (np.sqrt(state["sum"]) + eps)

    return rule


RULES = {
    "sgd": (lambda: optim.SGD(lr=0.05), sgd_rule(0.05)),
    "sgd_weight_decay": (
        lambda: optim.SGD(lr=0.05, weight_decay=0.1),
        sgd_rule(0.05, weight_decay=0.1),
    ),
    "sgd_momentum": (lambda: optim.SGD(lr=0.02, momentum=0.9), sgd_rule(0.02, 0.9)),
    "sgd_nesterov": (
        lambda: optim.SGD(lr=0.02, momentum=0.9, nesterov=True, weight_decay=0.01),
        sgd_rule(0.02, 0.9, True, 0.01),
    ),
    "momentum": (lambda: optim.Momentum(lr=0.02, momentum=0.8), sgd_rule(0.02, 0.8)),
    "adam": (lambda: optim.Adam(lr=0.05), adam_rule(0.05)),
    "adam_betas_eps": (
        lambda: optim.Adam(lr=0.01, betas=(0.8, 0.99), eps=1e-3),
        adam_rule(0.01, (0.8, 0.99), 1e-3),
    ),
    "adam_weight_decay": (
        lambda: optim.Adam(lr=0.05, weight_decay=0.1),
        adam_rule(0.05, weight_decay=0.1),
    ),
    "adamw": (lambda: optim.AdamW(lr=0.05, weight_decay=0.1), adam_rule(0.05, decoupled=0.1)),
    "rmsprop": (lambda: optim.RMSProp(lr=0.01), rmsprop_rule(0.01)),
    "rmsprop_centered_momentum": (
        lambda: optim.RMSProp(
            lr=0.005, alpha=0.9, eps=1e-6, momentum=0.5, centered=True, weight_decay=0.05
        ),
        rmsprop_rule(0.005, 0.9, 1e-6, 0.5, True, 0.05),
    ),
    "rmsprop_centered": (
        lambda: optim.RMSprop(lr=0.005, centered=True),
        rmsprop_rule(0.005, centered=True),
    ),
    "adagrad": (lambda: optim.Adagrad(lr=0.1), adagrad_rule(0.1)),
    "adagrad_all_options": (
        lambda: optim.Adagrad(
            lr=0.1, lr_decay=0.05, eps=1e-6, initial_accumulator_value=0.5, weight_decay=0.02
        ),
        adagrad_rule(0.1, 0.05, 1e-6, 0.5, 0.02),
    ),
}


@pytest.mark.parametrize("name", sorted(RULES))
def test_follows_published_rule_in_float64(name):
    make, rule = RULES[name]
    assert_follows(make, per_param(rule))


@pytest.mark.parametrize(
    "name", ["sgd_nesterov", "adam", "adamw", "rmsprop_centered_momentum", "adagrad_all_options"]
)
def test_float32_parameters_stay_float32_and_close_to_the_rule(name):
    make, rule = RULES[name]
    assert_follows(make, per_param(rule), dtype=np.float32, rtol=2e-4, atol=2e-5)


def test_l1_decay_adds_coeff_times_sign():
    def rule(p, g, state, t):
        return p - 0.05 * (g + 0.1 * np.sign(p))

    assert_follows(lambda: optim.SGD(lr=0.05, weight_decay=optim.L1Decay(0.1)), per_param(rule))


def test_l2_decay_object_equals_float_weight_decay():
    assert_follows(
        lambda: optim.Adam(lr=0.05, weight_decay=optim.L2Decay(0.1)),
        per_param(adam_rule(0.05, weight_decay=0.1)),
    )


def test_clip_by_value_then_regularize_then_update():
    """Paddle's order: the decay term is added to the already clipped gradient."""

    def rule(p, g, state, t):
        return p - 0.05 * (np.clip(g, -0.5, 0.3) + 0.1 * p)

    assert_follows(
        lambda: optim.SGD(lr=0.05, weight_decay=0.1, grad_clip=optim.ClipGradByValue(-0.5, 0.3)),
        per_param(rule),
    )


def test_clip_by_norm_rescales_each_tensor():
    def rule(p, g, state, t):
        return p - 0.1 * g * 1.0 / max(np.linalg.norm(g), 1.0)

    assert_follows(lambda: optim.SGD(lr=0.1, grad_clip=optim.ClipGradByNorm(1.0)), per_param(rule))


def test_clip_by_global_norm_is_torch_clip_grad_norm():
    def step(params, grads, states, t):
        total = np.sqrt(sum(np.sum(g * g) for g in grads))
        coef = min(1.0, 2.0 / (total + 1e-6))
        return [
            sgd_rule(0.1, 0.9)(p, g * coef, s, t)
            for p, g, s in zip(params, grads, states, strict=True)
        ]

    assert_follows(
        lambda: optim.SGD(lr=0.1, momentum=0.9, grad_clip=optim.ClipGradByGlobalNorm(2.0)), step
    )


def test_clip_by_global_norm_leaves_small_gradients_almost_unchanged():
    def step(params, grads, states, t):
        total = np.sqrt(sum(np.sum(g * g) for g in grads))
        coef = min(1.0, 1e3 / (total + 1e-6))
        assert coef == 1.0
        return [
            adam_rule(0.05)(p, g * coef, s, t)
            for p, g, s in zip(params, grads, states, strict=True)
        ]

    assert_follows(lambda: optim.Adam(lr=0.05, grad_clip=optim.ClipGradByGlobalNorm(1e3)), step)


def test_scheduled_rate_is_used_at_each_step():
    schedule = optim.lr_scheduler.StepDecay(0.1, step_size=10, gamma=0.5)

    def step(params, grads, states, t):
        lr = 0.1 * 0.5 ** ((t - 1) // 10)
        return [adam_rule(lr)(p, g, s, t) for p, g, s in zip(params, grads, states, strict=True)]

    assert_follows(lambda: optim.Adam(lr=schedule), step, schedule=schedule)
