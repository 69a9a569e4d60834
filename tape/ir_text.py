"""The Program text format (JSON, one variable or op per line) and its validation on load.

Layout (``version`` 1)::

    {"format": "fluidtape-program", "version": 1, "blocks": [
     {"idx": 0, "vars": [
      {"name": "x", "shape": [8, 3], "dtype": "float32", "persistable": false,
       "requires_grad": false},
      ...],
     "ops": [
      {"type": "mul", "name": "mul_0", "inputs": {"X": ["x"], "Y": ["w"]},
       "outputs": {"Out": ["h"]}, "attrs": {"x_num_col_dims": 1, "y_num_col_dims": 1},
       "is_target": false, "location": "train.py:12 in forward"},
      ...]}]}

Tuples in attributes are written as lists and restored through the op's attribute schema, so
``from_text(to_text(p)) == p`` and ``to_text(from_text(s)) == s`` for any ``s`` this module wrote.
Loading only parses JSON (never eval or pickle) and checks everything against the op registry: an
unknown op, slot or attribute, a bad attribute value, a variable no ``vars`` entry declares, or a
declared shape the op's inference disagrees with is a ``ProgramFormatError`` naming the op.
"""

from __future__ import annotations

import json

import numpy as np

from ops.registry import REGISTRY, canonical_dtype
from tape.errors import FluidError
from tape.ir import Block, OpDesc, Program, VarDesc, _Described, freeze, infer_outputs

FORMAT, VERSION = "fluidtape-program", 1
_VAR_KEYS = ("name", "shape", "dtype", "persistable", "requires_grad")
_OP_KEYS = ("type", "name", "inputs", "outputs", "attrs", "is_target", "location")


class ProgramFormatError(FluidError, ValueError):
    """A program text (or a Program) that is malformed or disagrees with the op registry."""


def to_text(program) -> str:
    """The program as text (see the module docstring)."""
    blocks = []
    for block in program.blocks:
        var_lines = ",\n".join(
            "  " + _dumps({k: getattr(v, k) for k in _VAR_KEYS}) for v in block.vars.values()
        )
        op_lines = ",\n".join(
            "  " + _dumps({k: getattr(op, k) for k in _OP_KEYS}) for op in block.ops
        )
        blocks.append(f' {{"idx": {block.idx}, "vars": [\n{var_lines}],\n "ops": [\n{op_lines}]}}')
    return (
        f'{{"format": "{FORMAT}", "version": {VERSION}, "blocks": [\n' + ",\n".join(blocks) + "]}\n"
    )


def _dumps(value):
    try:
        return json.dumps(value, allow_nan=True)
    except TypeError as err:
        raise ProgramFormatError(
            None,
            f"cannot write an attribute as text: {err}",
            hint="attributes must be numbers, strings, bools, None or lists of them",
        ) from None


