"""fluidtape's engine: Variable handles, the Tape that records ops, and backward over it.

>>> import numpy as np, tape
>>> tape.reset_global_tape()  # doctest: +ELLIPSIS
Tape(...)
>>> x = tape.Variable(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
>>> loss = (x * x).sum()
>>> tape.backward(loss)
>>> x.grad.numpy()
array([2., 4., 6.], dtype=float32)
"""

# Loads the op table first (it wires the engine in), checking that 'ops' is fluidtape's own.
from tape._package import VERSION as __version__  # noqa: I001
from ops.blas import blas_threads, get_num_threads, set_num_threads
from ops.xp import device, gpu_available
from tape import backward as _backward
from tape.checkpoint import CheckpointError, load, save
from tape.dlpack import from_dlpack
from tape.errors import (  # noqa: F401  (the public error types)
    AttrError,
    AxisError,
    DTypeError,
    ExecutionError,
    FluidError,
    GraphError,
    IndexingError,
    InputError,
    MutationError,
    NonFiniteError,
    ScalarOverflowError,
    ShapeError,
)
from tape.executor import Executor, load_inference_program, save_inference_program
from tape.anomaly import detect_anomaly
from tape.nonfinite import find_first_nonfinite
from tape.profiler import profile
from tape.grad_mode import enable_grad, is_grad_enabled, no_grad
from tape.ir import Block, OpDesc, Program, VarDesc
from tape.ir_text import ProgramFormatError
from tape.dot import draw, to_dot
from tape.lazy import explain, lazy
from tape.onnx_export import ExportError, export_onnx
from tape.memory import memory_report, track_memory
from tape.op_handle import OpHandle
from tape.random_state import seed
from tape.tape import Tape, get_global_tape, reset_global_tape
from tape.traced import traced
from tape.variable import Variable


def backward(loss, grad=None, retain_graph=False, create_graph=False):
    """Backward on this thread's global tape: accumulates d(loss)/d(leaf) into each leaf's grad.

    Args:
        loss: the Variable to differentiate (one element unless ``grad`` is given).
        grad: the gradient of ``loss`` to start from (defaults to ones).
        retain_graph: keep the recorded ops so backward can run over them again.
        create_graph: record the gradient ops so gradients can be differentiated again
            (implies ``retain_graph``).
    """
    get_global_tape().backward(loss, grad, retain_graph, create_graph)


def grad(loss, inputs, grad=None, retain_graph=False, create_graph=False):
    """d(loss)/d(x) for each x in ``inputs`` (a list of Variables), leaving ``.grad()`` untouched.

    Inputs the loss does not depend on get None.
    """
    return _backward.grad(get_global_tape(), loss, list(inputs), grad, retain_graph, create_graph)


__all__ = [
    "Variable",
    "Tape",
    "OpHandle",
    "get_global_tape",
    "reset_global_tape",
    "backward",
    "grad",
    "no_grad",
    "enable_grad",
    "is_grad_enabled",
    "seed",
    "device",
    "gpu_available",
    "set_num_threads",
    "get_num_threads",
    "blas_threads",
    "FluidError",
    "ShapeError",
    "AxisError",
    "DTypeError",
    "AttrError",
    "InputError",
    "GraphError",
    "ExecutionError",
    "MutationError",
    "NonFiniteError",
    "profile",
    "detect_anomaly",
    "find_first_nonfinite",
    "ScalarOverflowError",
    "CheckpointError",
    "ProgramFormatError",
    "__version__",
    "save",
    "load",
    "lazy",
    "traced",
    "explain",
    "track_memory",
    "to_dot",
    "draw",
    "memory_report",
    "Program",
    "Block",
    "OpDesc",
    "VarDesc",
    "Executor",
    "save_inference_program",
    "load_inference_program",
    "from_dlpack",
    "export_onnx",
    "ExportError",
]
