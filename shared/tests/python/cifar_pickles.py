"""Writes one small CIFAR-10 and CIFAR-100 in the layouts users have on disk, for
shared/tests/data_formats.rs.

    python3 cifar_pickles.py OUT_DIR

Under OUT_DIR, the same random images and labels (5 training batches of 3, 1, 2, 1 and 4 images, a
test batch of 2) as:

  bin/cifar-10-batches-bin/   the binary version (label byte, then the R, G and B planes);
  py2/cifar-10-batches-py/    the python version as its authors wrote it: Python 2's cPickle at
                              protocol 2, so keys and the pixel buffer are Python 2 `str`
                              (SHORT_BINSTRING / BINSTRING), labels a list of ints;
  py3p2/cifar-10-batches-py/  Python 3's pickle at protocol 2 (bytes re-encoded by _codecs);
  py3p5/cifar-10-batches-py/  Python 3's pickle at protocol 5 (NumPy's _frombuffer), str keys and
                              the labels as an int64 array, as a user who re-saved the batches has.
  c100bin/cifar-100-binary/   CIFAR-100's binary version (coarse label byte, fine label byte, the
                              planes) of 5 training and 3 test images;
  c100py/cifar-100-python/    CIFAR-100's python version of the same, as its authors wrote it
                              (Python 2's cPickle at protocol 2, `fine_labels`, `coarse_labels`).

Each pickle is read back here as torchvision reads it (`pickle.load(f, encoding="latin1")`) and
checked against the arrays it was made from, so the files are what Python itself accepts.
"""

import io
import os
import pickle
import struct
import sys

import numpy as np

COUNTS = [3, 1, 2, 1, 4]
TEST = 2


class Py2Pickler(pickle._Pickler):
    """Python 3's pure-Python pickler writing `bytes` as Python 2 wrote `str`."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_py2_str(self, obj):
        n = len(obj)
        if n < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([n]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", n) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str


def batches(rng):
    out = []
    for n in COUNTS + [TEST]:
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        labels = [int(x) for x in rng.integers(0, 10, size=n)]
        out.append((data, labels))
    return out


def names():
    return [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


def main():
    root = sys.argv[1]
    rng = np.random.default_rng(7)
    sets = batches(rng)
    layouts = {
        "bin": "cifar-10-batches-bin",
        "py2": "cifar-10-batches-py",
        "py3p2": "cifar-10-batches-py",
        "py3p5": "cifar-10-batches-py",
    }
    for layout, sub in layouts.items():
        os.makedirs(os.path.join(root, layout, sub), exist_ok=True)
    for name, (data, labels) in zip(names(), sets):
        # The binary version.
        path = os.path.join(root, "bin", layouts["bin"], name + ".bin")
        with open(path, "wb") as f:
            for img, lab in zip(data, labels):
                f.write(bytes([lab]) + img.tobytes())
        # Python 2's layout: bytes keys, as its str.
        buf = io.BytesIO()
        Py2Pickler(buf, protocol=2).dump(
            {b"batch_label": b"training batch", b"labels": labels, b"data": data,
             b"filenames": [b"x.png"] * len(labels)})
        py2 = buf.getvalue()
        assert py2[:3] == b"\x80\x02}" and pickle.SHORT_BINSTRING in py2
        for layout, blob in [
            ("py2", py2),
            ("py3p2", pickle.dumps({"batch_label": "b", "labels": labels, "data": data}, protocol=2)),
            ("py3p5", pickle.dumps({"labels": np.array(labels, dtype=np.int64), "data": data},
                                   protocol=5)),
        ]:
            back = pickle.loads(blob, encoding="latin1")
            keyed = {(k.decode() if isinstance(k, bytes) else k): v for k, v in back.items()}
            assert np.array_equal(keyed["data"], data)
            assert [int(x) for x in keyed["labels"]] == labels
            with open(os.path.join(root, layout, layouts[layout], name), "wb") as f:
                f.write(blob)
    cifar100(root, rng)
    print("wrote", root)


def cifar100(root, rng):
    for sub in ["c100bin/cifar-100-binary", "c100py/cifar-100-python"]:
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    for name, n in [("train", 5), ("test", 3)]:
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        fine = [int(x) for x in rng.integers(0, 100, size=n)]
        coarse = [int(x) for x in rng.integers(0, 20, size=n)]
        with open(os.path.join(root, "c100bin/cifar-100-binary", name + ".bin"), "wb") as f:
            for img, c, l in zip(data, coarse, fine):
                f.write(bytes([c, l]) + img.tobytes())
        buf = io.BytesIO()
        Py2Pickler(buf, protocol=2).dump(
            {b"filenames": [b"x.png"] * n, b"batch_label": name.encode(),
             b"fine_labels": fine, b"coarse_labels": coarse, b"data": data})
        back = pickle.loads(buf.getvalue(), encoding="latin1")
        assert np.array_equal(back["data"], data) and back["fine_labels"] == fine
        assert back["coarse_labels"] == coarse
        with open(os.path.join(root, "c100py/cifar-100-python", name), "wb") as f:
            f.write(buf.getvalue())


if __name__ == "__main__":
    main()
