"""Shared set-up of the compiled-loop tests (ops/fusion_backends/compiled_loop.py)."""

from ops.fusion_backends import compile_process, compiled_loop, numba_loops


def isolated(tmp_path, monkeypatch, module):
    """A fixture's body: a kernel cache, a compile process and ``module``'s loops of the test's
    own; the compile process stopped after it."""
    monkeypatch.setenv("FLUIDTAPE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FLUIDTAPE_COMPILE_PROCESS", raising=False)
    monkeypatch.setattr(compile_process, "_child", [None])
    monkeypatch.setattr(module, "_LOOPS", {})
    yield
    compile_process.stop()


def compile_now(source, arguments):
    """Compiles a loop into the kernel cache as the compile process does, here and now."""
    numba_loops.compile_request(compiled_loop.request(source, arguments))
