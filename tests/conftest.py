"""Test-suite settings: a hypothesis profile for CI (``CI`` set in the environment), which writes
no example database into the clone and prints the blob that reproduces a failure."""

import os

from hypothesis import settings

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


@pytest.fixture(autouse=True)
def _collector_resumed():
    """A test that leaves a lazy step unfinished (its tape never reset) must not leave the
    cyclic collector paused for the tests after it (``tape.collector``)."""
    yield
    from tape import collector

    collector.step_ended()


@pytest.fixture(autouse=True)
def _autobatch_costs_forgotten():
    """``autobatch="auto"`` chooses by the costs earlier runs measured (``tape.autobatch_choice``):
    each test starts with none, so its first interpreted run autobatches, as a new model's does."""
    from tape import autobatch_choice

    autobatch_choice.reset()
    yield
