"""The op ``fused_elementwise``: a group of elementwise ops run as one kernel (issue 9).

The fusion pass (``tape/passes/fusion.py``) replaces a group of connected elementwise ops by one
``fused_elementwise`` op whose attribute ``expression`` (``ops.fused_expression.Expression``) says
what to compute; this module registers the op and picks, per expression and array module, a
compiled callable from ``ops.fusion_backends`` (cached, so each group structure compiles once):

- ``"auto"`` (the default): on the CPU, ``blocked`` numpy (the reference itself for arrays of one
  block). Where numba is installed (``pip install fluidtape[fuse]``) an expression that it
  generates moves to ``numba`` once it has spent ``NUMBA_AFTER_SECONDS`` in numpy, so that the
  compile (0.3-2.5 s measured) is paid back (``NUMBA_CACHED_SECONDS`` where its kernel was
  compiled on this machine before and is loaded from disk: ``fusion_backends.kernel_cache``);
  where a compile process can run (``fusion_backends.compile_process``), it is compiled there
  instead once it has run ``NUMBA_SUBMIT_CALLS`` times, and moves when its code is on disk, the
  program never waiting for a compile. It moves if its loop vectorises whole: exact arithmetic,
  and the libm functions ``ops.fusion_backends.vecmath`` computes with vector instructions (exp;
  tanh in float32). Measured (benchmarks/README.md): 2-6x faster than blocked numpy on exact
  arithmetic at every size, and 2-3x on the chain's forward (tanh, sigmoid) at 4M. An expression
  calling another libm function (log, sin, float64 tanh, ...) moves only with at most
  ``NUMBA_LIBM_MAX_SIZE`` elements (numba's scalar libm costs ~15 ns per element and step against
  numpy's <1 ns SIMD loops, but numpy's ~2 us per call dominates small arrays). On a GPU,
  ``cupy_fuse`` where every step has a generated form, else ``reference``.
- ``"reference"``, ``"blocked"``, ``"numba"``, ``"cupy"``: that backend (``numba`` and ``cupy``
  fall back to ``blocked``/``reference`` for an expression they cannot generate).

>>> import ops.fused as fused
>>> with fused.backend("reference"):
...     fused.current_backend()
'reference'
"""

from __future__ import annotations

import collections
import contextlib
import time
import weakref

import numpy as np

from ops.fused_expression import Expression
from ops.fusion_backends import compile_process
from ops.registry import Attr, register
from tape.errors import AttrError, DTypeError, InputError, ShapeError

BACKENDS = ("auto", "reference", "blocked", "numba", "cupy")
# Seconds an expression runs in numpy before auto compiles it with numba (about the compile time
# measured, benchmarks/README.md); and the largest expression with scalar libm calls it moves.
NUMBA_AFTER_SECONDS = 0.5
# Seconds after which an expression whose kernel was compiled on this machine before (kept on
# disk: ops.fusion_backends.kernel_cache) moves: about what loading it costs.
NUMBA_CACHED_SECONDS = 0.02
# Runs, or seconds in numpy, after which an expression is handed to the compile process
# (``fusion_backends.compile_process``, where it can run): the program pays no compile, only
# a core at the lowest priority meanwhile, so a group that has run this often is worth it.
NUMBA_SUBMIT_CALLS = 64
NUMBA_SUBMIT_SECONDS = 0.01
NUMBA_LIBM_MAX_SIZE = 1024
_CACHE_SIZE = 256

_setting = {"backend": "auto"}
_cache = collections.OrderedDict()


def _infer(attrs, xs):
    expression = attrs["expression"]
    if not isinstance(expression, Expression):
        raise AttrError(
            None,
            "attribute 'expression' has the wrong type",
            expected="an ops.fused_expression.Expression",
            actual=type(expression).__name__,
        )
    if len(xs) != len(expression.inputs):
        raise InputError(
            None,
            "the number of inputs differs from the expression's",
            expected=str(len(expression.inputs)),
            actual=str(len(xs)),
        )
    for k, (x, (shape, dtype)) in enumerate(zip(xs, expression.inputs)):
        if tuple(x.shape) != tuple(shape):
            raise ShapeError(
                None, f"input X[{k}] has another shape than the expression's", shape, x.shape
            )
        if x.dtype != np.dtype(dtype):
            raise DTypeError(
                None, f"input X[{k}] has another dtype than the expression's", dtype, x.dtype
            )
    shapes = expression.output_shapes
    return ([(shape, np.dtype(d)) for shape, d in zip(shapes, expression.dtypes)],)


