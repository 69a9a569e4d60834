"""Graph pictures: a tape, a Variable's history, a Program or a lazy plan as Graphviz DOT text.

Ops are boxes (type, name, the user's line where one was kept), variables ellipses (name, shape,
dtype); parameters, gradients, gradient ops and optimizer updates are styled apart. In lazy mode
``plan=True`` draws the ops as the last plan ran them, with each group a rewrite made in its own
cluster (``plan_groups``: today the products ``batch_products`` joined; fused groups slot in
there). ``draw`` renders SVG/PNG where Graphviz is installed, else writes the ``.dot`` file.

>>> import numpy as np, tape, ops
>>> tape.reset_global_tape()  # doctest: +ELLIPSIS
Tape(...)
>>> w = tape.Variable(np.ones(3), requires_grad=True, name="w")
>>> loss = ops.tanh(w * 2.0).sum()
>>> print(tape.to_dot(loss).splitlines()[0])
digraph fluidtape {
"""

from __future__ import annotations

import os
import shutil
import warnings

from ops.registry import REGISTRY
from tape.ir import Program, from_ops
from tape.passes.plan import Plan
from tape.variable import Variable

# Names a rewrite gives the ops it emits ("<recorded op>/batched_matmul") -> the cluster label.
REWRITES = {"/batched_": "batched products"}

_OP_STYLE = {
    "forward": 'shape=box, style="rounded,filled", fillcolor="#dbe8f6"',
    "backward": 'shape=box, style="rounded,filled", fillcolor="#f8dcdc"',
    "update": 'shape=box, style="rounded,filled", fillcolor="#fff1c2"',
}
_VAR_STYLE = {
    "parameter": 'shape=ellipse, style="filled,bold", fillcolor="#c9ecc9"',
    "gradient": 'shape=ellipse, style="filled,dashed", fillcolor="#f8dcdc"',
    "value": "shape=ellipse",
}


def to_dot(source, backward=True, plan=False) -> str:
    """Graphviz DOT text for ``source``: a Tape (its ops), a Variable (the ops it depends on,
    and with ``backward`` the gradient ops a backward from it records), a Program, or a
    compiled plan; ``plan=True`` with a Tape draws its last lazy plan.

    An eager tape keeps only the ops backward needs, until backward releases them: draw before
    backward (its gradient ops are then recorded on a scratch lazy tape, never run).
    """
    block, roles, clusters = _graph(source, backward, plan)
    return _write(block, roles, clusters)


def draw(source, path, backward=True, plan=False) -> str:
    """Renders ``to_dot(source, ...)`` to ``path`` (.svg, .png, .pdf or .dot) with the
    ``graphviz`` package where the Graphviz ``dot`` program is installed; otherwise writes the
    DOT text beside it (``.dot``) and warns how to render it. Returns the path written."""
    text = to_dot(source, backward, plan)
    stem, suffix = os.path.splitext(os.fspath(path))
    kind = suffix.lstrip(".").lower() or "svg"
    if kind != "dot" and shutil.which("dot") is not None:
        try:
            import graphviz
        except ImportError:
            graphviz = None
        if graphviz is not None:
            graphviz.Source(text).render(outfile=f"{stem}.{kind}", format=kind, cleanup=True)
            return f"{stem}.{kind}"
    written = f"{stem}.dot"
    with open(written, "w", encoding="utf-8") as handle:
        handle.write(text)
    if kind != "dot":
        warnings.warn(
            f"Graphviz is not installed: wrote {written}; render it with "
            f"'dot -T{kind} {written} -o {stem}.{kind}' (apt install graphviz; "
            "pip install graphviz)",
            stacklevel=2,
        )
    return written


def plan_groups(plan) -> list:
    """(label, op indices) for each group of a plan's ops one rewrite made (see REWRITES)."""
    groups = {}
    for index, op in enumerate(plan.analysis.block.ops):
        for marker, kind in REWRITES.items():
            if marker in (op.name or ""):
                origin = op.name.split(marker)[0]
                groups.setdefault((kind, origin), []).append(index)
    return [(f"{kind} (from {origin})", members) for (kind, origin), members in groups.items()]


def _graph(source, backward, plan):
    if isinstance(source, Plan):
        return source.analysis.block, _roles(source.analysis.block), plan_groups(source)
    if isinstance(source, Program):
        block = source.global_block()
        return block, _roles(block), []
    if isinstance(source, Variable):
        return _history(source, backward)
    if plan:
        compiled = getattr(source, "_last_plan", None)
        if compiled is None:
            raise ValueError("this tape has run no lazy plan yet (plan=True draws the last one)")
        return _graph(compiled, backward, False)
    program = from_ops(source.ops)
    block = program.global_block()
    return block, _roles(block, program.bindings), []


def _history(var, backward):
    """The ops ``var`` depends on (on its tape), and with ``backward`` the gradient ops."""
    from tape.tape import get_global_tape

    owner = var._pending if var._pending.__class__.__name__ == "Tape" else get_global_tape()
    ops = _ancestors(owner.ops, var)
    if not backward or not var.requires_grad:
        program = from_ops(ops)
        return program.global_block(), _roles(program.global_block(), program.bindings), []
    scratch, forward = _record_backward(ops, var)
    program = from_ops(scratch)
    block = program.global_block()
    roles = {i: ("forward" if i < forward else "backward") for i in range(len(block.ops))}
    return block, {**_roles(block, program.bindings), **roles}, []


