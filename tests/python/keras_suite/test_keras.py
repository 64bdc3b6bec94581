"""recemb.keras inside Keras 3 models on the TensorFlow backend: model.fit against the same model
built from Keras's own Embedding layer, custom loops eager and under tf.function, the seed's
docstring examples, saving and loading weights, serving export, errors."""

import numpy as np
import pytest
import tensorflow as tf

import keras
import recemb
import recemb.keras

E = tf.tpu.experimental.embedding

VOCABULARY = 30
DIM = 4


def _initial(rng, vocabulary=VOCABULARY, dim=DIM):
    return rng.normal(size=(vocabulary, dim)).astype(np.float32)


def _data(rng, examples=96):
    ids = rng.integers(0, VOCABULARY, size=(examples, 1)).astype(np.int64)
    labels = rng.normal(size=(examples, 1)).astype(np.float32)
    return ids, labels


def test_model_fit_equals_keras_own_embedding_layer(rng):
    """A functional model trained by model.fit (compiled): recemb's table with the fused SGD and
    Keras's Dense with Keras's SGD give the same tables and weights as the same model built from
    keras.layers.Embedding, everything trained by Keras's SGD."""
    table = _initial(rng)
    dense_kernel = rng.normal(size=(DIM, 1)).astype(np.float32)
    ids, labels = _data(rng)

    def model_with(embedding_output):
        inputs = keras.Input(shape=(1,), dtype="int64", name="ids")
        dense = keras.layers.Dense(1, kernel_initializer=keras.initializers.Constant(
            dense_kernel), name="dense")
        model = keras.Model(inputs, dense(embedding_output(inputs)))
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss="mse")
        return model

    config = recemb.FeatureConfig(recemb.TableConfig(VOCABULARY, DIM, initializer=table,
                                                     combiner="sum", name="items"), name="ids")
    ours = recemb.keras.Embedding(config, optimizer=recemb.optimizers.SGD(learning_rate=0.1))
    model = model_with(ours)
    reference_table = keras.layers.Embedding(VOCABULARY, DIM, embeddings_initializer=(
        keras.initializers.Constant(table)))
    reference = model_with(lambda x: keras.ops.squeeze(reference_table(x), 1))

    history = model.fit(ids, labels, batch_size=16, epochs=2, shuffle=False, verbose=0)
    reference.fit(ids, labels, batch_size=16, epochs=2, shuffle=False, verbose=0)

    assert ours.step == 12
    assert history.history["loss"][1] < history.history["loss"][0]
    np.testing.assert_allclose(ours.embedding_tables["items"],
                               reference_table.embeddings.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.get_layer("dense").kernel.numpy(),
                               reference.get_layer("dense").kernel.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.trainable_variables[0].numpy(), 0.0)  # the trigger
    np.testing.assert_allclose(model.predict(ids, verbose=0), reference.predict(ids, verbose=0),
                               rtol=1e-5, atol=1e-6)


class SubclassedModel(keras.Model):
    """The seed's subclassed example: the layer, then a Dense over the concatenated outputs."""

    def __init__(self, feature_config, optimizer):
        super().__init__()
        self.embedding_layer = recemb.keras.TPUEmbedding(feature_config=feature_config,
                                                         optimizer=optimizer)
        self.dense = keras.layers.Dense(1, kernel_initializer="ones")

    def call(self, inputs, training=None):
        embedding = self.embedding_layer(inputs, training=training)
        return self.dense(tf.concat(tf.nest.flatten(embedding), axis=1))


def _seed_configs(rng):
    table = E.TableConfig(VOCABULARY, DIM, combiner="mean", name="video",
                          initializer=tf.constant_initializer(_initial(rng)))
    user = E.TableConfig(VOCABULARY + 3, DIM + 1, combiner="sum", name="user",
                         initializer=tf.constant_initializer(_initial(rng, VOCABULARY + 3,
                                                                      DIM + 1)))
    return {"watched": E.FeatureConfig(table, name="watched"),
            "liked": E.FeatureConfig(table, name="liked"),
            "user": E.FeatureConfig(user, name="user")}


