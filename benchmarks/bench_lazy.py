"""Lazy-mode variants of the workloads: the same user code run under ``tape.lazy()``.

``lazy_variant(setup)`` turns a workload's ``setup_fluidtape`` into a setup whose step records
the whole iteration lazily and runs it as one cached plan when the step returns (leaving the
``lazy()`` block runs what the user holds -- the loss and the gradients -- and the updates).
The harness registers it as one more implementation::

    from benchmarks.bench_lazy import lazy_variant
    IMPLEMENTATIONS["fluidtape-lazy"] = lazy_variant(setup_fluidtape)

Run standalone, this module times eager fluidtape, lazy fluidtape and PyTorch on the overhead
and lstm workloads with the shared harness (plan cache warm after the warm-up)::

    python -m benchmarks.bench_lazy [--only overhead,lstm] [--reps 9] [--threads N]
                                    [--wait-idle SECONDS] [--exact]

``--exact`` adds ``fluidtape-exact``: lazy mode without the rewrites that reorder sums
(``tape.lazy(exact=True)``), to show what the product batching is worth.
"""

from __future__ import annotations

import argparse
import importlib


def lazy_variant(setup, threads="auto", exact=False):
    """A setup running ``setup``'s step in lazy mode (``threads``: lazy mode's default "auto",
    or a count, > 1 on a thread pool; ``exact``: without the rewrites that reorder
    floating-point sums)."""

    def setup_lazy(config, data):
        import tape

        step = setup(config, data)

        def fluidtape_lazy_step():
            with tape.lazy(threads=threads, exact=exact):
                return step()

        return fluidtape_lazy_step

    setup_lazy.__doc__ = f"{setup.__doc__ or 'fluidtape'} (lazy mode, cached plan)"
    return setup_lazy


def implementations(workload, exact=False):
    """The workload's fluidtape and torch setups plus the lazy variant(s), by name."""
    found = {
        name: workload.IMPLEMENTATIONS[name]
        for name in ("fluidtape", "torch")
        if name in workload.IMPLEMENTATIONS
    }
    if "fluidtape" in found:
        found["fluidtape-lazy"] = lazy_variant(workload.IMPLEMENTATIONS["fluidtape"])
        if exact:
            found["fluidtape-exact"] = lazy_variant(
                workload.IMPLEMENTATIONS["fluidtape"], exact=True
            )
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="overhead,lstm")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        help="per workload, wait up to this many seconds for idle cores",
    )
    parser.add_argument("--exact", action="store_true", help="also time lazy mode exact=True")
    args = parser.parse_args(argv)
    from benchmarks import harness

    harness.set_threads(args.threads)
    for name in args.only.split(","):
        workload = importlib.import_module(f"benchmarks.{name}")
        config = dict(workload.DEFAULT)
        data = workload.make_data(config)
        steps = {
            impl: setup(config, data)
            for impl, setup in implementations(workload, args.exact).items()
        }
        results = harness.measure(steps, harness.Options(reps=args.reps, wait_idle=args.wait_idle))
        scale = workload.scale(config)
        torch = next((m.median for m in results if m.name == "torch"), None)
        print(f"{workload.TITLE} ({workload.UNIT})")
        for m in results:
            ratio = f"  {m.median / torch:.2f}x torch" if torch else ""
            others = f"  others {m.others:.2f}" if m.others is not None else ""
            print(f"  {m.name:16s} {m.median * scale:9.2f}{ratio}{others}")


if __name__ == "__main__":
    main()
