"""The blocked backend: the chain evaluated block by block, each step with its op's own kernel
or the numpy ufunc calls that kernel is made of (``block_program``), into reused scratch.

The broadcast shape is cut along one axis into blocks of about ``BLOCK_BYTES`` per array (all
axes before it are walked one index at a time), so every intermediate of a block stays in the
cache and dies with the block; outputs are written into preallocated arrays and reductions are
accumulated per block. Steps whose value does not vary along the cut axes (a step on two bias
vectors) run once, on whole arrays, before the loop.

Results: elementwise outputs equal ``reference`` bit for bit (each element comes from the same
kernels, or the very ufunc loops of ``block_program``, on the same operands). A reduction sums
each block and adds the block sums in order, so it differs from the reference's sum only in how
the terms are grouped: |fused - reference| <= count * eps * sum(|values|) (count: elements reduced
into one, eps: the output dtype's), the bound the tests check. Expressions that fit one block run
the reference backend itself.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from ops import buffers
from ops.fused_expression import resolve
from ops.fusion_backends import (
    as_array,
    distinct,
    reduce,
    reduced_count,
    reference,
    step_error,
    step_kernels,
    with_located_errors,
)
from ops.fusion_backends.block_program import TO_BUFFER, UFUNC, Program

# Bytes of one block of the widest array: chosen by measurement (``python -m
# benchmarks.fusion_backends --blocks``, 4M float32 chain, 2-core AMD EPYC VM with 1 MiB of L2
# per core): 128 KiB 13.2 ms, 256 KiB 13.4 ms, 1 MiB 11.0 ms, 2 MiB 11.5 ms, 4 MiB 12.2 ms;
# under 64 KiB the blocks' fixed costs dominate.
BLOCK_BYTES = 1024 * 1024


def compile(expression, xp):  # noqa: A001  (every backend's entry point has this name)
    """A callable evaluating ``expression`` in blocks, or the reference one if it fits one."""
    fallback = reference.compile(expression, xp)
    cut = _cut(expression)
    if cut is None:
        return fallback
    run = with_located_errors(_Blocked(expression, xp, *cut).run, fallback)
    run.backend = "blocked"
    return run


def _cut(expression):
    """(axis, chunk) cutting the broadcast shape into blocks of about BLOCK_BYTES, or None when
    it is one block."""
    shape = expression.shape
    if not shape or 0 in shape:
        return None
    itemsize = max(d.itemsize for d in expression.step_dtypes)
    for axis in range(len(shape)):
        row = math.prod(shape[axis + 1 :]) * itemsize
        if row <= BLOCK_BYTES:
            break
    chunk = max(1, BLOCK_BYTES // row)
    blocks = math.prod(shape[:axis]) * -(-shape[axis] // chunk)
    return None if blocks <= 1 else (axis, chunk)


class _Index:
    """How an array of ``shape`` (right-aligned to the broadcast shape) is cut per block:
    one index per axis before the cut (0 on a broadcast axis), the block's range on the cut axis
    (all of it on a broadcast one), nothing after. ``template`` is its block's shape, None
    standing for the block's length on the cut axis."""

    def __init__(self, shape, full, axis):
        lead = len(full) - len(shape)
        self.parts = []
        for a in range(max(lead, 0), axis + 1):
            size = shape[a - lead]
            if a < axis:
                self.parts.append(a if size != 1 else None)
            else:
                self.parts.append("cut" if size != 1 else "all")
        self.varies = any(p is not None and p != "all" for p in self.parts)
        tail = tuple(shape[max(axis - lead, 0) :])
        if lead <= axis and self.parts[-1] == "cut":
            tail = (None,) + tail[1:]
        self.template = tail

    def at(self, lead_index, span):
        return tuple(
            span if p == "cut" else slice(None) if p == "all" else 0 if p is None else lead_index[p]
            for p in self.parts
        )


