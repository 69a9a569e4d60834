"""The fused-kernel IR: the plain data the fusion pass hands to ``fused_elementwise``'s backends.

The fusion pass (``tape/passes/fusion.py``) turns a group of connected elementwise ops into one
``Expression``; the backends in ``ops/fusion_backends`` turn an Expression into a callable. Both
sides import only this module. An Expression is immutable and hashable (its hash is computed once),
so a compiled kernel is cached by it.

>>> e = Expression(
...     inputs=(((2, 3), "float32"), ((3,), "float32")),
...     shape=(2, 3),
...     steps=(
...         Step("elementwise_mul", (("axis", -1),), (("in", 0), ("in", 1)), ("mul", "m", None)),
...         Step("tanh", (), (("step", 0),), ("tanh", "tanh_2", None)),
...     ),
...     outputs=(1,),
...     reductions=(Reduction(step=1, axes=(0,), keepdims=False, mean=False, shape=(3,)),),
...     dtypes=("float32", "float32"),
... )
>>> e.step_shapes, [d.name for d in e.step_dtypes]
(((2, 3), (2, 3)), ['float32', 'float32'])
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np


@dataclasses.dataclass(frozen=True)
class Step:
    """One elementwise op of the group.

    ``op``: a registered op type with ``elementwise=True``. ``attrs``: its full attributes as
    sorted (name, value) pairs (Paddle's ``axis`` already -1). ``args``: one entry per input slot
    of the op: ``("in", k)`` (external input k), ``("step", j)`` (the value of step j < this one),
    a tuple of such references for a duplicable slot (``sum``'s X*), or None for an absent
    optional slot. ``origin``: (op type, op name, recorded-at location or None) of the op it came
    from, for error messages.
    """

    op: str
    attrs: tuple
    args: tuple
    origin: tuple


@dataclasses.dataclass(frozen=True)
class Reduction:
    """A sum (or mean) of one step's value over ``axes`` of the broadcast shape, reshaped to
    ``shape`` (``keepdims`` keeps the reduced axes as 1s before that reshape)."""

    step: int
    axes: tuple
    keepdims: bool
    mean: bool
    shape: tuple


@dataclasses.dataclass(frozen=True)
class Expression:
    """A group of elementwise ops: external ``inputs`` ((shape, dtype name) each, broadcastable
    to ``shape``), ``steps`` in program order, the steps materialised as ``outputs`` (each with
    its own broadcast shape), then ``reductions``; ``dtypes`` names every output's dtype (full
    outputs first, then reductions). Constants are 0-d external inputs."""

    inputs: tuple
    shape: tuple
    steps: tuple
    outputs: tuple
    reductions: tuple
    dtypes: tuple

    def __hash__(self):
        return self._hash

    @functools.cached_property
    def _hash(self):
        return hash((self.inputs, self.shape, self.steps, self.outputs, self.reductions))

    @functools.cached_property
    def structure(self):
        """What the kernel computes: this expression with its steps' origins cleared (each
        step's op type kept), so groups of equal structure -- a loop body fused at every
        iteration -- share one compiled kernel; ``ops.fused`` locates a shared kernel's errors
        with each group's own origins."""
        steps = tuple(Step(s.op, s.attrs, s.args, (s.op, None, None)) for s in self.steps)
        return self if steps == self.steps else dataclasses.replace(self, steps=steps)

    @functools.cached_property
    def step_shapes(self):
        """The broadcast shape of each step's value (it may be smaller than ``shape``)."""
        shapes = []
        for step in self.steps:
            arg_shapes = [self._ref_shape(ref, shapes) for ref in flat_refs(step.args)]
            shapes.append(tuple(np.broadcast_shapes(*arg_shapes)) if arg_shapes else ())
        return tuple(shapes)

    @functools.cached_property
    def step_dtypes(self):
        """The dtype of each step's value, from its op's own inference."""
        from ops.registry import REGISTRY

        descs, dtypes = [], []
        for step in self.steps:
            args = [_map_refs(arg, lambda ref: self._desc(ref, descs)) for arg in step.args]
            defn = REGISTRY[step.op]
            _, dtype = defn.infer(defn.check_attrs(dict(step.attrs)), *args)
            dtypes.append(np.dtype(dtype))
            descs.append(_Desc(self.step_shapes[len(descs)], dtype))
        return tuple(dtypes)

    @property
    def output_shapes(self):
        """The shape of every output: full outputs (their step's shape), then reductions."""
        full = tuple(self.step_shapes[j] for j in self.outputs)
        return full + tuple(tuple(r.shape) for r in self.reductions)

    @property
    def size(self):
        """Elements of the broadcast shape: the work of one step."""
        return int(np.prod(self.shape, dtype=np.int64))

    def _ref_shape(self, ref, shapes):
        kind, index = ref
        return tuple(self.inputs[index][0]) if kind == "in" else shapes[index]

    def _desc(self, ref, descs):
        kind, index = ref
        if kind == "in":
            shape, dtype = self.inputs[index]
            return _Desc(tuple(shape), np.dtype(dtype))
        return descs[index]


class _Desc:
    """What an op's inference reads of a Variable: shape and dtype."""

    __slots__ = ("shape", "dtype", "name", "requires_grad")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.name, self.requires_grad = None, False

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))


def is_ref(arg):
    """Whether a step argument is one reference (not a duplicable slot's tuple, not None)."""
    return arg is not None and len(arg) == 2 and isinstance(arg[0], str)


def flat_refs(args):
    """Every reference among a step's arguments, duplicable slots flattened, in order."""
    for arg in args:
        if arg is None:
            continue
        if is_ref(arg):
            yield arg
        else:
            yield from arg


def _map_refs(arg, fn):
    if arg is None:
        return None
    return fn(arg) if is_ref(arg) else [fn(ref) for ref in arg]


def resolve(arg, inputs, values):
    """A step argument's value(s): external inputs and earlier steps' values by reference."""
    if arg is None:
        return None
    if is_ref(arg):
        return inputs[arg[1]] if arg[0] == "in" else values[arg[1]]
    return [inputs[k] if kind == "in" else values[k] for kind, k in arg]


__all__ = ["Step", "Reduction", "Expression", "flat_refs", "resolve", "is_ref"]
