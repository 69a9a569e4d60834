"""Optimizer update ops: one op per parameter, giving its new value and its new state.

Each output is the new value of an input Variable (ParamOut of Param, each state output of its
state input: the ``inplace`` fact), has no gradient and a side effect, so the scheduler keeps it
in tape order. The kernels are pure: they never write into an input buffer, so an update is a
new buffer that the engine *commits* by rebinding the Variable once every update of the step
has been computed (``tape.transaction``). A step that fails part-way thus leaves every
parameter and state as it was, and a buffer the user or a retained graph still holds never
changes under them. With ``reuse_grad`` (set by the optimizer when nothing else holds the
gradient) ParamOut is computed in Grad's buffer, so an SGD step allocates nothing.

The rules are PyTorch's (``torch.optim``) under Paddle's op, slot and attribute names. Scalars
(LearningRate, Beta1Pow, ...) may have any float dtype; they are cast to Param's dtype before
they touch a tensor, so float32 parameters stay float32. Outputs and temporaries are
allocated (``_fresh``) and written with ``out=`` (on 0-d arrays a ufunc without ``out=`` returns
a scalar, which cannot be an ``out=`` target); large ones come from ``ops.buffers``, so a
training loop reuses the buffers of the values its last update replaced instead of faulting in
new ones.
"""

from __future__ import annotations

import math

import numpy as np

from ops import buffers
from ops.fusion_backends import update_loops
from ops.registry import Attr, register
from tape.errors import DTypeError, InputError, ShapeError

_UPDATE = dict(differentiable=False, side_effect=True)
# Whether ParamOut may be computed in Grad's buffer: the caller guarantees nothing else reads it.
_REUSE_GRAD = {"reuse_grad": Attr("bool", False)}


def _check_like_param(param, var, slot):
    if var.shape != param.shape:
        raise ShapeError(
            None,
            f"{slot} must have Param's shape",
            expected=str(param.shape),
            actual=f"{slot}.shape == {var.shape}",
        )
    if var.dtype != param.dtype:
        raise DTypeError(
            None,
            f"{slot} must have Param's dtype",
            expected=str(param.dtype),
            actual=f"{slot}.dtype == {var.dtype}",
        )


def _check_scalar(var, slot):
    if var.shape not in ((), (1,)):
        raise ShapeError(
            None,
            f"{slot} must hold one value",
            expected="shape () or (1,)",
            actual=f"{slot}.shape == {var.shape}",
        )
    if var.dtype.kind != "f":
        raise DTypeError(None, f"{slot} must be floating point", actual=str(var.dtype))


def check_update(param, grad, lr, states=(), scalars=()):
    """Infer helper: Grad and each state slot are like Param; LR and scalar slots hold a value.

    ``states`` and ``scalars`` are (slot name, Variable) pairs; returns Param's description
    once per state (ParamOut first) and each scalar's own description.
    """
    if param.dtype.kind != "f":
        raise DTypeError(None, "Param must be floating point", actual=str(param.dtype))
    _check_like_param(param, grad, "Grad")
    _check_scalar(lr, "LearningRate")
    for slot, var in states:
        _check_like_param(param, var, slot)
    for slot, var in scalars:
        _check_scalar(var, slot)
    described = (param.shape, param.dtype)
    return (described,) * (1 + len(states)) + tuple((v.shape, v.dtype) for _, v in scalars)


def scalar(xp, value, like):
    """A one-value input ready to scale ``like``: a Python float on the CPU (0-d numpy
    arithmetic costs microseconds per op, and a Python float is weakly typed, so float32 stays
    float32); on the GPU a 0-d array of ``like``'s dtype (reading it would synchronise)."""
    if xp is np:
        return value.item()
    return value.reshape(()).astype(like.dtype, copy=False)


def _looped(kind, param):
    """Whether ``param``'s update ``kind`` may run as a compiled loop: a numpy array large
    enough (the size test first, so the many small parameters pay no call)."""
    return param.size >= update_loops.MIN_ELEMENTS[kind] and param.__class__ is np.ndarray


