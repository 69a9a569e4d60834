"""The ops ``call_region`` and ``call_region_grad``: a lazy step's traced calls
(``tape.call_region``) run group by group, and their gradient.

Forward: the groups run in order of level (a group reads only lower levels). Each group's
program runs vectorised over its members (``ops.call.Vectorised``, as ``ops.call``'s batch
rule runs it), its inputs gathered along a new leading axis by one index per input: the
results of all calls of one packed shape and dtype live in one *store* (rows: group after
group, so a group's results are consecutive rows), and a group's input that is a result of
other calls is ``store[positions[refs]]``, whichever groups computed them (a tree node's
children: leaves and nodes of several heights). Inputs from outside are stacked, parameters
passed as they are. What each group's gradient reads is kept (``Vectorised.saved_plan``).

Backward: gradient stores of the same layout, the output gradients added into their rows;
then the groups in reverse order, each reading its rows' gradients as one slice, running its
gradient program vectorised (parameters' gradients summed over the members) and adding its
inputs' gradients into their rows by one indexed add per input (``np.add.at`` where a result
is read twice), those of inputs from outside read per member into rows of their own
(``_LiveRows``), and, where ``tape.grad`` asked for a result the calls read too, copying its
row as its group is reached. No Variable is made per call in either direction: the cost per
call is a few array elements of bookkeeping, and per group a few numpy calls. The stores are
pooled buffers (``ops.buffers``): one the user still holds a result in is never reused.

Results equal the calls run one at a time within the rounding of products over more rows and
of sums in another order, as autobatching's (``tape.lazy(exact=True)`` records the calls'
ops instead). An error inside a group is reported at the failing op of the traced function,
with the first call's line.
"""

from __future__ import annotations

import numpy as np

from ops import buffers
from ops.registry import Attr, register
from ops.xp import array_module
from tape.batched_backward import _stand_in, _zeros
from tape.errors import FluidError, GraphError
from tape.tape import apply, state


def _exported_descs(region):
    descs = []
    for row, index in region.exported:
        group = region.row_groups[row]
        program = group.program
        if index < 0:
            descs.append((program.out_shape, program.dtype))
        else:
            descs.append((program.part_descs[index][0], program.dtype))
    return descs


def _infer(attrs, xs):
    return (_exported_descs(attrs["region"]),)


@register(
    "call_region",
    inputs=("X*",),
    outputs=("Out*",),
    attrs={"region": Attr("any", required=True)},
    infer=_infer,
    returns=lambda results: results[0],
)
def call_region(xp, attrs, xs):
    """Out = the results someone holds of the traced calls of a region
    (``tape.call_region``), X the Variables the calls read from outside; the calls run
    group by group, each group's program vectorised over its members.

    dX = call_region_grad: the groups' gradient programs, vectorised, in reverse order.
    """
    return (forward(attrs["region"], xp, list(xs)),)


@call_region.gradient
def _(g):
    region = g.attrs["region"]
    (live,), (gouts,) = g.inputs, g.gouts
    grads = [None] * len(live)
    given = tuple(k for k, gout in enumerate(gouts or ()) if gout is not None)
    wanted = tuple(e for e, var in enumerate(live) if var.requires_grad)
    totals = tuple(sorted(region.wanted))  # (outputs tape.grad wants whole: tape.call_region)
    if not given or not (wanted or totals):
        return (grads,)
    if state.grad_enabled:
        raise GraphError(
            "call_region",
            "a gradient of traced calls batched as one region cannot be differentiated again",
            hint="use tape.lazy(autobatch=False) where the backward builds a graph",
            location=region.location,
        )
    attrs = {"region": region, "given": given, "wanted": wanted, "totals": totals}
    results = apply(call_region_grad, ([gouts[k] for k in given],), attrs)
    for e, grad in zip(wanted, results):
        grads[e] = grad
    for k, grad in zip(totals, results[len(wanted) :]):
        var, into = region.wanted.pop(k)
        into[id(var)] = grad  # (its gradient from outside and from the calls reading it)
    return (grads,)


def _infer_grad(attrs, gouts):
    region = attrs["region"]
    live, exported = region.live, _exported_descs(region)
    descs = [(tuple(live[e].shape), live[e].dtype) for e in attrs["wanted"]]
    return (descs + [exported[k] for k in attrs["totals"]],)


