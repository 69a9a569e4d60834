"""Makes the README's graph picture: tape.draw of a small model, rendered without Graphviz.

``tape.draw`` renders through Graphviz's ``dot`` program where it is installed; where it is not
(as on the machine the picture was made on) it writes the DOT text. This script then draws that
DOT file with matplotlib: it parses it with pydot, places the nodes in layers (each node one
layer below its lowest input, nodes ordered within a layer by the mean position of their
inputs), and draws every node with the shape, fill and label the DOT text gives it. Only the
layout is this script's own; nodes, labels, colours and edges are tape.to_dot's.

    pip install pydot matplotlib && python docs/render_dot.py    # writes docs/images/
"""

from __future__ import annotations

import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # this checkout's tape, ops, layers

import numpy as np  # noqa: E402

import layers  # noqa: E402
import tape  # noqa: E402


def record(stem):
    """tape.draw of a Linear(3, 2, tanh) layer's mean squared output, forward and backward."""
    tape.seed(0)
    model = layers.Linear(3, 2, act="tanh")
    with tape.lazy():  # lazy ops keep the line that recorded them, shown in each op's box
        tape.reset_global_tape()
        x = tape.Variable(np.ones((4, 3), np.float32), name="x")
        hidden = model(x)
        loss = (hidden * hidden).mean()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ("Graphviz is not installed: wrote ...")
            return tape.draw(loss, stem + ".svg")


def layout(nodes, edges):
    """{node: (x, layer)}: layers by longest path from the sources, x by barycentre sweeps."""
    inputs = {n: [] for n in nodes}
    for source, target in edges:
        inputs[target].append(source)
    layer = {}

    def depth(node):
        if node not in layer:
            layer[node] = 1 + max((depth(s) for s in inputs[node]), default=-1)
        return layer[node]

    for node in nodes:
        depth(node)
    rows = {}
    for node in nodes:
        rows.setdefault(layer[node], []).append(node)
    x = {}
    for row in sorted(rows):
        members = rows[row]
        for node in members:
            above = [x[s] for s in inputs[node] if s in x]
            x[node] = sum(above) / len(above) if above else len(x)
        members.sort(key=lambda n: x[n])
        for position, node in enumerate(members):
            x[node] = position - (len(members) - 1) / 2
    return {node: (x[node], layer[node]) for node in nodes}, max(len(r) for r in rows.values())


def render(dot_path, png_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.patches as patches
    import matplotlib.pyplot as plt
    import pydot

    (graph,) = pydot.graph_from_dot_file(dot_path)
    attrs = {}
    for node in graph.get_nodes():
        found = node.get_attributes()
        if "label" in found:
            attrs[node.get_name()] = {k: v.strip('"') for k, v in found.items()}
    edges = [(e.get_source(), e.get_destination()) for e in graph.get_edges()]
    where, widest = layout(list(attrs), edges)
    depth = max(y for _, y in where.values()) + 1
    figure, axes = plt.subplots(figsize=(2.3 * widest, 0.95 * depth))
    scale_x, scale_y = 2.3, 0.95
    for source, target in edges:
        (x0, y0), (x1, y1) = where[source], where[target]
        axes.annotate(
            "",
            xy=(x1 * scale_x, -y1 * scale_y + 0.22),
            xytext=(x0 * scale_x, -y0 * scale_y - 0.22),
            arrowprops={"arrowstyle": "->", "color": "#555555", "lw": 0.8},
        )
    for name, found in attrs.items():
        x, y = where[name][0] * scale_x, -where[name][1] * scale_y
        fill = found.get("fillcolor", "#ffffff")
        style = found.get("style", "")
        line = "--" if "dashed" in style else "-"
        weight = 2.0 if "bold" in style else 0.9
        if found.get("shape") == "box":
            patch = patches.FancyBboxPatch(
                (x - 1.0, y - 0.27), 2.0, 0.54, boxstyle="round,pad=0.02", fc=fill, ec="#333333"
            )
        else:
            patch = patches.Ellipse((x, y), 1.9, 0.5, fc=fill, ec="#333333")
        patch.set_linestyle(line)
        patch.set_linewidth(weight)
        axes.add_patch(patch)
        text = found["label"].replace("\\n", "\n")
        axes.text(x, y, text, ha="center", va="center", fontsize=6.2, family="DejaVu Sans")
    axes.set_xlim(-(widest / 2 + 0.2) * scale_x, (widest / 2 + 0.2) * scale_x)
    axes.set_ylim(-(depth - 0.4) * scale_y, 0.5 * scale_y)
    axes.axis("off")
    figure.tight_layout()
    figure.savefig(png_path, dpi=110)
    plt.close(figure)


def main():
    images = os.path.join(HERE, "images")
    os.makedirs(images, exist_ok=True)
    stem = os.path.join(images, "debugging_graph")
    written = record(stem)
    if written.endswith(".dot"):  # no Graphviz: render the DOT text here
        render(written, stem + ".png")
        print(f"wrote {written} and {stem}.png (matplotlib layout)")
    else:
        print(f"wrote {written} (Graphviz)")


if __name__ == "__main__":
    main()