def _work(xp, attrs, grad, like):
    """A scratch buffer shaped like Param: Grad's own when ``reuse_grad`` (Grad is dead after
    the update), else a new one."""
    return grad if attrs["reuse_grad"] else _fresh(xp, like)


def _fresh(xp, like):
    """A new buffer shaped like ``like`` (a reused one for large parameters: ``ops.buffers``;
    the parameter's previous value, once nothing holds it, serves its next update)."""
    return buffers.empty(xp, like.shape, like.dtype)


def _probability(name, default):
    return Attr("float", default, check=lambda v: 0.0 <= v < 1.0, rule=f"0 <= {name} < 1")


_EPSILON = Attr("float", 1e-8, check=lambda v: v >= 0.0, rule="epsilon >= 0")
_NONNEGATIVE = dict(check=lambda v: v >= 0.0, rule=">= 0")


def _infer_sgd(attrs, param, grad, lr):
    return check_update(param, grad, lr)[0]


@register(
    "sgd",
    inputs=("Param", "Grad", "LearningRate"),
    outputs=("ParamOut",),
    attrs=_REUSE_GRAD,
    infer=_infer_sgd,
    inplace={"ParamOut": "Param"},
    **_UPDATE,
)
def sgd(xp, attrs, param, grad, lr):
    """ParamOut = Param - LearningRate * Grad (no gradient); large parameters in one compiled
    pass where numba is installed (``ops.fusion_backends.update_loops``: the same bits)."""
    rate, out = scalar(xp, lr, param), _work(xp, attrs, grad, param)
    if _looped("sgd", param) and update_loops.run(
        "sgd", (param, grad), (rate,), attrs["reuse_grad"], lambda: (out,)
    ):
        return out
    step = xp.multiply(grad, rate, out=out)
    return xp.subtract(param, step, out=step)


def _infer_momentum(attrs, param, grad, velocity, lr):
    return check_update(param, grad, lr, [("Velocity", velocity)])


@register(
    "momentum",
    inputs=("Param", "Grad", "Velocity", "LearningRate"),
    outputs=("ParamOut", "VelocityOut"),
    attrs={
        "mu": Attr("float", 0.9, **_NONNEGATIVE),
        "use_nesterov": Attr("bool", False),
        **_REUSE_GRAD,
    },
    infer=_infer_momentum,
    inplace={"ParamOut": "Param", "VelocityOut": "Velocity"},
    **_UPDATE,
)
def momentum(xp, attrs, param, grad, velocity, lr):
    """SGD with momentum (PyTorch's form, no dampening); no gradient.

    VelocityOut = mu * Velocity + Grad;
    ParamOut = Param - LearningRate * (Grad + mu * VelocityOut) with use_nesterov,
    ParamOut = Param - LearningRate * VelocityOut without.
    """
    mu, rate = attrs["mu"], scalar(xp, lr, param)
    if _looped("momentum", param):  # (one compiled pass, the same bits: ``update_loops``)
        nesterov = attrs["use_nesterov"]

        def outputs():
            out = _fresh(xp, param) if nesterov else _work(xp, attrs, grad, param)
            return out, _fresh(xp, param)

        kind, in_place = ("nesterov", False) if nesterov else ("momentum", attrs["reuse_grad"])
        made = update_loops.run(kind, (param, grad, velocity), (mu, rate), in_place, outputs)
        if made:
            return made
    velocity = xp.multiply(velocity, mu, out=_fresh(xp, param))
    velocity += grad
    if attrs["use_nesterov"]:
        step = xp.multiply(velocity, mu, out=_fresh(xp, param))
        step += grad
        step *= rate
    else:
        step = xp.multiply(velocity, rate, out=_work(xp, attrs, grad, param))
    return xp.subtract(param, step, out=step), velocity


