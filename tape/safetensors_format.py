"""Checkpoints in the safetensors format (the model hubs' and PyTorch's), beside the .npz one.

The file is what ``safetensors.numpy.save`` writes: an 8-byte header length, a JSON header
naming each tensor's dtype, shape and byte range, then the raw bytes; nothing in it is code.
Parameters are stored under the names ``named_params()`` gives (then buffers, such as batch
norm's running statistics), which are PyTorch's names for the same layers. fluidtape adds to the
header's string metadata: ``fluidtape.sha256`` (JSON name -> SHA-256 of each tensor) and, when an
optimizer is saved, ``fluidtape.optimizer`` (its state dict as JSON, arrays stored as tensors
named ``__optimizer__.a0``, ...). Files from elsewhere have neither: their tensors load without
checksums, and asking for optimizer state from them is an error.

Layouts: every layer's parameters have PyTorch's layout except ``layers.Linear``'s weight,
which is (in, out) here and (out, in) in ``torch.nn.Linear``. ``layout="torch"`` transposes the
weight of every ``Linear`` in the model on save and on load, so a torch ``state_dict`` saved with
``safetensors.torch.save_file`` loads as is (``torch_transposed`` lists the names).

Loading validates everything before anything changes: the header (safetensors checks that the
byte ranges are in order, match each dtype and shape, and cover the file exactly, before any
tensor is read), every name, each shape and dtype against the parameter (read from the header,
before the tensor), the checksums where the file has them, and the optimizer state; then all
values are committed together (``tape.transaction``). A bad file raises ``CheckpointError`` and
changes nothing.
"""

from __future__ import annotations

import json
import os

import numpy as np

from tape import transaction
from tape.checkpoint import (
    CheckpointError,
    _array_refs,
    _Arrays,
    _check_names,
    _digest,
    _encode,
    _match,
    _placed,
    _prepare_optimizer,
    _write_atomic,
)
from tape.errors import InputError

FORMAT = "fluidtape-safetensors"
_OPTIMIZER = "__optimizer__."
# safetensors dtype names -> numpy (the ones numpy has)
_DTYPES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "U16": "uint16",
    "I16": "int16",
    "U32": "uint32",
    "I32": "int32",
    "U64": "uint64",
    "I64": "int64",
    "F16": "float16",
    "F32": "float32",
    "F64": "float64",
}
LAYOUTS = ("fluidtape", "torch")


_FORMATS = ("npz", "safetensors")


def chosen(path, format, layout):
    """Whether ``path`` is (to be) a safetensors file: ``format`` ("npz" or "safetensors") as
    given, else by the name's extension, else (for an existing file) by its first bytes (a zip
    archive starts with PK, safetensors with an 8-byte length and {). ``layout`` other than
    "fluidtape" is refused for .npz."""
    if format is not None:
        if format not in _FORMATS:
            raise InputError(
                None,
                "unknown checkpoint format",
                expected=f"one of {_FORMATS}",
                actual=repr(format),
            )
        return format == "safetensors" or _npz_layout_only(layout)
    name = os.fspath(path)
    if str(name).endswith(".safetensors"):
        return True
    try:
        with open(name, "rb") as file:
            head = file.read(9)
    except OSError:
        head = b""
    return (len(head) == 9 and head[8:9] == b"{") or _npz_layout_only(layout)


def _npz_layout_only(layout):
    if layout != "fluidtape":
        raise InputError(
            None,
            "layout applies to safetensors checkpoints only",
            expected='layout="fluidtape" for .npz',
            actual=repr(layout),
            hint='save with format="safetensors" to exchange weights with PyTorch',
        )
    return False


def _package():
    try:
        import safetensors
        import safetensors.numpy
    except ImportError:
        raise ImportError(
            "the safetensors format needs the 'safetensors' package: "
            "pip install safetensors (or fluidtape[interop])"
        ) from None
    return safetensors


def torch_transposed(model, layout):
    """The parameter names whose layout differs from PyTorch's under ``layout``: the weight of
    every ``layers.Linear`` in ``model`` for "torch", none for "fluidtape"."""
    if layout not in LAYOUTS:
        raise InputError(
            None, "unknown checkpoint layout", expected=f"one of {LAYOUTS}", actual=repr(layout)
        )
    if layout == "fluidtape":
        return frozenset()
    from layers.linear import Linear

    if not hasattr(model, "children"):
        raise InputError(
            None,
            'layout="torch" needs the model (a layer), to know which weights are Linear weights',
            actual=type(model).__name__,
        )
    names, todo = set(), [("", model)]
    while todo:
        prefix, layer = todo.pop()
        if isinstance(layer, Linear):
            names.add(prefix + "weight")
        todo.extend((f"{prefix}{name}.", child) for name, child in layer._children.items())
    return frozenset(names)


