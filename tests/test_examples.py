"""Smoke tests of examples/: each example's main() runs a few tiny steps in-process.

The full runs (>= 97% on the digits, the char-LSTM sample, the tree accuracy) take tens of
seconds each and are not part of the suite; these check that every example still runs end to
end on the current library and produces what it promises.
"""

import importlib.util
import math
import pathlib

import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def load_example(name):
    """Imports examples/<name>.py as a module (examples/ is a folder of scripts, not a package)."""
    pytest.importorskip("tqdm")
    pytest.importorskip("threadpoolctl")
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def all_finite(values):
    return all(math.isfinite(v) for v in values)


def test_train_digits_quick_saves_reloads_and_plots(tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    digits = load_example("train_digits")
    results = digits.main(["--quick", "--out", str(tmp_path)])
    assert results["passed"]
    for kind in ("mlp", "cnn"):
        result = results[kind]
        assert pathlib.Path(result["checkpoint"]) == tmp_path / f"{kind}.npz"
        assert (tmp_path / f"{kind}.npz").stat().st_size > 0
        # a fresh model loaded from the checkpoint scores exactly what the trained one did
        assert result["reloaded_accuracy"] == result["accuracy"]
        losses = result["history"]["step_losses"]
        assert len(losses) == 8 and all_finite(losses)
        assert result["history"]["loss"][-1] < result["history"]["loss"][0]
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_char_lstm_quick_trains_on_varying_lengths_and_samples():
    char_lstm = load_example("char_lstm")
    results = char_lstm.main(["--quick", "--prompt", "Alice "])
    losses = results["losses"]
    assert len(losses) == 8 and all_finite(losses)
    assert np.mean(losses[-3:]) < losses[0]
    assert results["valid_losses"][-1][1] < results["valid_losses"][0][1]
    sample = results["sample"]
    assert sample.startswith("Alice ") and len(sample) == len("Alice ") + 40
    assert set(sample) <= set(char_lstm.load_text())


def test_char_lstm_trains_the_same_in_lazy_mode():
    """Dropout, clipping, Adam and a new sequence length per step, run as scheduled plans: the
    same losses as eager mode within the rounding of batched products."""
    char_lstm = load_example("char_lstm")
    eager = char_lstm.main(["--quick", "--prompt", "Alice "])
    lazy = char_lstm.main(["--quick", "--prompt", "Alice ", "--lazy"])
    np.testing.assert_allclose(lazy["losses"], eager["losses"], rtol=1e-5)
    np.testing.assert_allclose(lazy["valid_loss"], eager["valid_loss"], rtol=1e-5)


def test_char_lstm_profile_prints_where_the_time_goes_and_writes_a_trace(tmp_path, capsys):
    """--profile trains exactly as without it, and prints the profiler's tables."""
    import json

    char_lstm = load_example("char_lstm")
    plain = char_lstm.main(["--quick"])
    trace = tmp_path / "trace.json"
    profiled = char_lstm.main(["--quick", "--profile", "--trace", str(trace)])
    assert profiled["losses"] == plain["losses"]
    out = capsys.readouterr().out
    assert "lstm_cell " in out and "lstm_cell_grad (backward)" in out
    assert "char_lstm.py:" in out and "% time" in out
    events = json.loads(trace.read_text())["traceEvents"]
    assert {"forward", "backward"} <= {e.get("cat") for e in events}


def test_char_lstm_unrolls_as_many_steps_as_the_batch_is_long():
    char_lstm = load_example("char_lstm")
    model = char_lstm.CharLSTM(vocab_size=7, embed_dim=4, hidden_size=5)
    rng = np.random.default_rng(0)
    data = rng.integers(0, 7, size=100)
    for length in (3, 11):
        inputs, targets = char_lstm.sample_batch(data, 2, length, rng)
        assert inputs.shape == targets.shape == (2, length)
        logits, (h, c) = model(inputs)
        assert logits.shape == (2, length, 7) and h.shape == c.shape == (2, 5)


def test_char_transformer_quick_trains_and_samples():
    char_transformer = load_example("char_transformer")
    results = char_transformer.main(["--quick", "--prompt", "Alice "])
    losses = results["losses"]
    assert len(losses) == 12 and all_finite(losses)
    assert np.mean(losses[-3:]) < losses[0]
    held_out = [loss for _, loss in results["valid_losses"]]
    assert held_out[-1] < held_out[0] and all_finite(held_out)
    sample = results["sample"]
    assert sample.startswith("Alice ") and len(sample) == len("Alice ") + 40
    assert set(sample) <= set(char_transformer.load_text())


def test_char_transformer_is_causal():
    """Changing a later character never changes the scores at earlier positions."""
    char_transformer = load_example("char_transformer")
    model = char_transformer.CharTransformer(vocab_size=9, context=8, dim=16, heads=2, depth=2)
    model.eval()
    ids = np.random.default_rng(0).integers(0, 9, size=(2, 8))
    changed = ids.copy()
    changed[:, 5] = (changed[:, 5] + 1) % 9
    before, after = model(ids).numpy(), model(changed).numpy()
    np.testing.assert_allclose(before[:, :5], after[:, :5], rtol=1e-6, atol=1e-6)
    assert not np.allclose(before[:, 5:], after[:, 5:])


def test_tree_rnn_quick_loss_falls():
    tree_rnn = load_example("tree_rnn")
    results = tree_rnn.main(["--quick"])
    losses = [loss for _, loss, _ in results["log"]]
    assert all_finite(losses) and losses[-1] < losses[0]
    assert 0.0 <= results["accuracy"] <= 1.0 and 0.0 < results["baseline"] < 1.0


def test_tree_rnn_quick_lazy_autobatched_learns_and_reports_both_speeds():
    tree_rnn = load_example("tree_rnn")
    results = tree_rnn.main(["--quick", "--lazy"])
    losses = [loss for _, loss, _ in results["log"]]
    assert all_finite(losses) and losses[-1] < losses[0]
    eager, lazy = results["speeds"]
    assert eager > 0 and lazy > 0


def test_tree_rnn_follows_each_tree():
    tree_rnn = load_example("tree_rnn")
    tree = ("*", ("+", 3, 4), ("*", 2, 7))
    assert tree_rnn.to_text(tree) == "((3 + 4) * (2 * 7))"
    assert tree_rnn.value(tree) == 98 and tree_rnn.label(tree) == 8
    model = tree_rnn.TreeRNN(dim=4)
    assert model(tree).shape == (10,) and model(5).shape == (10,)
    rng = np.random.default_rng(0)
    held_out = tree_rnn.make_trees(rng, 20, 1, 2)
    texts = {tree_rnn.to_text(t) for t in held_out}
    assert len(texts) == 20
    fresh = tree_rnn.make_trees(rng, 50, 1, 2, exclude=frozenset(texts))
    assert not texts & {tree_rnn.to_text(t) for t in fresh}


def test_seed_loop_quick_is_reproducible_and_learns_nothing_strange():
    seed_loop = load_example("seed_loop")
    first, again = seed_loop.main(["--quick"]), seed_loop.main(["--quick"])
    assert len(first) == 10 and all_finite(first)
    assert first == again  # a fixed seed
    assert seed_loop.main(["--quick", "--seed", "1"]) != first


def test_quick_digits_runs_default_to_their_own_directory():
    digits = load_example("train_digits")
    assert digits.parse_args(["--quick"]).out.endswith("digits-quick")
    assert digits.parse_args([]).out.endswith("digits")
    assert digits.parse_args(["--quick", "--out", "x"]).out == "x"