def _seed_batch(rng, batch=8):
    def ragged(vocabulary):
        lengths = rng.integers(1, 4, size=batch)
        ids = rng.integers(0, vocabulary, size=int(lengths.sum()))
        return tf.RaggedTensor.from_row_lengths(tf.constant(ids, tf.int64), lengths)
    features = {"watched": ragged(VOCABULARY), "liked": ragged(VOCABULARY),
                "user": tf.constant(rng.integers(0, VOCABULARY + 3, size=batch), tf.int64)}
    return features, tf.constant(rng.normal(size=(batch, 1)).astype(np.float32))


def _train(model, batches, optimizer, compiled):
    def step(features, labels):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(features, training=True) - labels))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss
    if compiled:
        step = tf.function(step)
    return [float(step(features, labels)) for features, labels in batches]


def test_custom_loop_compiled_equals_eager_bitwise(rng):
    configs = _seed_configs(rng)
    batches = [_seed_batch(rng) for _ in range(5)]
    results = []
    for compiled in (False, True):
        model = SubclassedModel(configs, E.Adagrad(learning_rate=0.2))
        losses = _train(model, batches, keras.optimizers.Adam(0.01), compiled)
        results.append((losses, dict(model.embedding_layer.embedding_tables),
                        model.dense.kernel.numpy()))
    (eager_losses, eager_tables, eager_kernel), (losses, tables, kernel) = results
    assert losses == eager_losses
    for name, table in tables.items():
        np.testing.assert_array_equal(table, eager_tables[name])
    np.testing.assert_array_equal(kernel, eager_kernel)


def test_separate_optimizer_model_of_the_seed_docstring(rng):
    """The seed's ModelWithSeparateOptimizer: the layer's own optimizer trains the tables, the
    dense optimizer the rest; the embedding optimizer's apply_gradients sees the trigger only."""
    configs = _seed_configs(rng)
    embedding_optimizer = tf.keras.optimizers.legacy.Adagrad(learning_rate=0.1)
    dense_optimizer = keras.optimizers.Adam(learning_rate=0.1)
    model = SubclassedModel(configs, embedding_optimizer)
    features, labels = _seed_batch(rng)
    before = {name: table.copy() for name, table in model.embedding_layer.embedding_tables.items()}

    @tf.function
    def training_step(features, labels):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(features, training=True) - labels))
        gradients = tape.gradient(loss, model.trainable_variables)
        grads_and_vars = list(zip(gradients, model.trainable_variables))
        embedding_var_ids = [id(v) for v in model.embedding_layer.trainable_variables]
        dense_optimizer.apply_gradients(
            [(g, v) for g, v in grads_and_vars if id(v) not in embedding_var_ids])
        return [g for g, v in grads_and_vars if id(v) in embedding_var_ids]

    embedding_gradients = training_step(features, labels)
    assert len(embedding_gradients) == 1 and float(embedding_gradients[0]) == 0.0
    assert model.embedding_layer.step == 1
    for name, table in model.embedding_layer.embedding_tables.items():
        assert not np.array_equal(table, before[name])
    accumulators = model.embedding_layer.slot_variables["video"]["accumulators"]
    assert accumulators.max() > 0.1  # Adagrad's initial_accumulator_value, then g^2 added


def test_save_weights_and_load_weights_round_trip(rng, tmp_path):
    configs = _seed_configs(rng)
    batches = [_seed_batch(rng) for _ in range(3)]
    model = SubclassedModel(configs, E.Adam(learning_rate=0.05))
    _train(model, batches, keras.optimizers.SGD(0.1), compiled=True)
    path = tmp_path / "model.weights.h5"
    model.save_weights(path)
    evaluation = model(batches[0][0], training=False)

    restored = SubclassedModel(_seed_configs(np.random.default_rng(5)), E.Adam(learning_rate=0.05))
    restored(batches[0][0])  # builds the dense layer
    restored.load_weights(path)
    layer, restored_layer = model.embedding_layer, restored.embedding_layer
    assert restored_layer.step == layer.step == 3
    for name in ("video", "user"):
        np.testing.assert_array_equal(restored_layer.embedding_tables[name],
                                      layer.embedding_tables[name])
        for slot, values in layer.slot_variables[name].items():
            np.testing.assert_array_equal(restored_layer.slot_variables[name][slot], values)
    np.testing.assert_array_equal(restored(batches[0][0], training=False), evaluation)


