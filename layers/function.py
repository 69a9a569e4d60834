"""Function: the seed's name for a layer, an object owning parameters that records ops when called.

Parameters and sub-layers assigned as attributes are registered in assignment order, so
``params()`` is stable across runs and ``named_params()`` gives dotted names
(``encoder.0.weight``) that checkpoints match on.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from layers import arguments
from tape.errors import InputError
from tape.variable import Variable


class Function:
    """Base class of layers. Subclasses create parameters in ``__init__`` and define ``forward``.

    >>> import numpy as np, tape
    >>> class Scale(Function):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.alpha = self.create_parameter((1,), init=lambda shape, dtype:
    ...                                            np.full(shape, 2.0, dtype))
    ...     def forward(self, x):
    ...         return x * self.alpha
    >>> Scale()(tape.Variable(np.ones(3, np.float32))).numpy()
    array([2., 2., 2.], dtype=float32)
    """

    # (position, name) of the data inputs a built-in layer's forward converts (layers.arguments)
    _data_inputs = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        builtin = cls.__module__.split(".")[0] == "layers"
        if builtin and "__init__" in cls.__dict__:
            cls.__init__ = arguments.checked_constructor(cls.__dict__["__init__"])
        if "forward" in cls.__dict__:
            cls._data_inputs = arguments.data_inputs(cls.forward) if builtin else None

    def __init__(self):
        object.__setattr__(self, "_params", OrderedDict())
        object.__setattr__(self, "_children", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_params" not in self.__dict__:
            raise RuntimeError(
                f"{type(self).__name__}.__init__ must call super().__init__() "
                "before assigning attributes"
            )
        self._params.pop(name, None)
        self._children.pop(name, None)
        if isinstance(value, Variable) and value.persistable and value.requires_grad:
            self._params[name] = value
        elif isinstance(value, Function):
            self._children[name] = value
        object.__setattr__(self, name, value)

    def create_parameter(self, shape, init, dtype="float32", name=None):
        """A new persistable Variable requiring a gradient, filled by ``init(shape, dtype)``.

        ``init`` returns an array or a Variable (the initializers in ``layers.init`` run their
        random op on a private tape, as the seed's init tape does).
        """
        shape = tuple(int(d) for d in shape)
        value = init(shape, np.dtype(dtype))
        if isinstance(value, Variable):
            value = value.value()
        if tuple(value.shape) != shape:
            raise InputError(
                None,
                f"initializer returned the wrong shape for parameter {name!r}",
                expected=str(shape),
                actual=str(tuple(value.shape)),
            )
        param = Variable(value, requires_grad=True, name=name, dtype=dtype)
        param.persistable = True
        return param

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        spec = self._data_inputs
        if spec:
            args, kwargs = arguments.convert(self, spec, args, kwargs)
        return self.forward(*args, **kwargs)

    def named_params(self, prefix=""):
        """(dotted name, parameter) pairs, own parameters first, then each child's in order."""
        for name, param in self._params.items():
            yield prefix + name, param
        for child_name, child in self._children.items():
            yield from child.named_params(prefix + child_name + ".")

    def params(self):
        """The parameters in a stable order (what optimizers are called on)."""
        return [param for _, param in self.named_params()]

    def parameters(self):
        """``params()`` under PyTorch's name (a list here, which iterates like PyTorch's
        generator): ``optim.SGD(model.parameters(), lr=0.1)``."""
        return self.params()

    def children(self):
        return list(self._children.values())

    def train(self, mode=True):
        """Switches this layer and its children to training mode (dropout, batch statistics)."""
        object.__setattr__(self, "training", bool(mode))
        for child in self._children.values():
            child.train(mode)
        return self

    def eval(self):
        """Switches to evaluation mode: dropout is the identity, batch norm uses running stats."""
        return self.train(False)

    def buffers(self, prefix=""):
        """Persistable non-parameter state (e.g. running statistics) as (name, Variable) pairs."""
        for name, value in self.__dict__.items():
            if isinstance(value, Variable) and value.persistable and name not in self._params:
                yield prefix + name, value
        for child_name, child in self._children.items():
            yield from child.buffers(prefix + child_name + ".")

    def __repr__(self):
        inner = ", ".join(f"{k}={type(v).__name__}" for k, v in self._children.items())
        return f"{type(self).__name__}({inner})"
