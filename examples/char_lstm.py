"""Character-level LSTM language model: an LSTMCell unrolled in a plain Python loop.

Embedding -> LSTMCell stepped once per character -> Linear -> CrossEntropyLoss, trained on the
opening chapter of "Alice's Adventures in Wonderland" (examples/data/alice.txt, public domain).
Every batch draws its own sequence length (16..48 characters by default), so each step records
a tape of a different length: nothing is compiled ahead, the loop simply runs longer or
shorter. Gradients are clipped by their global norm. At the end it prints the loss on a
held-out tail of the text (against the unigram baseline) and a sample drawn from the model
character by character with a temperature.

Run (about 20 s on 2 cores):
    pip install -e ".[examples]" && python examples/char_lstm.py
    python examples/char_lstm.py --steps 2000 --temperature 0.5
    python examples/char_lstm.py --quick          # a few steps, what the smoke test runs
    python examples/char_lstm.py --quick --profile --trace trace.json   # where the time goes
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import time

import numpy as np
from tqdm import tqdm

import layers
import ops
import optim
import tape

DEFAULT_TEXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "alice.txt")


def load_text(path=DEFAULT_TEXT):
    """The text without its first line (the source and licence header)."""
    with open(path, encoding="utf-8") as file:
        return file.read().split("\n", 1)[1].strip() + "\n"


class Vocabulary:
    """The characters of a text, each with an integer id."""

    def __init__(self, text):
        self.chars = sorted(set(text))
        self.ids = {char: i for i, char in enumerate(self.chars)}

    def __len__(self):
        return len(self.chars)

    def encode(self, text):
        return np.array([self.ids[char] for char in text], dtype=np.int64)

    def decode(self, ids):
        return "".join(self.chars[int(i)] for i in ids)


class CharLSTM(layers.Function):
    """Next-character scores for every position of a batch of id sequences."""

    def __init__(self, vocab_size, embed_dim=32, hidden_size=128, dropout=0.0):
        super().__init__()
        self.embed = layers.Embedding(vocab_size, embed_dim)
        self.cell = layers.LSTMCell(embed_dim, hidden_size)
        self.dropout = layers.Dropout(dropout)
        self.head = layers.Linear(hidden_size, vocab_size)

    def forward(self, ids, state=None):
        """ids (B, T) -> (logits (B, T, vocab), final (h, c)); one cell step per column."""
        hiddens = []
        for t in range(ids.shape[1]):
            state = self.cell(self.embed(ids[:, t]), state)
            hiddens.append(state[0])
        return self.head(self.dropout(ops.stack(hiddens, axis=1))), state


def sample_batch(data, batch_size, length, rng):
    """``batch_size`` random windows of ``length`` ids and the same windows shifted by one."""
    starts = rng.integers(0, len(data) - length, size=batch_size)
    windows = data[starts[:, None] + np.arange(length + 1)]
    return windows[:, :-1], windows[:, 1:]


def sequence_loss(model, loss_fn, inputs, targets):
    """Mean cross-entropy (nats per character) over every position of the batch."""
    logits, _ = model(inputs)
    return loss_fn(logits.reshape((-1, logits.shape[-1])), targets.reshape(-1))


def train(model, data, valid, args, rng):
    """Adam with global-norm clipping on batches of varying length; returns the step losses
    and the (step, held-out loss) pairs measured every ``args.eval_every`` steps."""
    optimizer = optim.Adam(lr=args.lr, grad_clip=optim.ClipGradByGlobalNorm(args.clip))
    loss_fn = layers.CrossEntropyLoss()
    losses, valid_losses = [], []
    bar = tqdm(range(args.steps), desc="char-lstm", unit="step")
    for step in bar:
        length = int(rng.integers(args.min_len, args.max_len + 1))
        inputs, targets = sample_batch(data, args.batch_size, length, rng)
        model.train()
        with tape.lazy(args.lazy):  # lazy: the step runs as one scheduled plan at .value()
            tape.reset_global_tape()
            loss = sequence_loss(model, loss_fn, inputs, targets)
            tape.backward(loss)
            optimizer(model.params())
            losses.append(float(loss.value()))
        if (step + 1) % args.eval_every == 0 or step == args.steps - 1:
            valid_losses.append((step + 1, evaluate(model, valid)))
            bar.set_postfix(
                loss=f"{np.mean(losses[-20:]):.3f}", held_out=f"{valid_losses[-1][1]:.3f}"
            )
    return losses, valid_losses


def evaluate(model, data, length=64):
    """Mean cross-entropy over consecutive windows of held-out ids (eval mode, no gradients)."""
    count = (len(data) - 1) // length
    windows = data[: count * length + 1]
    inputs = windows[:-1].reshape(count, length)
    targets = windows[1:].reshape(count, length)
    model.eval()
    with tape.no_grad():
        tape.reset_global_tape()
        return float(sequence_loss(model, layers.CrossEntropyLoss(), inputs, targets).value())


def unigram_entropy(train_ids, test_ids, vocab_size):
    """Cross-entropy of the held-out ids under train character frequencies (add-one smoothed)."""
    counts = np.bincount(train_ids, minlength=vocab_size) + 1.0
    return float(-np.log(counts[test_ids] / counts.sum()).mean())


def generate(model, vocab, prompt, length, temperature, rng):
    """``prompt`` continued by ``length`` characters drawn from softmax(logits / temperature)."""
    model.eval()
    ids = list(vocab.encode(prompt))
    with tape.no_grad():
        tape.reset_global_tape()
        logits, state = model(np.array([ids]))
        for _ in range(length):
            scores = logits.numpy()[0, -1].astype(np.float64) / temperature
            probs = np.exp(scores - scores.max())
            ids.append(int(rng.choice(len(vocab), p=probs / probs.sum())))
            tape.reset_global_tape()  # the state Variables keep their values
            logits, state = model(np.array([[ids[-1]]]), state)
    return vocab.decode(ids)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", default=DEFAULT_TEXT)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--min-len", type=int, default=16)
    parser.add_argument("--max-len", type=int, default=48)
    parser.add_argument("--embed-dim", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--dropout", type=float, default=0.5, help="on the LSTM outputs")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--clip", type=float, default=1.0, help="max global gradient norm")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--sample-length", type=int, default=300)
    parser.add_argument("--prompt", default="Alice ")
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="BLAS threads (more only helps much larger matrices)",
    )
    parser.add_argument(
        "--lazy",
        action="store_true",
        help="train in lazy mode: each step is one cached plan (one per sequence length)",
    )
    parser.add_argument("--quick", action="store_true", help="a few tiny steps (smoke test)")
    parser.add_argument(
        "--profile", action="store_true", help="print where training time goes (tape.profile)"
    )
    parser.add_argument("--trace", help="write training's Chrome trace JSON to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.batch_size, args.hidden, args.sample_length = 8, 8, 32, 40
        args.min_len, args.max_len, args.eval_every = 8, 16, 4
    return args


def main(argv=None):
    """Parses ``argv``, trains and samples; returns {"losses", "valid_losses", "valid_loss",
    "baseline", "sample", "seconds"}."""
    args = parse_args(argv)
    with tape.blas_threads(args.blas_threads):
        return run(args)


def run(args):
    tape.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    text = load_text(args.text)
    vocab = Vocabulary(text)
    ids = vocab.encode(text)
    split = int(len(ids) * 0.9)
    train_ids, valid_ids = ids[:split], ids[split:]
    print(f"{len(text)} characters, {len(vocab)} distinct; the last 10% is held out")
    model = CharLSTM(len(vocab), args.embed_dim, args.hidden, args.dropout)
    start = time.perf_counter()
    profiling = args.profile or args.trace
    with tape.profile() if profiling else contextlib.nullcontext() as profile:
        losses, valid_losses = train(model, train_ids, valid_ids, args, rng)
    seconds = time.perf_counter() - start
    if args.profile:
        print(profile.table(sort_by="total", group_by="op", limit=12))
        print(profile.table(sort_by="total", group_by="line", limit=8))
    if args.trace:
        profile.export_chrome_trace(args.trace)
        print(f"wrote {args.trace} (open it in https://ui.perfetto.dev or chrome://tracing)")
    for step, loss in valid_losses:
        print(
            f"step {step:5d}  training loss {np.mean(losses[max(step - 20, 0) : step]):.3f}  "
            f"held-out loss {loss:.3f} nats/char"
        )
    valid_loss = valid_losses[-1][1]
    baseline = unigram_entropy(train_ids, valid_ids, len(vocab))
    print(
        f"{args.steps} steps in {seconds:.1f} s; held-out loss {valid_loss:.3f} nats/char "
        f"({valid_loss / math.log(2):.2f} bits; unigram baseline {baseline:.3f})"
    )
    sample = generate(model, vocab, args.prompt, args.sample_length, args.temperature, rng)
    print(f"sample (temperature {args.temperature}):\n{sample}")
    return {
        "losses": losses,
        "valid_losses": valid_losses,
        "valid_loss": valid_loss,
        "baseline": baseline,
        "sample": sample,
        "seconds": seconds,
    }


if __name__ == "__main__":
    main()
