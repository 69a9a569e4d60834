"""Checkpoints: parameters and optimizer state in one .npz file, written atomically and loaded
by name after validating everything.

The file is a plain ``np.savez`` archive (never pickled) holding one array per value and a
``__manifest__`` member: UTF-8 JSON with the format name and version, each array's shape, dtype
and SHA-256, the parameter names, and the optimizer's state dict with its arrays replaced by
references. Loading checks the archive, every checksum, and every name, shape and dtype (plus
the optimizer state) before assigning anything, so a bad file changes no parameter.

>>> import os, tempfile, numpy as np, tape
>>> w = tape.Variable(np.arange(3.0), name="w")
>>> path = os.path.join(tempfile.mkdtemp(), "model.npz")
>>> tape.save(path, {"w": w})
>>> w.set_value(np.zeros(3))
>>> tape.load(path, {"w": w})
>>> w.numpy()
array([0., 1., 2.])
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
import zipfile

import numpy as np

from ops.xp import array_module, to_numpy
from tape import transaction
from tape.errors import FluidError, InputError
from tape.variable import Variable

FORMAT = "fluidtape-checkpoint"
VERSION = 1
_MANIFEST = "__manifest__"


class CheckpointError(FluidError, ValueError):
    """A checkpoint (or state dict) that cannot be loaded: truncated, corrupted, or not matching
    the parameters it is loaded into."""


def named_variables(source):
    """name -> Variable for a layer (``named_params()`` then ``buffers()``), a dict, or a list.

    A list is keyed by ``Variable.name`` when every Variable was given a distinct name, and by
    position ("0", "1", ...) otherwise.
    """
    if hasattr(source, "named_params") and hasattr(source, "buffers"):
        pairs = list(source.named_params()) + list(source.buffers())
    elif isinstance(source, dict):
        pairs = list(source.items())
    elif isinstance(source, Variable) or not hasattr(source, "__iter__"):
        raise InputError(
            None,
            "checkpoints take a layer, a dict name -> Variable or a list of Variables",
            actual=type(source).__name__,
        )
    else:
        variables = list(source)
        names = [getattr(v, "_name", None) for v in variables]
        if None in names or len(set(names)) != len(names):
            names = [str(i) for i in range(len(variables))]
        pairs = list(zip(names, variables, strict=True))
    named = {}
    for name, var in pairs:
        if not isinstance(name, str) or not isinstance(var, Variable):
            raise InputError(
                None,
                "checkpoint entries must be str names of Variables",
                actual=f"{name!r}: {type(var).__name__}",
            )
        if name in named and named[name] is not var:
            raise InputError(None, f"two different Variables are both named '{name}'")
        named[name] = var
    return named


def _digest(array):
    return hashlib.sha256(np.ascontiguousarray(array).reshape(-1).view(np.uint8)).hexdigest()


class _Arrays:
    """The archive's arrays being collected for writing, with their manifest entries."""

    def __init__(self):
        self.arrays, self.table = {}, {}

    def add(self, value):
        array = np.ascontiguousarray(to_numpy(value))
        if not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        key = f"a{len(self.arrays)}"
        self.arrays[key] = array
        self.table[key] = {
            "shape": list(array.shape),
            "dtype": array.dtype.name,
            "sha256": _digest(array),
        }
        return key


