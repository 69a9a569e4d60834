"""Graph pictures: tape.to_dot's DOT text, parsed with pydot (not compared as strings)."""

import numpy as np
import pytest

import layers
import ops
import optim
import tape
from tape.dot import plan_groups

pydot = pytest.importorskip("pydot")


def _parse(text):
    (graph,) = pydot.graph_from_dot_data(text)
    return graph


def _ops_by_role(graph):
    """{fill colour: [op types]} over box nodes, including those inside clusters."""
    nodes = list(graph.get_nodes())
    for sub in graph.get_subgraphs():
        nodes += sub.get_nodes()
    found = {}
    for node in nodes:
        attrs = node.get_attributes()
        if attrs.get("shape") == "box":
            kind = attrs["label"].strip('"').split("\\n")[0]
            found.setdefault(attrs["fillcolor"].strip('"'), []).append(kind)
    return found


FORWARD, BACKWARD, UPDATE = "#dbe8f6", "#f8dcdc", "#fff1c2"


def _model_loss():
    tape.reset_global_tape()
    model = layers.Linear(3, 2, act="tanh")
    x = tape.Variable(np.ones((4, 3), np.float32), name="x")
    return model, (model(x) ** 2.0).mean()


def test_a_loss_draws_its_forward_and_the_gradient_ops_without_running_them():
    model, loss = _model_loss()
    recorded = len(tape.get_global_tape().ops)
    graph = _parse(tape.to_dot(loss))
    roles = _ops_by_role(graph)
    assert roles[FORWARD] == ["mul", "elementwise_add", "tanh", "elementwise_pow", "mean"]
    assert "tanh_grad" in roles[BACKWARD] and "fill_ones_like" in roles[BACKWARD]
    # nothing ran or accumulated; the eager tape is as it was
    assert all(p.grad() is None for p in model.params())
    assert len(tape.get_global_tape().ops) == recorded
    nodes = [n for n in graph.get_nodes() if "label" in n.get_attributes()]
    labels = {n.get_attributes()["label"].strip('"'): n for n in nodes}
    weight = labels["LinearWeight\\n(3, 2) float32"].get_attributes()
    assert weight["style"].strip('"') == "filled,bold"  # parameters styled apart
    assert "x\\n(4, 3) float32" in labels


def test_every_op_is_wired_to_its_inputs_and_outputs():
    _, loss = _model_loss()
    graph = _parse(tape.to_dot(loss, backward=False))
    edges = {(e.get_source(), e.get_destination()) for e in graph.get_edges()}
    nodes = {n.get_name(): n.get_attributes() for n in graph.get_nodes()}
    ops_ = [name for name, attrs in nodes.items() if attrs.get("shape") == "box"]
    assert len(ops_) == 5
    for op in ops_:
        assert any(dst == op for _, dst in edges) and any(src == op for src, _ in edges)


def _lazy_lstm_step():
    cell = layers.LSTMCell(4, 8)
    h = c = tape.Variable(np.zeros((2, 8), np.float32))
    total = None
    for _ in range(6):
        h, c = cell(tape.Variable(np.ones((2, 4), np.float32)), (h, c))
        total = h.sum() if total is None else total + h.sum()
    total.backward()
    optim.SGD(cell.params(), lr=0.1).step()
    return total


def test_lazy_mode_draws_recorded_lines_gradient_ops_and_updates():
    with tape.lazy(compile=True):
        t = tape.reset_global_tape()
        _lazy_lstm_step()
        graph = _parse(tape.to_dot(t))
        roles = _ops_by_role(graph)
        assert "lstm_cell" in roles[FORWARD] and "lstm_cell_grad" in roles[BACKWARD]
        assert roles[UPDATE] == ["sgd"] * 4
        text = tape.to_dot(t)
        assert "test_dot.py:" in text and "in _lazy_lstm_step" in text


def test_a_lazy_plan_draws_its_batched_products_as_clusters():
    with tape.lazy(compile=True):
        t = tape.reset_global_tape()
        _lazy_lstm_step().numpy()
        compiled = t._last_plan
        groups = plan_groups(compiled)
        graph = _parse(tape.to_dot(t, plan=True))
    assert groups and all(label.startswith("batched products (from ") for label, _ in groups)
    block = compiled.analysis.block
    for _, members in groups:
        assert all("/batched_" in block.ops[i].name for i in members)
    clusters = graph.get_subgraphs()
    assert len(clusters) == len(groups)
    for cluster, (label, members) in zip(clusters, groups):
        assert cluster.get_label().strip('"') == label
        assert len([n for n in cluster.get_nodes() if n.get_name().startswith("op")]) == len(
            members
        )
    assert any("matmul" in kinds for kinds in _ops_by_role(graph).values())


def test_exact_plans_have_no_clusters():
    with tape.lazy(exact=True, compile=True):
        t = tape.reset_global_tape()
        _lazy_lstm_step().numpy()
        assert plan_groups(t._last_plan) == []
        assert _parse(tape.to_dot(t, plan=True)).get_subgraphs() == []


def test_a_program_is_drawn_from_its_ir():
    t = tape.Tape(lazy=True)
    x = tape.Variable(np.ones((2, 2), np.float32), name="x")
    t.add_op("relu", {"X": [x]})
    graph = _parse(tape.to_dot(tape.Program.from_tape(t)))
    assert _ops_by_role(graph) == {FORWARD: ["relu"]}


def test_draw_writes_the_dot_file_and_says_how_to_render_without_graphviz(tmp_path, monkeypatch):
    _, loss = _model_loss()
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.warns(UserWarning, match=r"dot -Tsvg .*step.dot -o .*step.svg"):
        written = tape.draw(loss, tmp_path / "step.svg")
    assert written == str(tmp_path / "step.dot")
    _parse((tmp_path / "step.dot").read_text())
    assert tape.draw(loss, tmp_path / "plain.dot") == str(tmp_path / "plain.dot")


def test_draw_renders_svg_where_graphviz_is_installed(tmp_path):
    import shutil

    pytest.importorskip("graphviz")
    if shutil.which("dot") is None:
        pytest.skip("the Graphviz 'dot' program is not installed")
    _, loss = _model_loss()
    written = tape.draw(loss, tmp_path / "step.svg")
    assert written == str(tmp_path / "step.svg")
    assert "<svg" in (tmp_path / "step.svg").read_text()


def test_a_tape_without_a_plan_says_so():
    with pytest.raises(ValueError, match="no lazy plan"):
        tape.to_dot(tape.Tape(), plan=True)


def test_stale_names_are_not_forced_on_the_users_variables():
    tape.reset_global_tape()
    y = ops.relu(tape.Variable(np.ones(2), requires_grad=True))
    tape.to_dot(y)
    assert y._name is None
