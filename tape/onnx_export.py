"""ONNX export: a Program (or the tape it comes from) as an ONNX model for other runtimes.

The ops that compute the requested outputs are kept (the rest of the tape -- gradients,
optimizer updates -- is pruned); each is turned into ONNX nodes by its entry in the table
``tape.onnx_ops`` (one mapping per op type). Variables the kept ops read that no kept op writes
and that are not graph inputs -- parameters, constants -- become initializers holding their
current values. With ``dynamic_batch`` the leading axis of every graph input of the recorded
batch size is the symbolic dimension ``batch``: shapes baked into attributes (a reshape's target,
say) that carry that batch size are rewritten to follow it, so the model runs on any batch.

An op without an ONNX form raises ``ExportError`` naming it (and why) before anything is
written. The model passes ``onnx.checker`` (with shape inference) before it is returned.
"""

from __future__ import annotations

import os

import numpy as np

from tape.errors import FluidError, InputError
from tape.ir import Program

DEFAULT_OPSET = 18  # the mappings use opset 18's operators (Reduce* take axes as an input)


class ExportError(FluidError, ValueError):
    """A program that cannot be exported to ONNX: an op without an ONNX form, an unknown
    input or output, an unsupported opset."""


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ImportError(
            "ONNX export needs the 'onnx' package: pip install onnx (or fluidtape[interop])"
        ) from None
    return onnx


def export_onnx(
    source, path=None, inputs=None, outputs=(), opset=DEFAULT_OPSET, dynamic_batch=True
):
    """Exports the ops computing ``outputs`` as an ONNX model; returns the ``onnx.ModelProto``
    (and writes it to ``path`` when given).

    Args:
        source: a ``tape.Program`` or a ``tape.Tape`` recorded with ``lazy=True`` or
            ``record_all=True`` (converted by ``Program.from_tape``).
        path: where to write the model (None: only return it).
        inputs: the graph inputs, Variables or program variable names; None: every variable
            the kept ops read that no op writes and that is not persistable (parameters are).
        outputs: the graph outputs, Variables or names (at least one).
        opset: the ONNX opset (18 or newer).
        dynamic_batch: the leading axis of inputs is the symbolic dimension ``batch``.

    Example (run with onnxruntime)::

        t = tape.Tape(lazy=True)
        with tape.lazy(): ...record on t...
        tape.export_onnx(t, "model.onnx", inputs=[x], outputs=[y])
    """
    onnx = _onnx()
    if not isinstance(opset, int) or not DEFAULT_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise ExportError(
            "export_onnx",
            "unsupported ONNX opset",
            expected=f"{DEFAULT_OPSET} to {onnx.defs.onnx_opset_version()}",
            actual=repr(opset),
        )
    program = source if isinstance(source, Program) else Program.from_tape(source)
    block = program.global_block()
    out_names = [_name_of(program, v, "output") for v in outputs]
    if not out_names:
        raise ExportError("export_onnx", "no outputs given", hint="outputs=[the Variables wanted]")
    given = None if inputs is None else [_name_of(program, v, "input") for v in inputs]
    ops = _kept_ops(block, out_names, given or ())
    in_names = given if given is not None else _free_leaves(block, ops)
    from tape import onnx_ops

    onnx_ops.check_exportable(ops)
    needed = set(out_names).union(*(op.input_names() for op in ops))
    graph = Graph(block, in_names, dynamic_batch, needed)
    for op in ops:
        graph.emit(op, onnx_ops.mapping(op.type))
    model = graph.model(onnx, program, out_names, opset)
    onnx.checker.check_model(model, full_check=True)
    if path is not None:
        onnx.save(model, os.fspath(path))
    return model


def _name_of(program, item, what):
    if isinstance(item, str):
        if item not in program.global_block().vars:
            raise ExportError("export_onnx", f"unknown {what} '{item}'")
        return item
    try:
        return program.name_of(item)
    except FluidError:
        raise ExportError(
            "export_onnx",
            f"{what} variable '{getattr(item, 'name', item)}' is not used by the program",
            hint="record the model on the tape that is exported",
        ) from None


def _kept_ops(block, out_names, in_names):
    """The ops the outputs need, in order, stopping at the graph inputs."""
    needed, kept = set(out_names), []
    stop = set(in_names)
    for op in reversed(block.ops):
        if any(name in needed and name not in stop for name in op.output_names()):
            kept.append(op)
            needed.update(op.input_names())
    missing = [
        n for n in out_names if n not in stop and not any(n in o.output_names() for o in kept)
    ]
    for name in missing:
        if not block.vars[name].persistable:
            raise ExportError("export_onnx", f"output '{name}' is not computed by any op")
    return kept[::-1]


def _free_leaves(block, ops):
    written = {name for op in ops for name in op.output_names()}
    free = []
    for op in ops:
        for name in op.input_names():
            if name not in written and not block.vars[name].persistable and name not in free:
                free.append(name)
    return free


