"""What the per-example workloads share (tree_rnn, treelstm, tagger): their data's batch cycle
and the fluidtape training step."""

from __future__ import annotations

# tape.lazy's keyword arguments of the two lazy variants: interpreted (as a graph that changes
# every step runs), without and with autobatching.
LAZY = {"autobatch": False, "compile": False}
AUTOBATCH = {"compile": False}


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
        with tape.lazy(**lazy):
            loss, grads = run()
            tape.get_global_tape().realize([loss] + grads)
        return loss, grads

    return step


def cycling(data):
    """The next (examples, labels) on each call, starting from the first batch."""
    state = {"step": 0}

    def next_batch():
        index = state["step"] % len(data["batches"])
        state["step"] += 1
        return data["batches"][index], data["labels"][index]

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
