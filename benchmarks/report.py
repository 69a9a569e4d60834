"""The comparison table: median, min-max and the ratio of medians against each peer."""

from __future__ import annotations

import platform
from importlib import metadata

PEERS = ("numpy", "torch", "autograd")


def rows(workload, config, measurements, tiny=False, name=None):
    """One row per implementation: times in the workload's unit, ratios, and the target check
    (none for ``tiny`` sizes, which only check the harness: their times say nothing);
    ``name``: the workload column (default: the workload's NAME)."""
    factor = workload.scale(config)
    medians = {m.name: m.median for m in measurements}
    table = []
    for m in measurements:
        row = {
            "workload": name or workload.NAME,
            "implementation": m.name,
            "median": f"{m.median * factor:.3g}",
            "min-max": f"{min(m.times) * factor:.3g}-{max(m.times) * factor:.3g}",
            "unit": workload.UNIT,
        }
        for peer in PEERS:
            ok = peer in medians and peer != m.name
            row[f"/{peer}"] = f"{m.median / medians[peer]:.2f}x" if ok else ""
        row["others"] = f"{m.others:.2f}" if m.others is not None else "?"
        row["target"] = "(tiny: no verdict)" if tiny else _target(workload, m, medians)
        table.append(row)
    return table


def _target(workload, measurement, medians):
    """The verdict on a fluidtape row: lazy mode has its own target where a workload sets
    ``LAZY_TARGET``, and none otherwise; ``TARGETS`` ({implementation: (peer, limit)}) sets
    one for any implementation by name."""
    if not measurement.name.startswith("fluidtape"):
        return ""
    lazy = measurement.name.endswith("-lazy")
    target = getattr(workload, "TARGETS", {}).get(measurement.name)
    if target is None:
        target = getattr(workload, "LAZY_TARGET", None) if lazy else workload.TARGET
    if target is None:
        return ""
    peer, limit = target
    if peer not in medians:
        return ""
    ratio = measurement.median / medians[peer]
    verdict = "met" if ratio <= limit else "MISSED"
    return f"<= {limit:g}x {peer}: {verdict}"


def format_table(table, markdown=False):
    """The rows as an aligned text table, or as a Markdown table."""
    if not table:
        return "(nothing measured)"
    columns = list(table[0])
    if markdown:
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(row[c] for c in columns) + " |" for row in table]
        return "\n".join(lines)
    widths = [max(len(c), *(len(row[c]) for row in table)) for c in columns]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    previous = None
    for row in table:
        if previous is not None and row["workload"] != previous:
            lines.append("")
        previous = row["workload"]
        cells = (row[c].ljust(w) for c, w in zip(columns, widths, strict=True))
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def environment(threads):
    """One line naming the interpreter, the libraries' versions and the thread count."""
    import numpy

    parts = [f"python {platform.python_version()}", f"numpy {numpy.__version__}"]
    for name in ("torch", "autograd"):
        try:
            parts.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{name} not installed")
    parts.append(f"{threads} threads")
    return ", ".join(parts)
