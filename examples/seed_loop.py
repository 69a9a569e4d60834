"""The seed's training loop ("Dynamic Graph on Fluid"), exactly as DESIGN.md's public contract.

Two relu Linear layers, the mean as the loss, SGD; the tape is reset every iteration.
Run: python examples/seed_loop.py
"""

import numpy as np

import layers
import optim
import tape


def main(steps=100):
    l1, l2, mean = layers.Linear(3, 3, act="relu"), layers.Linear(3, 3, act="relu"), layers.Mean()
    sgd = optim.SGD(lr=0.001)
    for step in range(steps):
        tape.reset_global_tape()
        x = tape.Variable(np.random.rand(8, 3).astype(np.float32))
        loss = mean(l2(l1(x)))
        if step % 10 == 0:
            print(f"step {step:3d}  loss {float(loss.value()):.4f}")
        tape.backward(loss)
        sgd(l1.params() + l2.params())
    return float(loss.value())


if __name__ == "__main__":
    main()
