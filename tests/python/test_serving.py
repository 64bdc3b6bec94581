"""Embedding.export and recemb.ServingModel: float32 lookups equal the layer's bitwise (nested
structures, weights, every input layout, sequence features, output shapes); float16 and int8
within the bounds of docs/serving.md, computed in float64; errors; the model outliving its
file, and unaffected by changes to it."""

import concurrent.futures
import os
import re

import numpy as np
import pytest

import recemb
import reference
from random_inputs import make_input

U = 2.0**-24
# name: (vocabulary_size, dim, combiner)
TABLES = {"a": (40, 5, "sum"), "b": (25, 3, "mean"), "c": (30, 4, "sqrtn")}
# name: (table, input kind, max_sequence_length, output_shape)
FEATURES = {"user_id": ("b", "dense1", 0, None), "history": ("a", "ragged", 4, None),
            "watched": ("a", "dense2", 0, None), "liked": ("c", "ragged", 0, None),
            "clicked": ("c", "sparse", 0, None), "shaped": ("b", "dense2", 0, [2, 3])}
BATCH = 6


def random_tables(rng):
    """Rows of very different ranges (int8's scale is per row), one of them constant."""
    tables = {}
    for name, (vocabulary_size, dim, _) in TABLES.items():
        scales = rng.uniform(0.01, 10.0, size=(vocabulary_size, 1))
        tables[name] = (rng.normal(size=(vocabulary_size, dim)) * scales).astype(np.float32)
        tables[name][3] = 0.75
    return tables


def nested_config(tables):
    """A nested structure (dicts and a list) of FeatureConfigs over tables of the given values."""
    configs = {name: recemb.TableConfig(vocabulary_size, dim, initializer=tables[name],
                                        combiner=combiner, name=name)
               for name, (vocabulary_size, dim, combiner) in TABLES.items()}
    feature = {name: recemb.FeatureConfig(configs[table], max_sequence_length=length,
                                          output_shape=shape, name=name)
               for name, (table, _, length, shape) in FEATURES.items()}
    return {"user": {"id": feature["user_id"], "history": feature["history"]},
            "items": [feature["watched"], feature["liked"], feature["clicked"]],
            "shaped": feature["shaped"]}


def nested(values):
    """Per-feature values arranged as nested_config."""
    return {"user": {"id": values["user_id"], "history": values["history"]},
            "items": [values["watched"], values["liked"], values["clicked"]],
            "shaped": values["shaped"]}


def random_inputs(rng, weighted):
    """(features, weights, {feature: reference (kind, ids, weights)}) in nested_config's shape."""
    ids, weights, references = {}, {}, {}
    for name, (table, kind, length, _) in FEATURES.items():
        ids[name], weights[name], references[name] = make_input(
            rng, kind, TABLES[table][0], BATCH, np.int64, weighted, width=5 if length else 4)
    return nested(ids), nested(weights) if weighted else None, references


@pytest.fixture
def exported(tmp_path):
    """A layer over random tables, trained one step, and its file path for each dtype."""
    rng = np.random.default_rng(21)
    layer = recemb.Embedding(nested_config(random_tables(rng)), "adagrad")
    features, _, _ = random_inputs(rng, False)
    layer(features)
    layer.apply_gradients(recemb._nest.map_structure(np.ones_like, layer.lookup(features)))
    paths = {}
    for dtype in ("float32", "float16", "int8"):
        paths[dtype] = tmp_path / f"model-{dtype}.recemb"
        layer.export(paths[dtype], dtype=dtype)
    return layer, paths


def assert_same_structure_and_values(got, want):
    assert type(got) is type(want)
    if isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            assert_same_structure_and_values(got[key], want[key])
    elif isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same_structure_and_values(g, w)
    else:
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("weighted", [False, True])
def test_float32_lookups_equal_the_layers_bitwise(exported, weighted):
    layer, paths = exported
    model = recemb.ServingModel.open(paths["float32"], feature_config=layer.feature_config)
    assert model.dtype == "float32" and model.path == paths["float32"]
    assert model.feature_config is layer.feature_config
    assert model.feature_names == layer.feature_names
    rng = np.random.default_rng(22 + weighted)
    for _ in range(3):
        features, weights, _ = random_inputs(rng, weighted)
        assert_same_structure_and_values(model.lookup(features, weights),
                                         layer.lookup(features, weights))


def error_bound(values, dtype):
    """The per-value bound e(x) of docs/serving.md, float64, for a float32 table."""
    x = values.astype(np.float64)
    if dtype == "float16":
        return np.maximum(2.0**-11 * np.abs(x), 2.0**-25)
    low, high = x.min(axis=1, keepdims=True), x.max(axis=1, keepdims=True)
    row = (high - low) / 255 / 2 + 2.0**-20 * np.maximum(np.abs(low), np.abs(high))
    return np.broadcast_to(row, x.shape)


