"""The seed's trainer/pserver split: one training Program becomes trainer and pserver programs.

``split(program, trainers, pservers)`` places each parameter on one parameter server (the
largest first, each on the least loaded server, so the bytes spread evenly) and returns:

- the **trainer** program (one for every trainer rank ``0 .. trainers - 1``): the forward and
  backward ops, a ``send`` of each gradient to its server right after its last producer, and a
  ``recv`` of each parameter's new value from its server at the end;
- one **pserver** program per server (rank ``trainers + s``): for each of its parameters a
  ``recv`` of the gradient from every trainer, their ``sum``, a ``scale`` by 1/trainers, the
  original update op (its optimizer state lives on the server), and a ``send`` of the new value
  to every trainer.

Updates are synchronous: the server waits for every trainer's gradient, so SGD here gives the
parameters the all-reduce mode gives. Sends and recvs are targets (``is_target``), so
``Executor.run`` keeps them; messages of parameter ``k`` carry tag ``k``. Every program
serialises with the program text format; ``mpiexec -n 3`` runs 2 trainers and 1 server.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ops.registry import REGISTRY
from tape.ir import Block, OpDesc, Program, freeze
from tape.passes.data_parallel import _last_producers


@dataclasses.dataclass
class Split:
    """The programs of a split: ``trainer`` (every trainer rank runs it), ``pservers[s]`` (rank
    ``trainers + s``) and ``placement`` (parameter name -> server index)."""

    trainer: Program
    pservers: list
    placement: dict


def split(program, trainers, pservers=1) -> Split:
    """Splits ``program`` (forward, backward, update ops) as the module docstring says."""
    block = program.global_block()
    updates = _all_updates(block)
    params = [op.inputs["Param"][0] for op in updates]
    placement = _place(block, params, pservers)
    server_rank = {name: trainers + placement[name] for name in params}
    trainer = _trainer(program, updates, server_rank)
    servers = [
        _pserver(program, [u for u in updates if placement[u.inputs["Param"][0]] == s], trainers)
        for s in range(pservers)
    ]
    return Split(trainer, servers, placement)


def _place(block, params, pservers):
    """Largest parameter first, each on the server holding the fewest bytes so far."""
    load, placement = [0] * pservers, {}
    sizes = {name: _nbytes(block.var(name)) for name in params}
    for name in sorted(params, key=lambda n: (-sizes[n], params.index(n))):
        server = load.index(min(load))
        placement[name] = server
        load[server] += sizes[name]
    return placement


def _nbytes(desc):
    return int(np.prod(desc.shape, dtype=np.int64)) * np.dtype(desc.dtype).itemsize


def _attrs(op_type, **attrs):
    return freeze(REGISTRY[op_type].check_attrs(attrs))


def _trainer(program, updates, server_rank):
    block = program.global_block()
    grads = [op.inputs["Grad"][0] for op in updates]
    producer = _last_producers(block, grads)
    skipped = {id(op) for op in updates}
    sends = {}
    for tag, grad in enumerate(grads):
        param = updates[tag].inputs["Param"][0]
        attrs = _attrs("send", peer=server_rank[param], tag=tag)
        sends.setdefault(producer[grad], []).append(
            OpDesc("send", {"X": [grad]}, {}, attrs, True, f"send_{grad}")
        )
    ops = []
    for index, op in enumerate(block.ops):
        if id(op) not in skipped:
            ops.append(op)
        ops += sends.get(index, [])
    for tag, op in enumerate(updates):
        param = op.inputs["Param"][0]
        desc = block.var(param)
        attrs = _attrs("recv", peer=server_rank[param], tag=tag, shape=desc.shape, dtype=desc.dtype)
        ops.append(OpDesc("recv", {}, {"Out": [param]}, attrs, True, f"recv_{param}"))
    used = {n for op in ops for n in op.input_names() + op.output_names()}
    variables = {name: desc for name, desc in block.vars.items() if name in used}
    return Program([Block(variables, ops, block.idx)], program.bindings)


def _pserver(program, updates, trainers):
    """Receive, average, update and send back the parameters of ``updates``.

    The server receives in the order the trainers send (the gradients' producer order), and
    sends only after every update, in program order, as the trainers receive: with the blocking
    transfers of large messages, any other order could leave both sides waiting on each other.
    """
    block = program.global_block()
    tags = {id(op): i for i, op in enumerate(_all_updates(block))}
    producer = _last_producers(block, [op.inputs["Grad"][0] for op in updates])
    variables, receives, updating, sends = {}, [], [], []
    for op in sorted(updates, key=lambda op: producer[op.inputs["Grad"][0]]):
        tag, grad = tags[id(op)], op.inputs["Grad"][0]
        desc = block.var(grad)
        parts = [f"{grad}@trainer{t}" for t in range(trainers)]
        for t, part in enumerate(parts):
            variables[part] = dataclasses.replace(desc, name=part, requires_grad=False)
            attrs = _attrs("recv", peer=t, tag=tag, shape=desc.shape, dtype=desc.dtype)
            receives.append(OpDesc("recv", {}, {"Out": [part]}, attrs, True, f"recv_{part}"))
    for op in updates:
        tag, grad, param = tags[id(op)], op.inputs["Grad"][0], op.inputs["Param"][0]
        for name in op.input_names() + op.output_names():
            variables[name] = block.var(name)
        desc = block.var(grad)
        for suffix in ("@SUM", "@AVG"):
            variables[grad + suffix] = dataclasses.replace(desc, name=grad + suffix)
        parts = [f"{grad}@trainer{t}" for t in range(trainers)]
        updating.append(OpDesc("sum", {"X": parts}, {"Out": [grad + "@SUM"]}, _attrs("sum")))
        scale = _attrs("scale", scale=1.0 / trainers)
        updating.append(OpDesc("scale", {"X": [grad + "@SUM"]}, {"Out": [grad + "@AVG"]}, scale))
        inputs = {**op.inputs, "Grad": [grad + "@AVG"]}
        updating.append(dataclasses.replace(op, inputs=inputs, is_target=True))
        for t in range(trainers):
            attrs = _attrs("send", peer=t, tag=tag)
            sends.append(OpDesc("send", {"X": [param]}, {}, attrs, True, f"send_{param}_{t}"))
    ops = receives + updating + sends
    return Program([Block(variables, ops, block.idx)], program.bindings)


def _all_updates(block):
    return [op for op in block.ops if REGISTRY[op.type].inplace and "Grad" in op.inputs]


__all__ = ["split", "Split"]
