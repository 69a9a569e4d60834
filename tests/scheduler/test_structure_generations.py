"""The structure numbering's interned forms live in two generations (tape.structure): a
structure that keeps repeating keeps its ids, so its cached plan stays reachable while tapes of
new structures come and go."""

import sys

import numpy as np

import ops
import tape
from tape import structure


def _chain(length, p):
    h = tape.Variable(np.ones(3))
    for _ in range(length):
        h = ops.tanh(h * p)
    return h


def test_a_repeated_structure_keeps_its_plan_while_fresh_structures_outgrow_the_tables(
    monkeypatch,
):
    lazy_module = sys.modules["tape.lazy"]
    compiles = []
    compile_trace = lazy_module.compile_trace

    def counted(*args, **kwargs):
        compiles.append(1)
        return compile_trace(*args, **kwargs)

    monkeypatch.setattr(lazy_module, "compile_trace", counted)
    monkeypatch.setattr(structure, "_LIMIT", 40)
    p = tape.Variable(np.full(3, 0.5))

    def run(length):
        with tape.lazy(autobatch=False):
            tape.reset_global_tape()
            value = _chain(length, p).numpy().copy()
            ran_a_plan = tape.explain().startswith("ops kept")  # (not interpreted)
        return value, ran_a_plan

    want, _ = run(5)
    assert run(5)[1] and len(compiles) == 1  # seen twice: compiled
    for length in range(20, 60):  # fresh structures: far more forms than the limit
        run(length)
        value, ran_a_plan = run(5)
        assert ran_a_plan  # the cached plan still found
        np.testing.assert_array_equal(value, want)
    assert len(compiles) == 1  # (each fresh length runs once: interpreted)
    assert len(structure._OPS) + len(structure._OLD_OPS) <= 2 * (40 + 4 * 200)