@register(
    "fused_elementwise",
    inputs=("X*",),
    outputs=("Out*",),
    attrs={"expression": Attr("any", required=True), "exact": Attr("bool", False)},
    infer=_infer,
    differentiable=False,
    returns=lambda results: results[0],  # the list of output Variables
)
def fused_elementwise(xp, attrs, xs):
    """Out = the expression's outputs: its materialised steps, then its reductions, computed by
    the backend chosen for it (see the module docstring). An error in a step is raised as that
    step's original op would raise it (its type, name and recorded-at line). With ``exact``
    every output is bit for bit what the unfused ops give (lazy mode's ``exact=True``).

    Not differentiable: the fusion pass fuses forward and gradient ops after backward was built.
    """
    run = kernel_for(attrs["expression"], xp, attrs["exact"])
    return (run(*xs),)  # one entry per output slot: Out*


def bound_kernel(attrs, xp):
    """The kernel a compiled plan runs for one fused op: the backend's callable, resolved on the
    first run and then held by the plan. (The shared cache alone thrashes when a plan has more
    groups than it holds: every run of a 10^4-op chain recompiled its ~400 kernels.)"""
    expression, exact = attrs["expression"], attrs["exact"]
    held = [None, None]  # the backend setting it was resolved under, the callable

    def kernel(xp, attrs, xs):
        if held[0] != _setting["backend"]:
            held[1] = kernel_for(expression, xp, exact)
            held[0] = _setting["backend"]
        return (held[1](*xs),)

    return kernel


fused_elementwise.bind = bound_kernel


def kernel_for(expression, xp, exact=False):
    """The compiled callable for ``expression`` with array module ``xp`` under the current
    backend setting (compiled on first use, then cached). ``exact``: only ways that give every
    output bit for bit as unfused execution does (see ``_compile_exact``)."""
    structure = expression.structure
    key = (structure, xp, _setting["backend"], exact)
    found = _cache.get(key)
    if found is None:
        compile_ = _compile_exact if exact else _compile
        found = _cache[key] = compile_(structure, xp, key[2])
        if len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return found if structure is expression else _Located(found, expression, xp)


class _Located:
    """A kernel compiled for an expression's structure (shared by every group of that
    structure), run for one group: a failure is raised as the group's own failing op would
    raise it (its name and the user's line), by running the group's steps one by one."""

    __slots__ = ("run", "expression", "xp")

    def __init__(self, run, expression, xp):
        self.run, self.expression, self.xp = run, expression, xp

    def __call__(self, *inputs):
        try:
            return self.run(*inputs)
        except Exception as err:
            from ops.fusion_backends import reference

            reference.compile(self.expression, self.xp)(*inputs)  # (raises the located error)
            raise err

    @property
    def backend(self):
        return getattr(self.run, "backend", None)


def _compile_exact(expression, xp, name):
    """Bit for bit with unfused execution: blocked numpy for elementwise outputs, numba where
    every rule is exact; a reduction (which blocks and numba reassociate) or a GPU (whose fused
    kernels may use other libm code) keeps the reference."""
    from ops.fusion_backends import blocked, numba_loops, reference

    if expression.reductions or xp is not np or name in ("reference", "cupy"):
        return reference.compile(expression, xp)
    exact_numba = numba_loops.available() and numba_loops.covers(expression, exact=True)
    if name == "numba" and exact_numba:
        return numba_loops.compile(expression, xp, vectorised=False)
    if name == "auto" and exact_numba:
        return _Adaptive(expression, blocked.compile(expression, xp), exact=True)
    return blocked.compile(expression, xp)


def _compile(expression, xp, name):
    from ops.fusion_backends import blocked, cupy_fuse, numba_loops, reference

    if name == "reference":
        return reference.compile(expression, xp)
    if name == "blocked":
        return blocked.compile(expression, xp)
    if name == "numba":
        if xp is np and numba_loops.available() and numba_loops.covers(expression):
            return numba_loops.compile(expression, xp)
        return blocked.compile(expression, xp)
    if name == "cupy" or xp is not np:
        if cupy_fuse.covers(expression) and (name == "cupy" or hasattr(xp, "fuse")):
            return cupy_fuse.compile(expression, xp)
        return reference.compile(expression, xp)
    return _Adaptive(expression, blocked.compile(expression, xp))


_ADAPTIVE = weakref.WeakSet()  # the live kernels that may still move to numba (_Adaptive)