class _Blocked:
    def __init__(self, expression, xp, axis, chunk):
        self.e, self.xp, self.axis, self.chunk = expression, xp, axis, chunk
        full = expression.shape
        self.kernels = step_kernels(expression, xp)
        self.in_index = [_Index(shape, full, axis) for shape, _ in expression.inputs]
        self.step_index = [_Index(s, full, axis) for s in expression.step_shapes]
        self.dtypes = [np.dtype(d) for d in expression.dtypes]
        self.fixed = {j for j, ix in enumerate(self.step_index) if not ix.varies}
        templates = ([ix.template for ix in self.in_index], [ix.template for ix in self.step_index])
        self.program = Program(expression, xp, self.kernels, templates, self.fixed)
        self.out_index = [self.step_index[j] for j in expression.outputs]
        firsts = {}
        for i, j in enumerate(expression.outputs):
            firsts.setdefault(j, i)
        self.written = set(firsts.values())  # a step listed twice is written once, then copied
        self._spare = []  # scratch buffers of finished runs (one set per concurrent run)

    def blocks(self):
        shape, axis, chunk = self.e.shape, self.axis, self.chunk
        for lead in itertools.product(*(range(n) for n in shape[:axis])):
            for start in range(0, shape[axis], chunk):
                yield lead, slice(start, min(start + chunk, shape[axis]))

    @functools.cached_property
    def schedule(self):
        """Per block: its length on the cut axis and the index of every varying input, written
        output and reduction accumulator (computed once per expression, not per run)."""
        inputs = [(k, ix) for k, ix in enumerate(self.in_index) if ix.varies]
        outputs = [
            (i, self.out_index[i])
            for i, j in enumerate(self.e.outputs)
            if j not in self.fixed and i in self.written
        ]
        reductions = [r for r in self.e.reductions if r.step not in self.fixed]
        return [
            (
                span.stop - span.start,
                [(k, ix.at(lead, span)) for k, ix in inputs],
                [(i, ix.at(lead, span)) for i, ix in outputs],
                [self._acc_index(r, lead, span) for r in reductions],
            )
            for lead, span in self.blocks()
        ]

    def run(self, *inputs):
        e, xp, program = self.e, self.xp, self.program
        hoisted = self._hoisted(inputs)
        vals = [None] * program.n_slots
        for slot, value in program.constants:
            vals[slot] = value
        for j, value in hoisted.items():
            vals[program.n_inputs + j] = value[self.step_index[j].at((), None)]
        for k, (a, ix) in enumerate(zip(inputs, self.in_index)):
            vals[k] = None if ix.varies else a[ix.at((), None)]
        outs = [
            hoisted[j] if j in hoisted else buffers.empty(xp, e.step_shapes[j], self.dtypes[i])
            for i, j in enumerate(e.outputs)
        ]
        for i, j in enumerate(e.outputs):
            if i not in self.written:
                outs[i] = outs[e.outputs.index(j)]
        scratch = self._spare.pop() if self._spare else self._scratch()
        try:
            sums = self._run_blocks(inputs, vals, outs, scratch)
        finally:
            self._spare.append(scratch)  # reused by the next run (page faults avoided)
        return distinct(outs, e.outputs) + self._reductions(hoisted, sums)

    def _scratch(self):
        return [
            self.xp.empty(tuple(self.chunk if n is None else n for n in t), d)
            for t, d in self.program.buffers
        ]

    def _run_blocks(self, inputs, vals, outs, buffers):
        xp, n_inputs = self.xp, self.program.n_inputs
        sums = self._accumulators()
        views = [None] * len(outs)
        for n, in_index, out_index, acc_index in self.schedule:
            for k, index in in_index:
                vals[k] = inputs[k][index]
            for i, index in out_index:
                views[i] = outs[i][index]
            self._block(vals, buffers if n == self.chunk else self._views(buffers, n), views)
            for (r, acc, local), index in zip(sums, acc_index):
                value = vals[n_inputs + r.step]
                if value.shape != self._block_shape(n):
                    value = xp.broadcast_to(value, self._block_shape(n))
                acc[index] += value.sum(axis=local, keepdims=True, dtype=acc.dtype)
        return sums

    def _views(self, buffers, n):
        templates = [t for t, _ in self.program.buffers]
        return [b[:n] if t[:1] == (None,) else b for b, t in zip(buffers, templates)]

    def _block(self, vals, buffers, outputs):
        xp = self.xp
        for instruction in self.program.code:
            if instruction[0] == UFUNC:
                _, fn, operands, dest, where, slot = instruction
                out = buffers[where] if dest == TO_BUFFER else outputs[where]
                vals[slot] = fn(*[vals[s] for s in operands], out=out)
                continue
            _, kernel, attrs, spec, slot, output = instruction
            args = [
                vals[a] if a.__class__ is int else None if a is None else [vals[s] for s in a]
                for a in spec
            ]
            vals[slot] = kernel(xp, attrs, *args)
            if output is not None:
                outputs[output][...] = vals[slot]

    def _hoisted(self, inputs):
        """Values of the steps that do not vary along the cut axes, on whole arrays."""
        values = {}
        for j, step in enumerate(self.e.steps):
            if j not in self.fixed:
                continue
            kernel, attrs = self.kernels[j]
            args = [resolve(arg, inputs, values) for arg in step.args]
            try:
                values[j] = as_array(kernel(self.xp, attrs, *args), self.xp)
            except Exception as err:
                raise step_error(step, err) from err
        return values

    def _block_shape(self, n):
        return (n,) + tuple(self.e.shape[self.axis + 1 :])

    def _accumulators(self):
        """(reduction, accumulator, block axes summed) for each reduction of a varying step;
        an accumulator keeps every axis (1 where reduced)."""
        e, n_full, found = self.e, len(self.e.outputs), []
        for i, r in enumerate(e.reductions):
            if not self.step_index[r.step].varies:
                continue
            shape = tuple(1 if a in r.axes else n for a, n in enumerate(e.shape))
            acc = self.xp.zeros(shape, self.dtypes[n_full + i])
            local = tuple(a - self.axis for a in r.axes if a >= self.axis)
            found.append((r, acc, local))
        return found

    def _acc_index(self, reduction, lead, span):
        parts = [0 if a in reduction.axes else lead[a] for a in range(self.axis)]
        parts.append(slice(0, 1) if self.axis in reduction.axes else span)
        return tuple(parts)

    def _reductions(self, hoisted, sums):
        e, n_full, xp = self.e, len(self.e.outputs), self.xp
        accumulated = {id(r): acc for r, acc, _ in sums}
        outs = []
        for i, r in enumerate(e.reductions):
            dtype = self.dtypes[n_full + i]
            if r.step in hoisted:
                outs.append(reduce(xp, hoisted[r.step], r, e.shape, dtype))
                continue
            acc = accumulated[id(r)]
            if r.mean:
                acc = acc / reduced_count(r, e.shape)
            out = acc.reshape(r.shape)
            outs.append(out if out.dtype == dtype else out.astype(dtype))
        return outs
