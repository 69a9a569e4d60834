"""What the per-example workloads share (tree_rnn, treelstm, tagger): their batches drawn at
random and the fluidtape training step."""

from __future__ import annotations

# tape.lazy's keyword arguments of the lazy variants, all interpreted (as a graph that changes
# every step runs): without autobatching, with the default autobatch="auto" (batched where it
# measures faster, tape.autobatch_choice), and always batched.
LAZY = {"autobatch": False, "compile": False}
AUTOBATCH = {"compile": False}
AUTOBATCH_ALWAYS = {"compile": False, "autobatch": True}


def training_step(params, example_losses, lazy=None):
    """A step callable: ``example_losses()`` records one batch's losses, one example at a time,
    and their mean is differentiated; returns (loss, gradients). ``lazy``: tape.lazy's keyword
    arguments (None: eager); the lazy step realises the loss and gradients it returns."""
    import ops
    import tape

    def run():
        tape.reset_global_tape()
        for param in params:
            param.clear_grad()
        loss = ops.stack(example_losses()).mean()
        tape.backward(loss)
        return loss, [p.grad() for p in params]

    if lazy is None:
        return run

    def step():
        _forget_structures()
        with tape.lazy(**lazy):
            loss, grads = run()
            tape.get_global_tape().realize([loss] + grads)
        return loss, grads

    return step


def _forget_structures():
    """Forgets the tape structures lazy mode has seen: every implementation draws the same
    batches (``sampling``), so a lazy variant timed after another would meet each structure for
    the second time (learning replay templates, compiling plans) instead of the first, which is
    what these workloads stand for. Forgetting costs a few dictionary clears."""
    import importlib

    from tape import replay

    lazy = importlib.import_module("tape.lazy")  # (the module: tape.lazy is the context manager)
    replay.forget()
    for remembered in (lazy._SEEN, lazy._BATCHED):
        remembered.clear()


def sampling(data, seed=0):
    """The next (examples, labels) on each call: a batch of ``data``'s batch size drawn at random
    from all its examples, so that every step's tape has a structure never seen before (the
    case of a model whose graph follows the data). Lazy mode remembers structures it has seen
    (plans, backward templates), so cycling through a few fixed batches would time mostly
    repeats. Every implementation draws the same sequence of batches (one seed)."""
    import numpy as np

    examples = [e for batch in data["batches"] for e in batch]
    labels = [label for batch in data["labels"] for label in batch]
    size, rng = len(data["batches"][0]), np.random.default_rng(seed)

    def next_batch():
        chosen = rng.choice(len(examples), size, replace=False)
        return [examples[i] for i in chosen], [labels[i] for i in chosen]

    return next_batch


def embedding_and_params(config, data):
    """fluidtape's ``layers.Embedding`` holding ``data["params"][0]``, and every parameter as a
    persistable Variable requiring a gradient, the embedding's table first (the order of
    ``data["params"]``)."""
    import layers
    import tape
    from benchmarks import common

    values = common.copies(data["params"])
    embed = layers.Embedding(config["vocab"], config["emb"])
    embed.params()[0].set_value(values[0])
    params = embed.params()
    for value in values[1:]:
        param = tape.Variable(value, requires_grad=True)
        param.persistable = True
        params.append(param)
    return embed, params
