"""Backward: a reverse scan of the tape asking each op's gradient maker for gradient ops.

Gradient ops are ordinary registered ops recorded through the same machinery, so with
``create_graph=True`` they land on the tape and can be differentiated again. A variable read by
several ops receives the ``sum`` of their gradients. An op none of whose outputs received a
gradient cannot reach the loss and is skipped. Unless ``retain_graph``, each op is dropped from
the tape as soon as its gradient ops ran, which frees the forward buffers only it still held
(seed: "release memory on backward"). Leaf gradients are committed only after the whole scan
succeeded, so a failing backward never leaves a parameter with a partial gradient.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from ops import buffers, intra_op
from ops.registry import REGISTRY
from ops.xp import array_module
from tape import (
    backward_faults,
    batched_backward,
    call_region,
    collector,
    eager_speculation,
    grad_memo,
    guard,
    instrument,
    region_plan,
    replay,
    stale,
    tier_choice,
)
from tape.errors import GraphError, InputError, user_location
from tape.guard import SHARED
from tape.tape import apply, run_trusted, state
from tape.variable import Variable, owner


class GradContext:
    """What a gradient maker sees: the forward op's inputs, outputs, attributes and output grads.

    ``inputs``/``outputs``/``gouts`` have one entry per slot, like OpHandle.args; a gout entry is
    None where no gradient reached that output.
    """

    __slots__ = ("op", "gouts", "inputs", "outputs", "attrs")

    def __init__(self, op, gouts):
        # (plain attributes, not properties: a maker reads them once or twice per op)
        self.op, self.gouts = op, gouts
        self.inputs, self.outputs, self.attrs = op.args, op.results, op.attrs

    def needs(self, index):
        """Whether input slot ``index`` needs a gradient (any of its Variables requires one)."""
        entry = self.op.args[index]
        if entry is None:
            return False
        if entry.__class__ is list:
            return any(v.requires_grad for v in entry)
        return entry.requires_grad

    def gout_or_zeros(self, index):
        """The gradient of output ``index``, or zeros of its shape if none reached it."""
        gout = self.gouts[index]
        if gout is None:
            gout = REGISTRY["fill_zeros_like"](self.op.results[index])
        return gout


def backward(tape, loss, grad=None, retain_graph=False, create_graph=False):
    """Accumulates d(loss)/d(leaf) into every leaf that requires a gradient (DyNet semantics)."""
    leaf_grads = gradients(tape, loss, grad, retain_graph, create_graph)
    # Leaves are shared state: threads running backward on their own tapes into the same
    # parameters take turns here (the scan above, the bulk of the work, stays lock-free).
    with _ACCUMULATING, _mode(tape, create_graph):
        for var, g in leaf_grads.values():
            previous = var._grad
            if previous is not None and previous._pending is not None:
                if owner(previous) is not tape:
                    previous._array()  # another thread's lazy tape: no cross-tape link
            var._grad = g if previous is None else REGISTRY["sum"]([previous, g])
            if var._grad._pending is tape:  # a lazy run asked for one computes them all
                tape._leaf_grads.append((weakref.ref(var._grad), weakref.ref(var), previous))


_ACCUMULATING = threading.RLock()


def grad(tape, loss, inputs, grad=None, retain_graph=False, create_graph=False):
    """d(loss)/d(input) for each of ``inputs`` (leaves or not), without touching ``.grad()``."""
    if tape._region is not None:  # (sealed first: the check reads what it exported)
        call_region.seal(tape)
    wanted = {id(v): None for v in inputs}
    region_plan.want(inputs, wanted)
    gradients(tape, loss, grad, retain_graph, create_graph, wanted)
    return [wanted[id(v)] for v in inputs]


def gradients(tape, loss, seed=None, retain_graph=False, create_graph=False, wanted=None):
    """Runs the reverse scan; returns {id: (leaf, grad)} and fills ``wanted`` {id: grad}.

    A lazy backward of a tape structure seen before replays the gradient ops it recorded then
    (``tape.replay``): a training loop runs its gradient makers once. A backward that failed
    part-way is resumed where it stopped (``tape.backward_faults``)."""
    if tape._region is not None:  # (the traced calls recorded as rows: now one op)
        call_region.seal(tape)
    progress = backward_faults.resumable(tape, loss, seed, retain_graph, create_graph, wanted)
    if progress is not None:
        if tape.lazy:  # (only a scan that drops ops leaves progress: ``_after_forward``'s)
            return _after_forward(tape, loss, retain_graph, progress)
        return _scan(tape, loss, seed, retain_graph, create_graph, wanted, progress)
    _check_loss(loss)
    if tape.speculated and not tape.lazy and seed is None and wanted is None:
        # (an eager step in a lazy block: its structure's sketch says whether it repeats)
        eager_speculation.eager_step(
            lambda: tier_choice.sketch(tape, loss, retain_graph), tape._ops
        )
        leaves = _scan(tape, loss, seed, retain_graph, create_graph, wanted)
        eager_speculation.eager_step_done(tape)
        return leaves
    # (gradient hooks need the scan: it sees each leaf's last reader)
    # (observers attribute each gradient op to its forward op: the makers must run)
    replayable = (
        tape.lazy
        and seed is None
        and not create_graph
        and not tape._grad_hooks
        and instrument.ACTIVE is None
    )
    if replayable and wanted is None and not tape._written:
        with collector.paused():  # (a lazy tape's ops all stay alive: see tape.collector)
            return replay.gradients(
                tape,
                loss,
                retain_graph,
                lambda: _scan(tape, loss, None, retain_graph, False, None, memo=True),
                _fresh(tape, loss, retain_graph),
            )
    return _scan(tape, loss, seed, retain_graph, create_graph, wanted)


def _fresh(tape, loss, retain_graph):
    """How a lazy backward over a structure seen for the first time runs: ``_after_forward``
    on a global tape in a ``tape.lazy()`` block, unless the lazy options compile every
    structure (whose plans fuse forward and backward); None (record the gradient ops) on a
    tape made by hand, which may become a Program (``Program.from_tape``) with its backward."""
    from tape.lazy import interprets_new_structures

    if not (tape.steps_only and state.lazy) or not interprets_new_structures():
        return None
    return lambda: _after_forward(tape, loss, retain_graph)


def _after_forward(tape, loss, retain_graph, progress=None):
    """A lazy backward over a tape structure seen for the first time: runs the pending forward
    ``loss`` needs (interpreted, autobatched as the options say), then the reverse scan the
    eager way, kernels at once and each op dropped once its gradient ran.

    Nothing of such a step is cached (a DyNet-style model records a new structure almost every
    step), and recording a gradient op lazily costs about what running it eagerly does (its
    maker or recipe, a Variable and an OpHandle, then numbering, deciding and dispatching it),
    so deferring the gradient ops to a run could only add to the step. Measured on the
    per-example Tree RNN: the lazy backward recorded its ops in as much time as the eager
    backward took with its kernels. A structure seen again records its gradient ops lazily
    (learnt and replayed, ``tape.replay``), so repeated steps run forward and backward as one
    compiled, fused plan. ``progress``: a failed one's, to resume (``tape.backward_faults``)."""
    run = None
    if progress is None:
        from tape.lazy import run_before_backward

        tape._batched_run = tape._batched_backward = tape._batched_backward_failed = None
        run_before_backward(tape, loss)
        run, tape._batched_run = getattr(tape, "_batched_run", None), None
    lazy, record_all = tape.lazy, tape.record_all
    tape.lazy = tape.record_all = False  # (ops that ran and need no gradient stay off the tape)
    try:
        leaves = None
        if run is not None and not retain_graph and _plain(tape):
            # (the forward ran autobatched: its backward batches the same way)
            with _mode(tape, False):
                leaves = batched_backward.gradients(tape, loss, run, _seed_grad(loss, None))
        if leaves is None:
            leaves = _scan(tape, loss, None, retain_graph, False, None, progress)
    finally:
        tape.lazy, tape.record_all = lazy, record_all
    if progress is None:
        from tape.lazy import measured_with_backward

        measured_with_backward(tape)  # (autobatch="auto" weighs forward and backward)
    return leaves


