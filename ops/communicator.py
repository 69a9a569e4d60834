"""Communicators for the collective ops: MPI groups (mpi4py), their timeout, and aborting a job.

The collective ops name their group by ``ring_id`` (an attribute, as in Paddle's ``c_*`` ops):
ring 0 is the world -- every process ``mpiexec`` started -- and ``register`` adds others (a split
of the world, or a test double). Every wait polls a non-blocking MPI request against the
communicator's ``timeout`` (default 300 s, or the FLUIDTAPE_COMM_TIMEOUT environment variable), so
a rank that never arrives is reported as a ``CollectiveTimeout`` naming the operation, instead of
a hang. In a world of more than one process an uncaught exception on any rank prints that rank's
traceback and aborts the whole job (``MPI.COMM_WORLD.Abort``): the other ranks never wait forever
for it. Without mpi4py (and without a launcher) the world is this process alone.

Arrays on the GPU are handed to MPI directly when ``cuda_aware`` is set (a CUDA-aware MPI reads
device memory), and are staged through host memory otherwise; NCCL would sit behind the same
methods.

    >>> from ops import communicator
    >>> world = communicator.world()
    >>> world.rank, world.size  # one process, not started by mpiexec
    (0, 1)
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback

import numpy as np

from tape.errors import FluidError

_LAUNCHER_SIZE = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")


class DistributedError(FluidError, RuntimeError):
    """A collective that cannot run: no MPI, a bad peer, or a mismatch between ranks."""


class CollectiveTimeout(DistributedError, TimeoutError):
    """A collective or point-to-point transfer did not complete within the timeout."""


SPIN = 0.01  # seconds a wait polls without sleeping
ABORT_GRACE_SECONDS = 0.5  # a failing rank waits this long for mpiexec to forward its traceback


def default_timeout():
    return float(os.environ.get("FLUIDTAPE_COMM_TIMEOUT", "300"))


class Communicator:
    """A group of processes the collective ops reduce over (an mpi4py communicator, or None for
    this process alone).

    Args:
        comm: an ``mpi4py.MPI.Comm``; None for a group of one.
        timeout: seconds any one transfer may take before ``CollectiveTimeout``.
        cuda_aware: hand GPU arrays to MPI directly (else copy through the host).
    """

    def __init__(self, comm=None, timeout=None, cuda_aware=False):
        self.comm = comm
        self.rank = 0 if comm is None else comm.Get_rank()
        self.size = 1 if comm is None else comm.Get_size()
        self.timeout = default_timeout() if timeout is None else float(timeout)
        self.cuda_aware = bool(cuda_aware)

    def __repr__(self):
        return f"Communicator(rank={self.rank}, size={self.size}, timeout={self.timeout})"

    # -- collectives -----------------------------------------------------------------------------

    def allreduce_sum(self, xp, arrays, what="c_allreduce_sum"):
        """The element-wise sums over the group of each array; arrays of one dtype travel as one
        message (a bucket)."""
        if self.size == 1:
            return [a.copy() for a in arrays]
        out = [None] * len(arrays)
        for dtype in dict.fromkeys(a.dtype for a in arrays):
            group = [i for i, a in enumerate(arrays) if a.dtype == dtype]
            parts = [arrays[i].reshape(-1) for i in group]
            flat = parts[0] if len(parts) == 1 else xp.concatenate(parts)
            total = self._from_host(xp, self._reduce(xp, flat, what))
            start = 0
            for i in group:
                size = arrays[i].size
                out[i] = total[start : start + size].reshape(arrays[i].shape)
                start += size
        return out

    def _reduce(self, xp, flat, what):
        send = self._to_host(xp, flat)
        received = np.empty_like(send) if send.__class__ is np.ndarray else xp.empty_like(send)
        from mpi4py import MPI

        self.wait(self.comm.Iallreduce(send, received, op=MPI.SUM), what)
        return received

    def broadcast(self, xp, array, root, what="c_broadcast"):
        """``array`` as ``root`` holds it, on every rank."""
        self._check_peer(root, what, "root")
        if self.size == 1:
            return array.copy()
        buffer = self._to_host(xp, array).copy()
        self.wait(self.comm.Ibcast(buffer, root=root), what)
        return self._from_host(xp, buffer)

    def allgather(self, xp, array, what="c_allgather"):
        """Every rank's ``array`` concatenated along axis 0, in rank order."""
        if self.size == 1:
            return array.copy()
        send = self._to_host(xp, array)
        received = np.empty((self.size,) + send.shape, send.dtype)
        self.wait(self.comm.Iallgather(send, received), what)
        received = received.reshape((self.size * array.shape[0],) + array.shape[1:])
        return self._from_host(xp, received)

    def send(self, xp, array, peer, tag, what="send"):
        self._check_peer(peer, what, "peer")
        self.wait(self.comm.Isend(self._to_host(xp, array), dest=peer, tag=tag), what)

    def recv(self, xp, shape, dtype, peer, tag, what="recv"):
        self._check_peer(peer, what, "peer")
        buffer = np.empty(shape, dtype)
        self.wait(self.comm.Irecv(buffer, source=peer, tag=tag), what)
        return self._from_host(xp, buffer)

    def barrier(self):
        if self.size > 1:
            self.wait(self.comm.Ibarrier(), "barrier")

    def broadcast_object(self, value, root=0):
        """A small picklable Python value (a seed, a path) from ``root`` to every rank."""
        return value if self.size == 1 else self.comm.bcast(value, root=root)

    # -- waiting ---------------------------------------------------------------------------------

    def wait(self, request, what):
        """Polls ``request`` until it completes; CollectiveTimeout after ``timeout`` seconds.

        Polling drives MPI's progress (over shared memory the polling rank does the copying), so
        it polls without pause for ``SPIN`` seconds; a rank still waiting then is waiting for a
        slower one, and sleeps between polls (up to 1 ms), leaving the core to the computation.
        """
        if request.Test():
            return
        start = time.monotonic()
        spin_until, deadline, pause = start + SPIN, start + self.timeout, 2e-5
        while not request.Test():
            now = time.monotonic()
            if now > spin_until:
                time.sleep(pause)
                pause = min(pause * 1.5, 1e-3)
            if now > deadline:
                raise CollectiveTimeout(
                    what,
                    f"did not complete within {self.timeout:g} s on rank {self.rank} of "
                    f"{self.size}",
                    hint="a rank never arrived: it crashed, hangs or took another branch "
                    "(set the timeout with FLUIDTAPE_COMM_TIMEOUT or Communicator(timeout=...))",
                )

    def _check_peer(self, peer, what, role):
        if not 0 <= peer < self.size:
            raise DistributedError(
                what,
                f"{role} rank is outside the group",
                expected=f"0 <= {role} < {self.size}",
                actual=str(peer),
            )

    def _to_host(self, xp, array):
        if xp is np:
            return np.ascontiguousarray(array)
        if hasattr(xp, "cuda"):  # MPI reads device memory outside the stream
            xp.cuda.get_current_stream().synchronize()
        return xp.ascontiguousarray(array) if self.cuda_aware else xp.asnumpy(array)

    def _from_host(self, xp, array):
        return array if xp is np or self.cuda_aware else xp.asarray(array)