def activation_bound(table, errors, feature_slots, shape, combiner):
    """docs/serving.md: |c| sum_j |w_j| e(x_j) + (n + 2) u |c| sum_j |w_j| (|x_j| + e(x_j))."""
    bound = np.zeros(tuple(shape) + (table.shape[1],))
    for index, entries in feature_slots:
        n = len(entries)
        for (row, _), gain in zip(entries, reference.gains(entries, combiner)):
            bound[index] += abs(gain) * (errors[row] + (n + 2) * U * (np.abs(table[row]) +
                                                                       errors[row]))
    return bound


@pytest.mark.parametrize("dtype", ["float16", "int8"])
@pytest.mark.parametrize("weighted", [False, True])
def test_quantized_lookups_are_within_the_documented_bounds(exported, dtype, weighted):
    layer, paths = exported
    model = recemb.ServingModel.open(paths[dtype], feature_config=layer.feature_config)
    assert model.dtype == dtype
    tables = {name: layer.embedding_tables[name].astype(np.float64) for name in TABLES}
    errors = {name: error_bound(layer.embedding_tables[name], dtype) for name in TABLES}
    rng = np.random.default_rng(31 + weighted)
    worst = 0.0
    for _ in range(3):
        features, weights, references = random_inputs(rng, weighted)
        served = dict(zip(layer.feature_names,
                          recemb._nest.flatten(model.lookup(features, weights))))
        for name, (table, _, length, _) in FEATURES.items():
            kind, ids, w = references[name]
            feature_slots, shape = reference.slots(kind, ids, w, length)
            combiner = TABLES[table][2]
            expected = reference.lookup(tables[table], feature_slots, shape, combiner)
            bound = activation_bound(tables[table], errors[table], feature_slots, shape,
                                     combiner)
            error = np.abs(served[name].reshape(expected.shape) - expected)
            assert np.all(error <= bound), (name, np.max(error - bound))
            worst = max(worst, np.max(error / np.maximum(bound, 1e-30)))
    assert worst > 0.5  # the bound is not vacuous: some activation comes near it


def test_default_structure_is_a_dict_by_feature_name(tmp_path):
    rng = np.random.default_rng(41)
    table = recemb.TableConfig(12, 3, initializer=rng.normal(size=(12, 3)), name="t")
    # Flattening order z, a, "10", "9": not the order of the names.
    names = ["z", "a", "10", "9"]
    layer = recemb.Embedding([recemb.FeatureConfig(table, name=name) for name in names])
    layer.export(tmp_path / "m")
    model = recemb.ServingModel.open(tmp_path / "m")
    assert sorted(model.feature_config) == sorted(names)
    assert model.feature_names == sorted(names)
    assert list(model.tables) == ["t"] and model.tables["t"].vocabulary_size == 12
    assert model.feature_config["a"].table is model.tables["t"]
    ids = [rng.integers(0, 12, size=(4, 2)) for _ in names]
    served = model.lookup(dict(zip(names, ids)))
    for name, activation in zip(names, layer.lookup(ids)):
        np.testing.assert_array_equal(served[name], activation)
    # Any structure of the same features works; they are matched by name.
    other = recemb.ServingModel.open(tmp_path / "m", feature_config=(
        (recemb.FeatureConfig(table, name="9"), recemb.FeatureConfig(table, name="a")),
        {"x": recemb.FeatureConfig(table, name="z"), "y": recemb.FeatureConfig(table, name="10")}))
    got = other.lookup(((ids[3], ids[1]), {"x": ids[0], "y": ids[2]}))
    np.testing.assert_array_equal(got[1]["y"], served["10"])
    np.testing.assert_array_equal(got[0][0], served["9"])


def test_feature_config_must_match_the_file(exported):
    layer, paths = exported
    path = paths["float32"]
    other = nested_config(random_tables(np.random.default_rng(0)))
    recemb.ServingModel.open(path, feature_config=other)  # values differ, configs match
    other["shaped"] = recemb.FeatureConfig(other["shaped"].table, name="renamed")
    with pytest.raises(ValueError, match=r"not in the model: \['renamed'\]; not in "
                                         r"feature_config: \['shaped'\]"):
        recemb.ServingModel.open(path, feature_config=other)
    other = nested_config(random_tables(np.random.default_rng(0)))
    other["user"]["history"].max_sequence_length = 3
    with pytest.raises(ValueError, match=r"feature 'history': max_sequence_length is 3 in "
                                         r"feature_config, 4 in the model"):
        recemb.ServingModel.open(path, feature_config=other)
    other = nested_config(random_tables(np.random.default_rng(0)))
    other["items"][1].table.combiner = "mean"
    with pytest.raises(ValueError, match=r"table 'c': combiner is 'mean' in feature_config, "
                                         r"'sqrtn' in the model"):
        recemb.ServingModel.open(path, feature_config=other)


