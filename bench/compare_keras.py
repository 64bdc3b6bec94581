"""The Keras training step three ways, on the same batches, on the CPU (docs/performance.md,
"recemb.keras beside the seed's layer and keras-rs"):

  (S) the seed        tensorflow_recommenders' TPUEmbedding (the layer recemb re-creates) built on
                      the CPU: its tables are tf.Variables trained by the Keras (tf_keras legacy)
                      Adagrad, the dense layer by the same optimizer (the seed's docstring loop);
  (K) keras-rs        keras_rs.layers.DistributedEmbedding, whose CPU path is Keras embedding
                      layers, trained with the dense layer by Keras 3's Adagrad;
  (R) recemb.keras    the tables trained by recemb's fused Adagrad in the backward pass, the
                      dense layer by Keras 3's Adagrad;
and two bounds: (D) "dense", the same step without an embedding layer (filled activations), and
(E) "engine", recemb's lookup and update of the same batches called from numpy. A layer's step
costs at least D + E, so peer / (D + E) is the most recemb.keras could reach over a peer.

Each step: a lookup of every feature (one id per feature and example, combiner sum), the
activations concatenated into one Dense(1), the mean logistic loss, gradients, the updates; the
steps run in one tf.function over a tf.data iterator (`for _ in tf.range(steps)`, as the seed's
docstring trains), so no Python runs between them. Adagrad: learning rate 0.05, initial accumulator 0.1. Workloads:
  dlrm        the 26 tables of `recemb train`'s small preset (the Criteo Kaggle cardinalities
              fit to 64 MiB at dim 16, dlrm/criteo_profile.h), batch 2,048;
  10m         one table of 10,000,000 rows x dim 32 (1.2 GiB, as much again for Adagrad's
              accumulators), looked up by 8 features, batch 2,048, uniform ids; the table
              starts at zeros (random arrays of this size, copied into the seed's graph
              constants, exhaust the machine's 24 GiB).
Timing: --rounds rounds, each running every contender for --steps steps (after 3 warm-up steps,
the first of which traces) in turn, the order rotating; a round's figure is its steps' time over
their number, a contender's the median over the rounds, and recemb's ratio over each the median
of per-round ratios. The loss of the first
step is printed as a check that the three train the same model (the same initial tables and
dense weights): they agree to float rounding.

Run in the environment of scripts/keras-env:
    build/venv-keras/bin/python bench/compare_keras.py [--workloads dlrm,10m] [--rounds 3]
    ... --smoke       tables and batches shrunk, one round of 2 steps (a check that it runs)
"""

import argparse
import gc
import os
import pathlib
import statistics
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras = tf_keras, as the seed needs
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402  (Keras 3)
import keras_rs  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_recommenders as tfrs  # noqa: E402

import recemb  # noqa: E402
import recemb.keras  # noqa: E402

tf.get_logger().setLevel("ERROR")  # each contender's new tf.function is traced on purpose

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_common import CRITEO_KAGGLE, cpu_model, fit_to_budget, git_commit  # noqa: E402

LEARNING_RATE = 0.05
INITIAL_ACCUMULATOR = 0.1
WARMUP_STEPS = 3


