"""The Keras training step three ways, on the same batches, on the CPU (docs/performance.md,
"recemb.keras beside the seed's layer and keras-rs"):

  (S) the seed        tensorflow_recommenders' TPUEmbedding (the layer recemb re-creates) built on
                      the CPU: its tables are tf.Variables trained by the Keras (tf_keras legacy)
                      Adagrad, the dense layer by the same optimizer (the seed's docstring loop);
  (K) keras-rs        keras_rs.layers.DistributedEmbedding, whose CPU path is Keras embedding
                      layers, trained with the dense layer by Keras 3's Adagrad;
  (R) recemb.keras    the tables trained by recemb's fused Adagrad in the backward pass, the
                      dense layer by Keras 3's Adagrad.

Each step: a lookup of every feature (one id per feature and example, combiner sum), the
activations concatenated into one Dense(1), the mean logistic loss, gradients, the updates; all
in one tf.function. Adagrad: learning rate 0.05, initial accumulator 0.1. Workloads:
  dlrm        the 26 tables of `recemb train`'s small preset (the Criteo Kaggle cardinalities
              fit to 64 MiB at dim 16, dlrm/criteo_profile.h), batch 2,048;
  10m         one table of 10,000,000 rows x dim 32 (1.2 GiB, as much again for Adagrad's
              accumulators), looked up by 8 features, batch 2,048, uniform ids.
Timing: --rounds rounds, each running every contender for --steps steps (after 3 warm-up steps)
in turn, the order rotating; a contender's figure is the median of its per-round medians of the
step time, and recemb's ratio over each the median of per-round ratios. The loss of the first
step is printed as a check that the three train the same model (the same initial tables and
dense weights): they agree to float rounding.

Run in the environment of scripts/keras-env:
    build/venv-keras/bin/python bench/compare_keras.py [--workloads dlrm,10m] [--rounds 3]
    ... --smoke       tables and batches shrunk, one round of 2 steps (a check that it runs)
"""

import argparse
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
    """`count` batches: ({feature: int64 ids [batch]}, labels [batch, 1])."""
    result = []
    for _ in range(count):
        ids = {f"f{t}_{k}": tf.constant(rng.integers(0, size, size=batch), tf.int64)
               for t, size in enumerate(sizes) for k in range(features_per_table)}
        labels = tf.constant((rng.random((batch, 1)) < 0.3).astype(np.float32))
        result.append((ids, labels))
    return result


def initial_values(rng, sizes, dim):
    return [(rng.random((size, dim), dtype=np.float32) - 0.5) * 0.1 for size in sizes]


def loss_of(logits, labels):
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))


def dense_layer(keras_module, inputs_width, kernel):
    layer = keras_module.layers.Dense(1, kernel_initializer=keras_module.initializers.Constant(
        kernel))
    layer.build((None, inputs_width))
    return layer


def seed_step(tables, sizes, dim, per_table, kernel):
    """(S): the seed's layer and a tf_keras Dense, trained by one tf_keras legacy Adagrad."""
    configs = [tf.tpu.experimental.embedding.TableConfig(
        size, dim, initializer=tf.constant_initializer(values), combiner="sum", name=f"t{t}")
        for t, (size, values) in enumerate(zip(sizes, tables))]
    features = {f"f{t}_{k}": tf.tpu.experimental.embedding.FeatureConfig(config, name=f"f{t}_{k}")
                for t, config in enumerate(configs) for k in range(per_table)}
    optimizer = tf.keras.optimizers.legacy.Adagrad(LEARNING_RATE,
                                                   initial_accumulator_value=INITIAL_ACCUMULATOR)
    embedding = tfrs.layers.embedding.TPUEmbedding(features, optimizer=optimizer)
    dense = dense_layer(tf.keras, dim * len(features), kernel)

    @tf.function
    def step(ids, labels):
        with tf.GradientTape() as tape:
            outputs = embedding(ids)
            loss = loss_of(dense(tf.concat([outputs[k] for k in sorted(outputs)], 1)), labels)
        variables = embedding.trainable_variables + dense.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss
    return step


