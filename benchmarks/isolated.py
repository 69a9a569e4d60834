"""Each implementation of a workload timed in a process of its own, still round-robin.

Why: in one shared process the implementations' arrays live in one heap, and each one's memory
changes what the allocator does for the others. Measured on ``cnn``: plain numpy alone in a
process takes 17-22 ms a step, most of it page faults (glibc gives freed large blocks back to
the system, and the next step faults them in again: with ``MALLOC_TOP_PAD_=200000000`` the same
process takes 9-14 ms); in the shared process, after PyTorch's and fluidtape's steps, it took
8.8-13.7 ms, as other implementations' live arrays keep the heap from shrinking. A user runs one
of them per process, so that is how each is timed here; the parent process only sends commands
("warm up", "time a block") to one worker at a time, in the same round-robin order as
``harness.measure``, so slow drifts of the machine still reach every implementation alike.

Workers start with the ``spawn`` method (no state inherited from this process) and build their
step as ``benchmarks.run.build`` does in-process; ``python -m benchmarks --shared-process``
times them all in one process instead.
"""

from __future__ import annotations

import multiprocessing
import traceback

from benchmarks import harness


def measure(workload, config, names, lazy, options, threads):
    """(measurements, notes) of the implementations ``names`` of workload ``workload`` (its
    name) at ``config``, each in its own worker process; ``lazy`` adds fluidtape-lazy as
    ``run.build`` does; notes say which implementations could not run."""
    context = multiprocessing.get_context("spawn")
    workers, notes = {}, []
    try:
        for name in names:
            parent, child = context.Pipe()
            process = context.Process(
                target=_serve,
                args=(child, workload, config, name, lazy, threads),
                daemon=True,
            )
            process.start()
            child.close()
            workers[name] = (process, parent)
        ready = []
        for name, (_, conn) in workers.items():
            status, detail = _receive(conn, name)
            if status == "ready":
                ready.append(name)
            else:
                notes += detail
        if not ready:
            return [], notes

        def warm(name, seconds):
            return _ask(workers[name][1], name, ("warmup", seconds))

        def block(name, count, pause):
            return _ask(workers[name][1], name, ("block", count, pause))

        return harness.round_robin(ready, warm, block, options), notes
    finally:
        for process, conn in workers.values():
            try:
                conn.send(("stop",))
            except (BrokenPipeError, OSError):
                pass
            conn.close()
            process.join(timeout=10)
            if process.is_alive():
                process.kill()


def _ask(conn, name, command):
    conn.send(command)
    return _receive(conn, name)[1]


def _receive(conn, name):
    try:
        status, detail = conn.recv()
    except EOFError:
        raise RuntimeError(f"the worker timing {name!r} died") from None
    if status == "error":
        raise RuntimeError(f"the worker timing {name!r} failed:\n{detail}")
    return status, detail


def _serve(conn, workload, config, name, lazy, threads):
    """A worker: builds implementation ``name`` and answers commands until "stop"."""
    try:
        harness.set_threads(threads)  # (before numpy is imported here)
        from benchmarks import run

        steps, notes = run.build(run.load(workload), config, {name}, lazy)
        if name not in steps:
            conn.send(("unavailable", notes))
            return
        step = steps[name]
        conn.send(("ready", None))
        while True:
            command, *args = conn.recv()
            if command == "warmup":
                conn.send(("done", harness.warm_up(step, *args)))
            elif command == "block":
                conn.send(("done", harness.timed_block(step, *args)))
            else:
                return
    except Exception:  # (reported by the parent, which raises it)
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


__all__ = ["measure"]