def unsettled(within=1.0):
    """How many fused kernels that ran in the last ``within`` seconds may still move to numba
    (``_Adaptive``: a move imports numba and loads the kernel, ~0.2-0.5 s once in a process).
    A benchmark warms a step up until none may, so that no move falls in a timed block; a
    training loop meets it once."""
    since = time.perf_counter() - within
    return sum(1 for k in list(_ADAPTIVE) if k.spent is not None and k.last >= since)


class _Adaptive:
    """Blocked numpy until the expression has cost ``NUMBA_AFTER_SECONDS`` (its compile), or
    ``NUMBA_CACHED_SECONDS`` where its kernel is on disk (its load); then numba, where it is
    installed and measured faster (see the module docstring). Where a compile process can
    run (``fusion_backends.compile_process``), an expression that has run
    ``NUMBA_SUBMIT_CALLS`` times or for ``NUMBA_SUBMIT_SECONDS`` is compiled there instead, and
    moves once its machine code is on disk; the program does not wait for the compile."""

    __slots__ = ("expression", "run", "spent", "backend", "exact", "after", "calls", "ticket")
    __slots__ += ("last", "__weakref__")

    def __init__(self, expression, run, exact=False):
        from ops.fusion_backends import numba_loops

        self.expression, self.run, self.spent, self.exact = expression, run, 0.0, exact
        self.backend = getattr(run, "backend", "blocked")
        self.after = None  # (the seconds it waits: decided at its first run)
        self.calls, self.ticket = 0, None  # (ticket: the compile process's key, once asked)
        self.last = 0.0  # (when it last ran: ``unsettled``)
        if not (numba_loops.available() and numba_loops.covers(expression)):
            self.spent = None  # never moves
        elif expression.size > NUMBA_LIBM_MAX_SIZE and numba_loops.scalar_libm(expression):
            self.spent = None  # scalar libm calls on large arrays: numpy's SIMD loops win
        else:
            _ADAPTIVE.add(self)

    def __call__(self, *inputs):
        if self.spent is None:
            return self.run(*inputs)
        if self.after is None:
            self._decide()
        start = self.last = time.perf_counter()
        outs = self.run(*inputs)
        self.spent += time.perf_counter() - start
        if self.ticket is not None:
            state = compile_process.state(self.ticket)
            if state == compile_process.READY:
                self._move()
            elif state != compile_process.PENDING:  # (failed: the in-process rule again)
                self.ticket, self.calls = None, -1
        elif self.spent >= min(self.after, NUMBA_AFTER_SECONDS):
            self._move()
        elif self.calls >= 0:
            self.calls += 1
            if self.calls >= NUMBA_SUBMIT_CALLS or self.spent >= NUMBA_SUBMIT_SECONDS:
                self._submit(inputs)
        return outs

    def _decide(self):
        """At the first run: how long to wait, and whether a compile process may compile it."""
        from ops.fusion_backends import numba_loops

        cached = numba_loops.compiled_before(self.expression, not self.exact)
        self.after = NUMBA_CACHED_SECONDS if cached else NUMBA_AFTER_SECONDS
        if cached or not compile_process.enabled():
            self.calls = -1  # (never asked)

    def _submit(self, inputs):
        from ops.fusion_backends import numba_loops

        self.calls = -1
        made = numba_loops.request(self.expression, inputs, not self.exact)
        if made is not None:
            compile_process.submit(*made)
            self.ticket = made[0]

    def _move(self):
        from ops.fusion_backends import numba_loops

        try:
            self.run = numba_loops.compile(self.expression, np, vectorised=not self.exact)
            self.backend = "numba"
        except ImportError:  # (installed but broken: the group stays in numpy)
            pass
        self.spent = None


def current_backend():
    """The backend setting in force ('auto' unless changed)."""
    return _setting["backend"]


def set_backend(name):
    """Makes ``name`` (one of BACKENDS) the backend of every fused kernel; returns the previous."""
    if name not in BACKENDS:
        raise ValueError(f"unknown fusion backend {name!r}; valid: {', '.join(BACKENDS)}")
    previous, _setting["backend"] = _setting["backend"], name
    return previous


@contextlib.contextmanager
def backend(name):
    """Runs the block with fused kernels on backend ``name``; e.g. ``with backend("reference")``."""
    previous = set_backend(name)
    try:
        yield
    finally:
        set_backend(previous)


def clear_cache():
    """Drops every compiled kernel (they recompile on next use)."""
    _cache.clear()


__all__ = [
    "fused_elementwise",
    "kernel_for",
    "set_backend",
    "backend",
    "current_backend",
    "unsettled",
]
