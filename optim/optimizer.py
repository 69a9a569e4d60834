"""The optimizer base: clip, regularize, then record one in-place update op per parameter.

An optimizer is called on a parameter list after backward (``opt(layer.params())``). Following
Paddle's ``apply_gradients``, it clips the gradients, adds the regularization terms, and records
one registered update op per parameter that has a gradient (``sgd``, ``adam``, ...), all under
``no_grad``; then it consumes the gradients. Every parameter's inputs are validated before the
first update is recorded, so a failure never leaves parameters half-updated.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from ops.registry import REGISTRY
from ops.xp import array_module
from optim.binding import BoundParams
from optim.lr_scheduler import LRScheduler
from optim.regularizer import as_regularizer, regularize
from tape import transaction
from tape.errors import AttrError, DTypeError, InputError, ShapeError, brief
from tape.grad_mode import no_grad
from tape.tape import get_global_tape, run_update
from tape.variable import Variable


class ParamState:
    """One parameter's optimizer state: its update count and its state Variables by op slot."""

    __slots__ = ("param", "step", "vars", "plan")

    def __init__(self, param, variables, step=0):
        self.param, self.vars, self.step = param, variables, step
        self.plan = None  # the update op's argument layout, built at the first update


class Optimizer(BoundParams):
    """Base class. Subclasses set ``op_type`` and ``hyper`` and define ``_slots`` and ``_attrs``.

    Args:
        params: optional, first: the parameters ``step()`` updates (PyTorch's form,
            ``optim.SGD(model.params(), lr=0.1)``; see ``optim.binding``).
        lr: the learning rate, a float or an ``optim.lr_scheduler`` schedule.
        weight_decay: a float (L2, added to the gradient as in PyTorch) or a regularizer
            (``optim.L1Decay`` / ``optim.L2Decay``).
        grad_clip: ``optim.ClipGradByValue``, ``ClipGradByNorm`` or ``ClipGradByGlobalNorm``.

    State is created lazily, per parameter (keyed by the Variable itself), as persistable
    Variables named ``<param name or position>_<slot>`` that never require a gradient.
    """

    op_type = None
    hyper = ()  # constructor arguments saved by state_dict as attributes (besides lr, decay)

    def __init__(self, lr, weight_decay=0.0, grad_clip=None):
        self._lr = lr if isinstance(lr, LRScheduler) else check_hyper(self, "lr", lr)
        self.regularization = as_regularizer(weight_decay)
        self.grad_clip = grad_clip
        self.step_count = 0
        # Every parameter seen, in first-seen order: its index is its state_dict position.
        # Holding the parameters keeps their ids unique while they key the dicts below.
        self._params = []
        self._position = {}  # id(param) -> position
        self._state = {}  # id(param) -> ParamState, created at the parameter's first update
        self._pending = {}  # position -> state loaded before that parameter had state
        self._lr_vars = {}  # (dtype, array module) -> (rate, Variable)

    # -- what subclasses define ----------------------------------------------------------------

    def _slots(self, param):
        """State slot -> (shape, dtype, initial value) for ``param`` (op input slot names)."""
        return {}

    def _attrs(self):
        """The update op's attributes."""
        return {}

    def _rate(self, state):
        """The learning rate for this parameter's next update (Adagrad's lr_decay overrides)."""
        return self.lr

    # -- the learning rate -----------------------------------------------------------------------

    @property
    def lr(self):
        """The current learning rate (the schedule's current value when there is one)."""
        return self._lr() if isinstance(self._lr, LRScheduler) else self._lr

    @lr.setter
    def lr(self, value):
        self._lr = value if isinstance(value, LRScheduler) else check_hyper(self, "lr", value)

    @property
    def scheduler(self):
        """The learning-rate schedule, or None for a constant rate."""
        return self._lr if isinstance(self._lr, LRScheduler) else None

    def _lr_variable(self, param, rate):
        """A persistable one-value Variable holding ``rate``, reused while the rate is unchanged
        (so a lazy plan can be reused across steps); a changed rate gets a new Variable, so an
        update still pending in lazy mode keeps reading its own rate."""
        xp = array_module(_buffer(param))
        key = (param.dtype, xp)
        entry = self._lr_vars.get(key)
        if entry is None or entry[0] != rate:
            var = Variable(xp.asarray([rate], dtype=param.dtype), name="learning_rate")
            var.persistable = True
            entry = self._lr_vars[key] = (rate, var)
        return entry[1]

    # -- one step ----------------------------------------------------------------------------

    def __call__(self, params):
        """Updates every parameter in ``params`` that has a gradient, and consumes the gradients.

        A step is a transaction: every update is computed before any is committed (see
        ``tape.transaction``), so a failure or an interrupt part-way (any exception, Ctrl-C, a
        MemoryError) leaves every parameter and optimizer state as it was. The step's gradients
        are dropped then too (their buffers may already hold new values): run backward again.
        In lazy mode the same holds for the run that executes the recorded updates.
        """
        params = self._register(params)
        pairs = [(p, p._grad) for p in params if p._grad is not None]
        if not pairs:
            return
        for pair in pairs:
            self._validate(*pair)
        del pair  # (a gradient held here could not lend its buffer to the update)
        states = [self._state_for(param) for param, _ in pairs]
        defn = REGISTRY[self.op_type]
        attrs = defn.check_attrs(self._attrs())
        tape = get_global_tape()
        counters = self._counters(states)
        try:
            with transaction.Step(), no_grad():
                if self.grad_clip is not None:
                    pairs = self.grad_clip(pairs)
                pairs = regularize(pairs, self.regularization)
                for param in params:
                    param.clear_grad()  # consumed: the buffers may hold the new values
                grads = [grad for _, grad in pairs]
                del pairs[:]
                for index, state in enumerate(states):
                    reuse = _sole_holder(grads, index)
                    self._record(tape, defn, attrs, state, grads[index], reuse)
                    grads[index] = None
                    state.step += 1
                self.step_count += 1
        except BaseException:
            self._restore(states, counters)
            for param in params:
                param.clear_grad()
            raise
        if tape.lazy:  # the run that executes the updates may still fail: undo these then
            tape._undo.append((tape._ops[-1], lambda: self._restore(states, counters)))

    def _counters(self, states):
        return [state.step for state in states], self.step_count

    def _restore(self, states, counters):
        steps, self.step_count = counters
        for state, step in zip(states, steps, strict=True):
            state.step = step

    def _register(self, params):
        """The parameters as a list, each seen once; new ones get the next positions."""
        params = self._parameter_list(params)
        seen = set()
        for param in params:
            if id(param) in seen:
                raise InputError(
                    self.op_type,
                    f"{self._describe(param)} appears twice",
                    hint="each parameter is updated once per call",
                )
            seen.add(id(param))
        for param in params:
            if id(param) not in self._position:
                self._position[id(param)] = len(self._params)
                self._params.append(param)
        return params

    def _describe(self, param):
        """'name' for a named parameter, its position otherwise (reading ``Variable.name``
        would give an unnamed parameter a generated name for good)."""
        if param._name is not None:
            return f"parameter '{param._name}'"
        position = self._position.get(id(param))
        return "an unnamed parameter" if position is None else f"parameter {position} (unnamed)"

    def _validate(self, param, grad):
        if param.dtype.kind != "f":
            raise DTypeError(
                self.op_type,
                f"{self._describe(param)} is not floating point",
                actual=str(param.dtype),
            )
        if grad.shape != param.shape:
            raise ShapeError(
                self.op_type,
                f"the gradient of {self._describe(param)} has the wrong shape",
                expected=str(param.shape),
                actual=str(grad.shape),
            )
        if grad.dtype != param.dtype:
            raise DTypeError(
                self.op_type,
                f"the gradient of {self._describe(param)} has the wrong dtype",
                expected=str(param.dtype),
                actual=str(grad.dtype),
            )
        position = self._position[id(param)]
        if id(param) not in self._state and position in self._pending:
            check_loaded(self, param, self._pending[position], str(position))

    def _state_for(self, param):
        state = self._state.get(id(param))
        if state is None:
            loaded = self._pending.pop(self._position[id(param)], None)
            state = self._state[id(param)] = self._new_state(param, loaded)
            return state
        slots = self._slots(param)
        if slots.keys() != state.vars.keys():  # a hyper-parameter change added or dropped one
            fresh = self._new_state(param).vars
            state.vars = {slot: state.vars.get(slot, fresh[slot]) for slot in slots}
            state.plan = None
        return state

    def _new_state(self, param, loaded=None):
        """``param``'s state Variables, initial or copied from a loaded entry."""
        xp = array_module(_buffer(param))
        base = param._name or f"param{self._position[id(param)]}"
        variables = {}
        for slot, (shape, dtype, initial) in self._slots(param).items():
            value = (
                xp.full(shape, initial, dtype)
                if loaded is None
                else xp.array(loaded[slot], dtype=dtype)
            )
            var = Variable(value, name=f"{base}_{slot}")
            var.persistable = True
            variables[slot] = var
        return ParamState(param, variables, 0 if loaded is None else int(loaded["step"]))

    def _record(self, tape, defn, attrs, state, grad, reuse_grad):
        """Records (eagerly: runs) the update op with its outputs bound to its inputs, which it
        updates in place."""
        plan = state.plan
        if plan is None or plan[0] is not defn:
            plan = state.plan = _plan(defn, state.param, state)
        _, args, grad_at, lr_at, given = plan
        args = list(args)
        args[grad_at] = grad
        args[lr_at] = self._lr_variable(state.param, self._rate(state))
        if reuse_grad:
            attrs = {**attrs, "reuse_grad": True}
        run_update(tape, defn, tuple(args), attrs, given)

    # -- state dicts ---------------------------------------------------------------------------

    def state_dict(self, params=None):
        """Step counts, hyper-parameters and per-parameter state as numpy arrays and plain values.

        Per-parameter state is keyed by position (the order the optimizer first saw the
        parameters in: "0", "1", ...), or by name when ``params`` (a layer, a dict
        name -> Variable, or a list) is given.
        """
        from optim.state import state_dict

        return state_dict(self, params)

    def load_state_dict(self, state, params=None):
        """Restores ``state_dict()``'s result; validates everything before changing anything.

        Raises ``tape.checkpoint.CheckpointError`` naming the entry on any mismatch. State keyed
        by position binds to parameters by their first-seen order, now or (for parameters not
        yet seen) at their first update.
        """
        self.prepare_load(state, params)()

    def prepare_load(self, state, params=None):
        """Validates ``state`` as ``load_state_dict`` does; returns a function applying it."""
        from optim.state import prepare_load

        return prepare_load(self, state, params)

    def __repr__(self):
        items = ", ".join(f"{k}={getattr(self, k)!r}" for k in ("lr",) + self.hyper)
        return f"{type(self).__name__}({items})"