def test_load_weights_of_other_tables_changes_nothing(rng, tmp_path):
    model = SubclassedModel(_seed_configs(rng), "sgd")
    model(_seed_batch(rng)[0])
    path = tmp_path / "model.weights.h5"
    model.save_weights(path)
    video = E.TableConfig(VOCABULARY - 1, DIM, name="video")
    small = {"watched": E.FeatureConfig(video, name="watched"),
             "liked": E.FeatureConfig(video, name="liked"),
             "user": E.FeatureConfig(E.TableConfig(VOCABULARY + 3, DIM + 1, name="user"),
                                     name="user")}
    renamed = {"watched": E.FeatureConfig(E.TableConfig(VOCABULARY, DIM, name="video"),
                                          name="watched"),
               "user": E.FeatureConfig(E.TableConfig(VOCABULARY + 3, DIM + 1, name="person"),
                                       name="user")}
    renamed["liked"] = E.FeatureConfig(renamed["watched"].table, name="liked")
    # Keras retries a layer whose loading failed and reports the last attempt's error: the
    # message is the layer's; the tables unchanged are what matters.
    for configs in (small, renamed):
        other = SubclassedModel(configs, "sgd")
        other(_seed_batch(rng)[0])
        before = {name: table.copy()
                  for name, table in other.embedding_layer.embedding_tables.items()}
        with pytest.raises(ValueError, match="the saved tables do not fit this layer"):
            other.load_weights(path)
        for name, table in other.embedding_layer.embedding_tables.items():
            np.testing.assert_array_equal(table, before[name])


def test_learning_rate_schedule_in_model_fit(rng):
    """A Keras LearningRateSchedule given through a Keras optimizer is called with recemb's step
    from inside the compiled step: SGD's rows move by lr(step) * gradient."""
    schedule = keras.optimizers.schedules.ExponentialDecay(0.5, decay_steps=1, decay_rate=0.5)
    table = _initial(rng)
    config = recemb.FeatureConfig(recemb.TableConfig(VOCABULARY, DIM, initializer=table,
                                                     combiner="sum", name="t"), name="f")
    layer = recemb.keras.Embedding(config, optimizer=keras.optimizers.SGD(learning_rate=schedule))
    ids = tf.constant([[3]], tf.int64)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(ids, training=True))
        return tape.gradient(loss, layer.trainable_variables)

    for _ in range(3):
        step()
    # gradient 1 in every column; learning rates 0.5, 0.25, 0.125
    np.testing.assert_allclose(layer.embedding_tables["t"][3], table[3] - 0.875, rtol=1e-6)


def test_export_for_serving_gives_the_evaluation_activations(rng, tmp_path):
    model = SubclassedModel(_seed_configs(rng), "adagrad")
    batches = [_seed_batch(rng) for _ in range(2)]
    _train(model, batches, keras.optimizers.SGD(0.1), compiled=False)
    path = tmp_path / "tables.recemb"
    model.embedding_layer.embedding.export(path)
    serving = recemb.ServingModel.open(path, feature_config=model.embedding_layer.feature_config)
    features = batches[1][0]
    expected = model.embedding_layer(features, training=False)
    got = serving.lookup({"watched": recemb.Ragged(features["watched"].values.numpy(),
                                                   features["watched"].row_splits.numpy()),
                          "liked": recemb.Ragged(features["liked"].values.numpy(),
                                                 features["liked"].row_splits.numpy()),
                          "user": features["user"].numpy()})
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name].numpy())


def test_bad_ids_raise_and_change_nothing(rng):
    model = SubclassedModel(_seed_configs(rng), "sgd")
    features, labels = _seed_batch(rng)
    model(features)
    before = {name: table.copy() for name, table in model.embedding_layer.embedding_tables.items()}
    features["user"] = tf.constant([1, 2, 3, 4, 5, 6, 7, VOCABULARY + 3], tf.int64)
    for compiled in (False, True):
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"feature 'user' \(table 'user'\): example 7.*out of range"):
            _train(model, [(features, labels)], keras.optimizers.SGD(0.1), compiled)
    assert model.embedding_layer.step == 0
    for name, table in model.embedding_layer.embedding_tables.items():
        np.testing.assert_array_equal(table, before[name])


