"""Batch rules: how one kernel call computes many independent instances of an op at once.

The lazy scheduler's autobatching (``tape.passes.autobatch``) groups ops of one signature -- op
type, attributes, per-example input shapes and dtypes, and which inputs are *shared* (the same
parameter in every member) -- and runs the group as one call. An op says how, beside its kernel::

    @register("matmul", ..., batch=batching.MATMUL)

Ops flagged ``elementwise`` batch by default (``ELEMENTWISE``); ``batch=False`` opts out. A rule
gets the per-example inputs already stacked along a new leading axis (``n`` members) and the
shared inputs as they are (for ``LIST``, one stack per element of the op's one list slot), and
returns one array of shape ``(n,) + out_shape`` whose row ``i`` is member ``i``'s output,
computed by the op's own kernel wherever possible (so batched results equal unbatched ones, up
to the rounding of a BLAS call over more rows). A rule's ``accepts`` says whether a signature
batches at all (e.g. a 1-D product of two per-example vectors does not).

A rule's ``as_op`` says how its call reads as one instance of the op itself (attributes, the
shapes its stacked operands are given, the slot order), so that the op's own gradient maker
differentiates the whole group at once (``tape.batched_backward``); None where it does not.
"""

from __future__ import annotations


class Rule:
    """A batch rule. ``accepts(attrs, shapes, each)``: per input slot its (per-example) shape
    and whether it differs per example (False: shared by the group). ``run(xp, kernel, attrs,
    inputs, n, out_shape)``: ``inputs`` has per slot ``(True, stacked)`` or ``(False, shared
    value)``."""

    name = "rule"
    lists = False  # whether it batches an op whose one input slot is a list (``LIST``'s kind)
    min_group = None  # the fewest members worth a batched call, if fewer than the schedule's
    shapes_in_attrs = False  # whether the op's attributes fix its inputs' shapes and dtypes

    @staticmethod
    def fixed_inputs(attrs):
        """How many of the op's last inputs its attributes fix (the same Variables in every op
        with these attributes), for a rule with ``shapes_in_attrs``: a signature skips them."""
        return 0

    def accepts(self, attrs, shapes, each):
        return any(each)

    def run(self, xp, kernel, attrs, inputs, n, out_shape):
        raise NotImplementedError

    def as_op(self, attrs, shapes, each, n, out_shape):
        """The group's call as one instance of the op: ``(attrs, slots, shapes, out_shape)``:
        its attributes, per slot of that instance the member's slot it reads, the shape the
        stacked operand (``(n,) + shape``) is reshaped to (a shared one: None, read as it is),
        and the shape of its result (the stacked results reshaped); None: it does not read as
        one (the members are differentiated one by one)."""
        return None

    def __repr__(self):
        return f"<batch rule {self.name}>"


class _Elementwise(Rule):
    """Broadcasting elementwise ops: stacked inputs get size-1 axes so that the leading member
    axis lines up; shared inputs broadcast as they are. The seed's ``axis`` attribute (Paddle
    broadcasting) only matters between inputs of different rank, so those do not batch."""

    name = "elementwise"

    def accepts(self, attrs, shapes, each):
        if not any(each):
            return False
        return attrs.get("axis", -1) == -1 or len({len(s) for s in shapes}) == 1

    def run(self, xp, kernel, attrs, inputs, n, out_shape):
        if attrs.get("axis", -1) != -1:
            attrs = {**attrs, "axis": -1}
        rank = len(out_shape)
        args = [
            stacked.reshape((n,) + (1,) * (rank - stacked.ndim + 1) + stacked.shape[1:])
            if each and stacked.ndim - 1 < rank
            else stacked
            for each, stacked in inputs
        ]
        out = kernel(xp, attrs, *args)
        return out if out.shape[0] == n else xp.broadcast_to(out, (n,) + tuple(out_shape))

    def as_op(self, attrs, shapes, each, n, out_shape):
        if attrs.get("axis", -1) != -1:
            attrs = {**attrs, "axis": -1}
        rank = len(out_shape)
        stacked = [
            (n,) + (1,) * (rank - len(shape)) + tuple(shape) if per else None
            for shape, per in zip(shapes, each)
        ]
        return attrs, tuple(range(len(shapes))), stacked, (n,) + tuple(out_shape)


