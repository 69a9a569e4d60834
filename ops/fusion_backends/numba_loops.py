"""The numba backend: the whole expression as one generated, compiled loop nest (optional extra).

Source is generated from ``table.RULES`` (one scalar expression per step, inputs read through
their broadcast index, outputs stored and reductions accumulated in the innermost loop) and
compiled once per expression with ``numba.njit`` (``pip install fluidtape[fuse]``). Nothing is
allocated per element and no intermediate touches memory.

exp and tanh (float32; exp in float64) come from ``vecmath``: branch-free code that LLVM
vectorises, where numba's own ``np.exp``/``np.tanh`` call scalar libm (``vectorised=False`` keeps
those). Expressions of ``PARALLEL_MIN_SIZE`` elements or more run their outermost axis as
``CHUNKS`` ``prange`` chunks, each with its own partial sums, on one thread or all of them as
``Threads`` measures.

When it wins (``python -m benchmarks.fusion_backends``, see benchmarks/README.md): on exact
arithmetic (add, mul, where, max, the *_grad ops of tanh, sigmoid and relu, ...) it is 2-6x faster
than blocked numpy at every size from 8x8 to 4M; on the chain's forward (tanh, sigmoid) 1.6x
faster at 256x256 and 2.5-3x at 1M-4M with ``vecmath`` (numba's scalar libm: 2-9x *slower*). Other
libm functions (log, sin, float64 tanh, ...) stay scalar calls: slower than numpy's SIMD loops
from 64x64 up, 7x faster at 8x8 (numpy's ~2 us per call dominates there). ``ops.fused``'s auto
policy follows these numbers, after the expression has paid for the compile (0.3-3 s).

Results: exact rules give numpy's results bit for bit (checked by the tests); libm functions are
within 5 ulp of numpy's (``vecmath``'s float32 exp and tanh within 1 ulp of the correctly rounded
value, numpy's own float32 exp within 2), and compositions that cancel (gelu_grad, silu_grad)
within 5e-6 * max(1, |value|) in float32 and 1e-14 * max(1, |value|) in float64, the narrowest
float dtype of the expression deciding. Reductions accumulate in float64 (int64 for bool), except
that a float32 sum along the innermost axis adds each row in float32 vector lanes first (as
numpy's own pairwise float32 sum does, in blocks of 8 lanes), and a float32 sum over outer axes
only adds in float32 within each chunk (as numpy's own sum over an outer axis does, row after
row), the chunks' partials in float64; they round once to the output dtype: within the
reference's rounding of the exact sum. Chunks are fixed by the shape, so a sum is the
same with any number of threads.
"""

from __future__ import annotations

import functools
import math
import re
import time

import numpy as np

from ops import buffers
from ops.fused_expression import is_ref
from ops.fusion_backends import kernel_cache, reference, with_located_errors
from ops.fusion_backends.table import Constant, rule_for

_TYPES = frozenset({"float32", "float64", "bool"})
# Expressions of at least this many elements run their outermost axis in parallel, cut into at
# most CHUNKS chunks (a fixed count, not the thread count: sums are the same on any machine).
# Below it, threads' start-up (~10 us) and parallel=True's longer compile do not pay (measured:
# benchmarks/fusion_backends.py).
PARALLEL_MIN_SIZE = 1 << 18
CHUNKS = 16
# Full outputs of an expression whose outputs take at most this many bytes together are rows of
# one block per (shape, dtype) (``Packing``); larger ones, whose lifetimes matter to memory, are
# arrays of their own.
PACK_MAX_BYTES = 1 << 16
# LLVM vectorises a loop only where it can check at run time that the arrays it writes overlap
# no other (at most 8 checks by default): a loop with more arrays than this stays scalar.
VECTOR_ARRAYS = 8


