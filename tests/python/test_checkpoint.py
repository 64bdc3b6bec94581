"""Embedding.save / restore and the checkpoint functions: bitwise round trips, training that
resumes exactly (against straight training and the float64 reference), resizing, and errors that
name the table or the file and leave the layer unchanged."""

import errno
import json
import os

import numpy as np
import pytest

import recemb
import reference

RTOL, ATOL = 2e-5, 2e-6
VIDEO, USER = (30, 4), (12, 3)


def random_table(rng, shape):
    return rng.normal(size=shape).astype(np.float32)


def make_layer(tables, optimizer, video_vocabulary=VIDEO[0], seed=0):
    """Two tables: "video" (shared by a dense and a ragged feature, sum) and "user" (mean), in a
    nested structure. tables: (video values, user values) as initializers."""
    video = recemb.TableConfig(video_vocabulary, VIDEO[1], initializer=tables[0], combiner="sum",
                               name="video")
    user = recemb.TableConfig(*USER, initializer=tables[1], name="user")
    return recemb.Embedding({"items": [recemb.FeatureConfig(video, name="watched"),
                                       recemb.FeatureConfig(video, name="liked")],
                             "user": recemb.FeatureConfig(user, name="user")},
                            optimizer, seed=seed)


def random_batch(rng):
    """(layer inputs, reference inputs in feature order: watched, liked, user)."""
    watched = rng.integers(0, VIDEO[0], size=(5, 3))
    lengths = rng.integers(0, 4, size=5)
    liked = recemb.Ragged.from_row_lengths(rng.integers(0, VIDEO[0], size=lengths.sum()),
                                           lengths)
    user = rng.integers(0, USER[0], size=5)
    return ({"items": [watched, liked], "user": user},
            [("dense", watched, None), ("ragged", (liked.values, liked.row_splits), None),
             ("dense", user, None)])


def train(layer, rng, steps, model=None):
    for _ in range(steps):
        inputs, reference_inputs = random_batch(rng)
        activations = layer(inputs)
        gradients = recemb._nest.map_structure(
            lambda a: rng.normal(size=a.shape).astype(np.float32), activations)
        layer.apply_gradients(gradients)
        if model is not None:
            model.lookup(reference_inputs)
            model.apply_gradients(recemb._nest.flatten(gradients))


def state(layer):
    """Every variable of every table (copies), and the step."""
    return {(name, variable): np.array(layer._variable(name, variable))
            for name in layer.table_names for variable in layer.variable_names(name)}, layer.step


def assert_bitwise_equal(got, want):
    assert got[1] == want[1]
    assert sorted(got[0]) == sorted(want[0])
    for key, values in want[0].items():
        np.testing.assert_array_equal(got[0][key], values, err_msg=str(key))