_RINGS = {}
_LOCK = threading.Lock()


def world() -> Communicator:
    """Ring 0: every process of the job (MPI_COMM_WORLD), created on first use."""
    with _LOCK:
        ring = _RINGS.get(0)
        if ring is None:
            ring = _RINGS[0] = Communicator(_mpi_world())
            if ring.size > 1:
                abort_on_uncaught_exceptions()
        return ring


def _mpi_world():
    try:
        from mpi4py import MPI
    except ImportError:
        launched = next((os.environ[k] for k in _LAUNCHER_SIZE if k in os.environ), "1")
        if launched != "1":
            raise DistributedError(
                None,
                f"this process was started as one of {launched} by an MPI launcher, but mpi4py "
                "is not installed",
                hint='pip install -e ".[dist]"',
            ) from None
        return None
    return MPI.COMM_WORLD


def register(comm, ring_id=None) -> int:
    """Makes ``comm`` (a Communicator) available to the ops as ``ring_id`` (the next free id by
    default); returns the id."""
    with _LOCK:
        if ring_id is None:
            ring_id = max(_RINGS, default=0) + 1
        _RINGS[int(ring_id)] = comm
    return int(ring_id)


def get(ring_id) -> Communicator:
    """The communicator of ``ring_id`` (ring 0, the world, is created on first use)."""
    if ring_id == 0:
        return world()
    try:
        return _RINGS[ring_id]
    except KeyError:
        raise DistributedError(
            None,
            f"no communicator is registered as ring {ring_id}",
            hint="ring 0 is the world; ops.communicator.register adds others",
        ) from None


def set_timeout(seconds, ring_id=0):
    """Sets how long a transfer on ``ring_id`` may wait for the other ranks."""
    get(ring_id).timeout = float(seconds)


def abort_on_uncaught_exceptions():
    """An uncaught exception (in any thread) prints ``[rank r]`` and its traceback, then aborts
    every process of the job, so no rank waits forever for one that died."""
    previous = sys.excepthook

    def abort(kind, value, trace):
        rank = _RINGS[0].rank if 0 in _RINGS else "?"
        text = "".join(traceback.format_exception(kind, value, trace))
        sys.stderr.write("".join(f"[rank {rank}] {line}\n" for line in text.splitlines()))
        sys.stderr.flush()
        if kind is KeyboardInterrupt:
            previous(kind, value, trace)
        from mpi4py import MPI

        # mpiexec forwards a rank's output asynchronously, and Abort tears the job down at once:
        # without a moment's grace the traceback was lost in ~1 of 6 runs (measured here).
        time.sleep(ABORT_GRACE_SECONDS)
        MPI.COMM_WORLD.Abort(1)

    sys.excepthook = abort
    threading.excepthook = lambda args: abort(args.exc_type, args.exc_value, args.exc_traceback)


__all__ = [
    "Communicator",
    "CollectiveTimeout",
    "DistributedError",
    "world",
    "register",
    "get",
    "set_timeout",
    "abort_on_uncaught_exceptions",
]