def _ancestors(ops, var):
    needed, kept = {id(var)}, []
    for op in reversed(ops):
        if any(id(v) in needed for v in op.output_vars()):
            kept.append(op)
            needed.update(id(v) for v in op.input_vars())
    return kept[::-1]


def _record_backward(ops, var):
    """``ops`` recorded again on a scratch lazy tape, then the gradient ops a backward from
    ``var`` records there (no kernel runs; no gradient reaches the real leaves)."""
    from tape.backward import grad
    from tape.grad_mode import enable_grad
    from tape.tape import Tape, record

    scratch, mapped = Tape(lazy=True), {}
    with enable_grad():
        for op in ops:
            args = tuple(_mapped(entry, mapped) for entry in op.args)
            outs = record(scratch, op.defn, args, op.attrs)
            copy = scratch._ops[-1]
            copy.location = op.location
            flat = outs if isinstance(outs, (tuple, list)) else (outs,)
            for old, new in zip(op.output_vars(), _flatten(flat)):
                mapped[id(old)] = new
        forward = len(scratch._ops)
        loss = mapped.get(id(var), var)
        leaves = [v for op in scratch.ops for v in op.input_vars() if v._leaf and v.requires_grad]
        grad(scratch, loss, leaves, grad=_ones(var) if var.size != 1 else None)
    for op in scratch._ops[forward:]:
        op.location = None
    return scratch.ops, forward


def _ones(var):
    import numpy as np

    return np.ones(var.shape, var.dtype)


def _mapped(entry, mapped):
    if entry is None:
        return None
    if entry.__class__ is list:
        return [mapped.get(id(v), v) for v in entry]
    return mapped.get(id(entry), entry)


def _flatten(items):
    flat = []
    for item in items:
        flat.extend(item if isinstance(item, list) else [item])
    return flat


def _roles(block, bindings=None):
    """'update' for in-place updates, 'backward' for gradient ops (everything reachable from a
    backward's seed ``fill_ones_like`` of a sink, and the helpers only they read), else
    'forward'."""
    readers = {}
    for index, op in enumerate(block.ops):
        for name in op.input_names():
            readers.setdefault(name, []).append(index)
    backward = set()
    for index, op in enumerate(block.ops):
        reads = op.input_names()
        seed = op.type == "fill_ones_like" and all(readers[n] == [index] for n in reads)
        if seed or any(_producer(block, n, index) in backward for n in reads):
            backward.add(index)
    for index in range(len(block.ops) - 1, -1, -1):  # helpers read only by gradient ops
        consumers = [r for n in block.ops[index].output_names() for r in readers.get(n, ())]
        if backward and consumers and all(r in backward for r in consumers):
            if index > min(backward):
                backward.add(index)
    roles = {}
    for index, op in enumerate(block.ops):
        update = bool(REGISTRY[op.type].inplace) and set(op.input_names()) & set(op.output_names())
        roles[index] = "update" if update else "backward" if index in backward else "forward"
    return roles


def _producer(block, name, before):
    for index in range(before - 1, -1, -1):
        if name in block.ops[index].output_names():
            return index
    return None


def _write(block, roles, clusters):
    lines = ["digraph fluidtape {", "  rankdir=TB;", '  node [fontname="Helvetica"];']
    grads = _gradient_names(block, roles)
    ids = {name: f"v{i}" for i, name in enumerate(block.vars)}
    for name, var in block.vars.items():
        kind = "parameter" if var.persistable else "gradient" if name in grads else "value"
        label = f"{name}\\n{tuple(var.shape)} {var.dtype}"
        lines.append(f'  {ids[name]} [label="{_escape(label)}", {_VAR_STYLE[kind]}];')
    clustered = {i for _, members in clusters for i in members}
    for index, op in enumerate(block.ops):
        if index not in clustered:
            lines.append("  " + _op_node(index, op, roles))
    for number, (label, members) in enumerate(clusters):
        lines.append(f"  subgraph cluster_{number} {{")
        lines.append(f'    label="{_escape(label)}"; style="dashed";')
        lines += ["    " + _op_node(i, block.ops[i], roles) for i in members]
        lines.append("  }")
    for index, op in enumerate(block.ops):
        lines += [f"  {ids[n]} -> op{index};" for n in dict.fromkeys(op.input_names())]
        lines += [f"  op{index} -> {ids[n]};" for n in dict.fromkeys(op.output_names())]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _gradient_names(block, roles):
    return {
        n for i, op in enumerate(block.ops) if roles[i] == "backward" for n in op.output_names()
    }


def _op_node(index, op, roles):
    label = f"{op.type}\\n{op.name or f'{op.type}_{index}'}"
    if op.location:
        label += f"\\n{op.location}"
    return f'op{index} [label="{_escape(label)}", {_OP_STYLE[roles[index]]}];'


def _escape(text):
    return text.replace('"', '\\"')


__all__ = ["to_dot", "draw", "plan_groups", "REWRITES"]