@register(
    "call_region_grad",
    inputs=("G*",),
    outputs=("Out*",),
    attrs={
        "region": Attr("any", required=True),
        "given": Attr("any", required=True),
        "wanted": Attr("any", required=True),
        "totals": Attr("any", ()),
    },
    infer=_infer_grad,
    differentiable=False,
    returns=lambda results: results[0],
)
def call_region_grad(xp, attrs, gouts):
    """Out = the gradients of a region's inputs numbered ``wanted``, then the whole
    gradients of its outputs numbered ``totals`` (results its own calls read too), from G,
    the gradients reaching its outputs numbered ``given`` (``call_region``'s gradient)."""
    region, totals = attrs["region"], attrs["totals"]
    return (backward(region, xp, attrs["given"], attrs["wanted"], list(gouts), totals),)


# ---- the forward -----------------------------------------------------------------------------


def forward(region, xp, live_values):
    """The values of the region's exported results, its live inputs being ``live_values``."""
    groups = sorted(region.groups.values(), key=_level)
    kinds, counts = {}, []  # (row shape, dtype) -> store number; rows per store
    positions = np.empty(len(region.levels), np.intp)
    for group in groups:
        program = group.program
        desc = (program.out_shape, program.dtype)
        kind = kinds.get(desc)
        if kind is None:
            kind = kinds[desc] = len(counts)
            counts.append(0)
        n = len(group.rows)
        group.kind, group.base = kind, counts[kind]
        positions[group.rows] = np.arange(counts[kind], counts[kind] + n)
        counts[kind] += n
    stores = [_rows(xp, count, shape, dtype) for (shape, dtype), count in zip(kinds, counts)]
    region.kinds, region.stores, region.positions = kinds, stores, positions
    for group in groups:
        program, n = group.program, len(group.rows)
        values = _gathered(region, group, xp, live_values)
        captured = region.captured[program][0]
        values += [live_values[e] for e in captured]
        each = group.each or (True,) * group.refs.shape[1]
        vectorised = program.vectorised(each + (False,) * len(captured))
        try:
            out, group.saved = _run(vectorised, xp, values, group.mask())
        except FluidError as err:
            location = err.location or group.location
            raise err.with_context(location=location) from None
        stores[group.kind][group.base : group.base + n] = out.reshape((n, *program.out_shape))
    return _exported_values(region, stores)


def _exported_values(region, stores):
    """The exported results' values: views of their rows in ``stores`` (``_entry``'s, with
    the positions read as Python ints: a tagger's ~700 token losses and states)."""
    positions = region.positions.tolist()
    return [_entry(region, stores, row, index, positions[row]) for row, index in region.exported]


def _rows(xp, rows, shape, dtype):
    """``rows`` uninitialised rows of ``shape``: a view of a reused buffer (``ops.buffers``)
    whose row count is ``rows`` rounded up to a power of two, so that the next step's store,
    of another size, reuses it (a fresh one is faulted in page by page as it is written). A
    buffer the user still holds a result in (a view of it) is not free, so not reused."""
    capacity = 1 << max(rows - 1, 0).bit_length()
    return buffers.empty(xp, (capacity, *shape), dtype)[:rows]


def _level(group):
    return group.level


def _run(vectorised, xp, values, mask):
    """The group's packed results, and what its gradient for ``mask`` reads: (mask, the values
    it would compute again, its inputs with stand-ins for those it does not read), or None."""
    if not mask:
        return vectorised.run(xp, values), None
    keep, unread = vectorised.grad(mask).inner.saved_plan()[2:]
    if keep:
        out, kept = vectorised.run(xp, values, keep)
    else:
        out, kept = vectorised.run(xp, values), None
    inputs = [
        _stand_in(xp, value.shape, value.dtype) if j in unread else value
        for j, value in enumerate(values)
    ]
    return out, (mask, kept, inputs)


