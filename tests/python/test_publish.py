"""Embedding.publish and ServingModel.apply_delta / clone / delta_sequence (docs/serving.md,
"Publishing deltas"): a base plus its deltas applied in order looks up bitwise as a fresh export of
the same step, for every dtype, with a static table and a dynamic one whose keys come and go;
refusals leave the model as it was."""

import numpy as np
import pytest

import recemb

DTYPES = ["float32", "float16", "int8"]


def make_layer(seed=3):
    user = recemb.TableConfig(dim=4, name="user", vocabulary=recemb.DynamicVocabulary(
        capacity=20, min_count=2, ttl_steps=3))
    item = recemb.TableConfig(50, 3, name="item")
    features = {"user": recemb.FeatureConfig(user, name="user"),
                "item": recemb.FeatureConfig(item, name="item")}
    return recemb.Embedding(features, recemb.optimizers.Adagrad(learning_rate=0.3), seed=seed)


def random_features(rng):
    return {"user": rng.integers(-40, 40, size=(6, 3)), "item": rng.integers(0, 20, size=(6, 2))}


def train(layer, rng, steps):
    for _ in range(steps):
        batch = recemb.LookupBatch()
        activations = layer.lookup(random_features(rng), batch=batch)
        layer.apply_gradients({name: rng.normal(size=a.shape).astype(np.float32)
                               for name, a in activations.items()}, batch=batch)


def expect_same_lookups(model, expected, rng):
    for _ in range(3):
        features = random_features(rng)
        got, want = model.lookup(features), expected.lookup(features)
        for name in want:
            assert got[name].tobytes() == want[name].tobytes(), name
    assert model.metadata == expected.metadata
    for name, values in expected.extra_arrays.items():
        assert model.extra_arrays[name].tobytes() == values.tobytes(), name


@pytest.mark.parametrize("dtype", DTYPES)
def test_base_plus_deltas_equals_a_fresh_export(tmp_path, dtype):
    rng = np.random.default_rng(DTYPES.index(dtype))
    layer = make_layer()
    train(layer, rng, 2)
    results, fresh = [], []
    for k in range(5):
        if k > 0 and k != 2:  # publish 2 follows no training: an empty delta
            train(layer, rng, 3)
        extras = {"top/w": np.full((2, 2), k, dtype=np.float32)}
        results.append(layer.publish(tmp_path / "model", dtype=dtype, extra_arrays=extras,
                                     metadata={"publish": k}))
        fresh.append(tmp_path / f"fresh-{k}.recemb")
        recemb._recemb.export_serving_model(layer._engine, fresh[-1], recemb._recemb.ExportOptions(
            dtype=recemb._recemb.parse_serving_dtype(dtype),
            extra_arrays=[recemb._recemb.ServingArray("top/w", [2, 2], extras["top/w"].reshape(-1))],
            metadata={"publish": str(k)}))
    assert [r.sequence for r in results] == [0, 1, 2, 3, 4]
    assert {r.version for r in results} == {1}
    assert results[0].file == tmp_path / "model" / "1" / "model.recemb"
    assert results[3].file == tmp_path / "model" / "1" / "delta-00000003.recemb"
    assert results[2].rows == 0
    assert results[0].file.read_bytes() == fresh[0].read_bytes()

    model = recemb.ServingModel.open(results[0].file)
    assert model.delta_sequence == 0
    for k in range(1, 5):
        model.apply_delta(results[k].file)
        assert model.delta_sequence == k
        expect_same_lookups(model, recemb.ServingModel.open(fresh[k]), rng)
    replica = model.clone()
    assert replica.delta_sequence == 4
    expect_same_lookups(replica, recemb.ServingModel.open(fresh[4]), rng)


def test_refused_deltas_change_nothing(tmp_path):
    rng = np.random.default_rng(7)
    layer = make_layer()
    train(layer, rng, 2)
    base = layer.publish(tmp_path / "m").file
    deltas = []
    for _ in range(2):
        train(layer, rng, 2)
        deltas.append(layer.publish(tmp_path / "m").file)
    model = recemb.ServingModel.open(base)
    with pytest.raises(RuntimeError, match="sequence 2"):
        model.apply_delta(deltas[1])
    damaged = bytearray(deltas[0].read_bytes())
    damaged[-1] ^= 0x01
    (tmp_path / "damaged.recemb").write_bytes(bytes(damaged))
    with pytest.raises(recemb.DataLoss):
        model.apply_delta(tmp_path / "damaged.recemb")
    assert model.delta_sequence == 0
    expect_same_lookups(model, recemb.ServingModel.open(base), rng)
    with pytest.raises(ValueError, match="dtype"):
        layer.publish(tmp_path / "m", dtype="bfloat16")


def test_retention_settings_bound_the_deltas_and_versions_on_disk(tmp_path):
    """base_every_deltas=2, keep_versions=2: a base, two deltas, a new base, ...; after each base
    only the two newest version directories remain, and the newest base plus its deltas looks up
    as a fresh export of the same step."""
    rng = np.random.default_rng(11)
    layer = make_layer()
    model_dir = tmp_path / "model"
    results = []
    for k in range(12):
        train(layer, rng, 2)
        results.append(layer.publish(model_dir, base_every_deltas=2, keep_versions=2))
        # The rule's prediction: publish k is in version k // 3 + 1, sequence k % 3.
        assert (results[-1].version, results[-1].sequence) == (k // 3 + 1, k % 3), k
        newest = k // 3 + 1
        on_disk = sorted(int(p.name) for p in model_dir.iterdir() if p.name.isdigit())
        assert on_disk == list(range(max(1, newest - 1), newest + 1)), (k, on_disk)
        assert results[-1].bytes == results[-1].file.stat().st_size
    assert results[3].base_reason != "" and "base_every_deltas" in results[3].base_reason
    assert results[4].base_reason == ""
    assert results[6].removed_versions == [1] and results[9].removed_versions == [2]
    fresh = tmp_path / "fresh.recemb"
    recemb._recemb.export_serving_model(layer._engine, fresh, recemb._recemb.ExportOptions())
    served = recemb.ServingModel.open(model_dir / "4" / "model.recemb")
    for sequence in (1, 2):
        served.apply_delta(model_dir / "4" / f"delta-{sequence:08d}.recemb")
    expect_same_lookups(served, recemb.ServingModel.open(fresh), rng)


def test_retention_settings_are_checked(tmp_path):
    layer = make_layer()
    for name in ("base_every_deltas", "base_every_bytes", "keep_versions"):
        with pytest.raises(ValueError, match=name):
            layer.publish(tmp_path / "model", **{name: -1})
    assert not (tmp_path / "model").exists()