def test_bad_inputs_raise_the_layers_errors(exported):
    layer, paths = exported
    model = recemb.ServingModel.open(paths["int8"], feature_config=layer.feature_config)
    features, weights, _ = random_inputs(np.random.default_rng(51), True)
    bad_id = recemb._nest.map_structure(lambda x: x, features)
    bad_id["items"][0] = np.array(bad_id["items"][0])
    bad_id["items"][0][2, 1] = 40
    bad_weight = recemb._nest.map_structure(lambda x: x, weights)
    bad_weight["user"]["id"] = np.array(bad_weight["user"]["id"])
    bad_weight["user"]["id"][0] = np.inf
    missing = {"user": features["user"], "items": features["items"]}
    for inputs, w, message in [(bad_id, None, r"feature 'watched'.*id 40 is out of range"),
                               (features, bad_weight, r"feature 'user_id'.*inf"),
                               (missing, None, r"missing \['shaped'\]"),
                               ({**features, "shaped": np.ones((6, 4), np.float64) / 2}, None,
                                r"feature 'shaped': ids must be integers")]:
        with pytest.raises(ValueError, match=message) as served:
            model.lookup(inputs, w)
        with pytest.raises(ValueError) as trained:
            layer.lookup(inputs, w)
        assert str(served.value) == str(trained.value)


def test_export_errors_create_no_file(exported, tmp_path):
    layer, paths = exported
    with pytest.raises(ValueError, match="bfloat16"):
        layer.export(tmp_path / "x", dtype="bfloat16")
    assert not (tmp_path / "x").exists()
    original = paths["float16"].read_bytes()
    layer.embedding_tables["c"][7, 2] = 70000.0  # unvalidated write through the view
    with pytest.raises(ValueError, match=r"table 'c'.*row 7.*column 2.*70000"):
        layer.export(paths["float16"], dtype="float16")
    assert paths["float16"].read_bytes() == original
    layer.embedding_tables["c"][7, 2] = np.nan
    with pytest.raises(ValueError, match=r"table 'c'.*row 7.*column 2"):
        layer.export(tmp_path / "y", dtype="float32")
    assert sorted(os.listdir(tmp_path)) == sorted(path.name for path in paths.values())


def damage(path, offset, *, truncate=False):
    data = bytearray(path.read_bytes())
    if truncate:
        del data[offset:]
    else:
        data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_open_errors_name_the_file(exported):
    _, paths = exported
    path = paths["float32"]
    with pytest.raises(FileNotFoundError, match="missing"):
        recemb.ServingModel.open(path.with_name("missing"))
    fifo = path.with_name("fifo")
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):  # at once, not waiting for a writer
        recemb.ServingModel.open(fifo)
    size = path.stat().st_size
    damage(path, size - 100)  # a byte of the last table
    with pytest.raises(recemb.DataLoss, match=re.escape(f"{path}': table 'b'")):
        recemb.ServingModel.open(path)
    recemb.ServingModel.open(path, verify=False)  # table checksums are skipped
    damage(path, size - 100)
    damage(path, 20)  # the header
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*header"):
        recemb.ServingModel.open(path, verify=False)
    damage(path, 20)
    damage(path, size - 64, truncate=True)
    with pytest.raises(ValueError, match=re.escape(str(path))):
        recemb.ServingModel.open(path, verify=False)


def test_model_outlives_its_file(exported, tmp_path):
    layer, _ = exported
    path = tmp_path / "live.recemb"
    layer.export(path)
    model = recemb.ServingModel.open(path, feature_config=layer.feature_config)
    features, weights, _ = random_inputs(np.random.default_rng(61), True)
    before = layer.lookup(features, weights)
    layer.embedding_tables["a"][:] += 1
    layer.export(path)  # replaced by rename: the open model keeps the old file
    assert_same_structure_and_values(model.lookup(features, weights), before)
    replaced = recemb.ServingModel.open(path, feature_config=layer.feature_config)
    assert_same_structure_and_values(replaced.lookup(features, weights),
                                     layer.lookup(features, weights))
    os.remove(path)
    assert_same_structure_and_values(model.lookup(features, weights), before)