_ADAM_INPUTS = ("Param", "Grad", "Moment1", "Moment2", "LearningRate", "Beta1Pow", "Beta2Pow")
_ADAM_OUTPUTS = ("ParamOut", "Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut")
_ADAM_INPLACE = {
    "ParamOut": "Param",
    "Moment1Out": "Moment1",
    "Moment2Out": "Moment2",
    "Beta1PowOut": "Beta1Pow",
    "Beta2PowOut": "Beta2Pow",
}
_ADAM_ATTRS = {
    "beta1": _probability("beta1", 0.9),
    "beta2": _probability("beta2", 0.999),
    "epsilon": _EPSILON,
    **_REUSE_GRAD,
}


def _infer_adam(attrs, param, grad, moment1, moment2, lr, beta1_pow, beta2_pow):
    return check_update(
        param,
        grad,
        lr,
        [("Moment1", moment1), ("Moment2", moment2)],
        [("Beta1Pow", beta1_pow), ("Beta2Pow", beta2_pow)],
    )


def _bias_corrected(xp, param, lr, beta1_pow, beta2_pow):
    """(lr / (1 - beta1**t), sqrt(1 - beta2**t)) in the accumulators' precision (float64 from
    the optimizer, as PyTorch computes them in double from its integer step count)."""
    if xp is np:
        return lr.item() / (1.0 - beta1_pow.item()), math.sqrt(1.0 - beta2_pow.item())
    rate = lr.reshape(()).astype(beta1_pow.dtype)
    step_size = (rate / (1.0 - beta1_pow.reshape(()))).astype(param.dtype)
    return step_size, xp.sqrt(1.0 - beta2_pow.reshape(())).astype(param.dtype)


def _adam_step(xp, attrs, param, grad, moment1, moment2, lr, beta1_pow, beta2_pow, decay=None):
    """Adam's update of ``param``, first multiplied by ``decay`` (AdamW's) where given."""
    beta1, beta2 = attrs["beta1"], attrs["beta2"]
    step_size, correction2 = _bias_corrected(xp, param, lr, beta1_pow, beta2_pow)
    powers = beta1_pow * beta1, beta2_pow * beta2
    if _looped("adam", param):  # (one compiled pass, the same bits: ``update_loops``)
        constants = (1.0 if decay is None else decay, 1.0 - beta1, beta2, 1.0 - beta2)
        constants += (correction2, attrs["epsilon"], step_size)
        made = update_loops.run(
            "adam",
            (param, grad, moment1, moment2),
            constants,
            attrs["reuse_grad"],
            lambda: (_work(xp, attrs, grad, param), _fresh(xp, param), _fresh(xp, param)),
        )
        if made:
            return (*made, *powers)
    if decay is not None:
        param = xp.multiply(param, decay)
    moment1_out = xp.subtract(grad, moment1, out=_fresh(xp, param))
    moment1_out *= 1.0 - beta1
    moment1_out += moment1  # Moment1 = lerp(Moment1, Grad, 1 - beta1)
    moment2_out = xp.multiply(moment2, beta2, out=_fresh(xp, param))
    work = xp.multiply(grad, grad, out=_work(xp, attrs, grad, param))
    work *= 1.0 - beta2
    moment2_out += work
    xp.sqrt(moment2_out, out=work)
    work /= correction2
    work += attrs["epsilon"]
    xp.divide(moment1_out, work, out=work)
    work *= step_size
    param_out = xp.subtract(param, work, out=work)
    return param_out, moment1_out, moment2_out, *powers


@register(
    "adam",
    inputs=_ADAM_INPUTS,
    outputs=_ADAM_OUTPUTS,
    attrs=_ADAM_ATTRS,
    infer=_infer_adam,
    inplace=_ADAM_INPLACE,
    **_UPDATE,
)
def adam(xp, attrs, param, grad, moment1, moment2, lr, beta1_pow, beta2_pow):
    """Adam (PyTorch's bias correction and epsilon placement); no gradient.

    Beta1Pow and Beta2Pow hold beta1**t and beta2**t for this step t (start them at beta1,
    beta2); each output is the input multiplied by its beta for the next step.
    Moment1Out = beta1 * Moment1 + (1 - beta1) * Grad;
    Moment2Out = beta2 * Moment2 + (1 - beta2) * Grad**2;
    ParamOut = Param - LearningRate / (1 - Beta1Pow) * Moment1Out
               / (sqrt(Moment2Out) / sqrt(1 - Beta2Pow) + epsilon).
    """
    return _adam_step(xp, attrs, param, grad, moment1, moment2, lr, beta1_pow, beta2_pow)


