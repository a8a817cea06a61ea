"""Writes a small SVHN in its own format, for shared/tests/data_formats.rs.

    python3 svhn_mat.py OUT_DIR

OUT_DIR/svhn (plain) and OUT_DIR/svhn-z (zlib-compressed, as the published files are) each get
train_32x32.mat (5 images) and test_32x32.mat (3) written by scipy.io.savemat: X a 32x32x3xN uint8
array (row, column, channel, image), y an Nx1 double array of labels 1-10 (10 is the digit 0), and
beside each file NAME.expected: the same images as records of a label byte (the digit, 0-9) and
the image as channel, row, column bytes (numpy's transpose), the product's layout.
"""

import os
import sys

import numpy as np
import scipy.io


def main():
    root = sys.argv[1]
    rng = np.random.default_rng(11)
    for folder, compress in (("svhn", False), ("svhn-z", True)):
        d = os.path.join(root, folder)
        os.makedirs(d, exist_ok=True)
        for name, n in (("train_32x32.mat", 5), ("test_32x32.mat", 3)):
            x = rng.integers(0, 256, size=(32, 32, 3, n), dtype=np.uint8)
            y = rng.integers(1, 11, size=(n, 1)).astype(np.float64)
            y[0, 0] = 10
            scipy.io.savemat(os.path.join(d, name), {"X": x, "y": y}, do_compression=compress)
            back = scipy.io.loadmat(os.path.join(d, name))
            assert np.array_equal(back["X"], x) and np.array_equal(back["y"], y)
            with open(os.path.join(d, name + ".expected"), "wb") as f:
                for i in range(n):
                    f.write(bytes([int(y[i, 0]) % 10]) + x[:, :, :, i].transpose(2, 0, 1).tobytes())
    print("wrote", root)


if __name__ == "__main__":
    main()