def test_model_survives_its_file_rewritten_in_place_or_truncated(exported, tmp_path):
    # The adversarial run's S9b: the model used to serve the new bytes, or die of SIGBUS.
    layer, _ = exported
    path = tmp_path / "served.recemb"
    layer.export(path)
    model = recemb.ServingModel.open(path, feature_config=layer.feature_config)
    features, weights, _ = random_inputs(np.random.default_rng(62), True)
    before = layer.lookup(features, weights)
    layer.embedding_tables["a"][:] += 1
    other = tmp_path / "other.recemb"
    layer.export(other)
    with open(path, "r+b") as served:  # as `cp other served` does: same inode, new bytes
        served.write(other.read_bytes())
    assert_same_structure_and_values(model.lookup(features, weights), before)
    os.truncate(path, 64)  # the header only
    assert_same_structure_and_values(model.lookup(features, weights), before)
    with pytest.raises(recemb.DataLoss, match="truncated"):
        recemb.ServingModel.open(path, feature_config=layer.feature_config)


def test_concurrent_lookups(exported):
    layer, paths = exported
    model = recemb.ServingModel.open(paths["int8"], feature_config=layer.feature_config)
    rng = np.random.default_rng(71)
    batches = [random_inputs(rng, True)[:2] for _ in range(16)]
    expected = [model.lookup(*batch) for batch in batches]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda batch: model.lookup(*batch), batches))
    for got, want in zip(results, expected):
        assert_same_structure_and_values(got, want)


def test_extra_arrays_and_metadata_round_trip(tmp_path):
    """Arrays exported beside the tables come back bitwise, of their shapes, read-only, in export
    order, and outlive the model object; metadata as given; a model without any has none."""
    rng = np.random.default_rng(12)
    table = recemb.TableConfig(20, 3, name="t")
    layer = recemb.Embedding({"f": recemb.FeatureConfig(table, name="f")}, optimizer="sgd")
    arrays = {"dense/weights": rng.normal(size=(4, 3)).astype(np.float32),
              "scale": np.array(rng.normal(), dtype=np.float32).reshape(()),
              "dense/bias": rng.normal(size=7).astype(np.float32)}
    metadata = {"dense/bottom_mlp": "64,16", "run": "", "caf\u00e9": "\u00fcber"}
    layer.export(tmp_path / "m.recemb", dtype="int8", extra_arrays=arrays, metadata=metadata)
    model = recemb.ServingModel.open(tmp_path / "m.recemb")
    assert model.metadata == metadata
    got = model.extra_arrays
    assert list(got) == list(arrays)
    for name, values in arrays.items():
        assert got[name].dtype == np.float32 and got[name].shape == values.shape
        assert got[name].tobytes() == values.tobytes(), name
        assert not got[name].flags.writeable
    weights = got["dense/weights"]
    del model, got
    assert weights.tobytes() == arrays["dense/weights"].tobytes()  # the memory lives on

    layer.export(tmp_path / "plain.recemb")
    plain = recemb.ServingModel.open(tmp_path / "plain.recemb")
    assert plain.extra_arrays == {} and plain.metadata == {}

    bad = recemb._recemb.ExportOptions(extra_arrays=[
        recemb._recemb.ServingArray("w", [2, 2], arrays["dense/bias"])])
    with pytest.raises(ValueError, match="the shape holds 4 values but 7 were given"):
        recemb._recemb.export_serving_model(layer._engine, tmp_path / "bad.recemb", bad)
    for extras, match in (({"w": [1.0, np.nan]}, "'w': value 1 is nan"),
                          ({"w": ["a"]}, r"extra_arrays\['w'\] must be real numbers"),
                          ({"": [1.0]}, "empty")):
        with pytest.raises(ValueError, match=match):
            layer.export(tmp_path / "bad.recemb", extra_arrays=extras)
    assert not (tmp_path / "bad.recemb").exists()


def test_torch_export_takes_a_dense_models_tensors(tmp_path):
    """recemb.torch.Embedding.export (and publish) take extra_arrays of tensors, such as a dense
    model's state_dict(), and metadata; ServingModel gives them back bitwise."""
    torch = pytest.importorskip("torch")
    import recemb.torch
    torch.manual_seed(3)
    table = recemb.TableConfig(20, 3, name="t")
    module = recemb.torch.Embedding({"f": recemb.FeatureConfig(table, name="f")}, "sgd")
    dense = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    state = dense.state_dict()
    module.export(tmp_path / "m.recemb", extra_arrays=state, metadata={"dense": "3-4-1"})
    model = recemb.ServingModel.open(tmp_path / "m.recemb")
    assert list(model.extra_arrays) == list(state) and model.metadata == {"dense": "3-4-1"}
    for name, tensor in state.items():
        assert model.extra_arrays[name].tobytes() == tensor.numpy().tobytes(), name
    result = module.publish(tmp_path / "dir", extra_arrays=state)
    published = recemb.ServingModel.open(result.file)
    assert published.extra_arrays["2.bias"].tobytes() == state["2.bias"].numpy().tobytes()
