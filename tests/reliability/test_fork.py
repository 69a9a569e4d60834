"""A process forked after fluidtape ran on threads keeps working: its thread pools start afresh.

A child has none of its parent's threads; a pool the parent started (a lazy plan's on
``threads=2``, intra-op chunks of a large kernel) would take work no thread runs, and the child
would wait for good (as it did before the pools were forgotten at fork). The parent is a fresh
interpreter, not the test process, whose other threads (JAX's, the distributed tests') would make
the fork itself unsafe.
"""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")

SCRIPT = textwrap.dedent(
    """
    import os
    import numpy as np
    import ops, tape
    from ops import intra_op

    def threaded_work():
        rng = np.random.default_rng(0)
        w = tape.Variable(rng.standard_normal((64, 64)).astype(np.float32))
        with tape.lazy(threads=2):
            branches = [ops.tanh(w @ w * float(k)) for k in range(4)]
            total = float(ops.stack(branches).sum().numpy())
        big = rng.standard_normal((intra_op.MIN_ELEMENTS // 512, 512)).astype(np.float32)
        assert intra_op.fan_out(big) > 1
        split = float(intra_op.ufunc(np.tanh, np.empty_like(big), big).sum())
        return total, split

    expected = threaded_work()  # the parent's pools exist now
    pid = os.fork()
    if pid == 0:
        os._exit(0 if threaded_work() == expected else 3)
    _, status = os.waitpid(pid, 0)
    raise SystemExit(os.waitstatus_to_exitcode(status))
    """
)


def test_a_forked_child_runs_thread_pools_of_its_own():
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2")
    parent = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # (its own process group: a hung child is killed with it)
    )
    try:
        _, err = parent.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.communicate()
        pytest.fail("the forked child hung on a thread pool of its parent")
    assert parent.returncode == 0, err
