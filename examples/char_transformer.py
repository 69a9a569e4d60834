"""Character-level causal Transformer: a small GPT-style language model on a bundled text.

Token and position embeddings -> pre-norm ``TransformerEncoderLayer``s with a causal mask (each
position attends only to itself and earlier ones) -> LayerNorm -> Linear -> CrossEntropyLoss,
trained with AdamW (a linear warm-up, then cosine decay) on random windows of the opening
chapter of "Alice's Adventures in Wonderland" (examples/data/alice.txt, public domain). Every
``--eval-every`` steps it prints the loss on a held-out tail of the text (against the unigram
baseline); at the end it samples a continuation of a prompt character by character with a
temperature.

Run (about 45 s on 2 cores):
    pip install -e ".[examples]" && python examples/char_transformer.py
    python examples/char_transformer.py --steps 1000 --layers 3 --temperature 0.6
    python examples/char_transformer.py --quick      # a few steps, what the smoke test runs
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np
from tqdm import tqdm

import layers
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


class CharTransformer(layers.Function):
    """Next-character scores for every position of a batch of id sequences (B, T), T <= context."""

    def __init__(self, vocab_size, context, dim=64, heads=4, depth=2, dropout=0.0):
        super().__init__()
        self.context = context
        self.tokens = layers.Embedding(vocab_size, dim)
        self.positions = layers.Embedding(context, dim)
        self.drop = layers.Dropout(dropout)
        self.blocks = layers.Sequential(
            *[
                layers.TransformerEncoderLayer(
                    dim, heads, 4 * dim, dropout, "relu", batch_first=True, norm_first=True
                )
                for _ in range(depth)
            ]
        )
        self.norm = layers.LayerNorm(dim)
        self.head = layers.Linear(dim, vocab_size)

    def forward(self, ids):
        """ids (B, T) -> logits (B, T, vocab)."""
        length = ids.shape[1]
        if length > self.context:
            raise ValueError(f"sequence of {length} ids is longer than the context {self.context}")
        x = self.drop(self.tokens(ids) + self.positions(np.arange(length)))
        for block in self.blocks.children():
            x = block(x, is_causal=True)
        return self.head(self.norm(x))


def sample_batch(data, batch_size, length, rng):
    """``batch_size`` random windows of ``length`` ids and the same windows shifted by one."""
    starts = rng.integers(0, len(data) - length, size=batch_size)
    windows = data[starts[:, None] + np.arange(length + 1)]
    return windows[:, :-1], windows[:, 1:]


def sequence_loss(model, loss_fn, inputs, targets):
    """Mean cross-entropy (nats per character) over every position of the batch."""
    logits = model(inputs)
    return loss_fn(logits.reshape((-1, logits.shape[-1])), targets.reshape(-1))


def evaluate(model, data, length):
    """Mean cross-entropy over consecutive windows of held-out ids (eval mode, no gradients)."""
    count = (len(data) - 1) // length
    inputs = data[: count * length].reshape(count, length)
    targets = data[1 : count * length + 1].reshape(count, length)
    model.eval()
    with tape.no_grad():
        tape.reset_global_tape()
        loss = sequence_loss(model, layers.CrossEntropyLoss(), inputs, targets)
        return float(loss.value())


def train(model, data, valid, args, rng):
    """AdamW with global-norm clipping, a linear warm-up then cosine decay; returns the step
    losses and the (step, held-out loss) pairs measured every ``args.eval_every`` steps."""
    decay = optim.lr_scheduler.CosineAnnealing(
        args.lr, T_max=max(args.steps - args.warmup, 1), eta_min=args.lr / 10
    )
    schedule = optim.lr_scheduler.LinearWarmup(
        decay, args.warmup, start_lr=args.lr / args.warmup, end_lr=args.lr
    )
    optimizer = optim.AdamW(
        lr=schedule, weight_decay=0.01, grad_clip=optim.ClipGradByGlobalNorm(args.clip)
    )
    loss_fn = layers.CrossEntropyLoss()
    losses, valid_losses = [], [(0, evaluate(model, valid, args.context))]
    bar = tqdm(range(args.steps), desc="char-transformer", unit="step")
    for step in bar:
        inputs, targets = sample_batch(data, args.batch_size, args.context, rng)
        model.train()
        tape.reset_global_tape()
        loss = sequence_loss(model, loss_fn, inputs, targets)
        tape.backward(loss)
        optimizer(model.params())
        schedule.step()
        losses.append(float(loss.value()))
        if (step + 1) % args.eval_every == 0 or step == args.steps - 1:
            valid_losses.append((step + 1, evaluate(model, valid, args.context)))
            bar.set_postfix(
                loss=f"{np.mean(losses[-20:]):.3f}", held_out=f"{valid_losses[-1][1]:.3f}"
            )
    return losses, valid_losses


def unigram_entropy(train_ids, test_ids, vocab_size):
    """Cross-entropy of the held-out ids under train character frequencies (add-one smoothed)."""
    counts = np.bincount(train_ids, minlength=vocab_size) + 1.0
    return float(-np.log(counts[test_ids] / counts.sum()).mean())


def generate(model, vocab, prompt, length, temperature, rng):
    """``prompt`` continued by ``length`` characters drawn from softmax(logits / temperature),
    each step reading the last ``context`` characters."""
    model.eval()
    ids = list(vocab.encode(prompt))
    with tape.no_grad():
        for _ in range(length):
            tape.reset_global_tape()
            logits = model(np.array([ids[-model.context :]]))
            scores = logits.numpy()[0, -1].astype(np.float64) / temperature
            probs = np.exp(scores - scores.max())
            ids.append(int(rng.choice(len(vocab), p=probs / probs.sum())))
    return vocab.decode(ids)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", default=DEFAULT_TEXT)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--context", type=int, default=64, help="characters per window")
    parser.add_argument("--dim", type=int, default=64, help="model width")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2, help="Transformer blocks")
    parser.add_argument(
        "--dropout", type=float, default=0.0, help="worth raising for runs much longer"
    )
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--warmup", type=int, default=50, help="steps of linear lr warm-up")
    parser.add_argument("--clip", type=float, default=1.0, help="max global gradient norm")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--sample-length", type=int, default=300)
    parser.add_argument("--prompt", default="Alice ")
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--blas-threads", type=int, default=1, help="BLAS threads")
    parser.add_argument("--quick", action="store_true", help="a few tiny steps (smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.batch_size, args.context, args.dim = 12, 8, 16, 32
        args.layers, args.sample_length, args.eval_every, args.warmup = 1, 40, 4, 4
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
    model = CharTransformer(
        len(vocab), args.context, args.dim, args.heads, args.layers, args.dropout
    )
    count = sum(int(np.prod(p.shape)) for p in model.params())
    print(f"{args.layers} blocks, width {args.dim}, {args.heads} heads: {count} parameters")
    start = time.perf_counter()
    losses, valid_losses = train(model, train_ids, valid_ids, args, rng)
    seconds = time.perf_counter() - start
    for step, loss in valid_losses:
        recent = f"{np.mean(losses[max(step - 20, 0) : step]):.3f}" if step else "  -  "
        print(f"step {step:5d}  training loss {recent}  held-out loss {loss:.3f} nats/char")
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
