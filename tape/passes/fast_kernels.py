"""Kernels that are faster and equal to eager mode's only within rounding, for non-exact plans.

An op whose kernel has such a form names it by an attribute that is off by default, so eager
mode, interpreted runs and ``exact=True`` plans compute bit for bit what they always did. This
pass turns it on in the plans the pipeline rewrites anyway (their results already differ from
eager mode's by reassociation, and ``validate=True`` compares them within that tolerance):

- ``softmax_with_cross_entropy`` with hard labels: ``fast_exp``, the softmax as one compiled loop
  per row (``ops.fusion_backends.softmax_rows``: 2.4x faster on a language model's logits),
  which its kernel uses where the rows are large enough and the loop is compiled.
- ``lstm_cell_grad``: ``fast_exp``, the LSTM step's gradient as one compiled loop
  (``ops.fusion_backends.lstm_grad_loop``: 28 -> 16 us an op in the ``lstm`` benchmark's plan),
  which its kernel uses on float32 where the loop is compiled.

Cost: one pass over the ops; the dependencies stay valid (no op is added, removed or rewired).
"""

from __future__ import annotations

import dataclasses

from tape.ir import Block

# Op type -> whether an op of it takes its fast form (all its attributes given).
FAST = {
    "softmax_with_cross_entropy": lambda attrs: not attrs["soft_label"],
    "lstm_cell_grad": lambda attrs: True,
}


def rewrite(block) -> Block:
    """``block`` with the fast forms switched on (the same block where there is none)."""
    ops = list(block.ops)
    changed = False
    for index, op in enumerate(ops):
        takes = FAST.get(op.type)
        if takes is not None and not op.attrs["fast_exp"] and takes(op.attrs):
            ops[index] = dataclasses.replace(op, attrs={**op.attrs, "fast_exp": True})
            changed = True
    return Block(block.vars, ops, block.idx) if changed else block