def _plain(tape):
    """Whether a backward on ``tape`` needs none of the scan's watchers: gradient hooks,
    writes to recorded buffers, shared buffers, a profiler or anomaly block."""
    return not tape._grad_hooks and not tape._written and not SHARED and instrument.ACTIVE is None


def _scan(tape, loss, seed, retain_graph, create_graph, wanted, progress=None, memo=False):
    """The reverse scan. ``memo``: a lazy tape just numbered (``tape.replay``), whose makers'
    gradient ops may come from ``tape.grad_memo``'s recipes."""
    release = not (retain_graph or create_graph)
    # A lazy tape keeps the op itself (it has not run yet) but marks its outputs released, so
    # the scheduler knows no later gradient will read the forward buffers it holds.
    drop = release and not tape.lazy
    if drop:
        tape._structure = None  # it numbers the ops this scan drops
    ops = tape._ops
    written = tape._written  # Variables given new values since ops were recorded: tape.guard
    if written:
        guard.verify_shared(tape)  # buffers shared through DLPack written since they were sealed
    final = _final_reads(ops) if tape._grad_hooks and wanted is None else None
    flags = (bool(retain_graph), bool(create_graph))
    scan = backward_faults.Scan(tape, loss, seed, flags, wanted, progress, drop)
    marked = scan.marked
    op = index = taken = None
    with _mode(tape, create_graph):
        if progress is None:
            scan.pending = {id(loss): [loss, _seed_grad(loss, seed)]}
        pending = scan.pending
        try:
            for index in range(scan.start, -1, -1):
                op = ops[index]
                if op is None or (op.defn.inplace and op.defn.grad_maker is None):
                    # (an update, e.g. an optimizer's: its outputs are its inputs given new
                    # values; a gradient reaching them flows on to the Variables themselves)
                    continue
                results = op.results
                if len(results) == 1 and results[0].__class__ is Variable:
                    out = results[0]
                    item = pending.pop(id(out), None)
                    if item is None:
                        continue
                    taken = item  # (the pending entry itself: [var, gradients...])
                    g = item[1]  # (one gradient, as most are: no call to sum them)
                    gouts = [g if len(item) == 2 and g.__class__ is not _Slices else _total(item)]
                    if wanted is not None and id(out) in wanted:
                        wanted[id(out)] = gouts[0]
                    if release:
                        if marked is None:
                            out._released = True
                        else:
                            _release(op, marked)
                else:
                    gouts, taken = _take_output_grads(op, pending, wanted)
                    if not taken:
                        continue
                    if release:
                        _release(op, marked)
                if op.defn.grad_maker is not None:
                    if written:
                        guard.check(written, op)
                    _run_grad_maker(op, gouts, pending, tape if memo else None)
                if final is not None and index in final:  # no earlier op reads these leaves
                    _announce(final.pop(index), pending, tape._grad_hooks)
                if drop:
                    ops[index] = None
            op = index = None
            leaves = _leaves(pending, wanted)
        except BaseException as err:
            scan.fail(err, op, index, taken, getattr(err, "partial_sum", False), wanted)
            raise
    if drop:
        tape.compact(lambda op: True)  # a loop that never resets the tape stays flat
        if tape.steps_only:
            collector.step_ended()  # (an eager step's ops are gone: tape.collector)
    return leaves