class _Matmul(Rule):
    """``op(X) @ op(Y)`` with a shared weight: the per-example operand's rows are joined into one
    large product (``concat(x_i) @ W``, or ``W @ x_i`` as ``x_i @ W^T`` for vectors). With
    neither operand shared (the weight gradients ``x_i^T @ g_i``), one batched product over the
    stacked operands."""

    name = "matmul"

    def accepts(self, attrs, shapes, each):
        (x, y), (x_each, y_each) = shapes, each
        if x_each and not y_each:  # shared right operand
            return len(x) == 1 or (len(x) == 2 and not attrs["transpose_x"])
        if y_each and not x_each:  # shared left operand, per-example vector
            return len(y) == 1
        return x_each and y_each and len(x) == len(y) >= 2

    def run(self, xp, kernel, attrs, inputs, n, out_shape):
        (x_each, x), (y_each, y) = inputs
        if x_each and not y_each:
            rows = x.reshape(-1, x.shape[-1])  # (n*m, k): one product with the shared weight
            attrs = {**attrs, "transpose_x": False}  # (a vector's flag means nothing)
            return kernel(xp, attrs, rows, y).reshape((n,) + tuple(out_shape))
        if y_each and not x_each:  # W @ y_i for vectors y_i: rows y_i @ op(W)^T
            flipped = {"transpose_x": False, "transpose_y": not attrs["transpose_x"]}
            return kernel(xp, flipped, y, x)
        return kernel(xp, attrs, x, y)

    def as_op(self, attrs, shapes, each, n, out_shape):
        (x, y), (x_each, y_each) = shapes, each
        out_shape = tuple(out_shape)
        if x_each and not y_each:
            attrs = {**attrs, "transpose_x": False}
            if len(x) == 1:
                return attrs, (0, 1), [(n,) + tuple(x), None], (n,) + out_shape
            rows = (n * x[0], x[1])
            return attrs, (0, 1), [rows, None], (n * out_shape[0],) + out_shape[1:]
        if y_each and not x_each:
            flipped = {**attrs, "transpose_x": False, "transpose_y": not attrs["transpose_x"]}
            return flipped, (1, 0), [(n,) + tuple(y), None], (n,) + out_shape
        return attrs, (0, 1), [(n,) + tuple(x), (n,) + tuple(y)], (n,) + out_shape


class _Rows(Rule):
    """Ops that act independently on every leading index of their per-example input and read
    the shared ones whole (``lookup_table``: ids per example, one table)."""

    name = "rows"

    def __init__(self, as_one=True):
        self.as_one = as_one  # whether the op's gradient maker reads stacked operands rightly

    def run(self, xp, kernel, attrs, inputs, n, out_shape):
        return kernel(xp, attrs, *(value for _, value in inputs))

    def as_op(self, attrs, shapes, each, n, out_shape):
        if not self.as_one:
            return None
        stacked = [(n,) + tuple(shape) if per else None for shape, per in zip(shapes, each)]
        return attrs, tuple(range(len(shapes))), stacked, (n,) + tuple(out_shape)


class _Reduce(Rule):
    """Reductions with ``axis`` (None: all) and ``keepdim``: the same reduction of every member,
    its axes moved past the member axis."""

    name = "reduce"

    def run(self, xp, kernel, attrs, inputs, n, out_shape):
        ((_, stacked),) = inputs
        return kernel(xp, self._moved(attrs, stacked.ndim - 1), stacked)

    def as_op(self, attrs, shapes, each, n, out_shape):
        (shape,) = shapes
        moved = self._moved(attrs, len(shape))
        return moved, (0,), [(n,) + tuple(shape)], (n,) + tuple(out_shape)

    @staticmethod
    def _moved(attrs, rank):
        """The attributes with the reduced axes of a member of ``rank`` moved past the member
        axis (None: all of the member's axes)."""
        axis = attrs["axis"]
        axes = range(rank) if axis is None else (a % rank for a in axis) if rank else ()
        return {**attrs, "axis": tuple(a + 1 for a in axes)}


class _View(Rule):
    """Ops that only re-describe their input's elements in C order (reshape, squeeze,
    unsqueeze): one reshape of the stacked members."""

    name = "view"

    def accepts(self, attrs, shapes, each):
        return each[0]

    def run(self, xp, kernel, attrs, inputs, n, out_shape):
        return inputs[0][1].reshape((n,) + tuple(out_shape))

    def as_op(self, attrs, shapes, each, n, out_shape):
        # (every such op's gradient is dOut reshaped to X's shape: stacked, the stacked shape)
        return attrs, (0,), [(n,) + tuple(shapes[0])], (n,) + tuple(out_shape)


class _Axes(Rule):
    """Ops whose attributes name axes of per-example inputs (``slice``, ``slice_grad``): every
    input per example, non-negative axes moved past the member axis (negative ones already
    count from the end)."""

    name = "axes"

    def __init__(self, *names):
        self.names = names

    def accepts(self, attrs, shapes, each):
        return all(each)

    def run(self, xp, kernel, attrs, inputs, n, out_shape):
        return kernel(xp, self._moved(attrs), *(value for _, value in inputs))

    def as_op(self, attrs, shapes, each, n, out_shape):
        stacked = [(n,) + tuple(shape) for shape in shapes]
        return self._moved(attrs), tuple(range(len(shapes))), stacked, (n,) + tuple(out_shape)

    def _moved(self, attrs):
        """The attributes with their non-negative axes moved past the member axis."""
        moved = {k: tuple(a + 1 if a >= 0 else a for a in attrs[k]) for k in self.names}
        return {**attrs, **moved}


