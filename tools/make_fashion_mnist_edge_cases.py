#!/usr/bin/python3
"""Writes tests/data/fashion_mnist_edge_cases/: test splits that the examples must handle or
refuse, each a t10k-images/t10k-labels pair made from the first test items of
tests/data/fashion_mnist_subset (tests/CMakeLists.txt puts each beside the subset's training
files):

  few_test/    10 test images (train_stn's sheet shows 48 when there are that many)
  empty_test/  no test images (train_mlp divided by the test split's size)
  wide_test/   the same 10 images' bytes as 14x56 images (not Fashion-MNIST's 28x28)

Run: /usr/bin/python3 tools/make_fashion_mnist_edge_cases.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fashion_mnist_subset import read_idx, write_idx  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")
SUBSET = os.path.join(DATA, "fashion_mnist_subset")
DST = os.path.join(DATA, "fashion_mnist_edge_cases")


def main():
    (_, rows, cols), images = read_idx(os.path.join(SUBSET, "t10k-images-idx3-ubyte.gz"))
    _, labels = read_idx(os.path.join(SUBSET, "t10k-labels-idx1-ubyte.gz"))
    n = 10
    cases = {
        "few_test": ((n, rows, cols), images[: n * rows * cols], labels[:n]),
        "empty_test": ((0, rows, cols), b"", b""),
        "wide_test": ((n, rows // 2, cols * 2), images[: n * rows * cols], labels[:n]),
    }
    for name, (dims, image_bytes, label_bytes) in cases.items():
        folder = os.path.join(DST, name)
        os.makedirs(folder, exist_ok=True)
        write_idx(os.path.join(folder, "t10k-images-idx3-ubyte.gz"), dims, image_bytes)
        write_idx(os.path.join(folder, "t10k-labels-idx1-ubyte.gz"), (dims[0],), label_bytes)
        print(name, dims)


if __name__ == "__main__":
    main()
