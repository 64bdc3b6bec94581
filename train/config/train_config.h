// The configuration of `recemb train`: every field has a default, may be set in a TOML file and
// overridden on the command line as `--set section.key=value` (the value in TOML syntax:
// `--set model.top_mlp=[128,64]`, `--set data.path="day_0.tsv"`).
//
//   [data]       path (a string or a list), eval_path, eval_fraction, strict, reader_threads,
//   preset,
//                table_budget_mib, eval_examples, max_malformed, synthetic_seed,
//                synthetic_item_lifetime
//   [model]      embedding_dim, bottom_mlp, top_mlp, seed
//   [embedding]  optimizer, learning_rate (default: the optimizer's), threads, sharding,
//                vocabulary (hashed | dynamic), capacity, min_count, ttl_steps, when_full
//   [dense]      optimizer, learning_rate
//   [train]      steps, epochs, batch_size, eval_every, log_every, overlap
//   [checkpoint] dir, every, keep
//   [output]     dir
//   [tables.C<k>] vocabulary_size, optimizer, learning_rate      (k = 1..26; per-table overrides)
//
// default_config_toml() (default_config.h) is the documented list of fields with their defaults
// and meanings; config_validation.h checks their values, resume_settings.h which a --resume keeps.
#ifndef RECEMB_TRAIN_CONFIG_TRAIN_CONFIG_H_
#define RECEMB_TRAIN_CONFIG_TRAIN_CONFIG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/placement.h"

