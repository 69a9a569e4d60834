"""The scheduler's pipeline: which passes run, in which order, and what they report.

    prune -> dependencies -> (batch_products -> batch_groups) -> (fusion -> broadcast_inputs
    -> rematerialise -> sibling_fusion) -> (dependencies) -> (fast_kernels) -> memory_plan
    -> plan -> (cache) -> execute

Rewrites of the pruned block (batching small products, ``batch_products``, first: a sum of
products is one product, which autobatching would gather in pieces; autobatching groups of
independent ops, ``batch_groups``, after which what no group reads any more is dropped, such as
the split of a joined product whose rows a group reads whole; elementwise fusion,
``fusion``, then across fused groups: reading broadcast sources, recomputing cheap values in
their readers, merging sibling groups; kernels equal to eager mode's within rounding,
``fast_kernels``) run when the plan is scheduled, because they must know
which variables the caller keeps; the dependencies are rebuilt for the rewritten block and
everything after it sees the new ops like any other. ``exact=True`` skips the rewrites that
reassociate sums (fusion then fuses only bit-exact elementwise chains, without trailing
reductions; recomputing, merging and reading broadcast sources stay: they give the same bits;
no fast kernels).
With
``debug`` (or the environment variable FLUIDTAPE_DEBUG=1) the IR is verified between passes and
each pass prints one line of statistics to stderr.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import typing

import numpy as np

from tape.passes import (
    batch_groups,
    batch_products,
    broadcast_inputs,
    dependencies,
    fast_kernels,
    fusion,
    memory_plan,
    plan,
    prune,
    rematerialise,
    sibling_fusion,
)
from tape.passes.block_edits import remove_dead

DEBUG = os.environ.get("FLUIDTAPE_DEBUG", "") not in ("", "0")
# Elementwise fusion on (FLUIDTAPE_FUSION=0 switches it off, e.g. to compare).
FUSION = os.environ.get("FLUIDTAPE_FUSION", "1") not in ("", "0")


@dataclasses.dataclass(frozen=True)
class Analysis:
    """What the passes found: the program before pruning, the prune result and the DAG."""

    source: object
    pruned: object
    deps: object


class Decisions(typing.NamedTuple):
    """What a plan was compiled from (``Plan.analysis``): the analysis, the memory plan, and the
    block and DAG after the rewrites (the analysed ones when nothing was rewritten)."""

    analysis: Analysis
    memory: object
    block: object
    deps: object


def analyse(program, targets=(), debug=None) -> Analysis:
    """Prune to ``targets`` (variable names; ops marked is_target) and build the op DAG."""
    debug = DEBUG if debug is None else debug
    pruned = prune.prune(program, targets)
    block = pruned.program.global_block()
    if debug:
        from tape.ir_text import validate

        validate(pruned.program)
        _report(
            "prune",
            f"{len(program.global_block().ops)} ops -> {len(block.ops)} ops "
            f"(targets: {len(targets)} variables, "
            f"{sum(op.is_target for op in program.global_block().ops)} ops)",
        )
    deps = dependencies.analyse(block)
    if debug:
        assert all(i < j for i, succ in enumerate(deps.edges) for j in succ), "edge points back"
        _report(
            "dependencies",
            f"{deps.edge_count(False)} edges -> {deps.edge_count()} after transitive reduction",
        )
    return Analysis(program, pruned, deps)


def schedule(
    analysis, keep=(), slot_of=None, slots=None, xp=np, debug=None, exact=False, batch=None
) -> plan.Plan:
    """Rewrites (unless ``exact``), the memory plan and the compiled Plan; ``keep`` names
    variables never to free; ``batch``: the autobatching heuristic (None: no autobatching).

    ``slot_of`` numbers the variables (default: the pruned block's declaration order); variables
    a rewrite introduces get slots after them and are never written back.
    """
    debug = DEBUG if debug is None else debug
    block, deps = analysis.pruned.program.global_block(), analysis.deps
    if not exact:
        rewritten = batch_products.rewrite(block, keep)
        if rewritten is not block:
            if debug:
                _report("batch_products", f"{len(block.ops)} ops -> {len(rewritten.ops)} ops")
            block, deps = rewritten, dependencies.analyse(rewritten)
    if not exact and batch:
        grouped = batch_groups.rewrite(block, keep, batch)
        if grouped is not block:
            # A group reading an earlier result whole (a joined product's, not the rows its
            # split made) leaves ops nothing reads: dropped, as batch_products drops its own.
            grouped = remove_dead(grouped, keep)
            if debug:
                _report("batch_groups", f"{len(block.ops)} ops -> {len(grouped.ops)} ops")
            block, deps = grouped, dependencies.analyse(grouped)
    if FUSION:
        fused = fusion.rewrite(block, keep, exact)
        fused = rematerialise.rewrite(broadcast_inputs.rewrite(fused), keep)
        fused = sibling_fusion.rewrite(fused)
        if fused is not block:
            if debug:
                _report("fusion", f"{len(block.ops)} ops -> {len(fused.ops)} ops")
            block, deps = fused, dependencies.analyse(fused)
    if not exact:
        block = fast_kernels.rewrite(block)  # (the same ops and wiring: deps stay valid)
    memory = memory_plan.plan_memory(block, deps, keep)
    if debug:
        _check_memory(memory, deps)
        _report(
            "memory_plan",
            f"{len(memory.refcount)} variables freed early, "
            f"{len(memory.users) - len(memory.refcount)} kept, "
            f"{len(memory.buffer_free_reads)} buffer-free reads",
        )
    if slot_of is None:
        slot_of = {name: i for i, name in enumerate(analysis.pruned.program.global_block().vars)}
        slots = len(slot_of)
    added = [name for name in block.vars if name not in slot_of]
    slot_of = {**slot_of, **{name: slots + i for i, name in enumerate(added)}}
    compiled = plan.build(
        block,
        deps,
        memory,
        slot_of,
        slots + len(added),
        xp,
        Decisions(analysis, memory, block, deps),
    )
    if added:
        compiled = dataclasses.replace(
            compiled, writeback=tuple(s for s in compiled.writeback if s < slots)
        )
    if debug:
        assert len(compiled.instructions) == len(block.ops)
        _report("plan", f"{len(compiled.instructions)} instructions over {compiled.slots} slots")
    return compiled


def rewritten(compiled) -> bool:
    """Whether a rewrite changed the plan's block (its results may then differ from eager mode
    by floating-point reassociation)."""
    decisions = compiled.analysis
    return decisions.block is not decisions.analysis.pruned.program.global_block()


def compile_program(program, targets=(), keep=(), debug=None, exact=False) -> plan.Plan:
    """All passes in order for a standalone program (slots in the pruned declaration order)."""
    return schedule(analyse(program, targets, debug), keep, debug=debug, exact=exact)


def _check_memory(memory, deps):
    for name, last in memory.last_users.items():
        users = memory.users[name]
        assert last and set(last) <= set(users), f"{name}: bad last users"
        for user in users:
            assert user in last or any(deps.happens_before(user, x) for x in last), (
                f"{name}: user {user} is not covered by a last user"
            )


def _operand(name, gathered, makers):
    """How a batched group reads one operand, for ``explain``."""
    if not gathered:
        return f"{name} shared"
    maker = makers.get(name)
    if maker is None or maker.type not in ("gather_rows", "slice"):
        return f"{name}: an earlier group's rows"
    if maker.type == "slice":
        return f"{name}: a slice of an earlier group's rows"
    copies = len(maker.inputs["X"])
    return f"{name}: gathered from {copies} source{'s' if copies != 1 else ''}"


def _report(name, text):
    print(f"[fluidtape scheduler] {name}: {text}", file=sys.stderr)


def explain(compiled, cache=None) -> str:
    """A readable account of a plan: the recorded ops it runs, what the rewrites made of them
    (batched products, fused groups and the ops each replaced), the reduced dependency edges and
    where each variable is freed."""
    analysis, memory, block, deps = compiled.analysis
    pruned = analysis.pruned.program.global_block()
    names = [op.name or f"{op.type}_{i}" for i, op in enumerate(block.ops)]
    lines = [f"ops kept: {len(pruned.ops)} of {len(analysis.source.global_block().ops)}"]
    lines += [f"  {op.name or f'{op.type}_{i}'}: {op.type}" for i, op in enumerate(pruned.ops)]
    lines.append(
        f"dependency edges after reduction: {deps.edge_count()} (of {deps.edge_count(False)})"
    )
    lines += [
        f"  {names[i]} -> {', '.join(names[j] for j in succ)}"
        for i, succ in enumerate(deps.successors)
        if succ
    ]
    lines.append("variables:")
    for var, before, after, freed in memory_plan.table(memory, block):
        where = f"freed after {', '.join(after)}" if freed else "kept"
        lines.append(f"  {var}: used by {', '.join(before)}; {where}")
    if rewritten(compiled):
        lines.append(f"rewrites: {len(pruned.ops)} ops -> {len(block.ops)} instructions")
        makers = {name: op for op in block.ops for name in op.output_names()}
        seen = set()  # ops already computed by an earlier fused kernel: recomputed here
        for op in block.ops:
            if op.type == "fused_elementwise":
                steps = op.attrs["expression"].steps
                names = [step.origin[1] for step in steps]
                origin = ", ".join(n for n in names if n not in seen)
                again = [n for n in names if n in seen]
                lines.append(f"  {op.name}: fused {len(steps) - len(again)} ops ({origin})")
                if again:
                    lines.append(f"    recomputing {len(again)} ({', '.join(again)})")
                seen.update(names)
            elif op.type == "batched_call":
                count, kind = op.attrs["count"], op.attrs["op"]
                reads = ", ".join(
                    _operand(name, gathered, makers)
                    for name, gathered in zip(op.inputs["X"], op.attrs["each"], strict=True)
                )
                lines.append(f"  {op.name}: {count} {kind} ops batched ({reads})")
            elif "/batched_" in (op.name or ""):
                lines.append(f"  {op.name}: batched {op.type}")
    if cache is not None:
        lines.append(f"plan cache: {cache.hits} hits, {cache.misses} misses, {len(cache)} plans")
    return "\n".join(lines)


__all__ = [
    "analyse",
    "schedule",
    "compile_program",
    "explain",
    "rewritten",
    "Analysis",
    "Decisions",
    "DEBUG",
]
