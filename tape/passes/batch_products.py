"""Batch products: many small matrix products of one shape become one large product.

An unrolled recurrent model computes per step products far too small to keep BLAS busy (a batch
of 16 rows), and its backward adds up one weight-gradient product per step. Two rewrites turn
them into single large products (the observation behind DyNet's autobatching and cuDNN's
persistent RNNs):

* **Sums of products.** ``sum_t op(A_t) @ op(B_t) = op(concat A) @ op(concat B)`` when the
  operands are joined along the contracted axis: the weight gradient ``sum_t dZ_t^T @ X_t`` of a
  recurrent cell is one ``(4H x T*B) @ (T*B x in)`` product instead of T products and T adds.
  Sums of ``sum_to_shape`` reductions over a leading axis (bias gradients) become one reduction
  of the joined inputs. Nested ``sum`` ops (backward adds contributions in batches) are
  flattened first.
* **Shared operands.** Products ``X_t @ W`` with one ``W`` whose ``X_t`` all exist before any of
  their results is read (the input projections of every step) become ``concat(X) @ W``, split.

Both change only the order in which floating-point numbers are added, so results equal eager
mode's within reassociation rounding (DESIGN.md, "Fusion"); ``exact=True`` switches the pass
off. It never drops a variable in ``keep``, never moves a read across a write of the variable,
and groups fewer than ``MIN_GROUP`` products not at all. Ops whose results nothing reads any more
are removed afterwards.
"""

from __future__ import annotations

import collections

from tape.ir import Block
from tape.passes.block_edits import Scan, remove_dead

# Measured here (16-row float32 products, one BLAS thread): joining two or three products gains
# nothing (0.9-1.1x), four 1.2-1.6x, eight 1.5-1.7x, fifty 2-3x.
MIN_GROUP = 4

_PRODUCTS = ("matmul", "mul")


def rewrite(block, keep=()) -> Block:
    """``block`` with the rewrites of the module docstring applied (itself if none applies)."""
    result = _SumsOfProducts(block, frozenset(keep)).apply()
    result = _SharedOperands(result, frozenset(keep)).apply()
    return result if result is block else remove_dead(result, keep)


class _SumsOfProducts(Scan):
    def __init__(self, block, keep):
        super().__init__(block, keep)
        self.joined = {}  # (names, axis) -> the name of their concat, emitted once

    def apply(self):
        tops, absorbed = [], set()
        for index in range(len(self.block.ops) - 1, -1, -1):  # outer sums absorb inner ones
            if self.block.ops[index].type == "sum" and index not in absorbed:
                terms, nested = self._terms(index)
                tops.append((index, terms, nested))
                absorbed |= nested
        for index, terms, nested in reversed(tops):  # program order: joins are emitted once
            if self._rewrite_sum(index, terms):
                self.replaced.update((i, []) for i in nested)
        return super().apply()

    def _rewrite_sum(self, index, terms):
        """Rewrites sum op ``index`` of ``terms``; returns whether anything was batched."""
        op = self.block.ops[index]
        groups = collections.defaultdict(list)
        for name in terms:
            groups[self._group_key(name, index)].append(name)
        batched = [
            names for key, names in groups.items() if key is not None and len(names) >= MIN_GROUP
        ]
        if not batched:
            return False
        out = op.outputs["Out"][0]
        rest = [
            name
            for key, names in groups.items()
            if key is None or len(names) < MIN_GROUP
            for name in names
        ]
        sole = not rest and len(batched) == 1  # the batched product is the whole sum
        emitted = [self._batch(names, index, out if sole else None) for names in batched]
        self.replaced[index] = (
            [] if sole else [self.op("sum", {"X": rest + emitted}, {"Out": [out]}, {}, op)]
        )
        return True

    def _terms(self, index):
        """The terms of sum ``index`` with nested private sums expanded (depth first, in input
        order: an explicit stack, as a chain of sums can be as long as the tape), and those
        sums."""
        terms, absorbed = [], set()
        stack = [(index, 0)]  # (sum op, next input position)
        while stack:
            sum_index, position = stack.pop()
            names = self.block.ops[sum_index].inputs["X"]
            while position < len(names):
                name = names[position]
                position += 1
                producer = self.producer(name)
                if (
                    producer is not None
                    and self.block.ops[producer].type == "sum"
                    and name not in self.keep
                    and self.readers[name] == [sum_index]
                ):
                    absorbed.add(producer)
                    stack.append((sum_index, position))  # resume here after the inner sum
                    stack.append((producer, 0))
                    break
                terms.append(name)
        return terms, absorbed

    def _group_key(self, name, at):
        """What batches ``name`` with other terms of the sum at ``at`` (None: it does not)."""
        producer = self.producer(name)
        if producer is None or name in self.keep:
            return None
        op = self.block.ops[producer]
        operands = op.input_names()
        if not all(self.unchanged(n, producer, at) for n in operands):
            return None
        if op.type == "matmul" and self.two_d(*operands):
            (a, b), attrs = operands, op.attrs
            ka, kb = (0 if attrs["transpose_x"] else 1), (1 if attrs["transpose_y"] else 0)
            return (
                "matmul",
                attrs["transpose_x"],
                attrs["transpose_y"],
                self.var(a).shape[1 - ka],
                self.var(b).shape[1 - kb],
                self.var(a).dtype,
                self.var(b).dtype,
            )
        if op.type == "sum_to_shape" and len(self.var(operands[0]).shape) > len(op.attrs["shape"]):
            x = self.var(operands[0])
            return ("sum_to_shape", tuple(op.attrs["shape"]), tuple(x.shape[1:]), x.dtype)
        return None

    def _batch(self, names, at, out):
        """One op computing the sum of the products ``names``, placed before op ``at``."""
        products = [self.block.ops[self.producer(n)] for n in names]
        first = products[0]
        if first.type == "sum_to_shape":
            joined = self._join([p.inputs["X"][0] for p in products], 0, at, first)
            attrs = {"shape": first.attrs["shape"]}
            inputs = {"X": [joined]}
        else:
            ka = 0 if first.attrs["transpose_x"] else 1
            kb = 1 if first.attrs["transpose_y"] else 0
            inputs = {
                "X": [self._join([p.inputs["X"][0] for p in products], ka, at, first)],
                "Y": [self._join([p.inputs["Y"][0] for p in products], kb, at, first)],
            }
            attrs = dict(first.attrs)
        result = self.var(names[0])
        if out is None:
            out = self.fresh(names[0], result.shape, result.dtype)
        self.before[at].append(self.op(first.type, inputs, {"Out": [out]}, attrs, first))
        return out

    def _join(self, names, axis, at, like):
        """The name of ``names`` concatenated along ``axis``, joined once for every sum."""
        key = (tuple(names), axis)
        found = self.joined.get(key)
        if found is not None and all(self.unchanged(n, found[1], at) for n in names):
            return found[0]
        parts = [self.var(n) for n in names]
        shape = list(parts[0].shape)
        shape[axis] = sum(p.shape[axis] for p in parts)
        joined = self.fresh(names[0], shape, parts[0].dtype)
        self.joined[key] = (joined, at)
        self.before[at].append(
            self.op("concat", {"X": list(names)}, {"Out": [joined]}, {"axis": axis}, like)
        )
        return joined