def _release(op, marked):
    """Marks ``op``'s outputs released (``marked`` lists the newly marked ones, if not None)."""
    for var in op.output_vars():
        if not var._released:
            var._released = True
            if marked is not None:
                marked.append(var)


def _leaves(pending, wanted):
    leaves = {}
    for item in pending.values():
        var, g = item[0], _total(item)
        if g.__class__ is not Variable:  # a hook's deferred gradient (Tape.on_grad_ready)
            g = g()
        if wanted is not None and id(var) in wanted:
            wanted[id(var)] = g
        if var._leaf:
            leaves[id(var)] = (var, g)
        else:
            raise _unreachable(var)
    return leaves


def _final_reads(ops):
    """{index: leaves}: the earliest op reading each leaf that requires a gradient; once the
    reverse scan has passed it, nothing can add to that leaf's gradient any more."""
    first = {}
    for index, op in enumerate(ops):
        if op is not None:
            for var in op.input_vars():
                if var._leaf and var.requires_grad and id(var) not in first:
                    first[id(var)] = (index, var)
    final = {}
    for index, var in first.values():
        final.setdefault(index, []).append(var)
    return final


def _announce(leaves, pending, hooks):
    """Hands each leaf's final gradient of this backward to the hooks; a hook may return a
    replacement (a Variable, or a callable giving one once the scan has ended)."""
    for var in leaves:
        item = pending.get(id(var))
        if item is not None:
            g = _total(item)
            for hook in hooks:
                replaced = hook(var, g)
                g = g if replaced is None else replaced
            item[1:] = [g]


def _check_loss(loss):
    if not isinstance(loss, Variable):
        raise InputError(
            "backward",
            "loss must be a Variable",
            actual=type(loss).__name__,
            location=user_location(),
        )
    if loss._released:
        raise GraphError(
            "backward",
            f"the ops that produced '{loss.name}' were released by an earlier backward",
            hint="pass retain_graph=True to the first backward to differentiate twice",
            location=user_location(),
        )
    if not loss.requires_grad:
        raise GraphError(
            "backward",
            f"'{loss.name}' does not require a gradient",
            hint="no input of its ops requires a gradient (or they ran under no_grad)",
            location=user_location(),
        )


