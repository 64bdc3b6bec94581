"""Random inputs of every layout (dense 1-D/2-D, ragged, sparse) for the layer's tests, with the
description the float64 reference in reference.py takes."""
import numpy as np

import recemb


def make_input(rng, kind, vocabulary_size, batch, dtype, weighted, width=4):
    """(recemb ids, recemb weights, reference (kind, ids, weights)) for one feature."""
    if kind in ("dense1", "dense2"):
        shape = (batch,) if kind == "dense1" else (batch, width)
        ids = rng.integers(0, vocabulary_size, size=shape).astype(dtype)
        weights = rng.uniform(0.5, 1.5, size=shape).astype(np.float32) if weighted else None
        return ids, weights, ("dense", ids, weights)
    if kind == "ragged":
        lengths = rng.integers(0, width + 1, size=batch)
        lengths[0] = 0  # an empty bag
        values = rng.integers(0, vocabulary_size, size=lengths.sum()).astype(dtype)
        ragged = recemb.Ragged.from_row_lengths(values, lengths)
        ragged.row_splits = ragged.row_splits.astype(dtype)
        w = rng.uniform(0.5, 1.5, size=values.size).astype(np.float32) if weighted else None
        return (ragged, None if w is None else recemb.Ragged(w, ragged.row_splits),
                ("ragged", (values, ragged.row_splits), w))
    mask = rng.random((batch, width)) < 0.5
    mask[1] = False  # an empty bag
    indices = np.argwhere(mask).astype(np.int64)
    values = rng.integers(0, vocabulary_size, size=len(indices)).astype(dtype)
    sparse = recemb.Sparse(indices, values, (batch, width))
    w = rng.uniform(0.5, 1.5, size=len(indices)).astype(np.float32) if weighted else None
    return (sparse, None if w is None else recemb.Sparse(indices, w, (batch, width)),
            ("sparse", (indices, values, (batch, width)), w))
