#!/usr/bin/env python3
"""Cut the bundled Fashion-MNIST subset of edgecfl-shared from the full dataset.

Rule (documented in README.md beside this script): walk each full IDX file in
file order and keep a sample while fewer than PER_CLASS samples of its label
have been kept (300 per class from the training set, 100 per class from the
test set). Kept samples stay in file order. The output is written as gzip'd
IDX files with a fixed gzip header (no file name, mtime 0, level 9), so the
same input always gives the same bytes.

Usage: make_subset.py [FULL_DIR] [OUT_DIR]
  FULL_DIR defaults to /usr/share/datasets/fashion-mnist (Debian package
  dataset-fashion-mnist); OUT_DIR defaults to the directory of this script.
Only the Python standard library is needed.
"""

import gzip
import hashlib
import os
import struct
import sys

ROWS = COLS = 28
NUM_CLASSES = 10
SPLITS = [("train", 300), ("t10k", 100)]


def read_idx(path, magic):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    found = struct.unpack(">I", data[:4])[0]
    if found != magic:
        sys.exit(f"{path}: magic {found:#010x}, expected {magic:#010x}")
    ndims = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndims, data[4 : 4 + 4 * ndims])
    body = data[4 + 4 * ndims :]
    size = 1
    for d in dims:
        size *= d
    if len(body) != size:
        sys.exit(f"{path}: {len(body)} data bytes, header says {size}")
    return dims, body


def find(full_dir, name):
    for candidate in (name, name + ".gz"):
        path = os.path.join(full_dir, candidate)
        if os.path.exists(path):
            return path
    sys.exit(f"{os.path.join(full_dir, name)}(.gz) not found: install dataset-fashion-mnist")


def write_gz(path, payload):
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as gz:
            gz.write(payload)
    print(f"{path}: {os.path.getsize(path)} bytes, sha256 of IDX {hashlib.sha256(payload).hexdigest()}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    full_dir = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"
    out_dir = sys.argv[2] if len(sys.argv) > 2 else here
    for prefix, per_class in SPLITS:
        (n_img, rows, cols), pixels = read_idx(find(full_dir, f"{prefix}-images-idx3-ubyte"), 0x803)
        (n_lab,), labels = read_idx(find(full_dir, f"{prefix}-labels-idx1-ubyte"), 0x801)
        if (rows, cols) != (ROWS, COLS) or n_img != n_lab:
            sys.exit(f"{prefix}: unexpected shape {n_img}x{rows}x{cols} with {n_lab} labels")
        kept = []
        counts = [0] * NUM_CLASSES
        for i, label in enumerate(labels):
            if counts[label] < per_class:
                counts[label] += 1
                kept.append(i)
        if counts != [per_class] * NUM_CLASSES:
            sys.exit(f"{prefix}: not enough samples per class: {counts}")
        size = ROWS * COLS
        img_out = struct.pack(">IIII", 0x803, len(kept), ROWS, COLS) + b"".join(
            pixels[i * size : (i + 1) * size] for i in kept
        )
        lab_out = struct.pack(">II", 0x801, len(kept)) + bytes(labels[i] for i in kept)
        write_gz(os.path.join(out_dir, f"{prefix}-images-idx3-ubyte.gz"), img_out)
        write_gz(os.path.join(out_dir, f"{prefix}-labels-idx1-ubyte.gz"), lab_out)
        print(f"{prefix}: kept {len(kept)} samples, last kept file index {kept[-1]}")


if __name__ == "__main__":
    main()