def _encode(value, arrays, where="optimizer"):
    """A state dict as JSON-ready values, arrays replaced by {"__array__": key}."""
    if isinstance(value, np.ndarray):
        return {"__array__": arrays.add(value)}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise InputError(None, f"state dict keys must be strings at {where}")
        return {k: _encode(v, arrays, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise InputError(
        None,
        f"cannot store a {type(value).__name__} at {where}",
        hint="state dicts hold arrays and plain Python values",
    )


def save(path, params, optimizer=None):
    """Writes ``params`` (a layer, a dict name -> Variable, or a list) and, optionally, the
    optimizer's state to ``path`` (exactly that name), atomically: a crash leaves the previous
    file intact."""
    named = named_variables(params)
    arrays = _Arrays()
    entries = [{"name": name, "key": arrays.add(var.value())} for name, var in named.items()]
    state = None if optimizer is None else _encode(optimizer.state_dict(named), arrays)
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "arrays": arrays.table,
        "params": entries,
        "optimizer": state,
    }
    members = dict(arrays.arrays)
    members[_MANIFEST] = np.frombuffer(json.dumps(manifest).encode("utf-8"), np.uint8)
    _write_atomic(os.fspath(path), members)


def _write_atomic(path, members):
    """np.savez into a new file beside ``path``, fsynced, then renamed over it."""
    directory = os.path.dirname(os.path.abspath(path))
    temp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            np.savez(file, **members)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    with contextlib.suppress(OSError):  # make the rename durable where directories sync
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def load(path, params, optimizer=None, strict=True):
    """Loads a checkpoint written by ``save`` into ``params`` (and ``optimizer``), by name.

    Everything is validated before anything is assigned: the archive, each array's SHA-256,
    that every name is present (and, with ``strict``, that the file has no other names), each
    shape and dtype, and the optimizer state. On any problem a ``CheckpointError`` names the
    entry and no parameter changes. Each parameter gets a new buffer holding its value, all of
    them (and the optimizer state) committed together (``tape.transaction``).
    """
    path = os.fspath(path)
    named = named_variables(params)
    manifest, arrays = _read(path)
    stored = {entry["name"]: arrays[entry["key"]] for entry in manifest["params"]}
    targets = _match(path, named, stored, strict)
    apply_optimizer = None
    if optimizer is not None:
        apply_optimizer = _prepare_optimizer(path, manifest, arrays, optimizer, named, strict)
    writes = [(var, _placed(var, array)) for var, array in targets]
    transaction.commit(writes, [apply_optimizer] if apply_optimizer is not None else ())


def _corrupted(path, err):
    return CheckpointError(
        None,
        f"checkpoint '{path}' is truncated or corrupted",
        actual=f"{type(err).__name__}: {err}",
    )


def _read(path):
    """The manifest and every array, each checked against its recorded shape, dtype and hash."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            if _MANIFEST not in archive.files:
                raise CheckpointError(
                    None,
                    f"'{path}' is not a fluidtape checkpoint",
                    expected=f"a '{_MANIFEST}' member",
                    actual=f"members {archive.files[:5]}",
                )
            manifest = json.loads(archive[_MANIFEST].tobytes().decode("utf-8"))
            _check_manifest(path, manifest)
            arrays = {key: archive[key] for key in manifest["arrays"]}
    except (CheckpointError, FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    # Damaged bytes surface as any of these, from zipfile, the .npy reader, UTF-8 or JSON.
    except (
        zipfile.BadZipFile,
        ValueError,
        OSError,
        EOFError,
        KeyError,
        UnicodeDecodeError,
        NotImplementedError,
    ) as err:
        raise _corrupted(path, err) from err
    labels = {entry["key"]: f"parameter '{entry['name']}'" for entry in manifest["params"]}
    for key, info in manifest["arrays"].items():
        array, label = arrays[key], labels.get(key, f"optimizer state array '{key}'")
        if list(array.shape) != info["shape"] or array.dtype != np.dtype(info["dtype"]):
            raise CheckpointError(
                None,
                f"checkpoint '{path}' is corrupted: {label} does not match the manifest",
                expected=f"shape {tuple(info['shape'])}, dtype {info['dtype']}",
                actual=f"shape {array.shape}, dtype {array.dtype}",
            )
        if _digest(array) != info["sha256"]:
            raise CheckpointError(
                None,
                f"checkpoint '{path}' is corrupted: checksum mismatch for {label}",
                expected=f"SHA-256 {info['sha256']}",
                actual=f"SHA-256 {_digest(array)}",
            )
    return manifest, arrays


def _check_manifest(path, manifest):
    def malformed(why):
        return CheckpointError(None, f"checkpoint '{path}' has a malformed manifest", actual=why)

    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise malformed(f"format {found!r}, expected {FORMAT!r}")
    if manifest.get("version") != VERSION:
        raise CheckpointError(
            None,
            f"checkpoint '{path}' has an unsupported format version",
            expected=str(VERSION),
            actual=repr(manifest.get("version")),
        )
    table, params = manifest.get("arrays"), manifest.get("params")
    if not isinstance(table, dict) or not isinstance(params, list):
        raise malformed("no 'arrays' table or 'params' list")
    for key, info in table.items():
        try:
            ok = isinstance(info["sha256"], str) and all(isinstance(d, int) for d in info["shape"])
            np.dtype(info["dtype"])
        except (KeyError, TypeError) as err:
            raise malformed(f"array '{key}': {err!r}") from None
        if not ok:
            raise malformed(f"array '{key}': {info!r}")
    for entry in params:
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("name"), str)
            or entry.get("key") not in table
        ):
            raise malformed(f"parameter entry {entry!r}")


def _match(path, named, stored, strict):
    """(Variable, its writable buffer or None, array) for each name, after checking them all."""
    missing = [name for name in named if name not in stored]
    unexpected = [name for name in stored if name not in named]
    if missing and strict:
        raise CheckpointError(
            None,
            f"parameter '{missing[0]}' is missing from checkpoint '{path}'",
            expected=f"names {sorted(named)}",
            actual=f"names {sorted(stored)}",
            hint=f"missing: {missing}; strict=False loads the others",
        )
    if unexpected and strict:
        raise CheckpointError(
            None,
            f"checkpoint '{path}' has parameter '{unexpected[0]}', "
            "which is not among the parameters",
            expected=f"names {sorted(named)}",
            actual=f"names {sorted(stored)}",
            hint=f"unexpected: {unexpected}; strict=False ignores them",
        )
    targets = []
    for name, var in named.items():
        if name not in stored:
            continue
        array = stored[name]
        if tuple(array.shape) != tuple(var.shape) or array.dtype != var.dtype:
            raise CheckpointError(
                None,
                f"parameter '{name}' does not match checkpoint '{path}'",
                expected=f"shape {tuple(var.shape)}, dtype {var.dtype} (the parameter)",
                actual=f"shape {tuple(array.shape)}, dtype {array.dtype} (the checkpoint)",
            )
        targets.append((var, array))
    return targets


def _placed(var, array):
    """A new buffer for ``var`` holding ``array``, on ``var``'s device."""
    current = var._value
    xp = array_module(current) if current is not None else np
    return xp.array(array, dtype=var.dtype, copy=True)


def _decode(value, arrays):
    if isinstance(value, dict):
        if set(value) == {"__array__"}:
            return arrays[value["__array__"]]
        return {k: _decode(v, arrays) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    return value


def _prepare_optimizer(path, manifest, arrays, optimizer, named, strict):
    if manifest.get("optimizer") is None:
        raise CheckpointError(
            None,
            f"checkpoint '{path}' holds no optimizer state",
            hint="save it with tape.save(path, params, optimizer)",
        )
    try:
        state = _decode(manifest["optimizer"], arrays)
    except (KeyError, TypeError) as err:
        raise CheckpointError(
            None, f"checkpoint '{path}' has malformed optimizer state", actual=repr(err)
        ) from None
    if not strict and isinstance(state.get("state"), dict):
        state["state"] = {k: v for k, v in state["state"].items() if k in named}
    return optimizer.prepare_load(state, named)