def keras_rs_step(tables, sizes, dim, per_table, kernel):
    """(K): keras-rs's DistributedEmbedding (its CPU path) and a Keras 3 Dense, one Adagrad."""
    optimizer = keras.optimizers.Adagrad(LEARNING_RATE,
                                         initial_accumulator_value=INITIAL_ACCUMULATOR)
    configs = [keras_rs.layers.TableConfig(
        name=f"t{t}", vocabulary_size=size, embedding_dim=dim, combiner="sum",
        initializer=keras.initializers.Constant(values), optimizer=optimizer)
        for t, (size, values) in enumerate(zip(sizes, tables))]
    features = {f"f{t}_{k}": keras_rs.layers.FeatureConfig(
        name=f"f{t}_{k}", table=config, input_shape=(None, 1), output_shape=(None, dim))
        for t, config in enumerate(configs) for k in range(per_table)}
    embedding = keras_rs.layers.DistributedEmbedding(features)
    dense = dense_layer(keras, dim * len(features), kernel)

    @tf.function
    def step(ids, labels):
        ids = {name: tf.reshape(values, [-1, 1]) for name, values in ids.items()}
        with tf.GradientTape() as tape:
            outputs = embedding(ids)
            loss = loss_of(dense(tf.concat([outputs[k] for k in sorted(outputs)], 1)), labels)
        variables = embedding.trainable_variables + dense.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss
    return step


def recemb_step(tables, sizes, dim, per_table, kernel):
    """(R): recemb.keras (fused Adagrad) and a Keras 3 Dense trained by Keras's Adagrad."""
    configs = [recemb.TableConfig(size, dim, initializer=values, combiner="sum", name=f"t{t}")
               for t, (size, values) in enumerate(zip(sizes, tables))]
    features = {f"f{t}_{k}": recemb.FeatureConfig(config, name=f"f{t}_{k}")
                for t, config in enumerate(configs) for k in range(per_table)}
    embedding = recemb.keras.Embedding(features, optimizer=recemb.optimizers.Adagrad(
        learning_rate=LEARNING_RATE, initial_accumulator_value=INITIAL_ACCUMULATOR))
    dense = dense_layer(keras, dim * len(features), kernel)
    optimizer = keras.optimizers.Adagrad(LEARNING_RATE,
                                         initial_accumulator_value=INITIAL_ACCUMULATOR)

    @tf.function
    def step(ids, labels):
        with tf.GradientTape() as tape:
            outputs = embedding(ids, training=True)
            loss = loss_of(dense(tf.concat([outputs[k] for k in sorted(outputs)], 1)), labels)
        variables = embedding.trainable_variables + dense.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss
    return step


CONTENDERS = {"seed": seed_step, "keras-rs": keras_rs_step, "recemb": recemb_step}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="dlrm,10m")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
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
        tables = initial_values(rng, sizes, dim)
        kernel = rng.normal(size=(dim * len(sizes) * per_table, 1)).astype(np.float32) * 0.1
        data = batches(rng, sizes, per_table, batch, WARMUP_STEPS + steps)
        print(f"\n{name}: {len(sizes)} table(s), {sum(sizes):,} rows x dim {dim}, "
              f"{len(sizes) * per_table} features, batch {batch}", flush=True)
        times = {contender: [] for contender in CONTENDERS}
        order = list(CONTENDERS)
        for round_index in range(rounds):
            for contender in order:
                step = CONTENDERS[contender](tables, sizes, dim, per_table, kernel)
                first = float(step(*data[0]))
                for ids, labels in data[1:WARMUP_STEPS]:
                    step(ids, labels)
                durations = []
                for ids, labels in data[WARMUP_STEPS:]:
                    start = time.perf_counter()
                    float(step(ids, labels))
                    durations.append(time.perf_counter() - start)
                times[contender].append(statistics.median(durations))
                if round_index == 0:
                    print(f"  {contender:9s} first-step loss {first:.6f}", flush=True)
                del step
            order = order[1:] + order[:1]
        for contender, values in times.items():
            median = statistics.median(values)
            print(f"  {contender:9s} {median * 1e3:9.2f} ms a step  {batch / median:12,.0f} "
                  "examples/s", flush=True)
        for peer in ("seed", "keras-rs"):
            ratio = statistics.median(p / r for p, r in zip(times[peer], times["recemb"]))
            print(f"  recemb / {peer}: {ratio:.2f}x the training step's speed (target 5x)",
                  flush=True)


if __name__ == "__main__":
    main()
