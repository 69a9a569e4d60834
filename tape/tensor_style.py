"""The PyTorch-familiar side of Variable: ``.grad``, ``.backward()``, ``.clone()``, ...

``x.grad`` is a property, as in PyTorch, and ``x.grad()`` -- fluidtape's own spelling, in the
design's contract -- keeps working: with a gradient, ``x.grad`` is the gradient Variable (and
calling a Variable with no arguments returns it); without one, ``x.grad`` is ``NO_GRAD``, a
falsy placeholder equal to None whose call returns None. So ``x.grad() is None``,
``not x.grad``, ``x.grad == None``, ``x.grad.numpy()`` and ``p.grad = None`` all work; the one
spelling that cannot is ``x.grad is None`` (always False): write ``x.grad() is None``. Using the
placeholder as a Variable raises an error that says so.
"""

from __future__ import annotations

from tape.errors import InputError, ShapeError, user_location


class TensorStyle:
    """Mixin of Variable: the gradient property and PyTorch's Tensor conveniences."""

    __slots__ = ()

    @property
    def grad(self):
        """The accumulated gradient as a Variable, or ``NO_GRAD`` (falsy, == None, and
        ``x.grad()`` is None) if no backward has reached it.

        >>> import numpy as np, tape
        >>> x = tape.Variable(np.array([1.0, 2.0]), requires_grad=True)
        >>> x.grad() is None, not x.grad
        (True, True)
        >>> tape.backward((x * x).sum())
        >>> x.grad.numpy(), x.grad().numpy()
        (array([2., 4.]), array([2., 4.]))
        >>> x.grad = None  # drops it, as clear_grad()
        >>> x.grad() is None
        True
        """
        grad = self._grad
        return NO_GRAD if grad is None else grad

    @grad.setter
    def grad(self, value):
        if value is None:
            self._grad = None
            return
        from tape.variable import Variable

        grad = value if isinstance(value, Variable) else Variable(value, dtype=self.dtype)
        if self.shape is not None and tuple(grad.shape) != tuple(self.shape):
            raise ShapeError(
                None,
                f"the gradient of '{self.name}' must have its shape",
                expected=str(self.shape),
                actual=str(grad.shape),
                location=user_location(),
            )
        self._grad = grad

    def __call__(self, *args, **kwargs):
        """A Variable called with no arguments is itself (so ``x.grad()`` still works)."""
        if args or kwargs:
            raise TypeError(
                f"a Variable is not a function (variable '{self.name}' was called with "
                "arguments); calling one with no arguments returns it, for x.grad()"
            )
        return self

    def backward(self, grad=None, retain_graph=False, create_graph=False):
        """``tape.backward(self, ...)`` on the thread's global tape, as ``loss.backward()``."""
        from tape.tape import get_global_tape

        get_global_tape().backward(self, grad, retain_graph, create_graph)

    def requires_grad_(self, requires_grad=True):
        """Sets ``requires_grad`` on a leaf in place and returns it (PyTorch's form).

        >>> import numpy as np, tape
        >>> w = tape.Variable(np.zeros(2, np.float32)).requires_grad_()
        >>> w.requires_grad
        True
        """
        if not self._leaf and not requires_grad:
            raise InputError(
                None,
                f"requires_grad_(False) on '{self.name}', the output of a recorded op",
                hint="use .detach() to cut it from the tape",
                location=user_location(),
            )
        if requires_grad and self.dtype is not None and self.dtype.kind not in "fc":
            raise InputError(
                None,
                f"variable '{self.name}' cannot require a gradient",
                expected="a floating-point dtype",
                actual=str(self.dtype),
                hint="cast it first, e.g. x.astype('float32')",
                location=user_location(),
            )
        self.requires_grad = bool(requires_grad)
        return self

    def clone(self):
        """A copy recorded as an op, so gradients flow back through it (``torch.clone``)."""
        from ops.registry import REGISTRY

        return REGISTRY["scale"](self, scale=1.0)

    def tolist(self):
        """The value as (nested) Python lists of Python numbers."""
        return self.numpy().tolist()

    def numel(self):
        """The number of elements."""
        return self.size

    def dim(self):
        """The number of axes."""
        return len(self.shape)


__all__ = ["TensorStyle"]


class _NoGradient:
    """``x.grad`` of a Variable no backward has reached: falsy, equal to None, and calling it
    gives None (see the module docstring)."""

    __slots__ = ()

    def __call__(self):
        return None

    def __bool__(self):
        return False

    def __eq__(self, other):
        return other is None or other is self

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(None)

    def __repr__(self):
        return "None"

    def __getattr__(self, name):
        raise AttributeError(
            f"there is no gradient yet ('.{name}' of x.grad): no backward has reached this "
            "Variable; test for it with x.grad() is None (x.grad is a placeholder, not None)"
        )


NO_GRAD = _NoGradient()
