"""The library's own thread pools (a lazy plan's helpers, intra-op chunks), one per purpose and
size, started on first use and renewed in a forked child.

A child has none of its parent's threads: a pool the parent started would take work no thread
runs, and the caller would wait for good (``tests/reliability/test_fork.py``).
"""

from __future__ import annotations

import concurrent.futures
import os
import threading

_pools = {}
_lock = threading.Lock()


def pool(name, helpers):
    """The pool of ``helpers`` threads named ``fluidtape-<name>``."""
    key = (name, helpers)
    with _lock:
        found = _pools.get(key)
        if found is None:
            found = _pools[key] = concurrent.futures.ThreadPoolExecutor(
                helpers, thread_name_prefix=f"fluidtape-{name}"
            )
        return found


def _forget():
    global _lock
    _pools.clear()
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)


__all__ = ["pool"]
