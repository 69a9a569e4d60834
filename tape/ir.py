"""The scheduler's IR: Program / Block / OpDesc / VarDesc, plain data from a tape or built by hand.

A Program is what the passes (``tape.passes``) read and return. It holds names, shapes, dtypes and
attributes only -- never arrays. ``Program.from_tape`` also remembers which Variable each name
stands for (``bindings``), so the static Executor can read parameters and accept Variables in a
fetch list; bindings are not part of the structure and are not serialised.

The structural hash is computed on a canonical form in which variables are numbered in order of
first appearance, so two tapes that record the same ops on the same shapes hash equally whatever
their variables are called::

    >>> import numpy as np, tape, ops
    >>> def record():
    ...     t = tape.Tape(lazy=True)
    ...     x = tape.Variable(np.ones((2, 3), np.float32))
    ...     t.add_op("relu", {"X": [x]})
    ...     return tape.Program.from_tape(t)
    >>> record().structural_hash() == record().structural_hash()
    True
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np

from ops.registry import lookup
from tape.errors import GraphError


@dataclasses.dataclass
class VarDesc:
    """A variable's compile-time description: name, shape, dtype and flags (no buffer)."""

    name: str
    shape: tuple
    dtype: str
    persistable: bool = False
    requires_grad: bool = False

    def signature(self):
        return (tuple(self.shape), self.dtype, self.persistable, self.requires_grad)


@dataclasses.dataclass
class OpDesc:
    """One op: its type, slot -> variable names for inputs and outputs, and full attributes.

    ``is_target`` marks an op the caller wants run (seed: Prune); ``name`` and ``location`` say
    which recorded op it was and where, for error messages -- they are not part of the structure.
    """

    type: str
    inputs: dict
    outputs: dict
    attrs: dict
    is_target: bool = False
    name: str = ""
    location: str | None = None

    def input_names(self):
        return [name for names in self.inputs.values() for name in names]

    def output_names(self):
        return [name for names in self.outputs.values() for name in names]


@dataclasses.dataclass
class Block:
    """An ordered list of ops and the variables they use (name -> VarDesc, in first-use order)."""

    vars: dict = dataclasses.field(default_factory=dict)
    ops: list = dataclasses.field(default_factory=list)
    idx: int = 0

    def var(self, name) -> VarDesc:
        try:
            return self.vars[name]
        except KeyError:
            raise GraphError(None, f"block {self.idx} has no variable '{name}'") from None

    def create_var(self, name, shape, dtype, persistable=False, requires_grad=False):
        """Declares a variable (e.g. a parameter or a feed target) and returns its VarDesc."""
        desc = VarDesc(
            name,
            tuple(int(d) for d in shape),
            np.dtype(dtype).name,
            bool(persistable),
            bool(requires_grad),
        )
        self.vars[name] = desc
        return desc

    def append_op(self, type, inputs=None, outputs=None, attrs=None, is_target=False):
        """Appends op ``type``; checks attributes and declares undeclared outputs by inference.

        ``inputs``/``outputs`` map slot names to lists of variable names (inputs must be declared).
        """
        defn = lookup(type)
        full = freeze(defn.check_attrs(attrs))
        inputs = {slot: list(names) for slot, names in (inputs or {}).items()}
        outputs = {slot: list(names) for slot, names in (outputs or {}).items()}
        args = describe_inputs(defn, inputs, self)
        descs = infer_outputs(defn, full, args)
        for slot, desc in zip(defn.output_slots, descs, strict=True):
            names = outputs.get(slot)
            if names is None:
                continue
            entries = desc if isinstance(desc, list) else [desc]
            for name, (shape, dtype) in zip(names, entries, strict=False):
                if name not in self.vars:
                    self.create_var(name, shape, dtype)
        op = OpDesc(type, inputs, outputs, full, is_target, f"{type}_{len(self.ops)}")
        self.ops.append(op)
        return op