@functools.lru_cache(maxsize=1)
def available():
    """Whether numba is installed (the ``fuse`` extra). Found, not imported: numba and LLVM
    cost ~70 MiB of resident code and ~0.5 s to import, which a program whose groups never
    move to numba should not pay (measured on ``bench_memory``'s steady state); a compile
    that then fails to import it leaves its group in numpy (``ops.fused``).
    ``FLUIDTAPE_NUMBA=0`` keeps every group in numpy, numba installed or not."""
    import importlib.util
    import os

    if os.environ.get("FLUIDTAPE_NUMBA", "1") in ("0", ""):
        return False
    return importlib.util.find_spec("numba") is not None


def covers(expression, exact=False):
    """Whether every step has a rule (an exact one if ``exact``) and every value is float32,
    float64 or bool (numba's integer arithmetic does not follow numpy's types)."""
    dtypes = [np.dtype(d).name for _, d in expression.inputs]
    dtypes += [d.name for d in expression.step_dtypes] + list(expression.dtypes)
    if not set(dtypes) <= _TYPES:
        return False
    for step in expression.steps:
        rule = rule_for(step)
        if rule is None or (exact and not rule.exact):
            return False
    return True


# numpy names generated code calls that compile to vector instructions (casts, selects, IEEE
# operations); every other np.<name>( is a libm function, vectorised only where ``vecmath`` has it.
_INLINE = frozenset({"float32", "float64", "bool_", "int64", "abs", "sqrt", "copysign"})
_INLINE |= {"isnan", "isinf", "isfinite"}
_CALL = re.compile(r"np\.(\w+)\(")


def scalar_libm(expression, vectorised=True):
    """The libm functions ``expression``'s loop would call one element at a time (with
    ``vectorised``, those that ``vecmath`` has no vectorised version of for the step's dtype),
    as {(name, dtype)}; empty when the whole loop vectorises."""
    from ops.fusion_backends.vecmath import VECTORISED

    vector = VECTORISED if vectorised else frozenset()

    names, dtypes, found = {}, {}, set()
    for k, (_, dtype) in enumerate(expression.inputs):
        names[("in", k)], dtypes[("in", k)] = f"x{k}", np.dtype(dtype)
    for j, step in enumerate(expression.steps):
        dtype = expression.step_dtypes[j]
        for name in _CALL.findall(_render(step, dtype, names, dtypes)):
            if name not in _INLINE and (name, dtype.name) not in vector:
                found.add((name, dtype.name))
        names[("step", j)], dtypes[("step", j)] = f"s{j}", dtype
    return found


def _spell(value, dtype):
    if dtype.kind == "b":
        return repr(bool(value))
    if math.isnan(value) or math.isinf(value):
        return f"np.{dtype.name}({str(value)!r})"
    return f"np.{dtype.name}({value!r})"


def chunks_for(expression):
    """How many chunks of the outermost axis the loop nest runs as (in parallel where there is
    more than one): one below ``PARALLEL_MIN_SIZE`` elements, else up to ``CHUNKS``. It depends
    on the shape alone, so a reduction's result does not depend on the number of threads."""
    shape = expression.shape
    if not shape or expression.size < PARALLEL_MIN_SIZE:
        return 1
    return max(1, min(CHUNKS, shape[0]))