def _plan(defn, param, state):
    """The update op's inputs with the fixed ones (Param, state) in place, where Grad and
    LearningRate go, and its outputs: each the input it updates (Paddle's dispensable outputs
    are lists of zero or one Variable)."""
    values = {"Param": param, **state.vars}
    args = [values.get(slot) for slot in defn.input_slots]
    given = []
    for slot in defn.output_slots:
        var = values.get(defn.inplace[slot])
        given.append(([var] if var is not None else []) if slot in defn.duplicable_outputs else var)
    slots = defn.input_slots
    return defn, args, slots.index("Grad"), slots.index("LearningRate"), tuple(given)


def _sole_holder(grads, index):
    """Whether ``grads`` is all that holds gradient ``grads[index]`` and its buffer (an owned,
    writable numpy array): then the update may compute the new parameter in that buffer. In
    lazy mode too, where a gradient was computed at the backward (the eager way, or a step run
    whole: ``tape.step_program``): nothing can read it before the update runs; a pending one
    is left to the run, which donates it where nothing reads it after (``tape.interpret``)."""
    var = grads[index]
    value = var._value
    return (
        var._pending is None
        and value.__class__ is np.ndarray
        and value.base is None
        and value.flags.writeable
        and sys.getrefcount(var) == 3  # grads, var, the argument
        and sys.getrefcount(value) == 3  # the Variable, value, the argument
    )


