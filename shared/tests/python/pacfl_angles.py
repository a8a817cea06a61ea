#!/usr/bin/env python3
"""Independent check of edgecfl's PACFL signatures and proximities (shared/tests/pacfl_sim.rs).

For each client of the JSON file: numpy's SVD of each of its classes' image matrix (one column
an image, as PACFL's main_pacfl.py forms it) must give edgecfl's columns, up to sign (an SVD leaves
signs free), in the same label order, the same number per label (top p, without directions of
zero variance). For each pair of clients: the proximity of PACFL's calculating_adjacency,
min(arccos(clip(U_i^T U_j, -1, 1))) in degrees, written as there, and the smallest principal
angle between the spans (arccos of the largest singular value of Q_i^T Q_j, Q from numpy's QR),
on edgecfl's columns, must be edgecfl's two proximities.

Only numpy and the standard library. usage: pacfl_angles.py FILE.json
Exit status 0 when all agree; prints one summary line.
"""

import json
import sys

import numpy as np


def subspace(images, labels, p):
    x = np.asarray(images, dtype=np.float64)
    y = np.asarray(labels)
    cols, labs = [], []
    for label in sorted(set(labels)):
        a = x[y == label].T
        u, s, _ = np.linalg.svd(a, full_matrices=False)
        keep = [i for i in range(min(p, len(s))) if s[i] > 0 and s[i] ** 2 > s[0] ** 2 * 1e-12]
        cols.append(u[:, keep])
        labs += [label] * len(keep)
    return np.hstack(cols), labs


def main():
    doc = json.load(open(sys.argv[1]))
    d, p = doc["d"], doc["p"]
    ours = []
    worst_cos = 1.0
    for c in doc["clients"]:
        u, labs = subspace(c["images"], c["labels"], p)
        mine = np.asarray(c["columns"], dtype=np.float64).reshape(-1, d).T
        assert labs == c["subspace_labels"], (labs, c["subspace_labels"])
        cos = np.abs(np.sum(u * mine, axis=0))
        worst_cos = min(worst_cos, cos.min())
        assert np.all(cos > 1 - 1e-5), cos
        ours.append(mine)
    worst = 0.0
    for pair in doc["pairs"]:
        ui, uj = ours[pair["i"]], ours[pair["j"]]
        mul = np.clip(ui.T @ uj, a_min=-1.0, a_max=1.0)
        entries = np.min(np.arccos(mul)) * 180 / np.pi
        qi, _ = np.linalg.qr(ui)
        qj, _ = np.linalg.qr(uj)
        sigma = np.linalg.svd(qi.T @ qj, compute_uv=False).max()
        principal = np.arccos(np.clip(sigma, -1.0, 1.0)) * 180 / np.pi
        for name, want in (("entries", entries), ("principal", principal)):
            got = pair[name]
            worst = max(worst, abs(got - want))
            assert abs(got - want) < 1e-3, (pair["i"], pair["j"], name, got, want)
    print(
        f"pacfl_angles: {len(doc['clients'])} clients' subspaces equal numpy's SVD "
        f"(worst |cos| {worst_cos:.7f}), {len(doc['pairs'])} pairs' angles within {worst:.2e} degrees"
    )


if __name__ == "__main__":
    main()
