"""The seed's training loop ("Dynamic Graph on Fluid"), as in the public contract of
docs/design.md: two relu Linear layers, the mean as the loss, SGD; the tape is reset every
iteration, and the seed is fixed so every run prints the same losses.

Run:
    python examples/seed_loop.py             # 100 steps
    python examples/seed_loop.py --quick     # 10 steps (what the smoke test runs)
    python examples/seed_loop.py --seed 3 --steps 500
"""

import argparse

import numpy as np

import layers
import optim
import tape


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data and initial weights")
    parser.add_argument("--quick", action="store_true", help="10 steps (a smoke test)")
    return parser.parse_args(argv)


def main(argv=None):
    """Trains for the given number of steps; returns the losses, one per step."""
    args = parse_args(argv)
    steps = 10 if args.quick else args.steps
    tape.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    l1, l2, mean = layers.Linear(3, 3, act="relu"), layers.Linear(3, 3, act="relu"), layers.Mean()
    sgd = optim.SGD(lr=0.001)
    losses = []
    for step in range(steps):
        tape.reset_global_tape()
        x = tape.Variable(rng.random((8, 3)).astype(np.float32))
        loss = mean(l2(l1(x)))
        losses.append(float(loss.value()))
        if step % 10 == 0:
            print(f"step {step:3d}  loss {losses[-1]:.4f}")
        tape.backward(loss)
        sgd(l1.params() + l2.params())
    return losses


if __name__ == "__main__":
    main()