def _buffer(param):
    """The parameter's current buffer without running pending lazy work (updates keep it)."""
    return param._value if param._value is not None else param.value()


def check_hyper(optimizer, name, value, check=lambda v: v >= 0.0, rule=None):
    """A float hyper-parameter passing ``check`` (default: >= 0); AttrError otherwise."""
    kind = type(optimizer).__name__
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise AttrError(
            None,
            f"{kind}: hyper-parameter '{name}' must be a number",
            actual=f"{brief(value)} ({type(value).__name__})",
            type_error=True,
        )
    value = float(value)
    if not math.isfinite(value) or not check(value):
        raise AttrError(
            None,
            f"{kind}: invalid hyper-parameter '{name}'",
            expected=rule or f"{name} >= 0",
            actual=repr(value),
        )
    return value


def check_loaded(optimizer, param, loaded, key):
    """A loaded per-parameter entry has every state slot with the parameter's shapes/dtypes."""
    from tape.checkpoint import CheckpointError

    slots = optimizer._slots(param)
    names = set(loaded) - {"step", "name"}
    if names != set(slots):
        raise CheckpointError(
            None,
            f"optimizer state for parameter '{key}' has the wrong slots",
            expected=str(sorted(slots)),
            actual=str(sorted(names)),
        )
    for slot, (shape, dtype, _) in slots.items():
        array = loaded[slot]
        if tuple(array.shape) != tuple(shape) or array.dtype != dtype:
            raise CheckpointError(
                None,
                f"optimizer state '{slot}' of parameter '{key}' does not match the parameter",
                expected=f"shape {tuple(shape)}, dtype {np.dtype(dtype)}",
                actual=f"shape {tuple(array.shape)}, dtype {array.dtype}",
            )