class Packing:
    """Which full outputs are written as rows of a block: ``blocks``, [(block shape (rows,
    *row shape), dtype, [output index per row])], and ``alone``, the other outputs' indices.

    Why: a loop nest storing to more than ~8 arrays does not vectorise (LLVM checks at run time
    that no two may overlap, up to 8 checks, and gives up beyond), and each array is an argument
    numba unboxes and an allocation. Rows of one flat block at constant offsets cannot overlap
    one another, so the 64-step chain kernel storing 43 values runs 8x faster, its outputs
    allocated at once. Only small expressions pack (``PACK_MAX_BYTES``; one chunk): a row keeps
    its whole block alive while it lives."""

    __slots__ = ("blocks", "alone")

    def __init__(self, expression, chunks):
        groups, alone, total = {}, [], 0
        for i, j in enumerate(expression.outputs):
            shape, dtype = expression.step_shapes[j], np.dtype(expression.dtypes[i])
            total += math.prod(shape) * dtype.itemsize
            groups.setdefault((shape, dtype), []).append(i)
        blocks = []
        for (shape, dtype), members in groups.items():
            if shape and len(members) > 1:  # (rows of a 0-d shape would be scalars)
                blocks.append(((len(members), *shape), dtype, members))
            else:
                alone += members
        if chunks > 1 or total > PACK_MAX_BYTES:
            blocks, alone = [], list(range(len(expression.outputs)))
        self.blocks, self.alone = blocks, sorted(alone)

    def rows(self):
        """{output index: (block number, row)}."""
        return {
            i: (b, r)
            for b, (_, _, members) in enumerate(self.blocks)
            for r, i in enumerate(members)
        }


def flat_loop(expression, chunks, packing=None):
    """Whether the loop nest can be one loop over every element: a single chunk of more than
    one axis, every input either the whole shape or one element, every full output the whole
    shape, every reduction over all axes, and at most ``VECTOR_ARRAYS`` arrays in the loop. Why:
    a small trailing axis (a 4x4 tape of the chain runs 4 elements in its inner loop) leaves
    the loop unvectorised; with more arrays it does not vectorise anyway, and the flat views
    cost ~30 ns an array. ``packing``: the outputs' ``Packing`` (by default the expression's)."""
    shape = expression.shape
    arrays = sum(not all(n == 1 for n in s) for s, _ in expression.inputs)
    packing = Packing(expression, chunks) if packing is None else packing
    arrays += len(packing.alone) + len(packing.blocks)
    return (
        chunks == 1
        and len(shape) > 1
        and arrays <= VECTOR_ARRAYS
        and all(s == shape or all(n == 1 for n in s) for s, _ in expression.inputs)
        and all(expression.step_shapes[j] == shape for j in expression.outputs)
        and all(len(r.axes) == len(shape) for r in expression.reductions)
    )


