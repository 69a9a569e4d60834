"""numba compiles in a separate process (ops/fusion_backends/compile_process.py): a request
compiled there lands in the kernel cache, from which the program loads it without compiling;
the auto backend hands a group over once it has run often enough and moves it when the code is
ready; a child that cannot start, dies or fails leaves the group to the in-process rule."""

import os
import signal
import sys
import time

import numpy as np
import pytest

from ops import fused
from ops.fusion_backends import compile_process, numba_loops, reference
from tests.ops.cases_fused import chain_expression
from tests.ops.fused_helpers import libm_tol

pytestmark = pytest.mark.skipif(not numba_loops.available(), reason="numba is not installed")

WAIT_SECONDS = 120  # (a compile takes 0.3-3 s; the child also imports numba first)


@pytest.fixture(autouse=True)
def own_child(tmp_path, monkeypatch):
    """Each test: its own kernel cache and its own compile process, stopped after it."""
    monkeypatch.setenv("FLUIDTAPE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FLUIDTAPE_COMPILE_PROCESS", raising=False)
    monkeypatch.setattr(compile_process, "_child", [None])
    fused.clear_cache()
    yield
    compile_process.stop()
    fused.clear_cache()


def _inputs(expression):
    rng = np.random.default_rng(0)
    return [np.asarray(rng.standard_normal(s)).astype(d) for s, d in expression.inputs]


def _adaptive(expression):
    """The auto backend's kernel of ``expression`` (which ``kernel_for`` wraps with the
    group's own origins)."""
    kernel = fused.kernel_for(expression, np)
    return kernel.run if isinstance(kernel, fused._Located) else kernel


def _settled(key):
    deadline = time.monotonic() + WAIT_SECONDS
    while compile_process.state(key) == compile_process.PENDING:
        assert time.monotonic() < deadline, "the compile process did not answer"
        time.sleep(0.02)
    return compile_process.state(key)


def test_a_kernel_compiled_in_the_child_is_loaded_by_the_program_without_compiling():
    expression = chain_expression((6, 9), "float32")
    inputs = _inputs(expression)
    key, request = numba_loops.request(expression, inputs)
    assert compile_process.state(key) is None
    compile_process.submit(key, request)
    assert _settled(key) == compile_process.READY
    assert numba_loops.compiled_before(expression)
    run = numba_loops.compile(expression, np)
    got = run(*inputs)
    assert sum(run.loops.stats.cache_hits.values()) == 1  # (loaded from disk)
    assert not run.loops.stats.cache_misses
    rtol, atol = libm_tol(expression)
    for g, e in zip(got, reference.compile(expression, np)(*inputs), strict=True):
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


def test_the_arguments_are_typed_as_numba_types_them():
    import numba

    expression = chain_expression((4, 8), "float64")
    inputs = _inputs(expression)
    inputs[0] = np.asfortranarray(np.broadcast_to(inputs[0], (4, 8)))  # (another layout)
    inputs[1] = inputs[1][::-1]
    _, request = numba_loops.request(expression, inputs)
    for x, (dtype, ndim, layout, readonly) in zip(inputs, request["arguments"], strict=False):
        assert numba.typeof(x) == numba.types.Array(
            numba.from_dtype(np.dtype(dtype)), ndim, layout, readonly=readonly
        )
    assert numba_loops.request(expression, [*inputs[:-1], 1.5]) is None  # (not an array)


def test_auto_hands_a_group_over_and_moves_it_once_the_code_is_ready(monkeypatch):
    monkeypatch.setattr(fused, "NUMBA_AFTER_SECONDS", 1e9)  # (never in the program)
    monkeypatch.setattr(fused, "NUMBA_SUBMIT_CALLS", 3)
    expression = chain_expression((5, 6), "float32")
    inputs = _inputs(expression)
    kernel = _adaptive(expression)
    expected = reference.compile(expression, np)(*inputs)
    deadline = time.monotonic() + WAIT_SECONDS
    calls = 0
    while kernel.backend != "numba":
        assert time.monotonic() < deadline, "the group never moved"
        outs = kernel(*inputs)
        calls += 1
        time.sleep(0.01)
    assert calls >= 3  # (not asked before its third run)
    assert sum(kernel.run.loops.stats.cache_hits.values()) == 0  # (its first run is still to come)
    outs = kernel(*inputs)
    assert sum(kernel.run.loops.stats.cache_hits.values()) == 1  # (loaded, not compiled here)
    rtol, atol = libm_tol(expression)
    for g, e in zip(outs, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


def test_a_child_that_cannot_start_leaves_the_group_to_the_in_process_rule(monkeypatch):
    monkeypatch.setattr(sys, "executable", os.path.join(os.sep, "no", "such", "python"))
    monkeypatch.setattr(fused, "NUMBA_SUBMIT_CALLS", 1)
    expression = chain_expression((3, 5), "float32")
    inputs = _inputs(expression)
    kernel = _adaptive(expression)
    kernel(*inputs)  # (asks: the child cannot start)
    assert compile_process.state(kernel.ticket) == compile_process.FAILED
    monkeypatch.setattr(fused, "NUMBA_AFTER_SECONDS", 0.0)
    kernel(*inputs)  # (the failure seen: back to the in-process rule)
    assert kernel.ticket is None and kernel.backend != "numba"
    kernel(*inputs)  # (which compiles in the program)
    assert kernel.backend == "numba"


def test_a_child_that_dies_fails_what_it_was_asked():
    expression = chain_expression((7, 3), "float32")
    key, request = numba_loops.request(expression, _inputs(expression))
    compile_process.submit(key, request)
    os.kill(compile_process._child[0].process.pid, signal.SIGKILL)
    assert _settled(key) in (compile_process.FAILED, compile_process.READY)
    other = chain_expression((7, 2), "float32")
    later, request = numba_loops.request(other, _inputs(other))
    compile_process.submit(later, request)
    assert compile_process.state(later) == compile_process.FAILED


def test_a_request_that_does_not_compile_fails():
    expression = chain_expression((2, 2), "float32")
    key, request = numba_loops.request(expression, _inputs(expression))
    request["source"] = "def fused(x0):\n    return undefined_name\n"
    request["arguments"] = [["<f4", 1, "C", False]]
    compile_process.submit(key, request)
    assert _settled(key) == compile_process.FAILED


def test_switched_off_nothing_is_asked(monkeypatch):
    monkeypatch.setenv("FLUIDTAPE_COMPILE_PROCESS", "0")
    assert not compile_process.enabled()
    monkeypatch.setattr(fused, "NUMBA_SUBMIT_CALLS", 1)
    expression = chain_expression((4, 4), "float32")
    kernel = _adaptive(expression)
    for _ in range(3):
        kernel(*_inputs(expression))
    assert kernel.ticket is None and compile_process._child[0] is None
    monkeypatch.setenv("FLUIDTAPE_COMPILE_PROCESS", "1")
    monkeypatch.setenv("FLUIDTAPE_KERNEL_CACHE", "0")  # (no cache to hand the code over)
    assert not compile_process.enabled()
