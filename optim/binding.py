"""PyTorch's optimizer form beside the seed's: parameters given at construction, then
``opt.step()`` / ``opt.zero_grad()``.

Both forms run the same transactional step (``Optimizer.__call__``)::

    opt = optim.SGD(model.params(), lr=0.1)   # or model.parameters(): PyTorch's spelling
    ...
    loss.backward()
    opt.step()         # = opt(model.params())
    opt.zero_grad()    # drops gradients not consumed by a step

    opt = optim.SGD(lr=0.1); ...; opt(model.params())   # the seed's form, unchanged

Every optimizer's constructor accepts the parameters as its first argument (or ``params=``):
``BoundParams.__init_subclass__`` wraps each subclass's ``__init__`` to take them off before
the subclass sees its usual arguments, so ``SGD(0.1)`` and ``SGD(lr=0.1)`` keep working.
"""

from __future__ import annotations

import functools
import numbers

from tape.errors import InputError, user_location
from tape.grad_mode import enable_grad
from tape.variable import Variable


class BoundParams:
    """Mixin of Optimizer: the parameters bound at construction, ``step`` and ``zero_grad``."""

    _bound = None  # the parameters given at construction, or None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:
            cls.__init__ = _taking_params(init)

    def step(self, closure=None):
        """Updates the parameters given at construction (PyTorch's ``opt.step()``); with
        ``closure`` (a function recomputing the loss: record, backward, return the loss), calls
        it first and returns its loss.

        >>> import numpy as np, tape, optim
        >>> w = tape.Variable(np.ones(2), requires_grad=True)
        >>> opt = optim.SGD([w], lr=0.5)
        >>> (w * w).sum().backward()
        >>> opt.step()
        >>> w.numpy(), w.grad() is None
        (array([0., 0.]), True)
        """
        if self._bound is None:
            raise InputError(
                None,
                f"{type(self).__name__}.step() needs the parameters given at construction",
                hint=f"build it as optim.{type(self).__name__}(model.params(), ...), or call "
                "it on the parameters: opt(model.params())",
                location=user_location(),
            )
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        self(self._bound)
        return loss

    def zero_grad(self, set_to_none=True):
        """Drops the gradients of the parameters given at construction (of every parameter the
        optimizer has seen, without those). A missing gradient is a zero one here, so
        ``set_to_none`` is accepted for PyTorch's signature and changes nothing."""
        for param in self._bound if self._bound is not None else self._params:
            param.clear_grad()

    def _parameter_list(self, params):
        """``params`` as a list of Variables; a layer or a non-iterable gets an InputError
        saying what to pass."""
        if isinstance(params, Variable):
            params = [params]
        elif callable(getattr(params, "params", None)) and not isinstance(params, (list, tuple)):
            raise InputError(
                None,
                f"{type(self).__name__}: got a layer ({type(params).__name__}) instead of its "
                "parameters",
                hint="pass model.params() (or model.parameters())",
                location=user_location(),
            )
        try:
            params = list(params)
        except TypeError:
            raise InputError(
                None,
                f"{type(self).__name__}: the parameters must be a list of Variables",
                actual=type(params).__name__,
                hint="pass model.params() (or model.parameters())",
                location=user_location(),
            ) from None
        for param in params:
            if not isinstance(param, Variable):
                raise InputError(
                    None,
                    f"{type(self).__name__}: the parameters must be a list of Variables",
                    actual=f"an item of type {type(param).__name__}",
                    hint="pass model.params() (or model.parameters())",
                    location=user_location(),
                )
        return params


def _given_params(value):
    """Whether a first constructor argument is parameters rather than a learning rate."""
    return not isinstance(value, (numbers.Number, str)) and (
        hasattr(value, "__iter__") or callable(getattr(value, "params", None))
    )


def _taking_params(init):
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        state = self.__dict__
        if state.get("_constructing"):  # super().__init__(lr, ...) inside a constructor
            return init(self, *args, **kwargs)
        params = kwargs.pop("params", None)
        if params is None and args and _given_params(args[0]):
            params, args = args[0], args[1:]
        state["_constructing"] = True
        try:
            init(self, *args, **kwargs)
        finally:
            del state["_constructing"]
        if params is not None:
            self._bound = self._register(params)

    return __init__


__all__ = ["BoundParams"]
