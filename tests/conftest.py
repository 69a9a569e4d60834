"""Test-suite settings: a hypothesis profile for CI (``CI`` set in the environment), which writes
no example database into the clone and prints the blob that reproduces a failure; a kernel
cache directory of the run's own."""

import atexit
import os
import shutil
import tempfile

from hypothesis import settings

# Generated numba kernels go to a directory of this run's own, not the user's cache
# (ops.fusion_backends.kernel_cache), unless one is set on purpose.
if "FLUIDTAPE_CACHE_DIR" not in os.environ:
    os.environ["FLUIDTAPE_CACHE_DIR"] = tempfile.mkdtemp(prefix="fluidtape-test-cache-")
    atexit.register(shutil.rmtree, os.environ["FLUIDTAPE_CACHE_DIR"], ignore_errors=True)

settings.register_profile("ci", database=None, print_blob=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


import sys  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(params=["interpreted", "compiled"])
def lazy_tier(request, monkeypatch):
    """Runs a test once with every lazy run interpreted (tape.interpret, a structure's first
    sighting) and once with every run compiled into a plan (its later sightings)."""
    import tape  # noqa: F401

    module = sys.modules["tape.lazy"]
    compiled = request.param == "compiled"
    monkeypatch.setattr(module, "_compiles", lambda key, pending: compiled)
    return request.param


@pytest.fixture
def no_speculation(monkeypatch):
    """Every lazy step records lazily: no streak of new structures makes a step record eagerly
    (``tape.eager_speculation``), for tests of the lazy tiers a structure goes through."""
    from tape import eager_speculation

    monkeypatch.setattr(eager_speculation, "STREAK", 1 << 30)


@pytest.fixture(autouse=True)
def _collector_resumed():
    """A test that leaves a lazy step unfinished (its tape never reset) must not leave the
    cyclic collector paused for the tests after it (``tape.collector``)."""
    yield
    from tape import collector

    collector.step_ended()


@pytest.fixture(autouse=True)
def _shared_buffers_released():
    """A test that shares a buffer through DLPack must not leave it shared for the tests after
    it: while one is alive every op checksums what it reads, and ``tape.grad_memo`` and the
    batched backward stand aside (``tape.guard.SHARED``). The global tape may hold it, in a
    cycle with its pending Variables that only the cyclic collector frees, so when one is left
    the tape is dropped and collected; one still listed then is a leak (some tape or cache
    holds the Variable: a CI run failed so) and fails the test."""
    yield
    from tape import guard

    if guard.SHARED:
        import contextlib
        import gc

        import tape

        with contextlib.suppress(Exception):  # (a side effect the test left failing)
            tape.reset_global_tape()
        gc.collect()
        left = sorted(str(entry[2]) for entry in guard.SHARED.values())
        if left:
            guard.SHARED.clear()  # (the tests after it start clean)
            pytest.fail(f"Variables shared through DLPack outlived the test (shared at {left})")


@pytest.fixture(autouse=True)
def _autobatch_costs_forgotten():
    """``autobatch="auto"`` chooses by the costs earlier runs measured (``tape.autobatch_choice``):
    each test starts with none, so its first interpreted run autobatches, as a new model's does."""
    from tape import autobatch_choice, eager_speculation

    autobatch_choice.reset()
    eager_speculation.reset()  # (nor a streak of new structures: no step starts eager)
    yield