def test_bad_arguments_raise_value_errors(rng):
    configs = _seed_configs(rng)
    with pytest.raises(ValueError, match="momentum"):
        recemb.keras.Embedding(configs, optimizer=keras.optimizers.SGD(0.1, momentum=0.9))
    with pytest.raises(ValueError, match="unsupported for TPU Embedding"):
        recemb.keras.Embedding(configs, optimizer=keras.optimizers.RMSprop(0.1))
    with pytest.raises(ValueError, match="slot_variable_creation_fn"):
        recemb.keras.Embedding(configs, optimizer=E.Adagrad(
            slot_variable_creation_fn=lambda *args: {}))
    with pytest.raises(ValueError, match="batch_size"):
        recemb.keras.Embedding(configs, batch_size=0)
    layer = recemb.keras.Embedding(configs, "sgd")
    features, _ = _seed_batch(rng)
    with pytest.raises(ValueError, match="keys do not match"):
        layer({"watched": features["watched"]})
    with pytest.raises(ValueError, match="ids must be int32 or int64"):
        layer({**features, "user": tf.constant([1.0] * 8)})
    with pytest.raises(ValueError, match="weights must be a RaggedTensor"):
        layer(features, {"watched": tf.ones([8, 2]), "liked": None, "user": None})


def test_training_lookups_without_gradients_are_bounded(rng):
    """Training calls outside a GradientTape keep their batches for gradients that never come:
    at most 8 are kept, the oldest dropped, and nothing is updated."""
    layer = recemb.keras.Embedding(_seed_configs(rng), "sgd")
    features, _ = _seed_batch(rng)
    before = layer.embedding_tables["video"].copy()
    for _ in range(20):
        layer(features, training=True)
    assert layer._graph_ops.pending() == 8
    np.testing.assert_array_equal(layer.embedding_tables["video"], before)
    assert layer.step == 0


def test_tf_train_checkpoint_saves_and_restores_the_tables(rng, tmp_path):
    """The seed's docstring: `checkpoint = tf.train.Checkpoint(model=model); checkpoint.save(...)`
    saves the tables, slots and step with the model; restore brings them back."""
    model = SubclassedModel(_seed_configs(rng), E.Adagrad(learning_rate=0.1))
    optimizer = keras.optimizers.SGD(0.1)
    batches = [_seed_batch(rng) for _ in range(4)]
    _train(model, batches[:2], optimizer, compiled=True)
    saved = {name: table.copy() for name, table in model.embedding_layer.embedding_tables.items()}
    accumulators = model.embedding_layer.slot_variables["video"]["accumulators"].copy()
    kernel = model.dense.kernel.numpy()
    checkpoint = tf.train.Checkpoint(model=model)
    path = checkpoint.save(str(tmp_path / "ckpt"))
    _train(model, batches[2:], optimizer, compiled=True)
    assert model.embedding_layer.step == 4
    checkpoint.restore(path).assert_existing_objects_matched()
    assert model.embedding_layer.step == 2
    for name, table in model.embedding_layer.embedding_tables.items():
        np.testing.assert_array_equal(table, saved[name])
    np.testing.assert_array_equal(model.embedding_layer.slot_variables["video"]["accumulators"],
                                  accumulators)
    np.testing.assert_array_equal(model.dense.kernel.numpy(), kernel)


def test_functional_model_of_the_seed_docstring(rng):
    """The seed's functional example: keras.Input per feature (dense and ragged), the layer on
    them, a Dense on the concatenated activations; trained by model.fit on a tf.data dataset."""
    configs = _seed_configs(rng)
    inputs = {"watched": keras.Input(shape=(None,), dtype="int64", ragged=True, name="watched"),
              "liked": keras.Input(shape=(None,), dtype="int64", ragged=True, name="liked"),
              "user": keras.Input(shape=(), dtype="int64", name="user")}
    embedding = recemb.keras.TPUEmbedding(feature_config=configs,
                                          optimizer=E.SGD(0.1))(inputs)
    logits = keras.layers.Dense(1)(keras.layers.Concatenate()(tf.nest.flatten(embedding)))
    model = keras.Model(inputs, logits)
    model.compile(optimizer="sgd", loss="mse")
    features, labels = _seed_batch(rng)
    dataset = tf.data.Dataset.from_tensors((features, labels)).repeat(3)
    (layer,) = [lay for lay in model.layers if isinstance(lay, recemb.keras.Embedding)]
    before = layer.embedding_tables["video"].copy()
    model.fit(dataset, verbose=0)
    assert layer.step == 3
    assert not np.array_equal(layer.embedding_tables["video"], before)
    assert model.predict(dataset.take(1), verbose=0).shape == (8, 1)