def generate(expression, chunks=1, packing=None):
    """The source of ``fused(in0, ..., out0, ..., blk0, ..., acc0, ...)`` computing
    ``expression`` (``packing``: the ``Packing`` of its outputs; None: none packed).

    The outermost axis is cut into ``chunks`` ranges walked by ``prange`` (run in parallel when
    compiled with ``parallel=True``); every accumulator has a leading axis of one partial per
    chunk, so no two threads write the same element. A reduction over the innermost axis adds
    into a local scalar (``radd``: an add LLVM may reassociate, so that loop vectorises) and
    stores it once per row. With a ``packing``, where ``flat_loop`` allows, the arrays are
    walked as one flat axis (inputs made contiguous first: a copy only where one is not)."""
    shape, ndim = expression.shape, len(expression.shape)
    n_in, n_out = len(expression.inputs), len(expression.outputs)
    alone = range(n_out) if packing is None else packing.alone
    packed = {} if packing is None else packing.rows()
    params = [f"in{k}" for k in range(n_in)] + [f"out{i}" for i in alone]
    params += [f"blk{b}" for b in range(len(packing.blocks) if packing else 0)]
    params += [f"acc{i}" for i in range(len(expression.reductions))]
    lines = [f"def fused({', '.join(params)}):"]
    indent = "    "
    local = [i for i, r in enumerate(expression.reductions) if ndim and ndim - 1 in r.axes]
    wide = [w for _, w, _, _ in _accumulators(expression)]
    # A row's sum of float32 values adds float32 (8 vector lanes, against 4 in float64: measured
    # 2x faster on the chain's loss), then joins the float64 accumulator once per row.
    row = {
        i: "float32" if expression.step_dtypes[r.step] == np.float32 else wide[i].name
        for i, r in enumerate(expression.reductions)
    }
    flat = packing is not None and flat_loop(expression, chunks, packing)
    loop = (expression.size,) if flat else shape  # (the axes the loop nest walks)
    names, dtypes, loaded = {}, {}, set()
    for k, (in_shape, dtype) in enumerate(expression.inputs):
        names[("in", k)], dtypes[("in", k)] = f"x{k}", np.dtype(dtype)
        if all(n == 1 for n in in_shape):  # one element: read once, before the loops
            lines.append(f"{indent}x{k} = in{k}[{_index(in_shape, ndim)}]")
            loaded.add(k)
        elif flat:
            lines.append(f"{indent}in{k}f = np.ascontiguousarray(in{k}).reshape({loop[0]})")
    if flat:
        for i in alone:
            lines.append(f"{indent}out{i}f = out{i}.reshape({loop[0]})")
    if ndim:
        lines.append(f"{indent}for c in prange({chunks}):")
        indent += "    "
    for a in range(len(loop)):
        if a == len(loop) - 1:
            for i in local:
                lines.append(f"{indent}r{i} = np.{row[i]}(0)")
        if a == 0:
            lines.append(
                f"{indent}for i0 in range(c * {loop[0]} // {chunks},"
                f" (c + 1) * {loop[0]} // {chunks}):"
            )
        else:
            lines.append(f"{indent}for i{a} in range({loop[a]}):")
        indent += "    "
    for k, (in_shape, _) in enumerate(expression.inputs):
        if k not in loaded:
            read = f"in{k}f[i0]" if flat else f"in{k}[{_index(in_shape, ndim)}]"
            lines.append(f"{indent}x{k} = {read}")
    for j, step in enumerate(expression.steps):
        dtype = expression.step_dtypes[j]
        lines.append(f"{indent}s{j} = np.{dtype.name}({_render(step, dtype, names, dtypes)})")
        names[("step", j)], dtypes[("step", j)] = f"s{j}", dtype
    for i, j in enumerate(expression.outputs):
        out_shape = loop if flat else expression.step_shapes[j]
        if i in packed:  # (a flat block at a constant offset: see Packing)
            block, at = packed[i]
            index = _flat_index(out_shape, len(loop), at * math.prod(out_shape))
            lines.append(f"{indent}blk{block}[{index}] = s{j}")
        elif flat:
            lines.append(f"{indent}out{i}f[i0] = s{j}")
        else:
            lines.append(f"{indent}out{i}[{_index(out_shape, ndim)}] = s{j}")
    for i, r in enumerate(expression.reductions):
        if i in local:
            lines.append(f"{indent}r{i} = radd(r{i}, np.{row[i]}(s{r.step}))")
            continue
        value = f"np.{wide[i].name}(s{r.step})"
        lines.append(f"{indent}acc{i}[{_partial(r, ndim)}] += {value}")
    if local:
        indent = indent[:-4]
        for i in local:
            index = _partial(expression.reductions[i], ndim)
            lines.append(f"{indent}acc{i}[{index}] += np.{wide[i].name}(r{i})")
    lines.append("    return 0")
    return "\n".join(lines) + "\n"


def _partial(reduction, ndim):
    """The element of a reduction's accumulator at the loop indices: its chunk's partial (0
    without loops), then 0 on the reduced axes."""
    kept = ["0" if a in reduction.axes else f"i{a}" for a in range(ndim)]
    return ", ".join(["c" if ndim else "0", *kept])


def _flat_index(shape, ndim, offset):
    """The element of a C-ordered array of ``shape`` (right-aligned, broadcast) stored flat from
    ``offset``, at loop indices i*: constant strides, so LLVM sees which elements differ."""
    lead, terms = ndim - len(shape), [str(offset)] if offset else []
    for a, n in enumerate(shape):
        if n != 1:
            stride = math.prod(shape[a + 1 :])
            terms.append(f"i{a + lead}" if stride == 1 else f"i{a + lead} * {stride}")
    return " + ".join(terms) or "0"


