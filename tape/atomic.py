"""Atomic file writes: a new file beside the target, fsynced, then renamed over it.

A crash or an exception at any point leaves either the previous file or the complete new one,
never a torn one; the temporary file is removed on failure. Checkpoints, inference programs and
the ``save`` op all write through ``write_atomic``.
"""

from __future__ import annotations

import contextlib
import os
import uuid


def write_atomic(path, write):
    """Calls ``write(file)`` on a fresh file beside ``path``, then renames it over ``path``."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    temp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    with contextlib.suppress(OSError):  # make the rename durable where directories sync
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


__all__ = ["write_atomic"]