class _List(Rule):
    """Elementwise ops over one list of inputs of one shape (``sum``, which backward uses to add
    up gradients): the members' j-th inputs are stacked, and the kernel gets the stacks."""

    name = "list"
    lists = True

    def accepts(self, attrs, shapes, each):
        return all(each) and len(set(shapes)) == 1

    def run(self, xp, kernel, attrs, inputs, n, out_shape):
        return kernel(xp, attrs, [value for _, value in inputs])

    def as_op(self, attrs, shapes, each, n, out_shape):
        # (one list slot: ``shapes`` has one shape per list position)
        return attrs, (0,), [[(n,) + tuple(shape) for shape in shapes]], (n,) + tuple(out_shape)


class _Concat(_List):
    """``concat``: the members' j-th inputs are stacked (their shapes may differ from one
    position to the next, as the members' do), and one concatenation along the axis moved
    past the member axis joins them all (a negative axis already counts from the end)."""

    name = "concat"

    def accepts(self, attrs, shapes, each):
        return all(each)

    def run(self, xp, kernel, attrs, inputs, n, out_shape):
        return kernel(xp, self._moved(attrs), [value for _, value in inputs])

    def as_op(self, attrs, shapes, each, n, out_shape):
        stacked = [[(n,) + tuple(shape) for shape in shapes]]
        return self._moved(attrs), (0,), stacked, (n,) + tuple(out_shape)

    @staticmethod
    def _moved(attrs):
        axis = attrs["axis"]
        return {**attrs, "axis": axis + 1} if axis >= 0 else attrs


class _ListAxes(_List):
    """``slices_grad``: the members' j-th pieces are stacked, and the kernel builds all
    members' gradients at once in a ``shape`` with the member axis first (non-negative axes
    moved past it)."""

    name = "list-axes"

    def accepts(self, attrs, shapes, each):
        return all(each)

    def run(self, xp, kernel, attrs, inputs, n, out_shape):
        shape = (n, *attrs["shape"])
        return kernel(xp, {**self.moved_axes(attrs), "shape": shape}, [v for _, v in inputs])

    @staticmethod
    def moved_axes(attrs):
        """The attributes with their non-negative axes moved past the member axis (``shape``
        is the member's still)."""
        moved = {
            k: tuple(a + 1 if a >= 0 else a for a in attrs[k]) for k in ("axes", "decrease_axis")
        }
        return {**attrs, **moved}

    def as_op(self, attrs, shapes, each, n, out_shape):
        return None  # (a gradient op: a first-order backward never differentiates it)


class _RowsAlong(Rule):
    """Ops that treat the leading axes of every input alike and work along one ``axis``
    attribute (softmax cross-entropy and its gradient: the class axis): every input per
    example, a non-negative axis moved past the member axis. ``several``: ``run`` returns one
    result per output slot for an op with several (autobatching batches one-output ops only;
    ``ops.call`` runs traced programs' ops of any kind vectorised)."""

    name = "rows-along-axis"
    several = True

    def accepts(self, attrs, shapes, each):
        return all(each)

    def run(self, xp, kernel, attrs, inputs, n, out_shape):
        axis = attrs["axis"]
        moved = {**attrs, "axis": axis + 1} if axis >= 0 else attrs
        return kernel(xp, moved, *(value for _, value in inputs))


ELEMENTWISE = _Elementwise()
ROWS_ALONG_AXIS = _RowsAlong()
LIST = _List()
CONCAT = _Concat()
SLICES = _ListAxes()
SLICE = _Axes("axes", "decrease_axis")
MATMUL = _Matmul()
ROWS = _Rows()
# ``outer``: its maker's products (dOut @ Y) read one example's operands, not stacked ones
ROWS_FORWARD = _Rows(as_one=False)
REDUCE = _Reduce()
VIEW = _View()


def rule_of(defn):
    """The op's batch rule, or None: its own ``batch`` fact, else ``ELEMENTWISE`` for plain
    elementwise ops (one output, one Variable per input)."""
    rule = defn.batch
    if rule is None:
        return ELEMENTWISE if defn.elementwise and defn.fast else None
    return rule or None


__all__ = [
    "Rule",
    "SLICE",
    "LIST",
    "CONCAT",
    "ELEMENTWISE",
    "MATMUL",
    "ROWS",
    "ROWS_FORWARD",
    "REDUCE",
    "VIEW",
    "ROWS_ALONG_AXIS",
    "rule_of",
]
