"""Switching gradient recording on and off for the current thread (``no_grad``, ``enable_grad``)."""

from __future__ import annotations

import functools

from tape.tape import state


class _GradMode:
    """A context manager and decorator; used bare on a function (``@no_grad``) it decorates it
    as ``@no_grad()`` does, as in PyTorch."""

    def __new__(cls, fn=None):
        if fn is None:
            return super().__new__(cls)
        if not callable(fn):
            raise TypeError(f"{cls.__name__}() takes no arguments (or a function to decorate)")
        return cls()(fn)

    def __init__(self, enabled):
        self.enabled = enabled

    def __enter__(self):
        self.previous = state.grad_enabled
        state.grad_enabled = self.enabled
        return self

    def __exit__(self, *exc):
        state.grad_enabled = self.previous

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_GradMode):
    """Ops run inside record nothing for backward: their outputs never require a gradient.

    >>> import numpy as np, tape
    >>> w = tape.Variable(np.ones(3), requires_grad=True)
    >>> with tape.no_grad():
    ...     y = w * 2
    >>> y.requires_grad
    False
    >>> @tape.no_grad  # or @tape.no_grad()
    ... def double(v):
    ...     return v * 2
    >>> double(w).requires_grad
    False
    """

    def __init__(self, fn=None):
        super().__init__(False)


class enable_grad(_GradMode):
    """Re-enables gradient recording inside a ``no_grad`` block."""

    def __init__(self, fn=None):
        super().__init__(True)


def is_grad_enabled() -> bool:
    return state.grad_enabled