class Graph:
    """The ONNX graph being built: nodes, initializers, and the op being emitted (the context
    the mapping functions of ``tape.onnx_ops`` work in)."""

    def __init__(self, block, in_names, dynamic_batch, needed=None):
        self.block, self.in_names = block, list(in_names)
        self.needed = needed
        self.nodes, self.constants, self.produced = [], {}, set(self.in_names)
        self.batch = None
        self.batched = set()
        if dynamic_batch:
            sizes = [block.vars[n].shape[0] for n in self.in_names if block.vars[n].shape]
            self.batch = sizes[0] if sizes else None
            self.batched = {n for n in self.in_names if block.vars[n].shape[:1] == (self.batch,)}
        self.op, self.counter = None, 0

    # ---- what mapping functions call --------------------------------------------------------

    def x(self, slot, index=0):
        """The ONNX name of input ``slot`` (None when the optional slot is absent)."""
        names = self.op.inputs.get(slot)
        return None if not names else self._value(names[index])

    def xs(self, slot):
        return [self._value(n) for n in self.op.inputs.get(slot, [])]

    def y(self, slot="Out", index=0):
        return self.op.outputs[slot][index]

    def ys(self, slot="Out"):
        return list(self.op.outputs.get(slot, []))

    def needs(self, slot):
        """Whether output ``slot`` is read by a later op or is a graph output."""
        names = self.op.outputs.get(slot) or []
        return any(self.needed is None or name in self.needed for name in names)

    def desc(self, name):
        return self.block.vars[name]

    def shape(self, name):
        return tuple(self.block.vars[name].shape)

    def dtype(self, name):
        return np.dtype(self.block.vars[name].dtype)

    @property
    def attrs(self):
        return self.op.attrs

    def node(self, op_type, inputs, outputs=1, **attrs):
        """Appends an ONNX node; returns its output name (a list when ``outputs`` is a list of
        names or a count > 1). ``None`` inputs become empty (absent optional inputs)."""
        if isinstance(outputs, int):
            names = [self.temp() for _ in range(outputs)]
            single = outputs == 1
        else:
            names, single = ([outputs], True) if isinstance(outputs, str) else (outputs, False)
        inputs = ["" if i is None else i for i in inputs]
        self.nodes.append((op_type, inputs, names, attrs))
        self.produced.update(names)
        return names[0] if single else names

    def const(self, value, dtype=None):
        """An initializer holding ``value`` (int64 for Python ints, else ``dtype`` or its own)."""
        array = np.asarray(value, dtype=dtype if dtype is not None else _default_dtype(value))
        name = f"{self.op.name}/c{self.counter}"
        self.counter += 1
        self.constants[name] = array
        return name

    def temp(self):
        name = f"{self.op.name}/t{self.counter}"
        self.counter += 1
        return name

    def cast(self, name, dtype, source_dtype=None):
        """``name`` as ``dtype`` (a Cast node only when the dtypes differ)."""
        current = source_dtype if source_dtype is not None else self._dtype_of(name)
        if current is not None and np.dtype(current) == np.dtype(dtype):
            return name
        return self.node("Cast", [name], to=_tensor_type(dtype))

    def target_shape(self, shape, source):
        """A Reshape shape for ``shape``; under dynamic batch, with a leading extent that
        carries the batch of ``source`` (the batch itself, or folded with other axes) as -1."""
        shape = [int(d) for d in shape]
        batch = self.batch
        if batch and self.is_batched(source) and shape and shape[0] % batch == 0:
            if 0 not in shape[1:]:
                shape[0] = -1
        return self.const(np.array(shape, np.int64))

    def is_batched(self, name):
        return name in self.batched

    # ---- the exporter's side -----------------------------------------------------------------

    def emit(self, op, mapping):
        self.op = op
        mapping(self)
        for slot, names in op.outputs.items():
            for name in names:
                if name not in self.produced and (self.needed is None or name in self.needed):
                    self.node("Identity", [self._unproduced(slot, name)], name)
        batch = self.batch
        if batch and any(self.is_batched(n) for n in op.input_names()):
            for name in op.output_names():  # the batch, or the batch folded with other axes
                if self.shape(name)[:1] and self.shape(name)[0] % batch == 0:
                    self.batched.add(name)

    def _unproduced(self, slot, name):
        raise ExportError(
            self.op.type,
            f"output '{slot}' of op '{self.op.type}' has no ONNX form",
            hint="export the op's other outputs only",
            name=self.op.name,
            location=self.op.location,
        )

    def _value(self, name):
        return name

    def _dtype_of(self, name):
        if name in self.block.vars:
            return self.block.vars[name].dtype
        if name in self.constants:
            return self.constants[name].dtype
        return None

    def model(self, onnx, program, out_names, opset):
        helper = onnx.helper
        read = {i for _, inputs, _, _ in self.nodes for i in inputs} | set(out_names)
        initializers = [
            onnx.numpy_helper.from_array(array, name) for name, array in self.constants.items()
        ]
        for name in sorted(read - self.produced - set(self.constants) - {""}):
            initializers.append(onnx.numpy_helper.from_array(_bound_value(program, name), name))
        nodes = [helper.make_node(t, i, o, name=f"{o[0]}/{t}", **a) for t, i, o, a in self.nodes]
        graph = helper.make_graph(
            nodes,
            "fluidtape",
            [self._info(helper, n) for n in self.in_names],
            [self._info(helper, n) for n in out_names],
            initializers,
        )
        opsets = [helper.make_opsetid("", opset)]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="fluidtape")
        model.ir_version = helper.find_min_ir_version_for(opsets)  # the widest runtime support
        return model

    def _info(self, helper, name):
        desc = self.block.vars[name]
        shape = list(desc.shape)
        if self.is_batched(name):
            shape[0] = "batch" if shape[0] == self.batch else None
        return helper.make_tensor_value_info(name, _tensor_type(desc.dtype), shape)


def _bound_value(program, name):
    var = program.bindings.get(name)
    if var is None:
        raise InputError("export_onnx", f"variable '{name}' has no value to store")
    return np.ascontiguousarray(var.numpy())


def _default_dtype(value):
    if isinstance(value, (bool, np.bool_)):
        return np.bool_
    if isinstance(value, (int, np.integer)) or (
        isinstance(value, (list, tuple)) and all(isinstance(v, (int, np.integer)) for v in value)
    ):
        return np.int64
    return None


def _tensor_type(dtype):
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


__all__ = ["export_onnx", "ExportError", "Graph", "DEFAULT_OPSET"]