@register(
    "adamw",
    inputs=_ADAM_INPUTS,
    outputs=_ADAM_OUTPUTS,
    attrs={**_ADAM_ATTRS, "coeff": Attr("float", 0.01, **_NONNEGATIVE)},
    infer=_infer_adam,
    inplace=_ADAM_INPLACE,
    **_UPDATE,
)
def adamw(xp, attrs, param, grad, moment1, moment2, lr, beta1_pow, beta2_pow):
    """AdamW: decoupled weight decay, then the Adam step (PyTorch's order); no gradient.

    Param = Param * (1 - LearningRate * coeff), then the ``adam`` update with the same slots.
    """
    decay = 1.0 - scalar(xp, lr, param) * attrs["coeff"]
    return _adam_step(xp, attrs, param, grad, moment1, moment2, lr, beta1_pow, beta2_pow, decay)


def _infer_rmsprop(attrs, param, grad, mean_square, moment, mean_grad, lr):
    if attrs["momentum"] > 0 and moment is None:
        raise InputError(
            None,
            "input Moment is required when momentum > 0",
            actual=f"momentum={attrs['momentum']}, no Moment",
        )
    if attrs["centered"] and mean_grad is None:
        raise InputError(None, "input MeanGrad is required when centered", actual="no MeanGrad")
    present = [
        (slot, var)
        for slot, var in (("MeanSquare", mean_square), ("Moment", moment), ("MeanGrad", mean_grad))
        if var is not None
    ]
    param_desc, mean_square_desc, *rest = check_update(param, grad, lr, present)
    rest.reverse()
    moment_desc = [rest.pop()] if moment is not None else []
    mean_grad_desc = [rest.pop()] if mean_grad is not None else []
    return param_desc, mean_square_desc, moment_desc, mean_grad_desc


@register(
    "rmsprop",
    inputs=("Param", "Grad", "MeanSquare", "Moment?", "MeanGrad?", "LearningRate"),
    outputs=("ParamOut", "MeanSquareOut", "MomentOut*", "MeanGradOut*"),
    attrs={
        "decay": _probability("decay", 0.99),
        "epsilon": _EPSILON,
        "momentum": Attr("float", 0.0, **_NONNEGATIVE),
        "centered": Attr("bool", False),
        **_REUSE_GRAD,
    },
    infer=_infer_rmsprop,
    inplace={
        "ParamOut": "Param",
        "MeanSquareOut": "MeanSquare",
        "MomentOut": "Moment",
        "MeanGradOut": "MeanGrad",
    },
    **_UPDATE,
)
def rmsprop(xp, attrs, param, grad, mean_square, moment, mean_grad, lr):
    """RMSProp (PyTorch's: epsilon outside the root; ``decay`` is PyTorch's alpha); no gradient.

    MeanSquareOut = decay * MeanSquare + (1 - decay) * Grad**2;
    centered: MeanGradOut = decay * MeanGrad + (1 - decay) * Grad,
    avg = sqrt(MeanSquareOut - MeanGradOut**2) + epsilon, else avg = sqrt(MeanSquareOut) + epsilon;
    with Moment: MomentOut = momentum * Moment + Grad / avg, ParamOut = Param - lr * MomentOut;
    without: ParamOut = Param - lr * Grad / avg. Moment and MeanGrad are optional (Paddle's
    dispensable slots): their outputs hold one Variable when the input is given, none otherwise.
    """
    decay = attrs["decay"]
    if _looped("rmsprop", param):  # (one compiled pass, the same bits: ``update_loops``)
        made = _rmsprop_looped(xp, attrs, param, grad, mean_square, moment, mean_grad, lr)
        if made:
            return made
    work = xp.multiply(grad, grad, out=_fresh(xp, param))
    work *= 1.0 - decay
    mean_square = xp.multiply(mean_square, decay, out=_fresh(xp, param))
    mean_square += work
    if mean_grad is not None:
        xp.subtract(grad, mean_grad, out=work)
        work *= 1.0 - decay
        mean_grad = xp.add(mean_grad, work, out=_fresh(xp, param))  # lerp(MeanGrad, Grad)
        xp.multiply(mean_grad, mean_grad, out=work)
        xp.subtract(mean_square, work, out=work)
        xp.sqrt(work, out=work)
    else:
        xp.sqrt(mean_square, out=work)
    work += attrs["epsilon"]
    step = xp.divide(grad, work, out=_work(xp, attrs, grad, param))
    if moment is not None:
        moment = xp.multiply(moment, attrs["momentum"], out=work)
        moment += step
        xp.multiply(moment, scalar(xp, lr, param), out=step)
    else:
        step *= scalar(xp, lr, param)
    return (
        xp.subtract(param, step, out=step),
        mean_square,
        [moment] if moment is not None else [],
        [mean_grad] if mean_grad is not None else [],
    )