namespace recemb::train {

struct TableOverride {
  std::optional<int64_t> vocabulary_size = {};  // replaces the preset's size
  std::optional<std::string> optimizer = {};    // a recemb optimizer name (optimizer.h)
  std::optional<double> learning_rate = {};
};

struct TrainConfig {
  struct Data {
    // Criteo TSV files (plain or gzip) read in order, each a path or a glob pattern (expanded in
    // sorted order when the data is opened); empty: the synthetic Criteo-like generator. The key
    // data.path takes one string or a list of them.
    std::vector<std::string> paths = {};
    std::string eval_path = {};  // held-out TSV; empty: eval_fraction's tail or `paths`' head
    // In (0, 1): the tail of the training data held out (no eval_path); 0: not used.
    double eval_fraction = 0;
    bool strict = false;           // refuse any line not in the canonical form (file and line)
    int reader_threads = 0;        // 1, or 2: gzip files decompressed on a thread of their own
    std::string preset = "small";  // table sizes: small | criteo-kaggle | criteo-1tb
    int64_t table_budget_mib = 0;  // > 0: the preset's sizes fitted to this many MiB of rows
    int64_t eval_examples = 0;     // held-out examples evaluated every eval_every steps
    int64_t max_malformed = 0;     // malformed input lines tolerated before the run fails
    uint64_t synthetic_seed = 0;   // seed of the synthetic data
    // Examples an item of the synthetic data's open vocabulary lives (embedding.vocabulary =
    // "dynamic"; SyntheticOptions::item_lifetime).
    int64_t synthetic_item_lifetime = 0;
  } data;
  struct Model {
    int64_t embedding_dim = 0;
    std::vector<int64_t> bottom_mlp = {};  // widths; the last must equal embedding_dim
    std::vector<int64_t> top_mlp = {};     // hidden widths; a width-1 output layer is added
    uint64_t seed = 0;                     // initialisation of tables and dense layers
  } model;
  struct EmbeddingOptimizer {
    std::string optimizer = {};  // sgd | adagrad | rowwise_adagrad | adam | ftrl | ...
    double learning_rate = 0.0;
    int threads = 0;  // 0: one per core
    // How the tables are split over the ranks of a run on several processes (mpirun): a
    // ShardingStrategy's name (auto, table_wise, row_wise, column_wise, replicated). One process
    // keeps every table whole.
    std::string sharding = {};
    // How categorical values become table ids (docs/training.md, "Vocabularies"): "hashed" into
    // the preset's fixed tables, or "dynamic": keyed by the raw values in dynamic tables
    // (recemb::DynamicVocabulary) with the settings below.
    std::string vocabulary = {};
    // Keys per table; 0: the table's size (preset, budget, override) + train.batch_size.
    int64_t capacity = 0;
    int64_t min_count = 0;       // training occurrences before a key gets a row
    int64_t ttl_steps = 0;       // keys unseen for this many steps are evicted; 0: never
    std::string when_full = {};  // evict_least_recent | evict_least_frequent | error
    std::string dtype = {};      // the tables' rows: float32 | bfloat16 | float16
  } embedding;
  struct DenseOptimizer {
    std::string optimizer = {};  // adam | adagrad
    double learning_rate = 0.0;
  } dense;
  struct Train {
    int64_t steps = 0;       // training steps (batches); the run also ends when the data does
    int64_t epochs = 0;      // times the training data is read
    int64_t batch_size = 0;  // examples per step
    int64_t eval_every = 0;  // steps between evaluations (0: only at the end)
    int64_t log_every = 0;   // steps between training-loss records in the metrics file
    // The next batch's lookup prefetched during the dense step (docs/training.md, "One training
    // step"): the same results as without.
    bool overlap = false;
  } train;
  struct Checkpoint {
    std::string dir = {};  // empty: <output.dir>/checkpoints
    int64_t every = 0;     // steps between checkpoints (0: only at the end)
    int keep = 0;          // complete checkpoints kept
  } checkpoint;
  struct Output {
    std::string dir = {};  // metrics.jsonl, summary.json, training.svg
  } output;
  // Online publishing (docs/training.md, "Publishing to a server"): a base, then deltas of the
  // rows changed (recemb/publish.h), into a model directory `recemb serve` reads.
  struct Serving {
    std::string publish_dir = {};        // MODEL_DIR/NAME; "": no publishing
    double publish_every_seconds = 0.0;  // > 0: seconds between publishes, at step boundaries
    std::string publish_dtype = {};      // float32 | float16 | int8
    // Retention (PublishOptions, docs/serving.md "Retention"): a new base after this many deltas
    // or bytes of deltas (0: no bound), and the versions kept (0: all).
    int64_t base_every_deltas = 0;
    int64_t base_every_bytes = 0;
    int keep_versions = 0;
  } serving;
  std::map<std::string, TableOverride> tables = {};  // by table name "C1".."C26"
};

// The largest train.batch_size: 2^20 examples, whose per-step buffers take about 18 GiB with the
// default model (the trainer also refuses a batch whose estimate exceeds the machine's memory).
inline constexpr int64_t kMaxBatchSize = int64_t{1} << 20;

// Defaults (default_config.h), then the TOML file `config_path` (if not empty), then each
// override "key=value" (dotted key, TOML value) in order. Throws InvalidArgument naming the file,
// line or override for a syntax error, an unknown key, a value of the wrong type or out of range
// (validate_train_config).
TrainConfig load_train_config(const std::string& config_path,
                              const std::vector<std::string>& overrides);

// The effective configuration as TOML (written beside the run's metrics).
std::string to_toml(const TrainConfig& config);

// Every setting of the TOML document `toml_text` (e.g. a to_toml) as "section.key" -> the TOML
// text of its value ("tables.C3.optimizer" -> "'adam'"). InvalidArgument naming `origin`, the line
// and the column for a syntax error.
std::map<std::string, std::string> flat_settings(std::string_view toml_text,
                                                 const std::string& origin);

// The strategy embedding.sharding names: the ShardingStrategy whose sharding_strategy_name is
// `name`. InvalidArgument naming the value and the valid ones otherwise.
ShardingStrategy sharding_strategy(std::string_view name);

// Whether embedding.vocabulary is "dynamic" (load_train_config accepts "hashed" and "dynamic").
bool dynamic_vocabulary(const TrainConfig& config);

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_CONFIG_TRAIN_CONFIG_H_
