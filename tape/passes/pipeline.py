"""The scheduler's pipeline: which passes run, in which order, and what they report.

    prune -> dependencies -> memory_plan -> plan -> (cache) -> execute

Fusion of elementwise chains (DESIGN.md, pass 5) belongs between prune and dependencies: it
rewrites the pruned block, and everything after it sees the fused ops like any other. With
``debug`` (or the environment variable FLUIDTAPE_DEBUG=1) the IR is verified between passes and
each pass prints one line of statistics to stderr.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np

from tape.passes import dependencies, memory_plan, plan, prune

DEBUG = os.environ.get("FLUIDTAPE_DEBUG", "") not in ("", "0")


@dataclasses.dataclass(frozen=True)
class Analysis:
    """What the passes found: the program before pruning, the prune result and the DAG."""

    source: object
    pruned: object
    deps: object


def analyse(program, targets=(), debug=None) -> Analysis:
    """Prune to ``targets`` (variable names; ops marked is_target) and build the op DAG."""
    debug = DEBUG if debug is None else debug
    pruned = prune.prune(program, targets)
    block = pruned.program.global_block()
    if debug:
        from tape.ir_text import validate

        validate(pruned.program)
        _report("prune", f"{len(program.global_block().ops)} ops -> {len(block.ops)} ops "
                f"(targets: {len(targets)} variables, "
                f"{sum(op.is_target for op in program.global_block().ops)} ops)")
    deps = dependencies.analyse(block)
    if debug:
        assert all(i < j for i, succ in enumerate(deps.edges) for j in succ), "edge points back"
        _report("dependencies", f"{deps.edge_count(False)} edges -> {deps.edge_count()} after "
                "transitive reduction")
    return Analysis(program, pruned, deps)


def schedule(analysis, keep=(), slot_of=None, slots=None, xp=np, debug=None) -> plan.Plan:
    """The memory plan and the compiled Plan; ``keep`` names variables never to free.

    ``slot_of`` numbers the variables (default: the pruned block's declaration order).
    """
    debug = DEBUG if debug is None else debug
    block = analysis.pruned.program.global_block()
    memory = memory_plan.plan_memory(block, analysis.deps, keep)
    if debug:
        _check_memory(memory, analysis.deps)
        _report("memory_plan", f"{len(memory.refcount)} variables freed early, "
                f"{len(memory.users) - len(memory.refcount)} kept, "
                f"{len(memory.buffer_free_reads)} buffer-free reads")
    if slot_of is None:
        slot_of = {name: i for i, name in enumerate(block.vars)}
        slots = len(slot_of)
    compiled = plan.build(block, analysis.deps, memory, slot_of, slots, xp, (analysis, memory))
    if debug:
        assert len(compiled.instructions) == len(block.ops)
        _report("plan", f"{len(compiled.instructions)} instructions over {compiled.slots} slots")
    return compiled


def compile_program(program, targets=(), keep=(), debug=None) -> plan.Plan:
    """All passes in order for a standalone program (slots in the pruned declaration order)."""
    return schedule(analyse(program, targets, debug), keep, debug=debug)


def _check_memory(memory, deps):
    for name, last in memory.last_users.items():
        users = memory.users[name]
        assert last and set(last) <= set(users), f"{name}: bad last users"
        for user in users:
            assert user in last or any(deps.happens_before(user, x) for x in last), \
                f"{name}: user {user} is not covered by a last user"


def _report(name, text):
    print(f"[fluidtape scheduler] {name}: {text}", file=sys.stderr)


def explain(compiled, cache=None) -> str:
    """A readable account of a plan: ops kept, reduced edges, where each variable is freed."""
    analysis, memory = compiled.analysis
    block = analysis.pruned.program.global_block()
    names = [op.name or f"{op.type}_{i}" for i, op in enumerate(block.ops)]
    lines = [f"ops kept: {len(block.ops)} of {len(analysis.source.global_block().ops)}"]
    lines += [f"  {name}: {op.type}" for name, op in zip(names, block.ops, strict=True)]
    lines.append(f"dependency edges after reduction: {analysis.deps.edge_count()} "
                 f"(of {analysis.deps.edge_count(False)})")
    lines += [f"  {names[i]} -> {', '.join(names[j] for j in succ)}"
              for i, succ in enumerate(analysis.deps.successors) if succ]
    lines.append("variables:")
    for var, before, after, freed in memory_plan.table(memory, block):
        where = f"freed after {', '.join(after)}" if freed else "kept"
        lines.append(f"  {var}: used by {', '.join(before)}; {where}")
    if cache is not None:
        lines.append(f"plan cache: {cache.hits} hits, {cache.misses} misses, "
                     f"{len(cache)} plans")
    return "\n".join(lines)


__all__ = ["analyse", "schedule", "compile_program", "explain", "Analysis", "DEBUG"]