def test_saved_model_export_is_refused_with_the_way_to_serve(rng, tmp_path):
    model = SubclassedModel(_seed_configs(rng), "sgd")
    features, _ = _seed_batch(rng)
    model(features)

    @tf.function(input_signature=[{
        "watched": tf.RaggedTensorSpec([None, None], tf.int64),
        "liked": tf.RaggedTensorSpec([None, None], tf.int64),
        "user": tf.TensorSpec([None], tf.int64)}])
    def serve(examples):
        return model(examples)

    with pytest.raises(ValueError, match="layer.embedding.export"):
        tf.saved_model.save(model, str(tmp_path / "saved"), signatures={"serving": serve})


def test_model_save_and_load_model_round_trip(rng, tmp_path):
    """model.save('*.keras') stores the layer's config (feature configs, optimizers, options) and
    its tables, slots and step; keras.models.load_model rebuilds it, and training continues
    as in the saved model."""
    table = recemb.TableConfig(VOCABULARY, DIM, name="t", combiner="sqrtn",
                               initializer=_initial(rng),
                               optimizer=recemb.optimizers.FTRL(learning_rate=0.2, beta=0.1))
    other = recemb.TableConfig(VOCABULARY + 2, DIM + 1, name="u",
                               initializer=_initial(rng, VOCABULARY + 2, DIM + 1))
    config = {"a": recemb.FeatureConfig(table, name="a"),
              "b": [recemb.FeatureConfig(table, name="b"),
                    recemb.FeatureConfig(other, max_sequence_length=2, name="c")]}
    inputs = {"a": keras.Input(shape=(), dtype="int64", name="a"),
              "b": [keras.Input(shape=(3,), dtype="int64", name="b"),
                    keras.Input(shape=(2,), dtype="int64", name="c")]}
    layer = recemb.keras.Embedding(config, recemb.optimizers.Adagrad(learning_rate=0.3), seed=7)
    out = layer(inputs)
    flat = keras.layers.Concatenate()([out["a"], out["b"][0], keras.layers.Flatten()(out["b"][1])])
    model = keras.Model(inputs, keras.layers.Dense(1)(flat))
    model.compile(optimizer="sgd", loss="mse")

    def data(count):
        return ({"a": rng.integers(0, VOCABULARY, size=count),
                 "b": [rng.integers(0, VOCABULARY, size=(count, 3)),
                       rng.integers(0, VOCABULARY + 2, size=(count, 2))]},
                rng.normal(size=(count, 1)).astype(np.float32))

    x, y = data(32)
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    (restored,) = [lay for lay in loaded.layers if isinstance(lay, recemb.keras.Embedding)]
    assert restored.step == layer.step == 4
    for name in ("t", "u"):
        np.testing.assert_array_equal(restored.embedding_tables[name], layer.embedding_tables[name])
        for slot, values in layer.slot_variables[name].items():
            np.testing.assert_array_equal(restored.slot_variables[name][slot], values)
    assert type(restored.feature_config["a"].table.optimizer).__name__ == "FTRL"
    assert restored.feature_config["b"][1].max_sequence_length == 2
    x, y = data(16)
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
    loaded.fit(x, y, batch_size=8, shuffle=False, verbose=0)
    for name in ("t", "u"):
        np.testing.assert_allclose(restored.embedding_tables[name], layer.embedding_tables[name],
                                   rtol=1e-6, atol=1e-7)


