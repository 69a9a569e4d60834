"""ONNX export of whole models: the digits MLP and CNN, the char LSTM's step and a Transformer
encoder layer run in onnxruntime as in fluidtape, at batch sizes other than the recorded one;
parameters are initializers; unexportable ops are named; the README's examples hold."""

import importlib.util
import pathlib

import numpy as np
import pytest

import layers
import optim
import tape

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def _example(name):
    spec = importlib.util.spec_from_file_location(f"onnx_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _export(forward, example_inputs, **kwargs):
    """Records ``forward`` on a lazy tape and exports it; returns the model."""
    with tape.lazy():
        tape.reset_global_tape()
        inputs = [tape.Variable(a) for a in example_inputs]
        outputs = forward(*inputs)
        outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
        model = tape.export_onnx(tape.get_global_tape(), inputs=inputs, outputs=outputs, **kwargs)
    tape.reset_global_tape()
    return model


def _eager(forward, arrays):
    tape.reset_global_tape()
    with tape.no_grad():
        outputs = forward(*[tape.Variable(a) for a in arrays])
    outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    return [o.numpy() for o in outputs]


def _check(forward, make, batches=(3, 1, 7)):
    """Exported at batch 3, run in onnxruntime at each batch size against eager fluidtape."""
    model = _export(forward, make(batches[0]))
    onnx.checker.check_model(model, full_check=True)
    session = _session(model)
    names = [i.name for i in session.get_inputs()]
    for batch in batches:
        arrays = make(batch)
        got = session.run(None, dict(zip(names, arrays)))
        for ours, theirs in zip(_eager(forward, arrays), got):
            np.testing.assert_allclose(theirs, ours, rtol=2e-5, atol=2e-6)
    return model


RNG = np.random.default_rng(0)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_digits_models(name):
    model = _example("train_digits").MODELS[name]()
    model.eval()
    exported = _check(model, lambda b: [RNG.random((b, 1, 8, 8), dtype=np.float32)])
    initializers = {i.name for i in exported.graph.initializer}
    param_names = {p.name for p in model.params()}
    assert param_names <= initializers  # parameters are initializers
    assert exported.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


def test_char_lstm_step():
    model = _example("char_lstm").CharLSTM(vocab_size=20, embed_dim=8, hidden_size=16)
    model.eval()

    def step(ids, h, c):
        h, c = model.cell(model.embed(ids), (h, c))
        return model.head(h), h, c

    def make(batch):
        return [
            RNG.integers(0, 20, (batch,)),
            RNG.standard_normal((batch, 16)).astype(np.float32),
            RNG.standard_normal((batch, 16)).astype(np.float32),
        ]

    _check(step, make)


@pytest.mark.parametrize("activation, norm_first", [("relu", False), ("gelu", True)])
def test_transformer_encoder_layer(activation, norm_first):
    layer = layers.TransformerEncoderLayer(
        16, 4, dim_feedforward=32, batch_first=True, activation=activation, norm_first=norm_first
    )
    layer.eval()
    _check(layer, lambda b: [RNG.standard_normal((b, 5, 16)).astype(np.float32)])


def test_a_training_tape_exports_its_forward_part():
    model = layers.Sequential(layers.Linear(4, 3), layers.ReLU(), layers.Linear(3, 2))
    opt = optim.SGD(lr=0.1)
    t = tape.Tape(record_all=True)
    tape.tape.state.tape = t
    x = tape.Variable(RNG.random((5, 4), dtype=np.float32))
    out = model(x)
    tape.backward(out.mean(), retain_graph=True)  # an eager backward drops what it ran
    opt(model.params())  # gradients and updates are on the tape too; the export prunes them
    exported = tape.export_onnx(t, inputs=[x], outputs=[out])
    assert {n.op_type for n in exported.graph.node} <= {
        "Flatten",
        "MatMul",
        "Add",
        "Relu",
        "Identity",
    }
    tape.reset_global_tape()


def test_unexportable_ops_are_named():
    layer = layers.Dropout(0.5)  # training mode: random
    with pytest.raises(tape.ExportError, match="dropout in training mode") as err:
        _export(layer, [np.ones((2, 3), np.float32)])
    assert "model.eval()" in str(err.value)
    with tape.lazy():
        tape.reset_global_tape()
        x = tape.Variable(np.ones(3, np.float32))
        y = tape.get_global_tape().add_op("uniform_random", {}, attrs={"shape": [3]}) + x
        with pytest.raises(tape.ExportError, match="have no ONNX form: uniform_random") as err:
            tape.export_onnx(tape.get_global_tape(), inputs=[x], outputs=[y])
        assert "random" in str(err.value)
    tape.reset_global_tape()


def test_bad_requests_are_refused():
    t = tape.Tape(record_all=True)
    x = tape.Variable(np.ones(2, np.float32))
    y = t.add_op("relu", {"X": [x]})
    with pytest.raises(tape.ExportError, match="unsupported ONNX opset"):
        tape.export_onnx(t, outputs=[y], opset=11)
    with pytest.raises(tape.ExportError, match="no outputs given"):
        tape.export_onnx(t, outputs=[])
    with pytest.raises(tape.ExportError, match="is not used by the program"):
        tape.export_onnx(t, outputs=[tape.Variable(np.ones(1))])


def test_readme_export_example(tmp_path):
    path = str(tmp_path / "model.onnx")
    # --- the README's "Interop" example, verbatim ---
    import onnxruntime as ort

    import layers
    import tape

    model = layers.Sequential(layers.Linear(64, 32, act="relu"), layers.Linear(32, 10))
    model.eval()
    with tape.lazy():
        x = tape.Variable(np.zeros((2, 64), np.float32))  # any batch > 1: it stays free
        logits = model(x)
        tape.export_onnx(tape.get_global_tape(), path, inputs=[x], outputs=[logits])
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    batch = np.random.rand(8, 64).astype(np.float32)
    (scores,) = session.run(None, {session.get_inputs()[0].name: batch})
    # --- end of the example ---
    tape.reset_global_tape()
    np.testing.assert_allclose(scores, _eager(model, [batch])[0], rtol=2e-5, atol=2e-6)