def save(path, named, optimizer=None, transposed=frozenset()):
    """Writes ``named`` (name -> Variable) and the optimizer's state to ``path`` atomically."""
    safetensors = _package()
    tensors, digests = {}, {}
    for name, var in named.items():
        if name.startswith(_OPTIMIZER):
            raise InputError(None, f"parameter name '{name}' uses the reserved prefix {_OPTIMIZER}")
        array = np.asarray(var.numpy())
        array = np.ascontiguousarray(array.T if name in transposed else array)
        tensors[name], digests[name] = array, _digest(array)
    metadata = {"format": FORMAT, "fluidtape.sha256": json.dumps(digests)}
    if optimizer is not None:
        arrays = _Arrays()
        metadata["fluidtape.optimizer"] = json.dumps(_encode(optimizer.state_dict(named), arrays))
        for key, array in arrays.arrays.items():
            tensors[_OPTIMIZER + key] = array
        metadata["fluidtape.optimizer_arrays"] = json.dumps(arrays.table)
    _write_atomic(os.fspath(path), safetensors.numpy.save(tensors, metadata=metadata))


def load(path, named, optimizer=None, strict=True, transposed=frozenset()):
    """Loads a safetensors file into ``named`` (and ``optimizer``); see the module docstring."""
    safetensors = _package()
    path = os.fspath(path)
    try:
        with safetensors.safe_open(path, framework="np") as file:
            metadata = file.metadata() or {}
            keys = [key for key in file.keys() if not key.startswith(_OPTIMIZER)]
            _check_names(path, named, dict.fromkeys(keys), strict)
            wanted = [name for name in named if name in keys]
            _check_declared(path, file, named, wanted, transposed)
            digests = _digests(path, metadata)
            stored = {name: _tensor(path, file, name, digests) for name in wanted}
            state = _optimizer_state(path, file, metadata) if optimizer is not None else None
    except safetensors.SafetensorError as err:
        raise CheckpointError(
            None,
            f"'{path}' is not a valid safetensors file (truncated or corrupted)",
            actual=str(err),
        ) from None
    stored = {name: (array.T if name in transposed else array) for name, array in stored.items()}
    targets = _match(path, named, stored)
    apply_optimizer = None
    if optimizer is not None:
        apply_optimizer = _prepare_optimizer(path, state, state["arrays"], optimizer, named, strict)
    writes = [(var, _placed(var, array)) for var, array in targets]
    transaction.commit(writes, [apply_optimizer] if apply_optimizer is not None else ())


def _check_declared(path, file, named, names, transposed):
    """Each tensor's dtype and shape as the header declares them, before any tensor is read."""
    for name in names:
        view = file.get_slice(name)
        dtype, shape = _DTYPES.get(view.get_dtype()), tuple(view.get_shape())
        if name in transposed:
            shape = shape[::-1]
        var = named[name]
        if dtype is None or shape != tuple(var.shape) or np.dtype(dtype) != var.dtype:
            raise CheckpointError(
                None,
                f"parameter '{name}' does not match checkpoint '{path}'",
                expected=f"shape {tuple(var.shape)}, dtype {var.dtype} (the parameter)",
                actual=f"shape {shape}, dtype {dtype or view.get_dtype()} (the checkpoint)",
                hint="a torch Linear weight is (out, in): load with layout='torch'"
                if len(shape) == 2 and shape[::-1] == tuple(var.shape)
                else None,
            )


def _tensor(path, file, name, digests):
    """Tensor ``name``, checked against its SHA-256 where ``digests`` (key -> hex) has one."""
    array = file.get_tensor(name)
    expected = digests.get(name.removeprefix(_OPTIMIZER))
    if expected is not None and _digest(array) != expected:
        raise CheckpointError(
            None,
            f"checkpoint '{path}' is corrupted: checksum mismatch for '{name}'",
            expected=f"SHA-256 {expected}",
            actual=f"SHA-256 {_digest(array)}",
        )
    return array


def _digests(path, metadata):
    """name -> SHA-256 from fluidtape's metadata ({} for files written elsewhere)."""
    raw = metadata.get("fluidtape.sha256")
    if raw is None:
        return {}
    try:
        digests = json.loads(raw)
    except ValueError as err:
        raise CheckpointError(
            None, f"checkpoint '{path}' has malformed metadata", actual=str(err)
        ) from None
    if not isinstance(digests, dict) or not all(isinstance(v, str) for v in digests.values()):
        raise CheckpointError(None, f"checkpoint '{path}' has malformed checksum metadata")
    return digests


def _optimizer_state(path, file, metadata):
    """{"optimizer": encoded state, "arrays": key -> array}, checked against the table."""
    raw = metadata.get("fluidtape.optimizer")
    if raw is None:
        raise CheckpointError(
            None,
            f"checkpoint '{path}' holds no optimizer state",
            hint="save it with tape.save(path, model, optimizer, format='safetensors')",
        )
    try:
        encoded = json.loads(raw)
        table = json.loads(metadata.get("fluidtape.optimizer_arrays", "{}"))
    except ValueError as err:
        raise CheckpointError(
            None, f"checkpoint '{path}' has malformed optimizer metadata", actual=str(err)
        ) from None
    digests = {key: info.get("sha256") for key, info in table.items() if isinstance(info, dict)}
    arrays = {}
    for key in _array_refs(encoded):
        if not isinstance(key, str) or _OPTIMIZER + key not in file.keys():
            raise CheckpointError(
                None, f"checkpoint '{path}' optimizer state refers to a missing tensor {key!r}"
            )
        arrays[key] = _tensor(path, file, _OPTIMIZER + key, digests)
    return {"optimizer": encoded, "arrays": arrays}


__all__ = ["save", "load", "chosen", "torch_transposed", "FORMAT", "LAYOUTS"]
