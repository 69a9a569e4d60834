"""The ONNX table against the registry: every op is mapped or listed as not exportable (with a
reason), and every mapped op's sweep cases run in onnxruntime as in fluidtape (float32)."""

import importlib
import pkgutil

import numpy as np
import pytest

import tape
import tests.ops as cases_package
from ops.registry import REGISTRY
from tape import onnx_ops

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")

onnx_ops._load()


def _cases():
    cases = []
    for module in pkgutil.iter_modules(cases_package.__path__):
        if module.name.startswith("cases_"):
            cases.extend(importlib.import_module(f"tests.ops.{module.name}").CASES)
    return cases


EXPORTABLE = [c for c in _cases() if c.op in onnx_ops.ONNX_OPS and "float32" in c.dtypes]


def test_every_op_is_mapped_or_listed_with_a_reason():
    mapped, listed = set(onnx_ops.ONNX_OPS), set(onnx_ops.NOT_EXPORTABLE)
    assert not mapped & listed, f"both mapped and listed: {sorted(mapped & listed)}"
    unknown = sorted(set(REGISTRY) - mapped - listed)
    assert not unknown, f"ops with neither an ONNX mapping nor a reason: {unknown}"
    assert not (mapped | listed) - set(REGISTRY), "the tables name unregistered ops"
    assert all(len(reason) > 10 for reason in onnx_ops.NOT_EXPORTABLE.values())


def _record(case):
    arrays = case.arrays("float32")
    defn = REGISTRY[case.op]
    t = tape.Tape(record_all=True)  # eager: the values are there, and the ops are kept
    inputs, feeds = {}, []
    for slot in defn.input_slots:
        value = arrays.get(slot)
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        variables = [tape.Variable(v) for v in values]
        inputs[slot] = variables
        feeds.extend(variables)
    outputs = t.add_op(case.op, inputs, attrs=case.attrs)
    outputs = _flat(outputs)
    wanted = onnx_ops.EXPORTED_OUTPUTS.get(case.op)
    if wanted is not None:
        slots = [s for s in defn.output_slots]
        outputs = [o for o, slot in zip(outputs, slots) if slot in wanted]
    return t, feeds, outputs


def _flat(outputs):
    if isinstance(outputs, tape.Variable):
        return [outputs]
    flat = []
    for out in outputs:
        flat.extend(out if isinstance(out, (list, tuple)) else [out])
    return flat


def run_onnx(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, feeds)))


# Cases where onnxruntime's operator itself differs from numpy's (and PyTorch's) semantics.
RUNTIME_DIFFERS = {
    "median-nan": "onnxruntime's TopK does not sort NaN last",
    "median-nan_all": "onnxruntime's TopK does not sort NaN last",
    "atan2-signed_zeros": "the composition atan(x / y) cannot see the sign of a zero x",
}


@pytest.mark.parametrize("case", EXPORTABLE, ids=[c.id for c in EXPORTABLE])
def test_onnxruntime_matches_fluidtape(case):
    if case.id in RUNTIME_DIFFERS:
        pytest.skip(RUNTIME_DIFFERS[case.id])
    t, feeds, outputs = _record(case)
    expected = [out.numpy() for out in outputs]
    try:
        model = tape.export_onnx(t, inputs=feeds, outputs=outputs, dynamic_batch=False)
    except tape.ExportError as err:  # attribute values the op's ONNX form does not cover
        assert case.op in onnx_ops.LIMITS, f"{case.op} raised {err}"
        assert f"op '{case.op}'" in str(err)
        return
    got = run_onnx(model, [f.numpy() for f in feeds])
    rtol, atol = case.tol.get("float32", (2e-5, 2e-6))
    for k, (ours, theirs) in enumerate(zip(expected, got)):
        assert theirs.dtype == ours.dtype, f"output {k}: {theirs.dtype} != {ours.dtype}"
        assert theirs.shape == ours.shape, f"output {k}: {theirs.shape} != {ours.shape}"
        np.testing.assert_allclose(theirs, ours, rtol=rtol, atol=atol, err_msg=f"output {k}")
