"""Generated numba kernels kept on disk (ops/fusion_backends/kernel_cache.py): where they go,
that a later process loads a kernel instead of compiling it, and that the cache stays out of the
way where it is switched off or cannot be written."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ops.fusion_backends import kernel_cache, numba_loops, reference
from tests.ops.cases_fused import chain_expression
from tests.ops.fused_helpers import libm_tol

pytestmark = pytest.mark.skipif(not numba_loops.available(), reason="numba is not installed")

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _inputs(expression):
    rng = np.random.default_rng(0)
    return [np.asarray(rng.standard_normal(s)).astype(d) for s, d in expression.inputs]


def test_a_compiled_kernel_is_kept_under_the_cache_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("FLUIDTAPE_CACHE_DIR", str(tmp_path))
    expression = chain_expression((5, 7), "float32")
    assert not numba_loops.compiled_before(expression)
    inputs = _inputs(expression)
    got = numba_loops.compile(expression, np)(*inputs)
    assert numba_loops.compiled_before(expression)
    files = os.listdir(tmp_path / "numba-kernels")
    assert sum(f.endswith(".py") for f in files) == 1 and sum(f.endswith(".ok") for f in files) == 1
    assert not any(f.endswith(".tmp") for f in files)  # (written whole, then renamed)
    rtol, atol = libm_tol(expression)
    for g, e in zip(got, reference.compile(expression, np)(*inputs), strict=True):
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


_PROCESS = textwrap.dedent(
    """
    import numpy as np
    from ops.fusion_backends import numba_loops
    from tests.ops.cases_fused import chain_expression

    expression = chain_expression((3, 4), "float32")
    rng = np.random.default_rng(0)
    inputs = [np.asarray(rng.standard_normal(s)).astype(d) for s, d in expression.inputs]
    run = numba_loops.compile(expression, np)
    outs = run(*inputs)
    print(sum(run.loops.stats.cache_hits.values()))
    print(float(outs[-1]))
    """
)


def _process(cache):
    env = dict(os.environ, FLUIDTAPE_CACHE_DIR=str(cache), PYTHONPATH=_ROOT)
    done = subprocess.run(
        [sys.executable, "-c", _PROCESS], env=env, capture_output=True, text=True, check=True
    )
    hits, total = done.stdout.split()
    return int(hits or 0), float(total)


def test_a_later_process_loads_the_kernel_instead_of_compiling_it(tmp_path):
    first_hits, first = _process(tmp_path)
    second_hits, second = _process(tmp_path)
    assert first_hits == 0 and second_hits == 1
    assert first == second


def test_switched_off_or_unwritable_the_cache_writes_nothing(tmp_path, monkeypatch):
    expression = chain_expression((2, 3), "float32")
    monkeypatch.setenv("FLUIDTAPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FLUIDTAPE_KERNEL_CACHE", "0")
    assert kernel_cache.directory() is None
    numba_loops.compile(expression, np)(*_inputs(expression))
    assert os.listdir(tmp_path) == []
    monkeypatch.delenv("FLUIDTAPE_KERNEL_CACHE")
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("FLUIDTAPE_CACHE_DIR", str(blocked))  # (a file: no directory there)
    assert kernel_cache.directory() is None
    outs = numba_loops.compile(expression, np)(*_inputs(expression))
    assert len(outs) == 4 and not numba_loops.compiled_before(expression)


def test_the_key_changes_with_the_source_and_the_vectorised_libm():
    one = kernel_cache.key("def fused():\n    return 0\n", True)
    assert one == kernel_cache.key("def fused():\n    return 0\n", True)
    assert one != kernel_cache.key("def fused():\n    return 1\n", True)
    assert one != kernel_cache.key("def fused():\n    return 0\n", False)


def test_auto_moves_a_kernel_on_disk_without_waiting_for_a_compiles_worth(tmp_path, monkeypatch):
    from ops import fused

    monkeypatch.setenv("FLUIDTAPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(fused, "NUMBA_AFTER_SECONDS", 1e9)  # (never, unless on disk)
    monkeypatch.setattr(fused, "NUMBA_CACHED_SECONDS", 0.0)
    known, unknown = chain_expression((6, 5), "float32"), chain_expression((6, 3), "float32")
    numba_loops.compile(known, np)(*_inputs(known))  # (compiled once: now on disk)
    fused.clear_cache()
    try:
        for expression in (known, unknown):
            kernel = fused.kernel_for(expression, np)
            kernel(*_inputs(expression))
            kernel(*_inputs(expression))
        assert fused.kernel_for(known, np).backend == "numba"
        assert fused.kernel_for(unknown, np).backend != "numba"
    finally:
        fused.clear_cache()
