"""Running ``mpiexec -n N python worker.py ...`` from pytest, with a time limit; skipping with the
reason when mpi4py or mpiexec is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def mpiexec():
    """The mpiexec beside this Python (the mpich wheel's) or on PATH; skips the test without
    it or without mpi4py."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip('mpi4py is not installed (pip install -e ".[dist]")')
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = beside if os.path.exists(beside) else shutil.which("mpiexec")
    if found is None:
        pytest.skip('mpiexec is not installed (pip install -e ".[dist]" brings mpich)')
    return found


def run(ranks, *args, timeout=60, env=None, script=WORKER):
    """Runs ``script`` (the worker) on ``ranks`` processes; returns the CompletedProcess (never
    hangs past ``timeout`` seconds: the job is killed and the test fails)."""
    command = [mpiexec(), "-n", str(ranks), sys.executable, script, *map(str, args)]
    environ = dict(os.environ, PYTHONPATH=ROOT)
    environ.update(env or {})
    try:
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=environ, cwd=ROOT
        )
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"mpiexec -n {ranks} {' '.join(map(str, args))} hung for {timeout} s: {err}")


def check(done):
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def params(path, rank):
    with np.load(f"{path}.rank{rank}.npz") as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]
