"""What models that are not convolutional networks score on the small scale's
split (the first TRAIN training images of Fashion-MNIST, all 10,000 test
images), so that the small target can be set clearly above them: a
multinomial logistic regression and an MLP with one hidden layer, trained with
minibatch SGD with momentum, weight decay and a cosine schedule, on the raw
28x28 pixels (no JPEG rounding, no resize: if anything easier than what the
ResNet sees). numpy only; about a minute on two cores.

    python3 image_classification/baselines.py [--train 60000] [--seeds 3]
"""
import argparse
import gzip
import os
import struct

import numpy as np

SRC = "/usr/share/datasets/fashion-mnist"


def idx(name):
    with gzip.open(os.path.join(SRC, name), "rb") as f:
        magic, count = struct.unpack(">II", f.read(8))
        dims = [count] + [struct.unpack(">I", f.read(4))[0] for _ in range((magic & 0xFF) - 1)]
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


def load(train_count):
    x = idx("train-images-idx3-ubyte.gz")[:train_count].reshape(train_count, -1) / 255.0
    y = idx("train-labels-idx1-ubyte.gz")[:train_count].astype(np.int64)
    xt = idx("t10k-images-idx3-ubyte.gz").reshape(10000, -1) / 255.0
    yt = idx("t10k-labels-idx1-ubyte.gz").astype(np.int64)
    mean, std = x.mean(0), x.std(0) + 0.1
    return ((x - mean) / std).astype(np.float32), y, ((xt - mean) / std).astype(np.float32), yt


def train(layers, x, y, xt, yt, seed, epochs, lr, batch=128, momentum=0.9, decay=1e-4):
    """layers: widths from input to output; ReLU between. Returns test top-1."""
    rng = np.random.default_rng(seed)
    ws = [rng.normal(0, np.sqrt(2.0 / a), (a, b)).astype(np.float32) for a, b in zip(layers, layers[1:])]
    bs = [np.zeros(b, np.float32) for b in layers[1:]]
    vel = [np.zeros_like(p) for p in ws + bs]
    steps = epochs * (len(x) // batch)
    step = 0
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for i in range(len(x) // batch):
            idx_ = order[i * batch:(i + 1) * batch]
            acts = [x[idx_]]
            for k, (w, b) in enumerate(zip(ws, bs)):
                z = acts[-1] @ w + b
                acts.append(np.maximum(z, 0) if k + 1 < len(ws) else z)
            logits = acts[-1] - acts[-1].max(1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(1, keepdims=True)
            p[np.arange(batch), y[idx_]] -= 1
            grad = p / batch
            grads_w, grads_b = [], []
            for k in range(len(ws) - 1, -1, -1):
                grads_w.insert(0, acts[k].T @ grad + decay * ws[k])
                grads_b.insert(0, grad.sum(0))
                if k:
                    grad = (grad @ ws[k].T) * (acts[k] > 0)
            rate = lr * 0.5 * (1 + np.cos(np.pi * step / steps))
            for p_, g, v in zip(ws + bs, grads_w + grads_b, vel):
                v *= momentum
                v += g
                p_ -= rate * v
            step += 1
    h = xt
    for k, (w, b) in enumerate(zip(ws, bs)):
        h = h @ w + b
        if k + 1 < len(ws):
            h = np.maximum(h, 0)
    return float((h.argmax(1) == yt).mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", type=int, default=60000, help="training images (the first N)")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    x, y, xt, yt = load(args.train)
    models = {
        "logistic regression": dict(layers=[784, 10], epochs=20, lr=0.01),
        "MLP 784-512-10": dict(layers=[784, 512, 10], epochs=20, lr=0.02),
    }
    print(f"Fashion-MNIST, first {args.train} training images, 10,000 test images")
    for name, m in models.items():
        scores = [train(m["layers"], x, y, xt, yt, seed, m["epochs"], m["lr"]) for seed in range(args.seeds)]
        print(f"{name:22s} top-1 mean {np.mean(scores):.4f}, best {max(scores):.4f} "
              f"({args.seeds} seeds, {m['epochs']} epochs)")


if __name__ == "__main__":
    main()