def test_model_save_refuses_what_has_no_config(rng, tmp_path):
    inputs = keras.Input(shape=(), dtype="int64")
    layer = recemb.keras.Embedding(recemb.FeatureConfig(
        recemb.TableConfig(VOCABULARY, DIM, name="t"), name="f"),
        recemb.optimizers.SGD(learning_rate=lambda: 0.1))
    model = keras.Model(inputs, keras.layers.Dense(1)(layer(inputs)))
    with pytest.raises(NotImplementedError, match="save_weights or tf.train.Checkpoint"):
        model.save(tmp_path / "model.keras")


def test_dynamic_table_trains_in_a_compiled_step(rng):
    """A dynamic vocabulary through the graph ops: training steps admit any int64 key, an
    evaluation lookup of an unseen key gives zeros and admits nothing; the rows equal those of
    recemb.Embedding trained by numpy on the same batches and gradients."""
    def configs():
        table = recemb.TableConfig(vocabulary=recemb.DynamicVocabulary(capacity=64), dim=DIM,
                                   name="users", combiner="sum")
        return recemb.FeatureConfig(table, name="user")

    layer = recemb.keras.Embedding(configs(), recemb.optimizers.Adagrad(learning_rate=0.2))
    reference = recemb.Embedding(configs(), recemb.optimizers.Adagrad(learning_rate=0.2))
    keys = rng.integers(-2**62, 2**62, size=12)

    @tf.function
    def step(ids, cotangent):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(ids, training=True) * cotangent)
        return tape.gradient(loss, layer.trainable_variables)

    for _ in range(3):
        ids = rng.choice(keys, size=(5, 2))
        cotangent = rng.normal(size=(5, DIM)).astype(np.float32)
        step(tf.constant(ids), tf.constant(cotangent))
        reference(ids)
        reference.apply_gradients(cotangent)
    stats = layer.embedding.vocabulary_stats("users")
    assert stats == reference.vocabulary_stats("users") and stats["size"] > 0
    got_keys, got_rows, _ = layer.embedding.read_dynamic_table("users")
    want_keys, want_rows, _ = reference.read_dynamic_table("users")
    np.testing.assert_array_equal(got_keys, want_keys)
    np.testing.assert_allclose(got_rows, want_rows, rtol=1e-6, atol=1e-7)
    unseen = np.setdiff1d(rng.integers(0, 2**40, size=4), keys)[:1]
    np.testing.assert_array_equal(layer(tf.constant(unseen), training=False), 0.0)
    assert layer.embedding.vocabulary_stats("users") == stats


def test_string_ids_of_a_dynamic_table(rng):
    """tf.string ids of a dynamic table become recemb's string keys in the graph
    (RecembStringKeys): the same keys and rows as recemb.Embedding given the same str ids;
    string ids of a static table are refused."""
    def configs():
        table = recemb.TableConfig(vocabulary=recemb.DynamicVocabulary(capacity=32), dim=DIM,
                                   name="words", combiner="mean")
        return {"w": recemb.FeatureConfig(table, name="w")}

    layer = recemb.keras.Embedding(configs(), recemb.optimizers.SGD(learning_rate=0.5))
    reference = recemb.Embedding(configs(), recemb.optimizers.SGD(learning_rate=0.5))
    words = np.array(["", "caf\u00e9", "user 17", "a b", "x" * 40])
    lists = [list(rng.choice(words, size=n)) for n in (2, 1, 3)]
    ragged = tf.ragged.constant(lists, dtype=tf.string)

    @tf.function
    def step(ids):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer({"w": ids}, training=True)["w"])
        return tape.gradient(loss, layer.trainable_variables)

    step(ragged)
    reference({"w": recemb.Ragged.from_lists(lists)})
    reference.apply_gradients({"w": np.ones((3, DIM), np.float32)})
    got_keys, got_rows, _ = layer.embedding.read_dynamic_table("words")
    want_keys, want_rows, _ = reference.read_dynamic_table("words")
    np.testing.assert_array_equal(got_keys, want_keys)
    assert sorted(got_keys) == sorted({recemb.string_key(word) for row in lists for word in row})
    np.testing.assert_allclose(got_rows, want_rows, rtol=1e-6, atol=1e-7)
    static = recemb.keras.Embedding(recemb.FeatureConfig(recemb.TableConfig(5, 2, name="t"),
                                                         name="f"))
    with pytest.raises(ValueError, match="or strings, for a dynamic table"):
        static(tf.constant(["a"]))
