"""The numba backend's vectorised exp and tanh (ops.fusion_backends.vecmath) and its parallel,
vectorised loops: accuracy bounds, special values, reductions split over chunks, layouts."""

import re

import numpy as np
import pytest

from ops.fused_expression import Expression, Reduction, Step
from ops.fusion_backends import numba_loops, reference
from tests.ops.cases_fused import chain_expression
from tests.ops.fused_helpers import assert_same

pytestmark = pytest.mark.skipif(
    not numba_loops.available(), reason="numba not installed (extra 'fuse')"
)


@pytest.fixture(scope="module")
def loops():
    """{(name, dtype): f(array) -> array}: each function applied by a compiled loop."""
    import numba

    from ops.fusion_backends import vecmath

    found = {}
    for name, function in vecmath.functions().items():

        def apply(x, out, function=function):
            for i in range(x.shape[0]):
                out[i] = function(x[i])

        compiled = numba.njit(error_model="numpy")(apply)

        def run(x, compiled=compiled):
            out = np.empty_like(x)
            compiled(x, out)
            return out

        found[name] = run
    return found


def _ulps(got, want):
    """Distance in units in the last place (adjacent floats are 1 apart; NaN == NaN; +-0 are 0
    apart), as int64."""
    kind = np.int32 if got.dtype == np.float32 else np.int64
    a, b = got.view(kind).astype(np.int64), want.view(kind).astype(np.int64)
    low = np.iinfo(kind).min
    a, b = np.where(a < 0, low - a, a), np.where(b < 0, low - b, b)
    distance = np.abs(a - b)
    distance[np.isnan(got) & np.isnan(want)] = 0
    return distance


def _float32_sweep():
    """Every 1021st float32 bit pattern (both signs, denormals, inf, NaN) and dense grids over
    the ranges where the functions change regime."""
    patterns = np.arange(0, 2**32, 1021, dtype=np.uint64).astype(np.uint32).view(np.float32)
    grids = [np.linspace(lo, hi, 100_001, dtype=np.float32) for lo, hi in _EDGES]
    return np.concatenate([patterns, *grids])


# exp: over/underflow and the denormal range; tanh: the polynomial / exp switch and saturation.
_EDGES = [(85.0, 90.0), (-106.0, -85.0), (-1.0, 1.0), (-0.7, -0.55), (0.55, 0.7), (8.0, 10.0)]


@pytest.mark.parametrize("name", ["exp", "tanh"])
def test_float32_is_within_one_ulp_of_the_correctly_rounded_value(loops, name):
    """Against float64 numpy rounded to float32 (numpy's own float32 exp is up to 2 ulp off)."""
    x = _float32_sweep()
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x.astype(np.float64)).astype(np.float32)
    distance = _ulps(loops[name](x), want)
    assert distance.max() <= 1, f"{name}: {distance.max()} ulp at {x[distance.argmax()]!r}"


def test_float64_exp_is_within_one_ulp_of_numpys(loops):
    rng = np.random.default_rng(0)
    patterns = rng.integers(0, 2**64, 1_000_000, dtype=np.uint64).view(np.float64)
    x = np.concatenate([patterns, np.linspace(-750.0, 750.0, 1_000_001)])
    with np.errstate(all="ignore"):
        want = np.exp(x)
    distance = _ulps(loops["exp"](x), want)
    assert distance.max() <= 1, f"{distance.max()} ulp at {x[distance.argmax()]!r}"


def test_float64_tanh_is_the_c_librarys(loops):
    import math

    x = np.linspace(-20.0, 20.0, 10_001)
    assert_same(loops["tanh"](x), np.array([math.tanh(v) for v in x]), "float64 tanh")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_exp_special_values(loops, dtype):
    big = {"float32": (88.7, 89.0, -103.9, -104.5), "float64": (709.7, 710.0, -745.1, -746.0)}
    finite, over, tiny, under = big[dtype]
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, finite, over, 1e4, tiny, under, -1e4], dtype)
    got = loops["exp"](x)
    assert got[0] == np.inf and got[1] == 0.0 and np.isnan(got[2])
    assert got[3] == 1.0 and got[4] == 1.0
    assert np.isfinite(got[5]) and got[5] > 1e38 and got[6] == np.inf and got[7] == np.inf
    assert 0.0 < got[8] < np.finfo(dtype).tiny  # a denormal, not flushed
    assert got[9] == 0.0 and got[10] == 0.0
    with np.errstate(all="ignore"):
        assert_same(got[np.isfinite(x)][:2], np.exp(x[np.isfinite(x)])[:2], "exp(+-0)")


def test_float32_tanh_special_values(loops):
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40, -1e-40, 10.0, -10.0, 1e30], "float32")
    got = loops["tanh"](x)
    want = np.array([1, -1, np.nan, 0.0, -0.0, 1e-40, -1e-40, 1, -1, 1], "float32")
    assert_same(got, want, "tanh special values")
    assert np.signbit(got[4]) and not np.signbit(got[3])


def _run(expression, inputs, **kwargs):
    return numba_loops.compile(expression, np, **kwargs)(*inputs)


def _chain_inputs(expression, seed=0, layout=None):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(d) for s, d in expression.inputs]
    if layout == "transposed":  # the same values read through a transposed, strided view
        arrays[0] = np.ascontiguousarray(arrays[0].T).T
    elif layout == "strided":
        wide = np.zeros((arrays[0].shape[0], 2 * arrays[0].shape[1]), arrays[0].dtype)
        wide[:, ::2] = arrays[0]
        arrays[0] = wide[:, ::2]
    return arrays


