"""Fixtures of the scheduler's tests."""

import importlib

import pytest


@pytest.fixture
def structures_forgotten():
    """Lazy mode meets every tape structure of the test for the first time: the backward
    templates, structures seen and those that batched well are forgotten before and after."""
    from tape import replay

    lazy_module = importlib.import_module("tape.lazy")  # (tape.lazy is the context manager)
    for forget in (replay.forget, lazy_module._SEEN.clear, lazy_module._BATCHED.clear):
        forget()
    yield
    replay.forget()