@dataclasses.dataclass
class Program:
    """A list of blocks (block 0 is the global block); see the module docstring."""

    blocks: list = dataclasses.field(default_factory=lambda: [Block()])
    bindings: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)
    # Parsed from text (a file): its side-effecting ops run only where the Executor allows.
    loaded: bool = dataclasses.field(default=False, compare=False, repr=False)

    def global_block(self) -> Block:
        return self.blocks[0]

    @classmethod
    def from_tape(cls, tape, dynamic_batch=False):
        """A Program of the ops recorded on ``tape``.

        Record with ``Tape(lazy=True)`` (or ``Tape(record_all=True)``) so ops no gradient flows
        through are kept too. The Program takes over a lazy tape's pending ops: they run only
        when an Executor runs the program (not again when the tape is reset). With
        ``dynamic_batch`` the leading axis of every input to feed is free (-1): an Executor
        runs the program with any batch size (``tape.batch_axis``).
        """
        program = from_ops(tape.ops)
        if dynamic_batch:
            from tape.batch_axis import free_batch

            free_batch(program)
        for op in tape._pending_ops:
            for var in op.output_vars():
                if var._value is not None:  # written in place by a pending op: keeps its value
                    var._pending = None
        tape._pending_ops = []
        return program

    def structural_hash(self) -> str:
        """A hex digest equal for programs of the same shape whatever their variable names."""
        form, _ = canonical_form(self.global_block())
        text = json.dumps(form, separators=(",", ":"), default=_json_default)
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()

    def to_text(self) -> str:
        from tape.ir_text import to_text

        return to_text(self)

    @classmethod
    def from_text(cls, text) -> "Program":
        from tape.ir_text import from_text

        return from_text(text)

    def explain(self, fetch_list=(), targets=()) -> str:
        """What the scheduler would do to run this program for ``fetch_list`` and ``targets``."""
        from tape.executor import Executor

        return Executor().explain(self, fetch_list=fetch_list, targets=targets)

    def name_of(self, var) -> str:
        """The name a bound Variable has in this program."""
        for name, bound in self.bindings.items():
            if bound is var:
                return name
        raise GraphError(
            None,
            f"variable '{var.name}' is not used by this program",
            hint="fetch a variable recorded on the tape the program came from",
        )


def from_ops(ops, names=None):
    """A Program holding ``ops`` (OpHandles in tape order), naming each distinct Variable once.

    ``names`` (id(var) -> name) may fix names; others come from the Variable's own name, made
    unique with a numeric suffix.
    """
    program = Program()
    block = program.global_block()
    given = names or {}
    seen = {}

    def name_for(var):
        key = id(var)
        name = seen.get(key)
        if name is None:
            name = given.get(key) or _unique(var._name or "tmp", block.vars)
            seen[key] = name
            block.vars[name] = VarDesc(
                name,
                tuple(var.shape),
                var.dtype.name,
                bool(var.persistable),
                bool(var.requires_grad),
            )
            program.bindings[name] = var
        return name

    for op in ops:
        inputs = _slots(op.defn.input_slots, op.args, name_for)
        outputs = _slots(op.defn.output_slots, op.results, name_for)
        block.ops.append(
            OpDesc(op.defn.type, inputs, outputs, freeze(op.attrs), False, op.name, op.location)
        )
    return program


def _slots(slots, entries, name_for):
    out = {}
    for slot, entry in zip(slots, entries, strict=True):
        if entry is None:
            continue
        out[slot] = [name_for(v) for v in (entry if isinstance(entry, (list, tuple)) else [entry])]
    return out


def _unique(base, taken):
    if base not in taken:
        return base
    k = 1
    while f"{base}_{k}" in taken:
        k += 1
    return f"{base}_{k}"


def freeze(attrs):
    """Attributes with lists turned into tuples, so they hash and compare like the originals."""
    return {key: _freeze_value(value) for key, value in attrs.items()}


def _freeze_value(value):
    if isinstance(value, (list, tuple)):
        return tuple(_freeze_value(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def canonical_form(block):
    """(form, names): the block with variables renumbered by first appearance, and the names in
    that order. Two blocks of the same shape give equal forms."""
    number = {}
    order = []

    def num(name):
        index = number.get(name)
        if index is None:
            index = number[name] = len(order)
            order.append(name)
        return index

    ops = []
    for op in block.ops:
        ins = [[slot, [num(n) for n in names]] for slot, names in op.inputs.items()]
        outs = [[slot, [num(n) for n in names]] for slot, names in op.outputs.items()]
        attrs = sorted(op.attrs.items())
        ops.append([op.type, ins, outs, attrs, op.is_target])
    variables = [list(block.var(name).signature()) for name in order]
    return [ops, variables], order


def _json_default(value):
    if isinstance(value, tuple):
        return list(value)
    return repr(value)


class _Described:
    """What infer functions see of a variable: its shape and dtype (no buffer)."""

    __slots__ = ("shape", "dtype", "name")

    def __init__(self, desc):
        self.shape, self.dtype, self.name = tuple(desc.shape), np.dtype(desc.dtype), desc.name

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))


def describe_inputs(defn, inputs, block):
    """One entry per input slot (a stand-in, a list for duplicable slots, or None)."""
    args = []
    for slot in defn.input_slots:
        names = inputs.get(slot)
        if names is None:
            args.append(None)
        elif slot in defn.duplicable_inputs:
            args.append([_Described(block.var(n)) for n in names])
        else:
            args.append(_Described(block.var(names[0])))
    return args


def infer_outputs(defn, attrs, args):
    """The op's inferred (shape, dtype) per output slot, as a tuple (lists for duplicable)."""
    descs = defn.infer(attrs, *args)
    return (descs,) if defn.single_output else tuple(descs)


__all__ = ["Program", "Block", "OpDesc", "VarDesc", "from_ops", "canonical_form", "freeze"]
