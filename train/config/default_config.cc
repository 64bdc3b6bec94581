// The settings of `recemb train` with their defaults, as the commented TOML document users read.
// load_train_config parses it like any user file: it defines which keys exist and their types, so
// a key missing from it is unknown everywhere.
#include "train/config/default_config.h"

#include <string>
#include <utility>

#include "recemb/error.h"
#include "recemb/optimizer.h"

namespace recemb::train {
namespace {

constexpr std::string_view kDefaultConfig = R"(# recemb train: every field with its default.
# Change fields in a file (recemb train --config FILE) or on the command line
# (recemb train --set section.key=value, the value in TOML syntax: --set model.top_mlp=[128,64]).

[data]
path = ""               # Criteo TSV (label, 13 integers, 26 hex categoricals), plain or gzip;
                        # a list of files or globs, read in order: ["day_0.gz", "day_1.gz"],
                        # ["day_*.gz"]; "" = synthetic data
eval_path = ""          # held-out TSV; "" = the tail of path (eval_fraction) or its first examples
eval_fraction = 0.0     # in (0, 1): hold out this tail of path's lines (no eval_path); 0 = off
strict = false          # true: refuse any line that is short, ends in CRLF, lacks its final \n...
reader_threads = 1      # 2: gzip files decompressed on a second thread, ahead of the parsing
preset = "small"        # table sizes: small | criteo-kaggle | criteo-1tb
table_budget_mib = 0    # > 0: the preset's sizes cut down to fit this many MiB of table rows
eval_examples = 65536   # held-out examples, evaluated every train.eval_every steps
max_malformed = 100     # malformed input lines skipped (and reported) before the run fails
synthetic_seed = 1      # seed of the synthetic data
synthetic_item_lifetime = 1048576  # embedding.vocabulary = "dynamic": examples a synthetic item
                        # (key) lives before a new one takes its place (2^20: about 512 steps)

[model]
embedding_dim = 16
bottom_mlp = [64, 16]   # widths of the MLP over the 13 dense features; the last = embedding_dim
top_mlp = [64, 32]      # hidden widths of the MLP over the interactions; a width-1 output follows
seed = 0                # initialisation of the tables and the dense layers

[embedding]
optimizer = "adagrad"   # sgd | adagrad | adagrad_momentum | adam | ftrl | rowwise_adagrad
learning_rate = 1.0     # when not set: the optimizer's own default (docs/training.md), sgd 100,
                        # adagrad 1, adagrad_momentum 0.1, adam 0.01, ftrl 1, rowwise_adagrad 0.1
threads = 0             # worker threads of the embedding engine; 0 = one per core
sharding = "auto"       # how tables are split over the ranks of an mpirun job: auto | table_wise |
                        # row_wise | column_wise | replicated (one process keeps tables whole)
vocabulary = "hashed"   # hashed: categorical values hashed into tables of the preset's sizes;
                        # dynamic: tables keyed by the raw values, rows admitted and evicted
capacity = 0            # dynamic: most keys per table; 0 = the table's size (preset, budget,
                        # override) + train.batch_size (room for a batch's new keys)
min_count = 1           # dynamic: occurrences in training before a key gets a row
ttl_steps = 0           # dynamic: keys not seen for this many steps are evicted; 0 = never
when_full = "evict_least_recent"  # dynamic, a full table: evict_least_recent |
                        # evict_least_frequent | error
dtype = "float32"       # the tables' rows: float32 | bfloat16 | float16 (hashed tables: half the
                        # memory, updates rounded stochastically; docs/semantics.md)

[dense]
optimizer = "adam"      # adam | adagrad
learning_rate = 0.003

[train]
steps = 2500            # training steps (>= 1); the run also ends when the data does
epochs = 1              # times the training files are read (>= 1); steps still bounds the run
batch_size = 2048       # examples per step, 1 to 1048576 (and what fits in memory)
eval_every = 500        # steps between evaluations; 0 = only at the end
log_every = 10          # steps between training-loss records in metrics.jsonl
overlap = false         # true: the next batch's lookup begun during the dense step (same results)

[checkpoint]
dir = ""                # "" = <output.dir>/checkpoints
every = 1000            # steps between checkpoints; 0 = only at the end
keep = 2                # complete checkpoints kept

[output]
dir = "recemb-run"      # metrics.jsonl, summary.json, training.svg, config.toml

[serving]
publish_dir = ""              # a model directory (MODEL_DIR/NAME) to publish to; "" = none
publish_every_seconds = 10.0  # seconds between publishes (> 0): a base, then deltas
publish_dtype = "float32"     # float32 | float16 | int8
base_every_deltas = 360       # a new base (the next version) after this many deltas; 0 = no bound
base_every_bytes = 1073741824 # ... or once the deltas hold this many bytes (1 GiB); 0 = no bound
keep_versions = 2             # versions kept in publish_dir after a new base (the newest and the
                              # one before, for a server still on it); 0 = all

# Per-table overrides, for any of the tables C1..C26:
# [tables.C3]
# vocabulary_size = 100000
# optimizer = "rowwise_adagrad"
# learning_rate = 0.1
)";

// Each embedding optimizer's learning rate when none is set: the best of a sweep on the default
// synthetic run (docs/training.md, "Learning rates"). Adagrad and FTRL divide by the root of the
// summed squared gradients and Adam by that of their mean, so they take rates near 1 or 0.01; SGD
// steps by the raw gradient of the batch's mean loss, which is about 1 / batch_size per row.
constexpr std::pair<std::string_view, double> kDefaultLearningRates[] = {
    {"sgd", 100.0}, {"adagrad", 1.0}, {"adagrad_momentum", 0.1},
    {"adam", 0.01}, {"ftrl", 1.0},    {"rowwise_adagrad", 0.1},
};

}  // namespace

std::string_view default_config_toml() { return kDefaultConfig; }

double default_learning_rate(std::string_view optimizer) {
  const std::string_view name = optimizer_name(parse_optimizer(optimizer));
  for (const auto& [known, rate] : kDefaultLearningRates) {
    if (known == name) return rate;
  }
  throw InvalidArgument("no default learning rate for optimizer '" + std::string(name) +
                        "': set embedding.learning_rate");
}

}  // namespace recemb::train
