"""The static API (seed: Executor): run a Program with feeds and fetches; save and load inference
programs.

``Executor(place).run(program, feed={name: array}, fetch_list=[...])`` adds a ``feed`` op per fed
name and a ``fetch`` op per fetched variable, prunes to the fetches (and to ops given as targets),
schedules with the passes of ``tape.passes`` and runs. The compiled plan is cached by the
program's structural hash plus the feed and fetch names, so running the same program again skips
the analysis. Parameters come from ``scope`` (name -> array) or, for a program built from a tape,
from the Variables it was recorded with; in-place updates (optimizer ops) write them back.

    >>> import numpy as np, tape, ops
    >>> t = tape.Tape(lazy=True)
    >>> x = tape.Variable(np.zeros((2, 2), np.float32), name="x")
    >>> y = t.add_op("relu", {"X": [x]})
    >>> y.name = "y"
    >>> program = tape.Program.from_tape(t)
    >>> tape.Executor().run(program, feed={"x": -np.eye(2, dtype=np.float32) + 1},
    ...                     fetch_list=["y"])[0]
    array([[0., 1.],
           [1., 0.]], dtype=float32)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import zipfile

import numpy as np

from ops.xp import module_for, to_numpy
from tape import batch_axis, transaction
from tape.constants import is_constant
from tape.errors import GraphError, InputError, user_location
from tape.ir import Block, OpDesc, Program, VarDesc, canonical_form
from tape.passes import execute, pipeline
from tape.passes.plan import CACHE, stand_ins
from tape.variable import Variable


class Executor:
    """Runs Programs on ``place`` ("cpu" or "gpu"), sequentially or on ``threads`` threads
    ("auto": where ``passes.parallel`` predicts the pool wins);
    ``exact=True``: without the rewrites that reorder floating-point sums (see ``tape.lazy``).

    A program parsed from text (``Program.from_text``, ``load_inference_program``) never acts
    on its own: its side-effecting ops (``save``) run only with ``write_dir`` given, and then
    only write paths relative to, and inside, that directory.
    """

    def __init__(self, place="cpu", threads=0, cache=None, exact=False, write_dir=None):
        self.place, self.xp = _place(place), module_for(_place(place))
        self.threads = threads if threads == "auto" else int(threads)
        self.cache, self.exact = CACHE if cache is None else cache, bool(exact)
        self.write_dir = None if write_dir is None else os.path.realpath(os.fspath(write_dir))

    def run(self, program, feed=None, fetch_list=(), targets=(), scope=None, return_numpy=True):
        """Runs what ``fetch_list`` (Variables, names, or OpDescs to run) and ``targets`` (ops:
        OpDescs, indices or names) need; returns the fetched values in order. ``feed`` maps
        names, or Variables of the tape the program came from, to arrays; an input declared with
        a free axis (-1, e.g. ``Program.from_tape(t, dynamic_batch=True)``) takes any size there
        (``tape.batch_axis``). Nothing is committed (scope, bound Variables) unless the whole
        run succeeds."""
        feed = _by_name(program, feed)
        if program.loaded:
            program = confined(program, self.write_dir)
        program = batch_axis.specialize(program, feed)  # (itself unless a shape has a -1)
        compiled, full, order = self._compile(program, list(feed), fetch_list, targets)
        slot_of = {name: i for i, name in enumerate(order)}
        vals = [None] * compiled.slots
        for slot in compiled.inputs:
            vals[slot] = self._value(order[slot], full, program, feed, scope)
        for slot, array in stand_ins(compiled):
            vals[slot] = array
        execute.run(compiled, vals, self.threads)
        self._write_back(compiled, full, order, vals, program, scope)
        fetched = [vals[slot_of[f"fetch@{name}"]] for name in _fetch_names(program, fetch_list)]
        return [to_numpy(v) for v in fetched] if return_numpy else fetched

    def explain(self, program, feed=(), fetch_list=(), targets=()) -> str:
        """What ``run`` would do: ops kept, reduced dependency edges, where variables are freed."""
        compiled, _, _ = self._compile(program, list(feed), fetch_list, targets)
        return pipeline.explain(compiled, self.cache)

    def _compile(self, program, feed_names, fetch_list, targets):
        fetch_names = _fetch_names(program, fetch_list)
        op_targets = _op_targets(
            program, list(targets) + [f for f in fetch_list if isinstance(f, OpDesc)]
        )
        full = with_feed_fetch(program, feed_names, fetch_names, op_targets)
        form, order = canonical_form(full.global_block())
        key = (
            "executor",
            json.dumps(form, default=repr),
            tuple(feed_names),
            tuple(fetch_names),
            self.place,
            self.exact,
        )
        compiled = self.cache.get(key)
        if compiled is None:
            # Fetches, and what ops update in place: the run's writes to them are committed.
            keep = [f"fetch@{name}" for name in fetch_names] + sorted(
                updated_in_place(full.global_block())
            )
            compiled = pipeline.schedule(
                pipeline.analyse(full),
                keep,
                {name: i for i, name in enumerate(order)},
                len(order),
                self.xp,
                exact=self.exact,
            )
            self.cache.put(key, compiled)
        return compiled, full, order

    def _value(self, name, full, program, feed, scope):
        desc = full.global_block().vars[name]
        if name.startswith("feed@"):
            if name[5:] not in feed:
                raise InputError(
                    "feed",
                    f"no value was fed for '{name[5:]}'",
                    hint="the program reads it: pass it in feed={...}",
                )
            value = self.xp.asarray(_fed(name[5:], feed[name[5:]], desc.dtype), dtype=desc.dtype)
            if tuple(value.shape) != tuple(desc.shape):
                raise InputError(
                    "feed",
                    f"fed value for '{name[5:]}' has the wrong shape",
                    expected=str(tuple(desc.shape)),
                    actual=str(value.shape),
                )
            return value
        if scope is not None and name in scope:
            return scope[name]
        bound = program.bindings.get(name)
        if bound is not None:
            if not (bound.persistable or bound.requires_grad or is_constant(bound)):
                raise InputError(
                    "feed",
                    f"no value was fed for '{name}'",
                    hint="it is an input of the program: pass it in feed={...} (its value "
                    "when recorded is not used; mark state persistable to read it instead)",
                )
            return bound._array()
        raise GraphError(
            None,
            f"variable '{name}' has no value",
            hint="feed it, or pass a scope holding it (a parameter)",
        )

    def _persisted(self, name, program, scope):
        """The value an inference program stores for ``name`` (from ``scope`` or its binding)."""
        if scope is not None and name in scope:
            return scope[name]
        bound = program.bindings.get(name)
        if bound is None:
            raise GraphError(
                None, f"variable '{name}' has no value", hint="pass a scope holding it"
            )
        return bound._array()

    def _write_back(self, compiled, full, order, vals, program, scope):
        """Commits the new values of persistable variables and of variables an op updated in
        place (an optimizer's parameter), all together, only after the whole run succeeded."""
        block = full.global_block()
        updated = updated_in_place(block)
        writes = []
        for slot in compiled.writeback:  # (slots of a rewrite's own variables are never kept)
            name = order[slot]
            if block.vars[name].persistable or name in updated:
                writes.append((name, vals[slot]))
        with transaction.uninterrupted():
            for name, value in writes:
                if scope is not None:
                    scope[name] = value
                bound = program.bindings.get(name)
                if bound is not None:
                    bound._value, bound._pending = value, None


def _place(place):
    if place not in ("cpu", "gpu"):
        raise InputError(
            None,
            "Executor: unknown place",
            expected="'cpu' or 'gpu'",
            actual=repr(place),
            location=user_location(),
        )
    return place


def _fed(name, value, dtype):
    """A fed value as an array that converts to ``dtype`` without losing its kind (no complex
    to real, no float to integer, no None or object to NaN)."""
    array = np.asarray(value)
    if array.dtype.kind not in "biufc" or not np.can_cast(array.dtype, dtype, "same_kind"):
        raise InputError(
            "feed",
            f"the value fed for '{name}' cannot become the program's {np.dtype(dtype)}",
            expected=f"numbers that convert to {np.dtype(dtype)} without losing their kind",
            actual=f"{type(value).__name__} of dtype {array.dtype}",
        )
    return array


def confined(program, write_dir):
    """``program`` with each side-effecting op's path resolved inside ``write_dir``; raises if a
    loaded program would write without one, or outside it."""
    from ops.registry import REGISTRY

    block = program.global_block()
    effects = [op for op in block.ops if REGISTRY[op.type].side_effect and "path" in op.attrs]
    if not effects:
        return program
    if write_dir is None:
        raise GraphError(
            effects[0].type,
            "a program loaded from a file wants to write files",
            actual=f"op '{effects[0].name}' writes {effects[0].attrs['path']!r}",
            hint="loaded programs never act on their own: run them with "
            "Executor(write_dir=...) to let them write inside that directory",
        )
    ops = []
    for op in block.ops:
        if op in effects:
            op = dataclasses.replace(
                op, attrs={**op.attrs, "path": _inside(write_dir, op.attrs["path"], op)}
            )
        ops.append(op)
    blocks = [Block(block.vars, ops, block.idx)] + program.blocks[1:]
    return Program(blocks, program.bindings, loaded=True)


def _inside(root, path, op):
    target = os.path.realpath(os.path.join(root, path))
    if os.path.isabs(path) or os.path.commonpath([root, target]) != root or target == root:
        raise GraphError(
            op.type,
            "a loaded program's op would write outside the directory it may write in",
            expected=f"a relative path inside {root}",
            actual=repr(path),
        )
    return target


def _by_name(program, feed):
    """``feed`` keyed by variable name (Variables are keys too, as in ``fetch_list``)."""
    return {
        (program.name_of(key) if isinstance(key, Variable) else key): value
        for key, value in (feed or {}).items()
    }


def updated_in_place(block):
    """Names an op both reads and writes (an update op's Param and ParamOut)."""
    return {name for op in block.ops for name in set(op.input_names()) & set(op.output_names())}


def _fetch_names(program, fetch_list):
    names = []
    for item in fetch_list:
        if isinstance(item, OpDesc):
            continue
        names.append(program.name_of(item) if isinstance(item, Variable) else str(item))
    return names


def _op_targets(program, targets):
    ops = program.global_block().ops
    indices = []
    for target in targets:
        if isinstance(target, int):
            found = target if 0 <= target < len(ops) else None
        else:
            found = next((i for i, op in enumerate(ops) if op is target or op.name == target), None)
        if found is None:
            raise GraphError(None, f"target {target!r} is not an op of this program")
        indices.append(found)
    return indices


def with_feed_fetch(program, feed_names, fetch_names, op_targets=()) -> Program:
    """A copy of ``program`` with a feed op per fed name (holder ``feed@name``) in front and a
    fetch op per fetched name (holder ``fetch@name``, a target) at the end; feed and fetch ops
    already present (as in a saved inference program) are reused."""
    block = program.global_block()
    variables, ops = dict(block.vars), list(block.ops)
    for index in op_targets:
        ops[index] = dataclasses.replace(ops[index], is_target=True)
    present = {op.outputs["Out"][0] for op in ops if op.type == "feed"}
    writers = {name: op for op in ops if op.type != "feed" for name in op.output_names()}
    feeds = []
    for name in feed_names:
        if name not in variables:
            raise InputError("feed", f"the program has no variable '{name}' to feed")
        if name in writers:
            raise InputError(
                "feed",
                f"cannot feed '{name}': op '{writers[name].name}' computes it",
                hint="feed the program's inputs",
            )
        if name not in present:
            var = variables[name]
            variables[f"feed@{name}"] = VarDesc(f"feed@{name}", var.shape, var.dtype)
            feeds.append(
                OpDesc(
                    "feed",
                    {"X": [f"feed@{name}"]},
                    {"Out": [name]},
                    {"name": name},
                    name=f"feed_{name}",
                )
            )
    for name in fetch_names:
        if name not in variables:
            raise GraphError("fetch", f"the program has no variable '{name}' to fetch")
        existing = next(
            (i for i, op in enumerate(ops) if op.type == "fetch" and op.inputs["X"] == [name]), None
        )
        if existing is not None:
            ops[existing] = dataclasses.replace(ops[existing], is_target=True)
            continue
        var = variables[name]
        variables[f"fetch@{name}"] = VarDesc(f"fetch@{name}", var.shape, var.dtype)
        ops.append(
            OpDesc(
                "fetch",
                {"X": [name]},
                {"Out": [f"fetch@{name}"]},
                {"name": name},
                True,
                f"fetch_{name}",
            )
        )
    return Program(
        [Block(variables, feeds + ops, block.idx)] + program.blocks[1:], program.bindings
    )


def save_inference_program(dirname, program, feed_names, fetch_list, scope=None):
    """Writes ``program`` pruned to ``fetch_list`` (with its feed and fetch ops) to
    ``dirname/program.json`` and the values it reads besides the feeds to ``dirname/params.npz``.

    Each file is written atomically (a crash leaves the previous one intact), parameters first;
    the parameters record the program's SHA-256, so a program is never loaded with parameters
    that were not saved with it.
    """
    from tape.atomic import write_atomic
    from tape.checkpoint import _write_atomic
    from tape.passes.prune import prune

    fetch_names = _fetch_names(program, fetch_list)
    full = with_feed_fetch(program, list(feed_names), fetch_names)
    block = full.global_block()
    block.ops = [dataclasses.replace(op, is_target=op.type == "fetch") for op in block.ops]
    pruned = prune(full).program
    pruned.global_block().ops = [
        dataclasses.replace(op, is_target=False, location=None) for op in pruned.global_block().ops
    ]
    written = {n for op in pruned.global_block().ops for n in op.output_names()}
    needed = [
        n
        for op in pruned.global_block().ops
        for n in op.input_names()
        if n not in written and not n.startswith("feed@")
    ]
    executor = Executor()
    params = {
        n: np.ascontiguousarray(to_numpy(executor._persisted(n, program, scope)))
        for n in dict.fromkeys(needed)
    }
    os.makedirs(dirname, exist_ok=True)
    text = pruned.to_text().encode("utf-8")
    arrays = {str(i): value for i, value in enumerate(params.values())}
    arrays["names"] = np.array(list(params), dtype=str)
    arrays["program_sha256"] = np.array(hashlib.sha256(text).hexdigest())
    _write_atomic(os.path.join(dirname, "params.npz"), arrays)
    write_atomic(os.path.join(dirname, "program.json"), lambda file: file.write(text))


def load_inference_program(dirname):
    """(program, feed names, fetch names, scope) from ``save_inference_program``'s files; run it
    with ``Executor().run(program, feed, fetch_names, scope=scope)``.

    Both files are validated completely (the program against the op registry, every parameter
    against the shape and dtype the program declares, and against the checksum the program
    recorded) before anything is returned; a loaded program writes no file unless the Executor
    running it allows it (``Executor(write_dir=...)``).
    """
    from tape.checkpoint import CheckpointError, _corrupted
    from tape.ir_text import ProgramFormatError

    program_path = os.path.join(dirname, "program.json")
    params_path = os.path.join(dirname, "params.npz")
    try:
        with open(program_path, "rb") as handle:
            text = handle.read(_PROGRAM_LIMIT + 1)
        program = Program.from_text(text.decode("utf-8"))
    except (UnicodeDecodeError, RecursionError) as err:
        raise ProgramFormatError(
            None, f"'{program_path}' is not an inference program", actual=repr(err)
        ) from None
    try:
        with np.load(params_path, allow_pickle=False) as data:
            names = [str(name) for name in data["names"]]
            recorded = str(data["program_sha256"])
            scope = {name: data[str(i)] for i, name in enumerate(names)}
    except (ValueError, OSError, KeyError, EOFError, zipfile.BadZipFile) as err:
        raise _corrupted(params_path, err) from err
    if hashlib.sha256(text).hexdigest() != recorded:
        raise CheckpointError(
            None,
            f"'{params_path}' was not saved with '{program_path}'",
            hint="the two files come from different saves (or one was damaged)",
        )
    _check_scope(program, scope, params_path)
    ops = program.global_block().ops
    feeds = [op.outputs["Out"][0] for op in ops if op.type == "feed"]
    fetches = [op.inputs["X"][0] for op in ops if op.type == "fetch"]
    return program, feeds, fetches, scope


_PROGRAM_LIMIT = 256 << 20  # bytes of program text an inference program may hold


def _check_scope(program, scope, path):
    from tape.checkpoint import CheckpointError

    declared = program.global_block().vars
    for name, value in scope.items():
        desc = declared.get(name)
        if desc is None or tuple(value.shape) != tuple(desc.shape) or value.dtype != desc.dtype:
            raise CheckpointError(
                None,
                f"parameter '{name}' in '{path}' does not match the program",
                expected="a variable the program declares"
                if desc is None
                else f"shape {tuple(desc.shape)}, dtype {desc.dtype}",
                actual=f"shape {tuple(value.shape)}, dtype {value.dtype}",
            )


__all__ = ["Executor", "with_feed_fetch", "save_inference_program", "load_inference_program"]
