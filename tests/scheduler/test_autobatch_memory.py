"""An autobatched lazy run frees what it computes as soon as nothing reads it any more."""

import tracemalloc

import numpy as np

import ops
import tape
from tape.passes import autobatch

N = 1 << 18  # float64: 2 MiB per example value
STEPS = 8


def _tanhs(x):
    for _ in range(STEPS):
        x = np.tanh(x)
    return x


def test_an_autobatched_run_frees_each_value_after_its_last_reader():
    examples = max(2, autobatch.MIN_GROUP)
    starts = [np.full(N, 0.1 * (k + 1)) for k in range(examples)]
    xs = [tape.Variable(start) for start in starts]
    with tape.lazy(compile=False):
        tape.reset_global_tape()
        total = None
        for x in xs:  # independent examples: each step's tanh ops run as one batched call
            h = x
            for _ in range(STEPS):
                h = ops.tanh(h)
            total = h.sum() if total is None else total + h.sum()
        tracemalloc.start()
        value = float(total.numpy())  # one run
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert f"batched tanh x{examples}" in tape.explain()
    np.testing.assert_allclose(value, sum(float(np.sum(_tanhs(s))) for s in starts), rtol=1e-12)
    # kept to the end, the run's values would take examples x STEPS x 2 MiB
    assert peak < 4 * examples * 8 * N, f"peak {peak / 2**20:.0f} MiB"