OPTIMIZERS = {
    "adagrad": (lambda: recemb.optimizers.Adagrad(learning_rate=0.2),
                lambda: reference.Optimizer("adagrad", 0.2)),
    # Bias correction and a schedule depend on the step: a restore must bring it back.
    "adam": (lambda: recemb.optimizers.Adam(
        learning_rate=recemb.schedules.ExponentialDecay(0.05, decay_steps=2, decay_rate=0.5),
        bias_correction=True, sum_inside_sqrt=False), None),
    "ftrl": (lambda: recemb.optimizers.FTRL(learning_rate=0.5, l2_regularization_strength=0.01),
             lambda: reference.Optimizer("ftrl", 0.5, l2_regularization_strength=0.01)),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_resume_equals_straight_training(tmp_path, name):
    make_optimizer, make_reference = OPTIMIZERS[name]
    rng = np.random.default_rng(11)
    initial = (random_table(rng, VIDEO), random_table(rng, USER))
    steps, saved_at = 7, 3

    straight = make_layer(initial, make_optimizer())
    model = None if make_reference is None else reference.Model(
        {"video": (initial[0], "sum", make_reference()),
         "user": (initial[1], "mean", make_reference())},
        [("video", 0), ("video", 0), ("user", 0)])
    train(straight, np.random.default_rng(1), steps, model)

    first = make_layer(initial, make_optimizer())
    data = np.random.default_rng(1)
    train(first, data, saved_at)
    path = first.save(tmp_path)
    assert path == tmp_path / "ckpt-000000000003" and path.is_dir()

    # A new layer with other initial values (and another seed): restore must overwrite all.
    other = np.random.default_rng(12)
    resumed = make_layer((random_table(other, VIDEO), random_table(other, USER)),
                         make_optimizer(), seed=5)
    assert resumed.restore(tmp_path) == saved_at
    assert_bitwise_equal(state(resumed), state(first))
    train(resumed, data, steps - saved_at)
    assert_bitwise_equal(state(resumed), state(straight))
    if model is not None:  # and the training itself is right
        for table in ("video", "user"):
            np.testing.assert_allclose(resumed.embedding_tables[table], model.tables[table],
                                       rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(resumed.slot_variables["video"]["accumulators"],
                                   model.slots["video"]["accumulators"], rtol=RTOL, atol=ATOL)


def test_keep_last_latest_and_restore_of_an_older_checkpoint(tmp_path):
    rng = np.random.default_rng(3)
    layer = make_layer((random_table(rng, VIDEO), random_table(rng, USER)), "adagrad")
    states = {}
    for _ in range(5):
        train(layer, rng, 1)
        states[layer.step] = state(layer)
        layer.save(tmp_path / "root", keep_last=2)
    assert sorted(os.listdir(tmp_path / "root")) == ["ckpt-000000000004", "ckpt-000000000005"]
    assert recemb.latest_checkpoint(tmp_path / "root") == tmp_path / "root" / "ckpt-000000000005"
    assert recemb.latest_checkpoint(str(tmp_path / "none")) is None
    assert recemb.latest_checkpoint(tmp_path) is None

    assert layer.restore(tmp_path / "root" / "ckpt-000000000004") == 4
    assert_bitwise_equal(state(layer), states[4])
    assert layer.restore(str(tmp_path / "root")) == 5  # a root: its latest
    assert_bitwise_equal(state(layer), states[5])
    with pytest.raises(recemb.FailedPrecondition, match="ckpt-000000000005"):
        layer.save(tmp_path / "root")  # a checkpoint of this step exists
    with pytest.raises(ValueError, match="keep_last"):
        layer.save(tmp_path / "other", keep_last=0)
    assert not (tmp_path / "other").exists()


def test_inspect_checkpoint(tmp_path):
    rng = np.random.default_rng(4)
    layer = make_layer((random_table(rng, VIDEO), random_table(rng, USER)), "adagrad")
    train(layer, rng, 2)
    path = layer.save(tmp_path)
    info = recemb.inspect_checkpoint(tmp_path)
    assert info.ok and info.step == 2 and info.format_version == 1
    manifest = json.loads(info.manifest_json)
    assert [table["config"]["name"] for table in manifest["tables"]] == ["video", "user"]
    files = {f.path: f for f in info.files}
    assert files["t0.parameters.f32"].bytes == 4 * VIDEO[0] * VIDEO[1]
    assert all(f.ok for f in info.files)

    flip_byte(path / "t1.accumulators.f32", 5)
    info = recemb.inspect_checkpoint(path)
    assert not info.ok
    damaged = [f for f in info.files if not f.ok]
    assert [f.path for f in damaged] == ["t1.accumulators.f32"] and damaged[0].error
    assert recemb.inspect_checkpoint(path, verify=False).ok  # sizes only


def flip_byte(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.fixture
def saved(tmp_path):
    """A trained layer's checkpoint, and a different layer to restore it into."""
    rng = np.random.default_rng(6)
    trained = make_layer((random_table(rng, VIDEO), random_table(rng, USER)), "adagrad")
    train(trained, rng, 2)
    path = trained.save(tmp_path / "root")
    target = make_layer((random_table(rng, VIDEO), random_table(rng, USER)), "adagrad")
    train(target, rng, 1)
    return path, target


# A damaged or truncated data file is recemb.DataLoss (a ValueError), a missing one
# FileNotFoundError; a damaged manifest a ValueError.
@pytest.mark.parametrize("damage,error,message", [
    (lambda path: flip_byte(path / "t0.parameters.f32", 77), recemb.DataLoss,
     r"t0\.parameters\.f32"),
    (lambda path: flip_byte(path / "t1.accumulators.f32", 0), recemb.DataLoss,
     r"t1\.accumulators\.f32"),
    (lambda path: os.truncate(path / "t0.accumulators.f32", 8), recemb.DataLoss,
     r"t0\.accumulators\.f32"),
    (lambda path: os.remove(path / "t1.parameters.f32"), FileNotFoundError,
     r"t1\.parameters\.f32"),
    (lambda path: flip_byte(path / "manifest.json", 30), ValueError, r"manifest\.json"),
])
def test_damaged_checkpoint_raises_naming_the_file_and_changes_nothing(saved, damage, error,
                                                                       message):
    path, target = saved
    damage(path)
    before = state(target)
    with pytest.raises(error, match=message):
        target.restore(path)
    assert_bitwise_equal(state(target), before)


def test_data_loss_is_a_value_error_and_a_missing_checkpoint_file_not_found(saved, tmp_path):
    assert issubclass(recemb.DataLoss, ValueError)
    path, target = saved
    with pytest.raises(FileNotFoundError, match="no checkpoint at") as missing:
        target.restore(tmp_path / "nothing")
    assert missing.value.errno == errno.ENOENT
    before = state(target)
    os.truncate(path / "t0.parameters.f32", 4)
    with pytest.raises(recemb.DataLoss, match=r"t0\.parameters\.f32.*truncated"):
        target.restore(path)
    assert_bitwise_equal(state(target), before)


def test_mismatched_configs_raise_naming_the_table_and_change_nothing(saved, tmp_path):
    path, target = saved
    rng = np.random.default_rng(7)
    cases = [
        (make_layer((random_table(rng, (VIDEO[0] + 5, VIDEO[1])), random_table(rng, USER)),
                    "adagrad", video_vocabulary=VIDEO[0] + 5),
         r"table 'video'.*vocabulary_size 30, the embedding 35; resize=\"grow\" restores"),
        (make_layer((random_table(rng, VIDEO), random_table(rng, USER)), "adam"),
         r"table 'video'.*optimizer is adagrad, the embedding's is adam"),
        (recemb.Embedding(recemb.FeatureConfig(recemb.TableConfig(30, 5, name="video")),
                          "adagrad"), r"user"),
    ]
    for layer, message in cases:
        before = state(layer)
        with pytest.raises(ValueError, match=message):
            layer.restore(path)
        assert_bitwise_equal(state(layer), before)
    dim = recemb.Embedding({"v": recemb.FeatureConfig(recemb.TableConfig(30, 5, name="video")),
                            "u": recemb.FeatureConfig(recemb.TableConfig(*USER, name="user"))},
                           "adagrad")
    with pytest.raises(ValueError, match=r"table 'video'.*dim 4, the embedding 5"):
        dim.restore(path)
    with pytest.raises(ValueError, match="resize='shrink': unknown resize 'shrink'; valid names "
                                         "are 'error', 'grow', 'grow_or_shrink'"):
        target.restore(path, resize="shrink")
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        target.restore(tmp_path / "nothing")


def test_resize_grow_keeps_the_new_rows_and_shrink_drops_rows(saved):
    path, _ = saved
    saved_tables = {t: np.fromfile(path / f"t{i}.parameters.f32", np.float32).reshape(shape)
                    for i, (t, shape) in enumerate([("video", VIDEO), ("user", USER)])}
    rng = np.random.default_rng(8)
    initial = random_table(rng, (VIDEO[0] + 6, VIDEO[1]))
    grown = make_layer((initial, random_table(rng, USER)), "adagrad",
                       video_vocabulary=VIDEO[0] + 6)
    assert grown.restore(path, resize="grow") == 2
    np.testing.assert_array_equal(grown.embedding_tables["video"][:VIDEO[0]],
                                  saved_tables["video"])
    np.testing.assert_array_equal(grown.embedding_tables["video"][VIDEO[0]:],
                                  initial[VIDEO[0]:])
    accumulators = grown.slot_variables["video"]["accumulators"]
    assert not np.all(accumulators[:VIDEO[0]] == 0.1)  # trained rows came from the checkpoint
    np.testing.assert_array_equal(accumulators[VIDEO[0]:], np.float32(0.1))
    np.testing.assert_array_equal(grown.embedding_tables["user"], saved_tables["user"])

    shrunk = make_layer((random_table(rng, (20, VIDEO[1])), random_table(rng, USER)), "adagrad",
                        video_vocabulary=20)
    before = state(shrunk)
    with pytest.raises(ValueError, match=r"table 'video'.*resize=\"grow_or_shrink\""):
        shrunk.restore(path, resize="grow")
    assert_bitwise_equal(state(shrunk), before)
    shrunk.restore(path, resize="grow_or_shrink")
    np.testing.assert_array_equal(shrunk.embedding_tables["video"], saved_tables["video"][:20])


def test_lookup_only_layer_takes_the_parameters(saved):
    path, _ = saved
    rng = np.random.default_rng(9)
    layer = make_layer((random_table(rng, VIDEO), random_table(rng, USER)), None)
    assert layer.restore(path) == 2
    np.testing.assert_array_equal(
        layer.embedding_tables["user"],
        np.fromfile(path / "t1.parameters.f32", np.float32).reshape(USER))


def test_file_system_errors_are_os_errors(tmp_path):
    layer = make_layer((random_table(np.random.default_rng(0), VIDEO), "zeros"), "sgd")
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(NotADirectoryError, match="file") as error:
        layer.save(tmp_path / "file" / "root")
    assert error.value.errno == errno.ENOTDIR


@pytest.mark.parametrize("value", [None, "", 3])
def test_a_path_that_is_not_one_raises_naming_the_argument(value):
    layer = make_layer((random_table(np.random.default_rng(0), VIDEO), "zeros"), "sgd")
    expected = f"={value!r}: expected a non-empty path"
    with pytest.raises(ValueError, match="directory" + expected):
        layer.save(value)
    with pytest.raises(ValueError, match="checkpoint" + expected):
        layer.restore(value)
    with pytest.raises(ValueError, match="path" + expected):
        layer.export(value)
    assert layer.step == 0


def test_bindings_extra_arrays_metadata_and_load_checkpoint(tmp_path):
    cpp = recemb._recemb
    rng = np.random.default_rng(10)
    layer = make_layer((random_table(rng, VIDEO), random_table(rng, USER)), "adagrad")
    train(layer, rng, 2)
    dense = rng.normal(size=37).astype(np.float32)
    # Temporary arrays: NamedArray and SaveOptions keep them alive.
    options = cpp.SaveOptions(keep_last=1, extra_arrays=[cpp.NamedArray("dense", dense.copy())],
                              metadata={"position": "42"}, checksum_block_bytes=64)
    options.extra_arrays = options.extra_arrays + [cpp.NamedArray("bias", np.ones(3, np.float32))]
    with pytest.raises(TypeError):
        cpp.NamedArray("float64", np.ones(3))
    path = cpp.save_checkpoint(layer._engine, tmp_path, options)

    target = make_layer((random_table(rng, VIDEO), random_table(rng, USER)), "adagrad")
    restored = cpp.restore_checkpoint(target._engine, path,
                                      cpp.RestoreOptions(resize=cpp.VocabularyResize.kError))
    assert restored.step == 2 and restored.metadata == {"position": "42"}
    arrays = restored.extra_arrays
    del restored  # the arrays keep the state alive
    assert sorted(arrays) == ["bias", "dense"] and arrays["dense"].dtype == np.float32
    np.testing.assert_array_equal(arrays["dense"], dense)
    np.testing.assert_array_equal(arrays["bias"], np.ones(3))
    assert_bitwise_equal(state(target), state(layer))

    loaded = cpp.load_checkpoint(path, cpp.LoadOptions(tables_only=True, num_threads=1))
    assert loaded.step() == 2 and loaded.variable_names("video") == ["parameters"]
    np.testing.assert_array_equal(loaded.variable_data("video", "parameters"),
                                  layer.embedding_tables["video"].reshape(-1))
