"""Embedding.export and recemb.ServingModel with a dynamic table: lookups by int keys and by str /
bytes ids equal the layer's pure lookups (bitwise for float32; float16 / int8 to the rounding of
the stored rows, computed here from the file's rules), absent keys are zero rows whose weights
count, and num_keys tells the keys exported."""

import numpy as np
import pytest

import recemb

DIM = 4


def make_layer(combiner, seed=1):
    user = recemb.TableConfig(dim=DIM, name="user", combiner=combiner,
                              vocabulary=recemb.DynamicVocabulary(capacity=1000))
    item = recemb.TableConfig(12, 3, name="item", combiner=combiner)
    features = {"user": recemb.FeatureConfig(user, name="user"),
                "history": recemb.FeatureConfig(user, max_sequence_length=3, name="history"),
                "item": recemb.FeatureConfig(item, name="item")}
    return recemb.Embedding(features, recemb.optimizers.Adagrad(learning_rate=0.3), seed=seed)


WORDS = [f"user-{i}" for i in range(30)]


def random_features(rng, words):
    """String ids for "user" (a [B, 3] array, random str and bytes objects) and int keys for
    "history" (their string_keys), from `words`."""
    picked = rng.choice(len(words), size=(5, 3))
    user = np.array([[words[i] if rng.random() < 0.5 else words[i].encode() for i in row]
                     for row in picked], dtype=object)
    history = recemb.string_keys(np.array([[words[i] for i in row] for row in
                                           rng.choice(len(words), size=(5, 4))]))
    return ({"user": user, "history": history, "item": rng.integers(0, 12, size=(5, 2))},
            {"user": rng.uniform(0.25, 2.0, size=(5, 3)).astype(np.float32), "history": None,
             "item": None})


def rounded(rows, dtype):
    """The values `dtype` stores for float32 `rows` [n, dim] (docs/serving.md)."""
    if dtype == "float32":
        return rows
    if dtype == "float16":
        return rows.astype(np.float16).astype(np.float32)
    low = rows.min(axis=1, keepdims=True)
    scale = (rows.max(axis=1, keepdims=True) - low) / np.float32(255)
    codes = np.clip(np.rint(np.divide(rows - low, scale, out=np.zeros_like(rows),
                                      where=scale > 0)), 0, 255)
    return (codes.astype(np.float32) * scale + low).astype(np.float32)


DTYPES = ["float32", "float16", "int8"]
COMBINERS = ["sum", "mean", "sqrtn"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("combiner", COMBINERS)
def test_lookups_by_keys_and_strings_equal_the_layers(tmp_path, dtype, combiner):
    rng = np.random.default_rng([DTYPES.index(dtype), COMBINERS.index(combiner)])
    layer = make_layer(combiner)
    trained = WORDS[:20]  # WORDS[20:] are never seen: absent
    for _ in range(3):
        features, weights = random_features(rng, trained)
        batch = recemb.LookupBatch()
        activations = layer.lookup(features, weights, batch=batch)
        layer.apply_gradients({name: rng.normal(size=a.shape).astype(np.float32)
                               for name, a in activations.items()}, batch)
    keys, rows, _ = layer.read_dynamic_table("user")
    assert 10 <= keys.size <= 20

    path = tmp_path / "model.recemb"
    layer.export(path, dtype=dtype)
    model = recemb.ServingModel.open(path, feature_config=layer.feature_config)
    assert model.num_keys("user") == keys.size
    vocabulary = model.tables["user"].vocabulary
    assert repr(vocabulary) == repr(recemb.DynamicVocabulary(capacity=1000))
    with pytest.raises(ValueError, match="table 'item' is not dynamic"):
        model.num_keys("item")

    # The layer holding what the file stores: itself for float32, else the rounded rows.
    expected_layer = layer
    if dtype != "float32":
        expected_layer = make_layer(combiner, seed=2)
        _, _, slots = layer.read_dynamic_table("user")
        expected_layer.write_dynamic_table("user", keys, rounded(rows, dtype), slots)
        # The Adagrad slots are not exported; the lookups do not read them.
        expected_layer.assign_table("item", rounded(layer.embedding_tables["item"], dtype))
    for _ in range(5):
        features, weights = random_features(rng, WORDS)
        served = model.lookup(features, weights)
        expected = expected_layer.lookup(features, weights)
        for name in expected:
            assert served[name].tobytes() == expected[name].tobytes(), name


def test_an_absent_key_is_a_zero_row_whose_weight_counts(tmp_path):
    layer = make_layer("mean")
    row = np.array([[0.5, -1.0, 2.0, 0.25]], np.float32)
    _, _, slots = layer.read_dynamic_table("user")
    layer.write_dynamic_table("user", [recemb.string_key("ann")], row,
                              {name: np.ones((1, DIM), np.float32) for name in slots})
    layer.export(tmp_path / "m.recemb")
    model = recemb.ServingModel.open(tmp_path / "m.recemb")
    out = model.lookup({"user": np.array([["ann", "zed", "zed"]]),
                        "history": np.array([[recemb.string_key("ann"), -5]]),
                        "item": np.array([[0]])},
                       {"user": np.array([[1.0, 1.5, 1.5]], np.float32), "history": None,
                        "item": None})
    np.testing.assert_array_equal(out["user"], row * np.float32(0.25))
    np.testing.assert_array_equal(out["history"][0], np.vstack([row, np.zeros((2, DIM))]))