def _assert_close(got, want, expression):
    """Elementwise outputs within the libm tolerance (5e-6 float32, 1e-14 float64), sums within
    count * eps * sum(|value|) of the reference's (reassociation) plus that tolerance."""
    dtype = np.dtype(expression.dtypes[0])
    tol = 5e-6 if dtype == np.float32 else 1e-14
    n_full = len(expression.outputs)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype
        if i < n_full:
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
            continue
        r = expression.reductions[i - n_full]
        count = np.prod([expression.shape[a] for a in r.axes]) if r.axes else 1
        magnitude = np.abs(want[expression.outputs.index(r.step)]).astype(np.float64)
        magnitude = magnitude.sum(axis=r.axes, keepdims=r.keepdims).reshape(g.shape)
        if r.mean:
            magnitude = magnitude / count
        bound = (count * np.finfo(dtype).eps + tol) * magnitude + tol * (1 if r.mean else count)
        assert np.all(np.abs(g.astype(np.float64) - w) <= bound)


@pytest.mark.parametrize(
    "dtype, layouts", [("float32", [None, "transposed", "strided"]), ("float64", [None])]
)
def test_parallel_chunks_equal_the_reference(dtype, layouts, monkeypatch):
    """A chain large enough to run in parallel chunks (sums over axis 0 and over all axes), on
    contiguous and non-contiguous inputs."""
    monkeypatch.setattr(numba_loops, "PARALLEL_MIN_SIZE", 1024)
    expression = chain_expression((300, 70), dtype)
    assert numba_loops.chunks_for(expression) == numba_loops.CHUNKS
    run = numba_loops.compile(expression, np)
    for layout in layouts:
        inputs = _chain_inputs(expression, layout=layout)
        want = reference.compile(expression, np)(*inputs)
        _assert_close(run(*inputs), want, expression)


def test_sums_do_not_depend_on_the_number_of_threads(monkeypatch):
    """The probes alternate one thread and all of them: every result is the same, bit for bit."""
    import numba

    monkeypatch.setattr(numba_loops, "PARALLEL_MIN_SIZE", 1024)
    expression = chain_expression((256, 64), "float32")
    inputs = _chain_inputs(expression, seed=3)
    run = numba_loops.compile(expression, np)
    results = [run(*inputs) for _ in range(5)]
    if numba.config.NUMBA_NUM_THREADS > 1:
        assert sorted(run.threads.times) == [1, numba.config.NUMBA_NUM_THREADS]
        assert all(len(t) == 2 for t in run.threads.times.values())  # first call compiled
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert_same(a, b, "1 thread against all")


def test_threads_keep_the_faster_count_then_probe_again():
    import numba

    threads = numba_loops.Threads()
    threads.record(1, 9.0)  # the compiling call: ignored
    many = max(2, numba.config.NUMBA_NUM_THREADS)
    threads.times = {1: [], many: []}
    for _ in range(threads.PROBES):
        threads.record(1, 0.010)
        threads.record(many, 0.030)
    assert threads.chosen == 1 and threads.left == threads.KEEP
    assert [threads.count() for _ in range(threads.KEEP)] == [1] * threads.KEEP
    threads.count()  # a new round of probes
    assert threads.left == 0 and threads.times


def _sum_of(shape, axes, op="tanh", dtype="float32"):
    """op(X) output, and its sum over each of ``axes`` (a list of axis tuples)."""
    steps = (Step(op, (), (("in", 0),), (op, f"{op}_0", None)),)
    reductions = tuple(
        Reduction(0, a, False, False, tuple(n for i, n in enumerate(shape) if i not in a))
        for a in axes
    )
    dtypes = (dtype,) * (1 + len(axes))
    return Expression((((shape), dtype),), shape, steps, (0,), reductions, dtypes)


@pytest.mark.parametrize(
    "shape, axes", [((37, 41), [(1,), (0,), (0, 1), ()]), ((9, 4, 33), [(0, 2), (2,), (1,)])]
)
def test_reductions_over_any_axes(shape, axes, monkeypatch):
    monkeypatch.setattr(numba_loops, "PARALLEL_MIN_SIZE", 64)
    expression = _sum_of(shape, axes)
    (x,) = _chain_inputs(expression, seed=5)
    want = reference.compile(expression, np)(x)
    _assert_close(_run(expression, [x]), want, expression)


def test_vectorised_false_keeps_numbas_libm_calls():
    expression = _sum_of((64, 16), [(0, 1)])
    (x,) = _chain_inputs(expression)
    fast, scalar = _run(expression, [x]), _run(expression, [x], vectorised=False)
    np.testing.assert_allclose(fast[0], scalar[0], rtol=5e-6, atol=0)
    assert numba_loops.scalar_libm(expression) == set()
    wide = _sum_of((4, 4), [(0,)], dtype="float64")
    assert numba_loops.scalar_libm(wide) == {("tanh", "float64")}
    assert numba_loops.scalar_libm(_sum_of((4, 4), [(0,)], op="log")) == {("log", "float32")}


def test_the_chain_loop_is_vectorised():
    """The point of vecmath: LLVM turns the chain's loop (tanh, sigmoid) into vector code."""
    expression = chain_expression((64, 128), "float32")
    run = numba_loops.compile(expression, np)
    run(*_chain_inputs(expression))
    ir = "\n".join(run.loops.inspect_llvm().values())
    assert re.search(r"<\d+ x float>", ir), "no vector instruction in the chain's loop"
