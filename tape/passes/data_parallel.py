"""Data parallel as a program transformation: all-reduce each gradient right after its producer.

``insert_allreduce(program, nranks)`` takes a training Program (forward, backward, optimizer
update ops) and returns a new one in which the gradients the update ops read are averaged over
the ranks: they are grouped, in the order backward produces them, into buckets of at most
``bucket_cap_mb``; after the last producer of each bucket comes one ``c_allreduce_sum`` of the
bucket and a ``scale`` by 1/nranks per gradient, and every later reader reads the average. The
all-reduce ops are side-effecting, so the dependency pass keeps them in this order on every rank,
while the backward ops not feeding them stay free: the thread-pool executor overlaps the
communication with the rest of backward. Run the result with ``tape.Executor`` in each process
(``mpiexec -n N``); it serialises with the program text format like any Program.

Gradients are found as the ``Grad`` inputs of update ops (ops updating an input in place), so a
clip or decay recorded between backward and the update acts on each rank's own gradient before
the average (the eager ``DistributedDataParallel`` averages first).
"""

from __future__ import annotations

import dataclasses

from ops.registry import REGISTRY
from tape.ir import Block, OpDesc, Program, VarDesc, freeze


def gradients_of_updates(block):
    """The names of the ``Grad`` inputs of the block's in-place update ops, in program order."""
    names = []
    for op in block.ops:
        if REGISTRY[op.type].inplace and "Grad" in op.inputs:
            names += [n for n in op.inputs["Grad"] if n not in names]
    return names


def insert_allreduce(program, nranks, ring_id=0, bucket_cap_mb=1.0, grads=None) -> Program:
    """A copy of ``program`` whose update ops read gradients averaged over ``nranks`` ranks
    (see the module docstring); ``grads`` names the gradients (default: the updates' Grad)."""
    block = program.global_block()
    grads = list(grads) if grads is not None else gradients_of_updates(block)
    producer = _last_producers(block, grads)
    order = sorted(grads, key=lambda name: producer[name])
    buckets = _buckets(block, order, bucket_cap_mb * 2**20)
    after = {max(producer[n] for n in bucket): bucket for bucket in buckets}
    variables, ops, renamed = dict(block.vars), [], {}
    for index, op in enumerate(block.ops):
        ops.append(_renamed_inputs(op, renamed) if renamed else op)
        bucket = after.get(index)
        if bucket is not None:
            ops += _reduce_ops(variables, bucket, nranks, ring_id, len(ops))
            renamed.update({name: f"{name}@AVG" for name in bucket})
    return Program([Block(variables, ops, block.idx)] + program.blocks[1:], program.bindings)


def _last_producers(block, grads):
    producer = {}
    for index, op in enumerate(block.ops):
        for name in op.output_names():
            if name in grads:
                producer[name] = index
    missing = [name for name in grads if name not in producer]
    if missing:
        from tape.errors import GraphError

        raise GraphError(
            "insert_allreduce",
            f"no op of the program computes gradient '{missing[0]}'",
            hint="record forward, backward and the optimizer step on the tape the program is "
            "built from",
        )
    return producer


def _buckets(block, order, cap_bytes):
    buckets, size = [], 0
    for name in order:
        desc = block.var(name)
        nbytes = _nbytes(desc)
        if buckets and size + nbytes <= cap_bytes and block.var(buckets[-1][0]).dtype == desc.dtype:
            buckets[-1].append(name)
            size += nbytes
        else:
            buckets.append([name])
            size = nbytes
    return buckets


def _nbytes(desc):
    import numpy as np

    return int(np.prod(desc.shape, dtype=np.int64)) * np.dtype(desc.dtype).itemsize


def _reduce_ops(variables, bucket, nranks, ring_id, position):
    """One c_allreduce_sum of the bucket, then a scale by 1/nranks per gradient."""
    summed = [f"{name}@ALLREDUCE" for name in bucket]
    for name, total in zip(bucket, summed, strict=True):
        desc = variables[name]
        variables[total] = VarDesc(total, desc.shape, desc.dtype)
        variables[f"{name}@AVG"] = VarDesc(f"{name}@AVG", desc.shape, desc.dtype)
    attrs = freeze(REGISTRY["c_allreduce_sum"].check_attrs({"ring_id": ring_id}))
    ops = [
        OpDesc(
            "c_allreduce_sum",
            {"X": list(bucket)},
            {"Out": summed},
            attrs,
            name=f"c_allreduce_sum@{position}",
        )
    ]
    scale = freeze(REGISTRY["scale"].check_attrs({"scale": 1.0 / nranks}))
    for name, total in zip(bucket, summed, strict=True):
        ops.append(OpDesc("scale", {"X": [total]}, {"Out": [f"{name}@AVG"]}, scale, name=total))
    return ops


def _renamed_inputs(op, renamed):
    inputs = {slot: [renamed.get(n, n) for n in names] for slot, names in op.inputs.items()}
    if inputs == op.inputs:
        return op
    return dataclasses.replace(op, inputs=inputs)


__all__ = ["insert_allreduce", "gradients_of_updates"]