def workloads(smoke):
    """{name: (vocabulary size per table, dim, features per table, batch)}."""
    shrink = 64 if smoke else 1
    dlrm = fit_to_budget(CRITEO_KAGGLE, 16, (64 << 20) // shrink)
    return {"dlrm": (list(dlrm), 16, 1, 2048 // (8 if smoke else 1)),
            "10m": ([10_000_000 // shrink], 32, 8, 2048 // (8 if smoke else 1))}


def batches(rng, sizes, features_per_table, batch, count):
    """A dataset of `count` batches ({feature: int64 ids [batch]}, labels [batch, 1]), repeated."""
    ids = {f"f{t}_{k}": rng.integers(0, size, size=(count, batch))
           for t, size in enumerate(sizes) for k in range(features_per_table)}
    labels = (rng.random((count, batch, 1)) < 0.3).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((ids, labels)).repeat()


def compiled_loop(step):
    """`steps` steps over an iterator in one tf.function, as the seed's docstring trains
    (`for _ in tf.range(num_steps)`): no Python between steps. Returns the last step's loss."""
    @tf.function
    def loop(iterator, steps):
        loss = tf.constant(0.0)
        for _ in tf.range(steps):
            ids, labels = next(iterator)
            loss = step(ids, labels)
        return loss
    return loop


def initial_values(rng, sizes, dim, name):
    """The tables' initial rows: random for dlrm; None (zeros) for 10m, whose random arrays the
    seed's constant initializer would copy into graph constants beyond the machine's memory."""
    if name == "10m":
        return [None for _ in sizes]
    return [(rng.random((size, dim), dtype=np.float32) - 0.5) * 0.1 for size in sizes]


def loss_of(logits, labels):
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))


def dense_layer(keras_module, inputs_width, kernel):
    layer = keras_module.layers.Dense(1, kernel_initializer=keras_module.initializers.Constant(
        kernel))
    layer.build((None, inputs_width))
    return layer


def training_step(lookup, embedding, dense, optimizer):
    """The step every contender runs: lookup(ids) -> {feature: activations}, concatenated in
    feature order into the Dense, the loss, its gradients with respect to the embedding layer's
    trainable variables and the Dense's, applied by `optimizer`."""
    def step(ids, labels):
        with tf.GradientTape() as tape:
            outputs = lookup(ids)
            loss = loss_of(dense(tf.concat([outputs[k] for k in sorted(outputs)], 1)), labels)
        variables = embedding.trainable_variables + dense.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss
    return step


def seed_step(tables, sizes, dim, per_table, kernel):
    """(S): the seed's layer and a tf_keras Dense, trained by one tf_keras legacy Adagrad."""
    configs = [tf.tpu.experimental.embedding.TableConfig(
        size, dim, initializer=tf.zeros_initializer() if values is None else
        tf.constant_initializer(values), combiner="sum", name=f"t{t}")
        for t, (size, values) in enumerate(zip(sizes, tables))]
    features = {f"f{t}_{k}": tf.tpu.experimental.embedding.FeatureConfig(config, name=f"f{t}_{k}")
                for t, config in enumerate(configs) for k in range(per_table)}
    optimizer = tf.keras.optimizers.legacy.Adagrad(LEARNING_RATE,
                                                   initial_accumulator_value=INITIAL_ACCUMULATOR)
    embedding = tfrs.layers.embedding.TPUEmbedding(features, optimizer=optimizer)
    return training_step(embedding, embedding, dense_layer(tf.keras, dim * len(features), kernel),
                         optimizer)


def keras_rs_step(tables, sizes, dim, per_table, kernel):
    """(K): keras-rs's DistributedEmbedding (its CPU path) and a Keras 3 Dense, one Adagrad."""
    optimizer = keras.optimizers.Adagrad(LEARNING_RATE,
                                         initial_accumulator_value=INITIAL_ACCUMULATOR)
    configs = [keras_rs.layers.TableConfig(
        name=f"t{t}", vocabulary_size=size, embedding_dim=dim, combiner="sum",
        initializer="zeros" if values is None else keras.initializers.Constant(values),
        optimizer=optimizer)
        for t, (size, values) in enumerate(zip(sizes, tables))]
    features = {f"f{t}_{k}": keras_rs.layers.FeatureConfig(
        name=f"f{t}_{k}", table=config, input_shape=(None, 1), output_shape=(None, dim))
        for t, config in enumerate(configs) for k in range(per_table)}
    embedding = keras_rs.layers.DistributedEmbedding(features)
    return training_step(
        lambda ids: embedding({name: tf.reshape(values, [-1, 1]) for name, values in ids.items()}),
        embedding, dense_layer(keras, dim * len(features), kernel), optimizer)


def recemb_features(tables, sizes, dim, per_table):
    """recemb's feature configs of the workload, and its fused Adagrad (R and E)."""
    configs = [recemb.TableConfig(size, dim, initializer="zeros" if values is None else values,
                                  combiner="sum", name=f"t{t}")
               for t, (size, values) in enumerate(zip(sizes, tables))]
    features = {f"f{t}_{k}": recemb.FeatureConfig(config, name=f"f{t}_{k}")
                for t, config in enumerate(configs) for k in range(per_table)}
    return features, recemb.optimizers.Adagrad(learning_rate=LEARNING_RATE,
                                               initial_accumulator_value=INITIAL_ACCUMULATOR)


def recemb_step(tables, sizes, dim, per_table, kernel):
    """(R): recemb.keras (fused Adagrad) and a Keras 3 Dense trained by Keras's Adagrad."""
    features, table_optimizer = recemb_features(tables, sizes, dim, per_table)
    embedding = recemb.keras.Embedding(features, optimizer=table_optimizer)
    optimizer = keras.optimizers.Adagrad(LEARNING_RATE,
                                         initial_accumulator_value=INITIAL_ACCUMULATOR)
    return training_step(lambda ids: embedding(ids, training=True), embedding,
                         dense_layer(keras, dim * len(features), kernel), optimizer)


def dense_step(tables, sizes, dim, per_table, kernel):
    """(D), a bound: the step without an embedding layer. Each feature's activations are a filled
    [batch, dim] tensor, concatenated into the Dense(1) as above; the loss's gradients with
    respect to them (what an embedding layer receives) and the Dense's (applied by Keras 3's
    Adagrad) are computed. Any layer's step costs this plus its own lookup and update."""
    features = len(sizes) * per_table
    dense = dense_layer(keras, dim * features, kernel)
    optimizer = keras.optimizers.Adagrad(LEARNING_RATE,
                                         initial_accumulator_value=INITIAL_ACCUMULATOR)

    def step(ids, labels):
        batch = tf.shape(labels)[0]
        activations = [tf.fill([batch, dim], 0.01 * (f + 1)) for f in range(features)]
        with tf.GradientTape() as tape:
            tape.watch(activations)
            loss = loss_of(dense(tf.concat(activations, 1)), labels)
        variables = dense.trainable_variables
        gradients = tape.gradient(loss, variables + activations)
        optimizer.apply_gradients(zip(gradients[:len(variables)], variables))
        return loss + 0.0 * tf.add_n([tf.reduce_sum(g) for g in gradients[len(variables):]])
    return step


def engine_seconds(tables, sizes, dim, per_table, data, steps):
    """(E), a bound: recemb's own lookup and fused Adagrad update of the same batches, called
    from Python with numpy arrays (recemb.Embedding), seconds a step (median of `steps`)."""
    layer = recemb.Embedding(*recemb_features(tables, sizes, dim, per_table))
    batches = [{name: values.numpy() for name, values in ids.items()}
               for ids, _ in data.take(WARMUP_STEPS + steps)]
    gradients = {name: np.full((len(values), dim), 0.01, np.float32)
                 for name, values in batches[0].items()}
    durations = []
    for index, ids in enumerate(batches):
        start = time.perf_counter()
        layer(ids)
        layer.apply_gradients(gradients)
        if index >= WARMUP_STEPS:
            durations.append(time.perf_counter() - start)
    return statistics.median(durations)


CONTENDERS = {"seed": seed_step, "keras-rs": keras_rs_step, "recemb": recemb_step,
              "dense": dense_step}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="dlrm,10m")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    rounds, steps = (1, 2) if args.smoke else (args.rounds, args.steps)
    print(f"CPU: {cpu_model()}; recemb {git_commit()}; tensorflow {tf.__version__}, keras "
          f"{keras.__version__}, tensorflow-recommenders {tfrs.__version__}, keras-rs "
          f"{keras_rs.__version__}; {os.cpu_count()} cores", flush=True)
    known = workloads(args.smoke)
    for name in args.workloads.split(","):
        if name not in known:
            sys.exit(f"compare_keras: unknown workload {name!r}; known: {sorted(known)}")
        sizes, dim, per_table, batch = known[name]
        rng = np.random.default_rng(2026)
        tables = initial_values(rng, sizes, dim, name)
        kernel = rng.normal(size=(dim * len(sizes) * per_table, 1)).astype(np.float32) * 0.1
        data = batches(rng, sizes, per_table, batch, WARMUP_STEPS + steps)
        print(f"\n{name}: {len(sizes)} table(s), {sum(sizes):,} rows x dim {dim}, "
              f"{len(sizes) * per_table} features, batch {batch}", flush=True)
        times = {contender: [] for contender in CONTENDERS}
        order = list(CONTENDERS)
        for round_index in range(rounds):
            for contender in order:
                step = compiled_loop(CONTENDERS[contender](tables, sizes, dim, per_table, kernel))
                iterator = iter(data)
                first = float(step(iterator, tf.constant(1)))
                step(iterator, tf.constant(WARMUP_STEPS - 1))
                start = time.perf_counter()
                float(step(iterator, tf.constant(steps)))
                times[contender].append((time.perf_counter() - start) / steps)
                if round_index == 0:
                    print(f"  {contender:9s} first-step loss {first:.6f}", flush=True)
                del step
                gc.collect()  # the contender's tables, before the next one's
            order = order[1:] + order[:1]
        for contender, values in times.items():
            median = statistics.median(values)
            print(f"  {contender:9s} {median * 1e3:9.2f} ms a step  {batch / median:12,.0f} "
                  "examples/s", flush=True)
        engine = engine_seconds(tables, sizes, dim, per_table, data, steps)
        print(f"  engine    {engine * 1e3:9.2f} ms a step  (recemb's lookup and update alone, "
              "from numpy)", flush=True)
        bound = statistics.median(times["dense"]) + engine
        for peer in ("seed", "keras-rs"):
            ratio = statistics.median(p / r for p, r in zip(times[peer], times["recemb"]))
            ceiling = statistics.median(times[peer]) / bound
            print(f"  recemb / {peer}: {ratio:.2f}x the training step's speed (target 5x; "
                  f"ceiling {ceiling:.2f}x: {peer} / (dense + engine))", flush=True)


if __name__ == "__main__":
    main()
