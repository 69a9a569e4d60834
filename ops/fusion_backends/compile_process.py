"""numba compiles in a separate low-priority process, so that a program never waits for one.

A fused group moves from numpy to a numba kernel once it has run often enough to pay for the
compile (``ops.fused``). Compiled in the program's own process, that compile stalls the program
for 0.3-2.5 s per kernel structure. On a thread beside it, the stall is no shorter: numba's
compiler holds the interpreter lock, and the main thread's small numpy ops were measured 5x
slower while it ran (benchmarks/HISTORY.md, stop 32). So the compile runs in a child
process. The child compiles the kernel's generated module into the on-disk kernel cache
(``fusion_backends.kernel_cache``) and replies. The program goes on in numpy until the reply
arrives, then loads the machine code from disk, which takes milliseconds.

The child is ``python -m ops.fusion_backends.compile_process``. It is started at the first
request and runs at the lowest CPU priority (``os.nice``). It ends when the program does: killed
at exit (``stop``), or when its standard input closes. It reads one JSON request a line: the
generated source, whether libm is vectorised and the loop parallel, and the argument types
(``numba_loops.request``). It writes one JSON reply a line: the request's key and whether it
compiled. A child that cannot start or that dies fails every request still pending, and later
ones fail at once. A failed request leaves its group to the in-process rule of ``ops.fused``.
While it compiles the child takes a core, at the lowest priority, and while it lives ~170 MiB
resident (Python, numpy, numba and LLVM). ``FLUIDTAPE_COMPILE_PROCESS=0`` switches it off:
kernels then compile in the program, as before. It is also off where the kernel cache is off
(the child could not hand the code over).
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import sys
import threading

PENDING, READY, FAILED = "pending", "ready", "failed"


def enabled():
    """Whether requests go to a compile process (the setting, and a kernel cache to share)."""
    from ops.fusion_backends import kernel_cache

    if os.environ.get("FLUIDTAPE_COMPILE_PROCESS", "1") in ("0", ""):
        return False
    return kernel_cache.directory() is not None


class _Child:
    """The compile process and what it was asked: key -> PENDING, READY or FAILED. Requests
    are written by a thread of their own: a pipe full of requests while the child compiles
    blocks that thread, never the program."""

    def __init__(self):
        self.pid = os.getpid()  # (a forked copy of this object must not write to the pipe)
        self.states = {}
        self.lock = threading.Lock()
        self.process = None
        self.requests = queue.SimpleQueue()
        self.dead = False

    def submit(self, key, request):
        with self.lock:
            if key in self.states:
                return
            if self.dead or not self._start():
                self.states[key] = FAILED
                return
            self.states[key] = PENDING
        self.requests.put(json.dumps(dict(request, key=key)) + "\n")

    def _start(self):
        if self.process is not None:
            return True
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.environ.get("PYTHONPATH")
        env = dict(os.environ, PYTHONPATH=root + (os.pathsep + path if path else ""))
        env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "ops.fusion_backends.compile_process"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                text=True,
            )
        except OSError:
            self.dead = True
            return False
        atexit.register(stop, wait=False)
        threading.Thread(target=self._write, args=(self.process,), daemon=True).start()
        threading.Thread(target=self._read, args=(self.process,), daemon=True).start()
        return True

    def _write(self, process):
        while True:
            line = self.requests.get()
            try:
                if line is None:
                    process.stdin.close()
                    return
                process.stdin.write(line)
                process.stdin.flush()
            except (OSError, ValueError):
                with self.lock:
                    self._died()
                return

    def _read(self, process):
        for line in process.stdout:
            try:
                reply = json.loads(line)
                state = READY if reply["ok"] else FAILED
                with self.lock:
                    self.states[reply["key"]] = state
            except (ValueError, KeyError, TypeError):
                continue
        with self.lock:
            self._died()

    def _died(self):
        """(the lock held) The child is gone: what it was still asked fails."""
        self.dead = True
        for key, state in self.states.items():
            if state == PENDING:
                self.states[key] = FAILED


_child = [None]


def submit(key, request):
    """Asks the compile process to compile ``request`` (see the module docstring) under
    ``key`` (its kernel cache key); a key asked for before is not asked again."""
    child = _child[0]
    if child is None or child.pid != os.getpid():
        child = _child[0] = _Child()
    child.submit(key, request)


def state(key):
    """PENDING, READY (its machine code is in the kernel cache) or FAILED; None if never asked."""
    child = _child[0]
    if child is None or child.pid != os.getpid():
        return None
    return child.states.get(key)


def stop(wait=True):
    """Ends the compile process, if one runs (what it was still asked fails): after the
    requests it has (``wait``), else at once. At exit it is ended at once, so that no compile
    outlives the program (numba writes its cache files whole, so none is left half written)."""
    child, _child[0] = _child[0], None
    if child is None or child.process is None or child.pid != os.getpid():
        return
    if wait:
        child.requests.put(None)  # (its standard input closes after the requests before)
        try:
            child.process.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            pass
    child.process.kill()
    child.process.wait()


def main():
    """The compile process: compiles one request per line of standard input."""
    from ops.fusion_backends import numba_loops

    try:
        os.nice(19)
    except OSError:
        pass
    for line in sys.stdin:
        key, ok = None, False
        try:
            request = json.loads(line)
            key = request["key"]
            numba_loops.compile_request(request)
            ok = True
        except Exception:  # noqa: BLE001  (any failure is the request's: the program compiles it)
            pass
        if key is not None:
            sys.stdout.write(json.dumps({"key": key, "ok": ok}) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