def _seed_grad(loss, seed):
    if seed is None:
        if loss.size != 1:
            raise GraphError(
                "backward",
                "an implicit gradient needs a loss with one element",
                expected="loss.size == 1",
                actual=f"shape {loss.shape}",
                hint="pass grad= with the loss's shape",
                location=user_location(),
            )
        return REGISTRY["fill_ones_like"](loss)
    if not isinstance(seed, Variable):
        seed = Variable(seed, dtype=loss.dtype)
    if seed.shape != loss.shape:
        raise GraphError(
            "backward",
            "grad must have the loss's shape",
            expected=str(loss.shape),
            actual=str(seed.shape),
            location=user_location(),
        )
    return seed


def _take_output_grads(op, pending, wanted):
    """The gradients reaching ``op``'s outputs (None where none did) and the pending entries
    they came from, as a tuple (empty: no gradient reached the op)."""
    gouts, taken = [], []
    for entry in op.results:
        if entry.__class__ is list:
            gouts.append([_pop(v, pending, wanted, taken) for v in entry])
        else:
            gouts.append(_pop(entry, pending, wanted, taken))
    return gouts, tuple(taken)


def _pop(var, pending, wanted, taken):
    item = pending.pop(id(var), None)
    if item is None:
        return None
    taken.append(item)
    g = _total(item)
    if wanted is not None and id(var) in wanted:
        wanted[id(var)] = g
    return g


def _run_grad_maker(op, gouts, pending, memo=None):
    """Runs ``op``'s gradient maker (or replays its recipe on the lazy tape ``memo``:
    ``tape.grad_memo``) and adds its gradients to ``pending``. An error while adding is marked
    ``partial_sum`` (some inputs may have their share already). A slice's gradient is kept as
    a piece (``_Slices``) until its input's gradient is complete."""
    if op.defn.type == "slice" and instrument.ACTIVE is None:
        x = op.args[0]
        if x.requires_grad:
            _accumulate_slice(op.attrs, gouts[0], x, pending)
        return
    try:
        if memo is not None and instrument.ACTIVE is None and not SHARED:
            gins = grad_memo.make(
                op, gouts, memo, lambda: op.defn.grad_maker(GradContext(op, gouts))
            )
        elif instrument.ACTIVE is None:
            gins = op.defn.grad_maker(GradContext(op, gouts))
        else:
            with instrument.making_gradient_of(op):
                gins = op.defn.grad_maker(GradContext(op, gouts))
    except BaseException as err:
        converted = backward_faults.in_gradient(op, err)
        if converted is err:
            raise
        raise converted from err
    try:
        for entry, g in zip(op.args, gins):
            if g is None or entry is None:
                continue
            if entry.__class__ is list:
                for var, gv in zip(entry, g):
                    if gv is not None and var.requires_grad:
                        _accumulate(_checked(op, var, gv), var, pending)
            elif entry.requires_grad:
                if g.shape != entry.shape or g.dtype != entry.dtype:
                    g = _checked(op, entry, g)
                _accumulate(g, entry, pending)
    except BaseException as err:
        err.partial_sum = True
        raise


def _checked(op, var, g):
    if g.shape != var.shape:
        raise GraphError(
            op.type,
            f"gradient maker returned a gradient of the wrong shape for '{var.name}'",
            expected=str(var.shape),
            actual=str(g.shape),
        )
    if g.dtype != var.dtype:
        # Mixed-dtype inputs (float32 weight, float64 data) give a promoted gradient; every
        # gradient has its variable's dtype, through a recorded cast (lazy and create_graph see it).
        g = apply(REGISTRY["cast"], (g,), {"out_dtype": var.dtype.name})
    return g


def _accumulate(g, var, pending):
    item = pending.get(id(var))
    if item is None:
        pending[id(var)] = [var, g]
        return
    if item[1].__class__ is _Slices:  # a gradient other than slices': the pieces join as one
        item[1] = item[1].total(var)
    if state.trusted:
        _add_in_place(item, g)
    else:
        # Recorded gradients are summed in batches by one 'sum' op: fewer ops than pairwise
        # adds, while holding at most _BATCH gradients of one variable at a time.
        item.append(g)
        if len(item) > _BATCH:
            item[1:] = [REGISTRY["sum"](item[1:])]


_BATCH = 8
_OWNED = object()  # marks a pending entry whose gradient buffer this backward allocated


