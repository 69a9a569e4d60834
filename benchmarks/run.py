"""The benchmark command: ``python -m benchmarks`` or ``python benchmarks/run.py`` prints one table.

Each workload is a module (``benchmarks/<name>.py``) with ``IMPLEMENTATIONS``, a dict of
name -> ``setup(config, data)`` returning a step callable; adding an implementation (say
"fluidtape lazy") is one entry there. The implementations of a workload are timed round-robin
after warm-up, each in a worker process of its own (``benchmarks.isolated`` says why;
``--shared-process`` times them all in this one, as ``--profile`` does).

    python -m benchmarks --only overhead,mlp --reps 5
    python -m benchmarks --only lstm --impls fluidtape,torch
    python -m benchmarks --only mlp --profile fluidtape
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import WORKLOADS  # noqa: E402


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--only",
        default=",".join(WORKLOADS),
        help=f"comma-separated workloads (default: all of {', '.join(WORKLOADS)})",
    )
    parser.add_argument(
        "--impls", default=None, help="comma-separated implementations to keep (default: all)"
    )
    parser.add_argument("--reps", type=int, default=9, help="timed blocks per implementation")
    parser.add_argument("--block", type=float, default=0.25, help="seconds per timed block")
    parser.add_argument("--warmup", type=float, default=0.5, help="warm-up seconds per impl")
    parser.add_argument(
        "--pause",
        type=float,
        default=0.2,
        help="seconds of sleep before each block (lets thread pools idle)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="BLAS/OpenMP/torch threads for every library (default: all cores)",
    )
    parser.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="per workload, wait up to SECONDS in all for other processes to "
        "leave the cores idle: before starting, and to redo disturbed blocks",
    )
    parser.add_argument(
        "--lazy",
        action="store_true",
        help="also time fluidtape in lazy mode (fluidtape-lazy: tape.lazy(), plan cache warm)",
    )
    parser.add_argument(
        "--tiny", action="store_true", help="tiny sizes (checks the harness; no verdicts)"
    )
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument(
        "--shared-process",
        action="store_true",
        help="time every implementation in this one process (default: each in its own)",
    )
    parser.add_argument(
        "--profile",
        metavar="IMPL",
        help="instead of timing, cProfile IMPL on each workload and print it",
    )
    return parser.parse_args(argv)


def load(name):
    if name not in WORKLOADS:
        raise SystemExit(f"unknown workload {name!r}; valid: {', '.join(WORKLOADS)}")
    return importlib.import_module(f"benchmarks.{name}")


def setups(workload, config, wanted, lazy=False):
    """{name: setup} of the implementations to time: those ``wanted`` (None: all) that the
    config does not skip; ``lazy`` adds fluidtape's lazy-mode variant after fluidtape."""
    from benchmarks.bench_lazy import lazy_variant

    found = {}
    for name, setup in workload.IMPLEMENTATIONS.items():
        found[name] = setup
        if lazy and name == "fluidtape":
            found["fluidtape-lazy"] = lazy_variant(setup)
    return {
        name: setup
        for name, setup in found.items()
        if (wanted is None or name in wanted) and name not in config.get("skip", ())
    }


def build(workload, config, wanted, lazy=False):
    """{name: step} for the implementations that can run, and notes on those that cannot
    (``setups`` says which)."""
    from benchmarks.common import Unavailable

    data = workload.make_data(config)
    steps, notes = {}, []
    for name, setup in setups(workload, config, wanted, lazy).items():
        try:
            steps[name] = setup(config, data)
        except Unavailable as why:
            notes.append(f"{workload.NAME}/{name} skipped: {why}")
    return steps, notes


def configurations(workload, tiny=False):
    """(label, config) pairs to time: the workload's ``CONFIGS`` where it has several (a
    config's "reps" caps the timed blocks, its "skip" lists implementations not timed there),
    else its DEFAULT; TINY with ``tiny``."""
    if tiny:
        return [(workload.NAME, workload.TINY)]
    configs = getattr(workload, "CONFIGS", None)
    if configs is None:
        return [(workload.NAME, workload.DEFAULT)]
    return [(f"{workload.NAME} {label}", config) for label, config in configs]


def _profile(workload, name, step, args):
    from benchmarks import harness, kernels

    seconds = max(args.block * args.reps, 1.0)
    print(f"== {workload.NAME} / {name}: {workload.TITLE}")
    if name.startswith("fluidtape"):
        print(kernels.kernel_profile(step, seconds), end="\n\n")
    print(harness.profile(step, seconds))


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from benchmarks import harness  # imports nothing heavy; numpy comes after the thread setup

    harness.set_threads(args.threads)
    from benchmarks import isolated, report

    options = harness.Options(args.reps, args.block, args.warmup, args.pause, args.wait_idle)
    wanted = set(args.impls.split(",")) if args.impls else None
    table, notes = [], []
    for name in args.only.split(","):
        workload = load(name.strip())
        for label, config in configurations(workload, args.tiny):
            reps = dataclasses.replace(
                options,
                reps=min(options.reps, config.get("reps", 99)),
                warmup=max(options.warmup, getattr(workload, "WARMUP", 0.0)),
                warmups={} if args.tiny else getattr(workload, "WARMUPS", {}),
            )
            if args.profile or args.shared_process:
                steps, skipped = build(workload, config, wanted, args.lazy)
                notes += skipped
            if args.wait_idle > 0:
                harness.wait_until_idle(args.wait_idle)
            if args.profile:
                if args.profile in steps:
                    _profile(workload, args.profile, steps[args.profile], args)
                continue
            print(f"measuring {label}: {workload.TITLE} ...", file=sys.stderr, flush=True)
            if args.shared_process:
                measured = harness.measure(steps, reps)
            else:
                names = list(setups(workload, config, wanted, args.lazy))
                measured, skipped = isolated.measure(
                    name.strip(), config, names, args.lazy, reps, args.threads
                )
                notes += skipped
            table += report.rows(workload, config, measured, args.tiny, label)
    if not args.profile:
        print(report.environment(args.threads))
        print(report.format_table(table, markdown=args.markdown))
        print("others: cores other processes kept busy during the timed blocks (want ~0)")
        if args.tiny:
            print("tiny sizes (--tiny): this checks the harness; the times judge nothing")
    for note in notes:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