def _index(shape, ndim):
    """The element of an array of ``shape`` (right-aligned, broadcast) at loop indices i*."""
    if not shape:
        return "()"
    lead = ndim - len(shape)
    return ", ".join("0" if n == 1 else f"i{a + lead}" for a, n in enumerate(shape))


def _render(step, dtype, names, dtypes):
    rule = rule_for(step)
    refs = [arg for arg in step.args if arg is not None]
    flat = [ref for arg in refs for ref in ([arg] if is_ref(arg) else arg)]
    if rule.cast == "out":
        compute = dtype
    elif rule.cast == "common":
        compute = np.result_type(*(dtypes[r] for r in flat))
    else:
        compute = None
    args = []
    for ref in flat:
        name, have = names[ref], dtypes[ref]
        cast = compute is not None and have != compute and have.kind == "f"
        args.append(f"np.{compute.name}({name})" if cast else name)
    k = Constant(compute if compute is not None else dtype, _spell)
    return rule.render(args, dict(step.attrs), k)


def compiled_before(expression, vectorised=True):
    """Whether ``expression``'s kernel was compiled on this machine before and is kept on disk
    (``kernel_cache``): loading it costs milliseconds, not a compile."""
    return kernel_cache.compiled_before(_layout(expression)[2], vectorised)


def request(expression, inputs, vectorised=True):
    """``(key, request)`` asking ``compile_process`` to compile ``expression``'s kernel for
    ``inputs`` (its arrays), or None where it cannot (an input that is not a numpy array, or
    no kernel cache to hand the machine code over)."""
    if kernel_cache.directory() is None:
        return None
    chunks, packing, source = _layout(expression)
    arguments = []
    for x in inputs:
        if x.__class__ is not np.ndarray:
            return None
        arguments.append(_typed(x.dtype, x.ndim, x.flags))
    for i in packing.alone:
        shape = expression.step_shapes[expression.outputs[i]]
        arguments.append(_typed(np.dtype(expression.dtypes[i]), len(shape)))
    arguments += [_typed(np.dtype(dtype), 1) for _, dtype, _ in packing.blocks]
    arguments += [
        _typed(np.dtype(w), len(shape) + 1) for shape, w, _, _ in _accumulators(expression)
    ]
    key = kernel_cache.key(source, vectorised)
    return key, {
        "source": source,
        "vectorised": bool(vectorised),
        "parallel": chunks > 1,
        "arguments": arguments,
    }


def _typed(dtype, ndim, flags=None):
    """An argument as numba types an array (``numba.typeof``): [dtype, ndim, layout, read-only]."""
    if flags is None or flags.c_contiguous:
        layout = "C"
    else:
        layout = "F" if flags.f_contiguous else "A"
    return [dtype.str, ndim, layout, flags is not None and not flags.writeable]


def compile_request(request):
    """Compiles a ``request`` (made by ``request``) into the kernel cache: ``compile_process``'s
    work, in the compile process."""
    import numba

    vectorised = request["vectorised"]
    fused, cached = kernel_cache.function(request["source"], vectorised, kernel_globals(vectorised))
    if not cached:
        raise OSError("the kernel cache cannot be written: nothing to hand the code over")
    loops = _jit(fused, parallel=request["parallel"], cache=True)
    types = tuple(
        numba.types.Array(numba.from_dtype(np.dtype(dtype)), ndim, layout, readonly=readonly)
        for dtype, ndim, layout, readonly in request["arguments"]
    )
    loops.compile(types)
    kernel_cache.mark_compiled(request["source"], vectorised)


def _jit(fused, parallel, cache):
    """numba's dispatcher of a generated ``fused``: one set of options for the program's compile
    and the compile process's, so that the machine code one caches is what the other loads."""
    import numba

    return numba.njit(nogil=True, error_model="numpy", parallel=parallel, cache=cache)(fused)