class _SharedOperands(Scan):
    def apply(self):
        groups = collections.defaultdict(list)
        for index, op in enumerate(self.block.ops):
            key = self._group_key(op)
            if key is not None:
                groups[key].append(index)
        for members in groups.values():
            if len(members) >= MIN_GROUP:
                self._batch(members)
        return super().apply()

    def _group_key(self, op):
        """Products whose right operand is one variable and whose left ones differ in rows."""
        if op.type not in _PRODUCTS or not self.two_d(*op.input_names()):
            return None
        out = op.outputs["Out"][0]
        if self.producer(out) is None:
            return None
        x, y = self.var(op.inputs["X"][0]), op.inputs["Y"][0]
        if op.type == "matmul":
            if op.attrs["transpose_x"]:
                return None
        elif op.attrs["x_num_col_dims"] != 1 or op.attrs["y_num_col_dims"] != 1:
            return None
        return (op.type, y, tuple(sorted(op.attrs.items())), x.shape[1], x.dtype)

    def _batch(self, members):
        """Joins the products ``members`` (indices) into one, where all their inputs exist."""
        chosen, start, limit, outputs = [], 0, len(self.block.ops), set()
        for index in members:
            op = self.block.ops[index]
            if any(n in outputs for n in op.input_names()):
                continue  # reads a joined product itself (x @ W @ W): not ready at the join
            ready = max(
                (
                    max((w for w in self.writers.get(n, ()) if w < index), default=-1) + 1
                    for n in op.input_names()
                ),
                default=0,
            )
            readers = self.readers.get(op.outputs["Out"][0], ())
            first_read = min(readers, default=len(self.block.ops))
            if max(start, ready) <= min(limit, first_read):
                chosen.append(index)
                outputs.add(op.outputs["Out"][0])
                start, limit = max(start, ready), min(limit, first_read)
        ops = [self.block.ops[i] for i in chosen]
        if len(chosen) < MIN_GROUP or not all(
            self.unchanged(n, i, start)
            for i, op in zip(chosen, ops, strict=True)
            for n in op.input_names()
        ):
            return
        first = ops[0]
        xs = [op.inputs["X"][0] for op in ops]
        rows = tuple(self.var(x).shape[0] for x in xs)
        outs = [op.outputs["Out"][0] for op in ops]
        joined = self.fresh(xs[0], (sum(rows), self.var(xs[0]).shape[1]), self.var(xs[0]).dtype)
        result = self.var(outs[0])
        product = self.fresh(outs[0], (sum(rows), result.shape[1]), result.dtype)
        self.before[start] += [
            self.op("concat", {"X": xs}, {"Out": [joined]}, {"axis": 0}, first),
            self.op(
                first.type,
                {"X": [joined], "Y": first.inputs["Y"]},
                {"Out": [product]},
                dict(first.attrs),
                first,
            ),
            self.op(
                "split",
                {"X": [product]},
                {"Out": outs},
                {"num": 0, "sections": rows, "axis": 0},
                first,
            ),
        ]
        for index in chosen:
            self.replaced[index] = []


__all__ = ["rewrite", "MIN_GROUP"]