def from_text(text) -> Program:
    """Parses and validates a program text; raises ProgramFormatError on any problem."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise ProgramFormatError(None, f"not a program text: invalid JSON ({err})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ProgramFormatError(None, "not a program text", expected=f'"format": "{FORMAT}"')
    if doc.get("version") != VERSION:
        raise ProgramFormatError(
            None,
            "unsupported program text version",
            expected=str(VERSION),
            actual=repr(doc.get("version")),
        )
    blocks = [_block(b) for b in _field(doc, "blocks", list, "the program")]
    program = Program(blocks, loaded=True)
    validate(program)
    return program


def _field(doc, key, kind, where):
    value = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ProgramFormatError(
            None,
            f"{where}: field '{key}' is missing or has the wrong type",
            expected=kind.__name__,
            actual=repr(value),
        )
    return value


def _block(doc):
    block = Block(idx=_field(doc, "idx", int, "a block"))
    for item in _field(doc, "vars", list, "a block"):
        var = _var(item)
        if var.name in block.vars:
            raise ProgramFormatError(None, f"variable '{var.name}' is declared twice")
        block.vars[var.name] = var
    block.ops = [_op(item, i) for i, item in enumerate(_field(doc, "ops", list, "a block"))]
    return block


def _var(doc):
    where = f"variable {doc.get('name')!r}" if isinstance(doc, dict) else "a variable"
    _no_unknown_keys(doc, _VAR_KEYS, where)
    shape = _field(doc, "shape", list, where)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= -1 for d in shape):
        raise ProgramFormatError(
            None,
            f"{where}: shape must hold non-negative ints (or -1: a free axis)",
            actual=repr(shape),
        )
    try:
        dtype = canonical_dtype(_field(doc, "dtype", str, where))
    except TypeError:
        raise ProgramFormatError(
            None, f"{where}: unknown dtype", actual=repr(doc["dtype"])
        ) from None
    return VarDesc(
        _field(doc, "name", str, where),
        tuple(shape),
        dtype,
        _field(doc, "persistable", bool, where),
        _field(doc, "requires_grad", bool, where),
    )


def _op(doc, index):
    where = f"op #{index}"
    _no_unknown_keys(doc, _OP_KEYS, where)
    location = doc.get("location")
    if location is not None and not isinstance(location, str):
        raise ProgramFormatError(None, f"{where}: field 'location' must be a string or null")
    return OpDesc(
        _field(doc, "type", str, where),
        _slot_map(doc, "inputs", where),
        _slot_map(doc, "outputs", where),
        _field(doc, "attrs", dict, where),
        _field(doc, "is_target", bool, where),
        _field(doc, "name", str, where),
        location,
    )


def _slot_map(doc, key, where):
    value = _field(doc, key, dict, where)
    for slot, names in value.items():
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ProgramFormatError(
                None, f"{where}: {key} slot '{slot}' must list variable names", actual=repr(names)
            )
    return value


def _no_unknown_keys(doc, keys, where):
    if not isinstance(doc, dict):
        raise ProgramFormatError(None, f"{where} must be an object", actual=repr(doc))
    unknown = sorted(set(doc) - set(keys))
    if unknown:
        raise ProgramFormatError(
            None, f"{where}: unknown field '{unknown[0]}'", hint=f"fields are {', '.join(keys)}"
        )


def validate(program):
    """Checks every op of ``program`` against the registry; normalises attributes in place."""
    for block in program.blocks:
        for op in block.ops:
            try:
                _check_op(op, block)
            except FluidError as err:
                if isinstance(err, ProgramFormatError):
                    raise err.with_context(name=op.name or None, op=op.type) from None
                raise ProgramFormatError(
                    op.type, err.headline, err.expected, err.actual, err.hint, name=op.name or None
                ) from None
    return program


def _check_op(op, block):
    defn = REGISTRY.get(op.type)
    if defn is None:
        import difflib

        close = difflib.get_close_matches(op.type, REGISTRY, n=3)
        raise ProgramFormatError(
            op.type, "unknown op type", hint=f"did you mean {', '.join(close)}?" if close else None
        )
    op.attrs = freeze(defn.check_attrs(op.attrs))
    _check_slots(defn, op.inputs, defn.input_slots, defn.duplicable_inputs, "input", block)
    _check_slots(defn, op.outputs, defn.output_slots, defn.duplicable_outputs, "output", block)
    missing = [s for s in defn.input_slots if s not in op.inputs and s not in defn.optional_inputs]
    if missing:
        raise ProgramFormatError(None, f"missing input '{missing[0]}'")
    args = [
        None
        if s not in op.inputs
        else (
            [_Described(block.vars[n]) for n in op.inputs[s]]
            if s in defn.duplicable_inputs
            else _Described(block.vars[op.inputs[s][0]])
        )
        for s in defn.input_slots
    ]
    if any(-1 in block.vars[n].shape for n in op.input_names()):
        return  # a free axis (tape.batch_axis): checked when a run fixes the fed shapes
    for slot, desc in zip(defn.output_slots, infer_outputs(defn, op.attrs, args), strict=True):
        descs = desc if isinstance(desc, list) else [desc]
        for name, (shape, dtype) in zip(op.outputs.get(slot, ()), descs, strict=False):
            declared = block.vars[name]
            if tuple(declared.shape) != tuple(shape) or declared.dtype != np.dtype(dtype).name:
                raise ProgramFormatError(
                    None,
                    f"output '{name}' is declared with another shape or dtype than the op infers",
                    expected=f"{tuple(shape)} {np.dtype(dtype).name}",
                    actual=f"{tuple(declared.shape)} {declared.dtype}",
                )


def _check_slots(defn, given, slots, duplicable, kind, block):
    for slot, names in given.items():
        if slot not in slots:
            raise ProgramFormatError(
                None,
                f"unknown {kind} slot '{slot}'",
                hint=f"{kind} slots are {', '.join(slots) or '(none)'}",
            )
        if slot not in duplicable and len(names) != 1:
            raise ProgramFormatError(
                None,
                f"{kind} slot '{slot}' takes exactly one variable",
                actual=f"{len(names)} names",
            )
        for name in names:
            if name not in block.vars:
                raise ProgramFormatError(
                    None,
                    f"{kind} '{slot}' names variable '{name}', which the block does not declare",
                    hint="every variable an op uses needs a 'vars' entry",
                )


__all__ = ["to_text", "from_text", "validate", "ProgramFormatError"]
