"""Writes FEMNIST files as LEAF's preprocessing writes them, and what reading them must give.

LEAF (github.com/TalwalkarLab/leaf, data/femnist/preprocess/data_to_json.py and
utils/split_data.py) stores each split as JSON files written by `json.dump` of a dict
{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}; each x row is
a 28 x 28 image flattened row-major, `np.asarray(gray).flatten() / 255` turned into a list of
Python floats; y the class number (0-9 digits, 10-35 capitals, 36-61 small letters).

Usage: leaf_femnist.py OUT. Writes OUT/train/*.json and OUT/test/*.json, and for each split
OUT/truth/<split>.images (the bytes round(255 x) in the reading order the product documents:
files by name, then each file's users list, then each user's rows), <split>.labels (one byte each)
and <split>.writers (one writer name a line, a line per sample).
"""

import json
import os
import sys

import numpy as np

out = sys.argv[1]
rng = np.random.default_rng(7)

# (file, users in the file's order, samples per user). The writer "w_only_train" has no test
# sample; "w_z" is listed before "w_a" in its file, and the second file's name sorts first.
layout = {
    "train": [
        ("all_data_1_niid_0_keep_0_train_9.json", [("w_z", 3), ("w_a", 2)]),
        ("all_data_0_niid_0_keep_0_train_9.json", [("w_b", 4), ("w_only_train", 1)]),
    ],
    "test": [
        ("all_data_0_niid_0_keep_0_test_9.json", [("w_b", 1), ("w_a", 2), ("w_z", 1)]),
    ],
}

for split, files in layout.items():
    os.makedirs(os.path.join(out, split), exist_ok=True)
    truth = {"images": [], "labels": [], "writers": []}
    written = {}
    for name, users in files:
        data = {"users": [u for u, _ in users], "num_samples": [n for _, n in users], "user_data": {}}
        # user_data in the reverse order of users: readers must go by "users".
        for user, n in reversed(users):
            pixels = rng.integers(0, 256, size=(n, 784), dtype=np.uint8)
            pixels[:, 0] = 255  # a white corner, as LEAF's 1.0 background
            labels = rng.integers(0, 62, size=n)
            labels[0] = 61 if user == "w_z" else labels[0]  # the last class occurs
            data["user_data"][user] = {
                "x": (pixels / 255).tolist(),
                "y": [int(v) for v in labels],
            }
            written[(name, user)] = (pixels, labels)
        with open(os.path.join(out, split, name), "w") as f:
            json.dump(data, f)
    for name, users in sorted(files):
        for user, n in users:
            pixels, labels = written[(name, user)]
            truth["images"].append(pixels.tobytes())
            truth["labels"].append(labels.astype(np.uint8).tobytes())
            truth["writers"].extend([user] * n)
    os.makedirs(os.path.join(out, "truth"), exist_ok=True)
    with open(os.path.join(out, "truth", f"{split}.images"), "wb") as f:
        f.write(b"".join(truth["images"]))
    with open(os.path.join(out, "truth", f"{split}.labels"), "wb") as f:
        f.write(b"".join(truth["labels"]))
    with open(os.path.join(out, "truth", f"{split}.writers"), "w") as f:
        f.write("".join(w + "\n" for w in truth["writers"]))
# A file beside the splits that is not JSON is not read.
with open(os.path.join(out, "train", "README.txt"), "w") as f:
    f.write("not data\n")