def _rmsprop_looped(xp, attrs, param, grad, mean_square, moment, mean_grad, lr):
    """``rmsprop``'s outputs from its compiled loop, or None where it did not run."""
    kind = "rmsprop" + ("_centered" if mean_grad is not None else "")
    kind += "_momentum" if moment is not None else ""
    decay = attrs["decay"]
    constants = (decay, 1.0 - decay, attrs["epsilon"], scalar(xp, lr, param))
    constants += (attrs["momentum"],) if moment is not None else ()
    state = [v for v in (moment, mean_grad) if v is not None]

    def outputs():
        return (_work(xp, attrs, grad, param), *[_fresh(xp, param) for _ in range(1 + len(state))])

    made = update_loops.run(
        kind, (param, grad, mean_square, *state), constants, attrs["reuse_grad"], outputs
    )
    if not made:
        return None
    out, mean_square_out, *rest = made
    moment_out = [rest.pop(0)] if moment is not None else []
    return out, mean_square_out, moment_out, rest


def _infer_adagrad(attrs, param, grad, moment, lr):
    return check_update(param, grad, lr, [("Moment", moment)])


@register(
    "adagrad",
    inputs=("Param", "Grad", "Moment", "LearningRate"),
    outputs=("ParamOut", "MomentOut"),
    attrs={"epsilon": Attr("float", 1e-10, **_NONNEGATIVE), **_REUSE_GRAD},
    infer=_infer_adagrad,
    inplace={"ParamOut": "Param", "MomentOut": "Moment"},
    **_UPDATE,
)
def adagrad(xp, attrs, param, grad, moment, lr):
    """Adagrad (PyTorch's: epsilon outside the root); no gradient.

    MomentOut = Moment + Grad**2;  ParamOut = Param - LearningRate * Grad / (sqrt(MomentOut) +
    epsilon). PyTorch's lr_decay is a learning-rate schedule, applied by the optimizer.
    """
    if _looped("adagrad", param):  # (one compiled pass, the same bits: ``update_loops``)
        made = update_loops.run(
            "adagrad",
            (param, grad, moment),
            (attrs["epsilon"], scalar(xp, lr, param)),
            attrs["reuse_grad"],
            lambda: (_work(xp, attrs, grad, param), _fresh(xp, param)),
        )
        if made:
            return made
    moment_out = xp.multiply(grad, grad, out=_fresh(xp, param))
    moment_out += moment
    work = xp.sqrt(moment_out, out=_fresh(xp, param))
    work += attrs["epsilon"]
    step = xp.divide(grad, work, out=grad if attrs["reuse_grad"] else work)
    step *= scalar(xp, lr, param)
    return xp.subtract(param, step, out=step), moment_out