@functools.lru_cache(maxsize=256)
def _layout(expression):
    """(chunks, ``Packing``, generated source) of ``expression``: made once, for the disk
    cache's look-up and the compile alike."""
    chunks = chunks_for(expression)
    packing = Packing(expression, chunks)
    return chunks, packing, generate(expression, chunks, packing)


def kernel_globals(vectorised=True):
    """The names generated code uses: the helpers, and ``np`` (``vecmath``'s stand-in where
    ``vectorised``)."""
    from ops.fusion_backends import vecmath

    namespace = dict(_helpers())
    namespace["np"] = vecmath.namespace() if vectorised else np
    return namespace


@functools.lru_cache(maxsize=1)
def _helpers():
    import numba

    inline = numba.njit(inline="always")

    @inline
    def where(cond, a, b):
        return a if cond else b

    @inline
    def maximum(a, b):  # numpy's: NaN wins, ties give b
        return a if (a > b or a != a) else b

    @inline
    def minimum(a, b):
        return a if (a < b or a != a) else b

    @inline
    def clip_low(x, low):  # numpy's clip: NaN stays, -0.0 stays at a bound of 0
        return low if x < low else x

    @inline
    def clip_high(x, high):
        return high if x > high else x

    return {
        "prange": numba.prange,
        "radd": _reassociable_add(),
        "where": where,
        "maximum": maximum,
        "minimum": minimum,
        "clip_low": clip_low,
        "clip_high": clip_high,
    }


def _reassociable_add():
    """``radd(a, b)``: a + b whose float add carries LLVM's ``reassoc`` flag, so a loop summing
    with it vectorises (partial sums per vector lane); nothing else in the loop is reassociated.
    Integers add as usual."""
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def radd(typingctx, a, b):
        if a != b or not isinstance(a, (types.Float, types.Integer)):
            return None

        def codegen(context, builder, signature, args):
            if isinstance(a, types.Integer):
                return builder.add(*args)
            total = builder.fadd(*args)
            total.flags.append("reassoc")
            return total

        return a(a, b), codegen

    return radd


def compile(expression, xp, vectorised=True):  # noqa: A001  (every backend's entry point)
    """A callable running ``expression`` as one compiled loop nest (numba compiles it at the
    first call, for the inputs' layouts). ``vectorised``: exp and tanh from ``vecmath`` (branch
    free, so the loop vectorises; within a few ulp of numpy's) instead of numba's scalar libm
    calls. Large expressions run their outermost axis in ``chunks_for`` parallel chunks."""

    chunks, packing, source = _layout(expression)
    fused, cached = kernel_cache.function(source, vectorised, kernel_globals(vectorised))
    loops = _jit(fused, parallel=chunks > 1, cache=cached)
    unmarked = [cached]  # (whether the first run, which compiles, is still to be noted)
    alone = [
        (i, expression.step_shapes[expression.outputs[i]], np.dtype(expression.dtypes[i]))
        for i in packing.alone
    ]
    blocks = [(math.prod(shape), shape, dtype, members) for shape, dtype, members in packing.blocks]
    whole = len(blocks) == 1 and not alone  # (the common case: every output a row of one block)
    n_out = len(expression.outputs)
    accumulators = _accumulators(expression)
    threads = Threads() if chunks > 1 else None

    def run(*inputs):
        own = [buffers.empty(np, shape, dtype) for _, shape, dtype in alone]
        flats = [np.empty(size, dtype) for size, _, dtype, _ in blocks]
        accs = [np.zeros((chunks, *shape), dtype) for shape, dtype, _, _ in accumulators]
        if threads is None:
            loops(*inputs, *own, *flats, *accs)
        else:
            threads.call(loops, *inputs, *own, *flats, *accs)
        if unmarked[0]:
            unmarked[0] = False
            kernel_cache.mark_compiled(source, vectorised)
        if whole:
            outs = list(flats[0].reshape(blocks[0][1]))
        else:
            outs = [None] * n_out
            for (i, _, _), array in zip(alone, own):
                outs[i] = array
            for flat, (_, shape, _, members) in zip(flats, blocks):
                for i, row in zip(members, flat.reshape(shape)):
                    outs[i] = row
        for acc, (_, _, reduction, dtype) in zip(accs, accumulators):
            if chunks > 1:
                acc = acc.sum(axis=0, dtype=np.float64 if acc.dtype.kind == "f" else None)
            else:
                acc = acc[0]
            if reduction.mean:
                acc = acc / math.prod(expression.shape[a] for a in reduction.axes)
            outs.append(acc.reshape(reduction.shape).astype(dtype, copy=False))
        return outs

    run = with_located_errors(run, reference.compile(expression, xp))
    run.backend, run.loops = "numba", loops  # loops: the numba dispatcher, for inspection
    run.source, run.packing = source, packing
    run.threads = threads
    return run