def _gathered(region, group, xp, live_values):
    """The group's per-call inputs, each stacked over its members (or, shared, as it is)."""
    refs, stores, positions = group.refs, region.stores, region.positions
    in_descs, each = group.program.in_descs, group.each
    values = []
    for j in range(refs.shape[1]):
        column = refs[:, j]
        if each is not None and not each[j]:
            values.append(live_values[(-1 - int(column[0])) // 2])
            continue
        shape, dtype = in_descs[j]
        if column.min() >= 0:  # (results of calls: one indexed read)
            values.append(stores[region.kinds[(shape, dtype)]][_on(xp, positions[column])])
            continue
        outside = column < 0
        if outside.all():  # (from outside: live inputs or constants, or both)
            values.append(_outside(region, xp, live_values, column))
            continue
        # (mixed: results of calls by one indexed read, then the few from outside put in;
        # an ordinary op's result among them: the first example's embeddings, looked up
        # before its first call opened the region)
        gathered = stores[region.kinds[(shape, dtype)]][_on(xp, positions[column * ~outside])]
        gathered[_on(xp, outside)] = _outside(region, xp, live_values, column[outside])
        values.append(gathered)
    return values


def _outside(region, xp, live_values, column):
    """The inputs from outside (live ones, constants) that ``column`` names, stacked."""
    consts = region.consts
    members = [consts[c >> 1] if c & 1 else live_values[c >> 1] for c in (-1 - column).tolist()]
    return _stacked(xp, members)


def _stacked(xp, arrays):
    """``arrays`` (one shape and dtype: a group's column) stacked along a new first axis. On
    the host by ``np.array``, which reads a list of arrays in C: ``np.stack`` pays a Python
    step per array (1,539 word ids: 280 against 30 us)."""
    if xp is np:
        return np.array(arrays)
    return xp.stack([xp.asarray(array) for array in arrays])


def _entry(region, stores, row, index, position=None):
    """The place of an exported result (``index``: its part, or -1: the whole output) in the
    row of ``stores`` (the forward's or the gradient's) holding its call's packed output: a
    view (``Program.parts`` cuts a part out); ``position``: its row's, where the caller has
    it as an int."""
    group = region.row_groups[row]
    if position is None:
        position = region.positions[row]
    packed = stores[group.kind][position, ...]
    return packed if index < 0 else group.program.parts(packed)[index]


# ---- the backward ----------------------------------------------------------------------------


def backward(region, xp, given, wanted, gouts, whole_of=()):
    """The gradients of the live inputs numbered ``wanted`` from those of the exported
    results numbered ``given`` (``gouts``), through the groups in reverse order; then the
    whole gradients of the exported results numbered ``whole_of``, read from the gradient
    stores as their groups are reached (every call reading them ran before: higher level)."""
    if region.stores is None:
        raise GraphError("call_region_grad", "the region's forward has not run")
    stores, saved = region.stores, {}
    if array_module(stores[0]) is not xp:  # (a forward run on another device: tests)
        stores, saved = _moved(region, xp)
    grad_stores = [_zeros(xp, len(store), store.shape[1:], store.dtype) for store in stores]
    _add_given(region, xp, grad_stores, given, gouts)
    totals = {}  # live number -> its gradient so far (parameters and shared inputs)
    members = _LiveRows(region, wanted)  # (the gradients of inputs read per member)
    whole = {}  # (exported number -> its whole gradient: ``whole_of``)
    waiting = {k: region.exported[k] for k in whole_of}
    for group in sorted(region.groups.values(), key=_level, reverse=True):
        for k, (row, index) in list(waiting.items()):
            if region.row_groups[row] is group:
                whole[k] = _entry(region, grad_stores, row, index).copy()
                del waiting[k]
        facts = saved.get(group, group.saved)
        if facts is None:
            continue
        mask, kept, inputs = facts
        program, n = group.program, len(group.rows)
        captured = region.captured[program][0]
        each = group.each or (True,) * group.refs.shape[1]
        vectorised = program.vectorised(each + (False,) * len(captured))
        gout = grad_stores[group.kind][group.base : group.base + n]
        gout = gout.reshape((n, *program.out_shape))
        try:
            pieces = vectorised.grad(mask).pieces(xp, inputs + [gout], kept)
        except FluidError as err:
            location = err.location or group.location
            raise err.with_context(location=location) from None
        width = group.refs.shape[1]
        for j, piece in zip(mask, pieces):
            if j >= width:  # (a parameter the program reads: its total over the members)
                _accumulate(totals, captured[j - width], piece)
                continue
            column = group.refs[:, j]
            if not each[j]:
                _accumulate(totals, (-1 - int(column[0])) // 2, piece)
                continue
            shape, dtype = program.in_descs[j]
            results = column >= 0
            if results.all():
                _add_rows(region, grad_stores[region.kinds[(shape, dtype)]], column, piece)
                continue
            if results.any():
                _add_rows(
                    region,
                    grad_stores[region.kinds[(shape, dtype)]],
                    column[results],
                    piece[_on(xp, results)],
                )
            outside = ~results
            codes = -1 - column[outside]
            live = codes & 1 == 0  # (the others are constants: no gradient)
            if live.any():
                if not outside.all():
                    piece = piece[_on(xp, outside)]
                members.add(xp, codes[live] >> 1, piece[_on(xp, live)] if not live.all() else piece)
    return members.gradients(xp, totals, wanted) + [whole[k] for k in whole_of]


def _add_given(region, xp, grad_stores, given, gouts):
    """Adds the gradients ``gouts`` reaching the exported results numbered ``given`` into
    their rows of ``grad_stores``: those of whole outputs of one store (of its row's shape and
    dtype) by one indexed add, the others (parts of packed outputs) one by one. A tagger's
    ~600 token losses cost ~1.5 us each one by one."""
    batches = {}  # store number -> ([rows], [gradients])
    exported, row_groups = region.exported, region.row_groups
    for k, gout in zip(given, gouts):
        row, index = exported[k]
        if index < 0:
            kind = row_groups[row].kind
            store = grad_stores[kind]
            if gout.shape == store.shape[1:] and gout.dtype == store.dtype:
                batch = batches.get(kind)
                if batch is None:
                    batch = batches[kind] = ([], [])
                batch[0].append(row)
                batch[1].append(gout)
                continue
        target = _entry(region, grad_stores, row, index)
        target += gout  # (a view: into the gradient store)
    for kind, (rows, values) in batches.items():  # (an exported row is exported once)
        grad_stores[kind][_on(xp, region.positions[rows])] += _stacked(xp, values)


class _LiveRows:
    """The gradients of the region's inputs from outside read per member (an embedding
    looked up by an ordinary op and passed to the calls), one array per shape and dtype with
    a row for each such input: a group's rows added to them by one indexed add, not one add
    per member; each input's gradient is then its row (a view)."""

    def __init__(self, region, wanted):
        self.region, self.wanted = region, wanted
        self.row_of = np.full(len(region.live), -1, np.intp)  # (live number -> its row)
        self.kind_of = {}  # live number -> its (shape, dtype)
        self.counts, self.arrays = {}, {}  # (shape, dtype) -> rows; -> the array (or None)
        for e in wanted:
            var = region.live[e]
            desc = (tuple(var.shape), var.dtype)
            self.row_of[e] = self.counts.get(desc, 0)
            self.counts[desc] = self.row_of[e] + 1
            self.kind_of[e] = desc

    def add(self, xp, numbers, values):
        """Adds ``values`` (stacked) into the rows of the inputs numbered ``numbers``."""
        rows = self.row_of[numbers]
        wanted = rows >= 0
        if not wanted.all():
            numbers, rows = numbers[wanted], rows[wanted]
            values = values[_on(xp, wanted)]
        if not len(rows):
            return
        desc = self.kind_of[int(numbers[0])]
        array = self.arrays.get(desc)
        if array is None:
            array = self.arrays[desc] = xp.zeros((self.counts[desc], *desc[0]), desc[1])
        _scatter_add(xp, array, rows, values)

    def gradients(self, xp, totals, wanted):
        """Per wanted input, its gradient: its total (a parameter's), its row, or zeros."""
        grads = []
        for e in wanted:
            total = totals.get(e)
            desc = self.kind_of[e]
            array = self.arrays.get(desc)
            if array is not None:
                row = array[int(self.row_of[e])]
                total = row if total is None else total + row
            grads.append(total if total is not None else xp.zeros(desc[0], desc[1]))
        return grads


def _moved(region, xp):
    """The forward's stores and what each group saved, on ``xp``'s device."""
    saved = {}
    for group in region.groups.values():
        if group.saved is not None:
            mask, kept, inputs = group.saved
            kept = None if kept is None else [xp.asarray(value) for value in kept]
            saved[group] = mask, kept, [xp.asarray(value) for value in inputs]
    return [xp.asarray(store) for store in region.stores], saved


def _add_rows(region, target, rows, values):
    """Adds ``values`` into the rows of ``target`` holding the results of the calls ``rows``:
    by one indexed add, or, where a call's result is read twice among them, ``np.add.at``
    (a result read twice in the region is read twice by one group's input only rarely: a
    tagger's states are read by the next step and by the loss, two groups)."""
    xp = array_module(target)
    positions = region.positions[rows]
    if region.repeated and int(region.read[rows].max()) > 1:
        _scatter_add(xp, target, positions, values)
    else:
        target[_on(xp, positions)] += values


def _scatter_add(xp, target, rows, values):
    """target[rows] += values for host index ``rows``, a row named twice added twice (by
    ``add.at``, only then: an indexed add is several times faster)."""
    if len(rows) <= 64:  # (a set is ~5x faster than a sort there; slower for thousands)
        repeated = len(set(rows.tolist())) < len(rows)
    else:
        ordered = np.sort(rows)
        repeated = bool((ordered[1:] == ordered[:-1]).any())
    if repeated:
        xp.add.at(target, _on(xp, rows), values)
    else:
        target[_on(xp, rows)] += values


def _on(xp, index):
    """A host index array on ``xp``'s device."""
    return index if xp is np else xp.asarray(index)


def _accumulate(totals, number, grad):
    previous = totals.get(number)
    totals[number] = grad if previous is None else previous + grad


__all__ = ["call_region", "call_region_grad", "forward", "backward"]
