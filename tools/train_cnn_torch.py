#!/usr/bin/python3
"""examples/train_cnn.cpp in PyTorch: the same CNN (two blocks of Conv2d 3x3 -> BatchNorm2d ->
ReLU -> MaxPool2d 2, then Flatten -> Linear 3136-128 -> ReLU -> Linear 128-10), cross_entropy,
Adam, the same batch size and epochs, batches of a fresh random permutation each epoch (drawn
from torch's generator: the same style, not the same order), images in [0, 1]. Prints the time
and test accuracy of each epoch, to compare an epoch with tapegrad's on the same machine and
threads:

    /usr/bin/python3 tools/train_cnn_torch.py --epochs 3 --batch-size 64 --lr 1e-3 --threads 2
"""
import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def load_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_split(data_dir, prefix):
    images = load_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = load_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


def make_cnn():
    def block(i, o):
        return [nn.Conv2d(i, o, 3, 1, 1), nn.BatchNorm2d(o), nn.ReLU(), nn.MaxPool2d(2)]
    return nn.Sequential(*block(1, 32), *block(32, 64), nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                         nn.Linear(128, 10))


def accuracy(model, x, y, batch=1000):
    model.eval()
    correct = 0
    with torch.no_grad():
        for b in range(0, len(x), batch):
            correct += (model(x[b:b + batch]).argmax(1) == y[b:b + batch]).sum().item()
    model.train()
    return correct / len(x)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--limit", type=int, default=0, help="use only the first N training samples (0: all)")
    p.add_argument("--no-flush-denormal", action="store_true", help="keep IEEE denormals (as train_cnn's flag)")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(not args.no_flush_denormal)
    torch.manual_seed(args.seed)
    x_train, y_train = load_split(args.data_dir, "train")
    x_test, y_test = load_split(args.data_dir, "t10k")
    if args.limit:
        x_train, y_train = x_train[:args.limit], y_train[:args.limit]
    n = len(x_train)
    print(f"Fashion-MNIST: {n} train, {len(x_test)} test images; {args.threads} threads; torch {torch.__version__}")
    model = make_cnn()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    shuffle = torch.Generator().manual_seed(args.seed + 1)
    total = 0.0
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(n, generator=shuffle)
        start = time.perf_counter()
        loss_sum, steps = 0.0, 0
        for b in range(0, n, args.batch_size):
            idx = order[b:b + args.batch_size]
            x, y = x_train[idx], y_train[idx]
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item()
            steps += 1
        seconds = time.perf_counter() - start
        total += seconds
        acc = accuracy(model, x_test, y_test)
        print(f"epoch {epoch}: train loss {loss_sum / steps:.4f}, test accuracy {100 * acc:.2f}%, {seconds:.1f} s "
              f"({n / seconds:.0f} samples/s)", flush=True)
    print(f"final test accuracy {100 * acc:.2f}% after {total:.1f} s of training ({total / args.epochs:.1f} s per epoch)")


if __name__ == "__main__":
    main()