class Threads:
    """How many threads a parallel loop nest runs with: measured, not assumed. The chunks run on
    one thread or on all (``numba.set_num_threads`` per call; the results are the same, the
    chunks being fixed): the first ``2 * PROBES`` calls alternate, then the faster (by median)
    runs for ``KEEP`` calls, then it probes again. Where a second core is idle, all threads
    should win (torch.compile uses both); where other processes keep the cores busy, a thread
    waiting for a descheduled other costs up to a time slice per call (measured on the shared
    2-core machine: 2x slower on the 1M chain, 60x on 256x256), so one thread wins."""

    PROBES, KEEP = 3, 64

    def __init__(self):
        self.times = {}  # thread count -> seconds of this round's probes
        self.chosen, self.left, self.compiled = None, 0, False

    def count(self):
        """The thread count of the next call."""
        import numba

        if self.left > 0:
            self.left -= 1
            return self.chosen
        every = numba.config.NUMBA_NUM_THREADS
        one, all_ = self.times.setdefault(1, []), self.times.setdefault(every, [])
        return 1 if len(one) <= len(all_) else every

    def record(self, count, seconds):
        if not self.compiled:  # the first call compiles: not a measurement
            self.compiled = True
            return
        if self.left > 0 or count not in self.times:
            return
        self.times[count].append(seconds)
        if all(len(t) >= self.PROBES for t in self.times.values()):
            self.chosen = min(self.times, key=lambda n: sorted(self.times[n])[self.PROBES // 2])
            self.times, self.left = {}, self.KEEP

    def call(self, loops, *args):
        import numba

        count, before = self.count(), numba.get_num_threads()
        numba.set_num_threads(count)
        started = time.perf_counter()
        try:
            loops(*args)
        finally:
            numba.set_num_threads(before)
        self.record(count, time.perf_counter() - started)


def _accumulators(expression):
    """(shape keeping every axis, accumulation dtype, reduction, output dtype) per reduction.

    A float32 sum of float32 values over outer axes only (a broadcast vector's gradient: the
    column sums of a matrix) accumulates in float32, as numpy's own sum over an outer axis
    does (row after row, in float32), so that the innermost loop stays float32 vector lanes
    (measured 2x faster on the chain's backward kernel: float64 accumulators halve the lanes
    and convert every element); the chunks' partials then add in float64."""
    n_full, found = len(expression.outputs), []
    ndim = len(expression.shape)
    for i, r in enumerate(expression.reductions):
        shape = tuple(1 if a in r.axes else n for a, n in enumerate(expression.shape))
        dtype = np.dtype(expression.dtypes[n_full + i])
        wide = np.dtype(np.int64) if dtype.kind in "biu" else np.dtype(np.float64)
        outer = ndim and ndim - 1 not in r.axes
        if outer and dtype == np.float32 and expression.step_dtypes[r.step] == np.float32:
            wide = dtype
        found.append((shape, wide, r, dtype))
    return found
