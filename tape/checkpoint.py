"""Checkpoints: parameters and optimizer state in one .npz file, written atomically and loaded
by name after validating everything.

The file is a plain ``np.savez`` archive (never pickled) holding one array per value and a
``__manifest__`` member: UTF-8 JSON with the format name and version, each array's shape, dtype
and SHA-256, the parameter names, and the optimizer's state dict with its arrays replaced by
references; ``__manifest_sha256__`` holds the manifest's own SHA-256. Loading checks the
archive, every checksum, and every name, shape and dtype (plus the optimizer state) before
assigning anything, so a bad file changes no parameter; arrays are read only after their
declared size was checked, and only those something refers to.

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
import zipfile

import numpy as np

from ops.xp import array_module, to_numpy
from tape import transaction
from tape.atomic import write_atomic
from tape.errors import FluidError, InputError
from tape.variable import Variable

FORMAT = "fluidtape-checkpoint"
VERSION = 2  # 2: the manifest's SHA-256 in its own member; version 1 files still load
_READABLE = (1, 2)
_MANIFEST = "__manifest__"
_MANIFEST_DIGEST = "__manifest_sha256__"
_MANIFEST_LIMIT = 64 << 20  # bytes of manifest JSON a checkpoint may hold
_HEADER = 64 << 10  # bytes a .npy member may hold beyond its data (its header)


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


def save(path, params, optimizer=None, format=None, layout="fluidtape"):
    """Writes ``params`` (a layer, a dict name -> Variable, or a list) and, optionally, the
    optimizer's state to ``path`` (exactly that name), atomically: a crash leaves the previous
    file intact.

    ``format`` is "npz" (this module) or "safetensors" (``tape.safetensors_format``); by default
    a name ending in ``.safetensors`` picks the latter. ``layout="torch"`` (safetensors only)
    stores ``Linear`` weights as PyTorch's (out, in).
    """
    from tape import safetensors_format

    if safetensors_format.chosen(path, format, layout):
        transposed = safetensors_format.torch_transposed(params, layout)
        safetensors_format.save(path, named_variables(params), optimizer, transposed)
        return
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
    raw = json.dumps(manifest).encode("utf-8")
    members[_MANIFEST] = np.frombuffer(raw, np.uint8)
    members[_MANIFEST_DIGEST] = np.frombuffer(hashlib.sha256(raw).hexdigest().encode(), np.uint8)
    _write_atomic(os.fspath(path), members)


def _write_atomic(path, members):
    """np.savez of ``members`` (or ``members`` itself when it is bytes) written atomically to
    ``path``."""
    if isinstance(members, bytes):
        write_atomic(path, lambda file: file.write(members))
    else:
        write_atomic(path, lambda file: np.savez(file, **members))


def load(path, params, optimizer=None, strict=True, layout="fluidtape"):
    """Loads a checkpoint written by ``save`` into ``params`` (and ``optimizer``), by name.

    A ``.safetensors`` file (by name, or by its header) goes to ``tape.safetensors_format``,
    with the same guarantees; ``layout="torch"`` reads ``Linear`` weights as PyTorch's
    (out, in), e.g. a ``torch.nn`` model's ``state_dict`` saved by ``safetensors.torch``.

    Everything is validated before anything is assigned: the archive, the manifest's own
    SHA-256, each array's declared size (before it is read), shape, dtype and SHA-256, that every
    name is present (and, with ``strict``, that the file has no other names), and the optimizer
    state, schedule included. Arrays nothing refers to are never read. On any problem a
    ``CheckpointError`` names the entry and nothing changes. Each parameter gets a new buffer
    holding its value, all of them and the optimizer state committed together
    (``tape.transaction``).
    """
    path = os.fspath(path)
    from tape import safetensors_format

    if safetensors_format.chosen(path, None, layout):
        transposed = safetensors_format.torch_transposed(params, layout)
        safetensors_format.load(path, named_variables(params), optimizer, strict, transposed)
        return
    named = named_variables(params)
    with _opened(path) as archive:
        manifest = _read_manifest(path, archive)
        entries = {entry["name"]: entry["key"] for entry in manifest["params"]}
        _check_names(path, named, entries, strict)
        wanted = [entries[name] for name in named if name in entries]
        if optimizer is not None:
            wanted += _array_refs(manifest.get("optimizer"))
        arrays = _read_arrays(path, archive, manifest, wanted)
    stored = {name: arrays[key] for name, key in entries.items() if key in arrays}
    targets = _match(path, named, stored)
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


# Damaged bytes surface as any of these, from zipfile, the .npy reader, UTF-8 or JSON.
_DAMAGE = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    ValueError,
    OSError,
    EOFError,
    KeyError,
    UnicodeDecodeError,
    NotImplementedError,
    OverflowError,
    RecursionError,
    MemoryError,
)


@contextlib.contextmanager
def _opened(path):
    """The archive, with damage of any kind turned into a CheckpointError."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            if not hasattr(archive, "zip"):
                raise CheckpointError(
                    None, f"'{path}' is not a fluidtape checkpoint", actual="a single .npy array"
                )
            yield archive
    except (CheckpointError, FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except _DAMAGE as err:
        raise _corrupted(path, err) from err


def _read_manifest(path, archive):
    if _MANIFEST not in archive.files:
        raise CheckpointError(
            None,
            f"'{path}' is not a fluidtape checkpoint",
            expected=f"a '{_MANIFEST}' member",
            actual=f"members {archive.files[:5]}",
        )
    raw = _member(path, archive, _MANIFEST, dtype=np.uint8, limit=_MANIFEST_LIMIT).tobytes()
    if _MANIFEST_DIGEST in archive.files:
        digest = _member(path, archive, _MANIFEST_DIGEST, dtype=np.uint8, limit=64).tobytes()
        if hashlib.sha256(raw).hexdigest().encode() != digest:
            raise CheckpointError(
                None,
                f"checkpoint '{path}' is corrupted: the manifest's checksum does not match",
                expected=f"SHA-256 {digest[:64].decode('ascii', 'replace')}",
                actual=f"SHA-256 {hashlib.sha256(raw).hexdigest()}",
            )
    manifest = json.loads(raw.decode("utf-8"))
    _check_manifest(path, manifest, _MANIFEST_DIGEST in archive.files)
    return manifest


def _member(path, archive, key, shape=None, dtype=None, limit=None):
    """Member ``key``, read only after its .npy header was checked: ``shape`` and ``dtype`` as
    declared (or a 1-D array of at most ``limit`` elements), so a forged header cannot make the
    reader allocate what the file does not hold."""
    name = f"{key}.npy"
    if name not in archive.zip.namelist():
        raise CheckpointError(None, f"checkpoint '{path}' is corrupted: no member '{key}'")
    with archive.zip.open(name) as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            found_shape, fortran, found_dtype = np.lib.format.read_array_header_1_0(member)
        elif version == (2, 0):
            found_shape, fortran, found_dtype = np.lib.format.read_array_header_2_0(member)
        else:
            raise CheckpointError(
                None, f"checkpoint '{path}' has an unsupported .npy version", actual=str(version)
            )
        if shape is None:
            ok = len(found_shape) == 1 and found_shape[0] <= limit and found_dtype == dtype
        else:
            ok = tuple(found_shape) == tuple(shape) and found_dtype == np.dtype(dtype)
        if not ok:
            raise CheckpointError(
                None,
                f"checkpoint '{path}' is corrupted: member '{key}' is not what the manifest says",
                expected=f"shape {shape}, dtype {dtype}" if shape is not None else f"<= {limit}",
                actual=f"shape {found_shape}, dtype {found_dtype}",
            )
    with archive.zip.open(name) as member:
        return np.lib.format.read_array(member, allow_pickle=False)


def _read_arrays(path, archive, manifest, keys):
    """The arrays ``keys`` names, each checked against its declared size before it is read and
    against its shape, dtype and SHA-256 after."""
    labels = {entry["key"]: f"parameter '{entry['name']}'" for entry in manifest["params"]}
    table, arrays = manifest["arrays"], {}
    for key in dict.fromkeys(keys):
        info, label = table[key], labels.get(key, f"optimizer state array '{key}'")
        size = archive.zip.getinfo(f"{key}.npy").file_size if key in archive.files else 0
        declared = int(np.prod(info["shape"], dtype=np.int64)) * np.dtype(info["dtype"]).itemsize
        if size < declared or size > declared + _HEADER:
            raise CheckpointError(
                None,
                f"checkpoint '{path}' is corrupted: {label} does not match the manifest",
                expected=f"{declared} bytes of shape {tuple(info['shape'])}, {info['dtype']}",
                actual=f"a member of {size} bytes",
            )
        array = _member(path, archive, key, info["shape"], info["dtype"])
        if _digest(array) != info["sha256"]:
            raise CheckpointError(
                None,
                f"checkpoint '{path}' is corrupted: checksum mismatch for {label}",
                expected=f"SHA-256 {info['sha256']}",
                actual=f"SHA-256 {_digest(array)}",
            )
        arrays[key] = array
    return arrays


def _array_refs(value):
    """The array keys the optimizer part of a manifest refers to (``{"__array__": key}``)."""
    refs, todo = [], [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            if set(item) == {"__array__"}:
                refs.append(item["__array__"])
            else:
                todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return refs


def _check_manifest(path, manifest, digested):
    def malformed(why):
        return CheckpointError(None, f"checkpoint '{path}' has a malformed manifest", actual=why)

    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise malformed(f"format {found!r}, expected {FORMAT!r}")
    if manifest.get("version") not in _READABLE:
        raise CheckpointError(
            None,
            f"checkpoint '{path}' has an unsupported format version",
            expected=" or ".join(map(str, _READABLE)),
            actual=repr(manifest.get("version")),
        )
    if manifest["version"] >= 2 and not digested:
        raise CheckpointError(
            None, f"checkpoint '{path}' is corrupted: the manifest's checksum is missing"
        )
    table, params = manifest.get("arrays"), manifest.get("params")
    if not isinstance(table, dict) or not isinstance(params, list):
        raise malformed("no 'arrays' table or 'params' list")
    for key, info in table.items():
        try:
            ok = (
                isinstance(key, str)
                and isinstance(info["sha256"], str)
                and isinstance(info["shape"], list)
                and all(type(d) is int and d >= 0 for d in info["shape"])
                and np.dtype(info["dtype"]).kind in "biufc"
            )
        except (KeyError, TypeError, ValueError) as err:
            raise malformed(f"array '{key}': {err!r}") from None
        if not ok:
            raise malformed(f"array '{key}': {info!r}")
    for key in _array_refs(manifest.get("optimizer")):
        if not isinstance(key, str) or key not in table:
            raise malformed(f"optimizer state refers to an unknown array {key!r}")
    for entry in params:
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("name"), str)
            or entry.get("key") not in table
        ):
            raise malformed(f"parameter entry {entry!r}")


def _check_names(path, named, entries, strict):
    missing = [name for name in named if name not in entries]
    unexpected = [name for name in entries if name not in named]
    if missing and strict:
        raise CheckpointError(
            None,
            f"parameter '{missing[0]}' is missing from checkpoint '{path}'",
            expected=f"names {sorted(named)}",
            actual=f"names {sorted(entries)}",
            hint=f"missing: {missing}; strict=False loads the others",
        )
    if unexpected and strict:
        raise CheckpointError(
            None,
            f"checkpoint '{path}' has parameter '{unexpected[0]}', "
            "which is not among the parameters",
            expected=f"names {sorted(named)}",
            actual=f"names {sorted(entries)}",
            hint=f"unexpected: {unexpected}; strict=False ignores them",
        )


def _match(path, named, stored):
    """(Variable, array) for each name stored, after checking every shape and dtype."""
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
