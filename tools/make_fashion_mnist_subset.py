#!/usr/bin/python3
"""Writes tests/data/fashion_mnist_subset/: the first 512 training and 256 test items of
Fashion-MNIST, taken from Debian's dataset-fashion-mnist, as gzip IDX files named like the
originals. Tests use it so they run without the package; the first items are taken (no
shuffling) so the subset is reproducible and its items can be checked against the full set.

Run: /usr/bin/python3 tools/make_fashion_mnist_subset.py [source_dir]
"""
import gzip
import os
import struct
import sys

SRC = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"
DST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "fashion_mnist_subset")
COUNTS = {"train": 512, "t10k": 256}


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    assert zero == 0 and dtype == 0x08, path
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return dims, data[4 + 4 * ndim:]


def write_idx(path, dims, payload):
    header = struct.pack(">HBB", 0, 0x08, len(dims)) + struct.pack(">" + "I" * len(dims), *dims)
    # mtime=0 and a fixed name make the gzip bytes reproducible from run to run.
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as f:
            f.write(header + payload)


def main():
    os.makedirs(DST, exist_ok=True)
    for split, n in COUNTS.items():
        for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
            name = f"{split}-{kind}.gz"
            dims, payload = read_idx(os.path.join(SRC, name))
            item = 1
            for d in dims[1:]:
                item *= d
            write_idx(os.path.join(DST, name), (n,) + tuple(dims[1:]), payload[: n * item])
            print(name, (n,) + tuple(dims[1:]))


if __name__ == "__main__":
    main()