def _add_in_place(item, g):
    """Eager backward that records nothing: the first contribution may be shared (an add passes
    one gout to both inputs), so the second one is added into a fresh buffer, which later ones
    update in place -- no op, no temporary per contribution."""
    a, b = item[1]._value, g._value
    if len(item) == 3:
        if a.__class__ is np.ndarray and a.nbytes >= buffers.MIN_BYTES:
            intra_op.ufunc(np.add, a, a, b)  # (threads for the largest, bit for bit)
        else:
            item[1]._value += b
        return
    out = buffers.binary_out(a, b)  # (a reused buffer: no page faults)
    total = a + b if out is None else intra_op.ufunc(np.add, out, a, b)
    if total.__class__ is not np.ndarray and array_module(total) is np:
        total = np.asarray(total)  # numpy turns 0-d sums into scalars
    item[1] = Variable._make(total, total.shape, total.dtype, False)
    item.append(_OWNED)


def _total(item):
    """The summed gradient of a pending entry [var, g, more gradients... | _OWNED]."""
    if item[1].__class__ is _Slices:
        item[1] = item[1].total(item[0])
    if len(item) > 2 and item[2] is not _OWNED:
        item[1:] = [REGISTRY["sum"](item[1:])]
    return item[1]


def _accumulate_slice(attrs, g, x, pending):
    """Adds the gradient ``g`` of the slice ``attrs`` of ``x`` to ``pending``: as a piece of
    the pending ``_Slices`` of ``x`` while every gradient reaching ``x`` so far is a slice's
    (of the same axes), else as a dense gradient."""
    item = pending.get(id(x))
    if item is None:
        pending[id(x)] = [x, _Slices(attrs, g)]
    elif len(item) == 2 and item[1].__class__ is _Slices and item[1].joins(attrs):
        item[1].add(attrs, g)
    else:
        try:
            _accumulate(_Slices(attrs, g).total(x), x, pending)
        except BaseException as err:
            err.partial_sum = True
            raise


class _Slices:
    """The gradients of slices of one Variable (an LSTM's gates cut from one product), kept
    until its gradient is complete and then made by one op: ``slices_grad``, one buffer where
    a ``slice_grad`` per slice and their ``sum`` took k + 1 ops and buffers (the same values:
    see the op). One slice alone is the ``slice_grad`` it always was."""

    __slots__ = ("axes", "decrease_axis", "strided", "attrs", "gouts")

    def __init__(self, attrs, g):
        self.axes, self.decrease_axis = attrs["axes"], attrs["decrease_axis"]
        self.strided = bool(attrs["strides"])
        self.attrs, self.gouts = [attrs], [g]

    def joins(self, attrs):
        return (
            attrs["axes"] == self.axes
            and attrs["decrease_axis"] == self.decrease_axis
            and bool(attrs["strides"]) == self.strided
        )

    def add(self, attrs, g):
        self.attrs.append(attrs)
        self.gouts.append(g)

    def total(self, x):
        """The gradient of ``x`` (recorded or computed now, as any gradient op)."""
        if len(self.gouts) == 1:
            return apply(REGISTRY["slice_grad"], (x, self.gouts[0]), self.attrs[0])
        merged = {  # (tuples: hashable, as autobatching's signatures need)
            "shape": tuple(x.shape),
            "axes": tuple(self.axes),
            "starts": tuple(v for a in self.attrs for v in a["starts"]),
            "ends": tuple(v for a in self.attrs for v in a["ends"]),
            "strides": tuple(v for a in self.attrs for v in a["strides"]) if self.strided else (),
            "decrease_axis": tuple(self.decrease_axis),
        }
        defn, args = REGISTRY["slices_grad"], (list(self.gouts),)
        # (an eager backward records nothing: the kernel runs without inference, as for any
        # gradient op there, but ``record`` takes that path only for one Variable per slot)
        return run_trusted(defn, args, merged) if state.trusted else apply(defn, args, merged)


def _unreachable(var):
    return stale.unreachable(var)


class _mode:
    """Records gradient ops on ``tape``; differentiably only when ``create_graph``."""

    def __init__(self, tape, create_graph):
        self.tape, self.create_graph = tape, create_graph

    def __enter__(self):
        self.saved = (state.tape, state.grad_enabled, state.trusted, state.location)
        state.tape, state.grad_enabled = self.tape, self.create_graph
        state.trusted = not self.create_graph and not self.tape.lazy
        if self.tape.lazy:  # every gradient op is recorded from the user's backward call
            state.location = user_location()

    def __exit__(self, *exc):
        state.tape, state.grad_enabled, state.trusted, state.location = self.saved


__all__ = ["GradContext", "backward", "grad", "apply"]
