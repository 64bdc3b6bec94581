#include "train/trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <utility>

#include "recemb/checkpoint.h"
#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/placement.h"

#include "train/batch_buffers.h"
#include "train/criteo_profile.h"
#include "train/criteo_reader.h"
#include "train/data_parallel.h"
#include "train/dense_optimizer.h"
#include "train/dlrm_dense_model.h"
#include "train/embedding_model.h"
#include "train/metrics.h"
#include "train/metrics_log.h"
#include "train/prefetching_source.h"
#include "train/run_resources.h"
#include "train/trainer_checkpoint.h"
#include "train/training_data.h"

namespace recemb::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A run "did not learn" when its held-out AUC ends below this, or its log loss not below the one
// before its first step (docs/training.md, "What a run prints and writes").
constexpr double kLearnedAuc = 0.52;

// The Embedding of every rank of `group`: with several ranks, its tables placed over them as
// embedding.sharding says; alone, whole tables exactly as without a communicator.
Embedding make_embedding(const TrainConfig& config, EmbeddingModel model, const RankGroup& group) {
  // Checked here, before the Embedding's constructor (the first collective), from what every rank
  // knows alike: every rank throws the same error.
  if (config.train.batch_size < group.size()) {
    throw InvalidArgument("train.batch_size " + std::to_string(config.train.batch_size) +
                          " is smaller than the number of ranks (" + std::to_string(group.size()) +
                          "): every rank trains on its share of each batch");
  }
  EmbeddingOptions options{.optimizer = std::move(model.optimizer),
                           .num_threads = config.embedding.threads,
                           .seed = config.model.seed,
                           .communicator = group.embedding_communicator()};
  if (group.size() > 1) {
    options.placement = PlacementOptions{.num_shards = group.size(),
                                         .strategy = sharding_strategy(config.embedding.sharding)};
  }
  return Embedding(std::move(model.tables), std::move(model.features), std::move(options));
}

DenseOptimizerConfig dense_optimizer_config(const TrainConfig::DenseOptimizer& dense) {
  if (dense.optimizer == "adagrad") {
    return DenseAdagrad{.learning_rate = static_cast<float>(dense.learning_rate)};
  }
  return DenseAdam{.learning_rate = static_cast<float>(dense.learning_rate)};
}

// A batch of training data and what flows through the step that trains on it.
struct StepBatch {
  explicit StepBatch(int64_t dim) : buffers(dim) {}
  ExampleBatch examples;
  int64_t count = 0;     // examples read (0: the data ended)
  std::string position;  // the data position after it
  BatchBuffers buffers;  // its inputs, activations and their gradients (this rank's slice)
  LookupBatch lookup;
};

// Where the batch of the next step stands: not read yet, read ahead (its examples or the error
// of reading them), or read and its lookup prefetched.
enum class Ahead { kNone, kRead, kPrefetched };

class Trainer {
 public:
  Trainer(const TrainConfig& config, const RunOptions& options)
      : config_(config),
        options_(options),
        group_(options.communicator),
        log_(group_.rank() != 0       ? null_log_
             : options.log != nullptr ? *options.log
                                      : std::cerr),
        progress_(log_, options.progress),
        overlap_(config.train.overlap && group_.size() == 1),
        steps_{StepBatch(config.model.embedding_dim), StepBatch(config.model.embedding_dim)},
        embedding_(make_embedding(config, embedding_model(config), group_)),
        sizes_(embedding_model(config).sizes),
        model_(DlrmDenseConfig{.num_dense_features = kNumDenseFeatures,
                               .num_sparse_features = kNumCategoricalFeatures,
                               .embedding_dim = config.model.embedding_dim,
                               .bottom_mlp = config.model.bottom_mlp,
                               .top_mlp = config.model.top_mlp,
                               .seed = config.model.seed,
                               .num_threads = config.embedding.threads}),
        dense_optimizer_(dense_optimizer_config(config.dense), model_.num_parameters(),
                         model_.dense_isa()),
        output_dir_(config.output.dir),
        checkpoint_dir_(config.checkpoint.dir.empty()
                            ? output_dir_ / "checkpoints"
                            : std::filesystem::path(config.checkpoint.dir)) {
    // Checked by every rank and agreed on: ranks on other machines may have other limits.
    locally([&] {
      check_memory(config_, memory_limit());
      data_ = open_training_data(config_, sizes_);
      summary_.best_auc = data_.best_auc;
      summary_.best_log_loss = data_.best_log_loss;
    });
    sync();
    if (group_.size() > 1) expect_same_on_every_rank(data_.eval_set.size, "held-out examples");
    if (group_.size() > 1) expect_same_dense_isa();
    prefetching_.emplace(*data_.train_source, config.train.batch_size);
  }

  TrainSummary run() {
    // Rank 0 alone writes output.dir and looks into the checkpoint directory; the other ranks
    // learn of its errors at sync() and of its findings by broadcast.
    locally([&] {
      if (root()) std::filesystem::create_directories(output_dir_);
    });
    if (options_.resume) {
      resume();
    } else {
      locally([&] {
        if (!root()) return;
        if (const auto earlier = latest_checkpoint(checkpoint_dir_)) {
          throw InvalidArgument(checkpoint_dir_.string() +
                                " holds checkpoints of an earlier run (" +
                                earlier->filename().string() +
                                "): continue it with --resume, or choose another output.dir or "
                                "checkpoint.dir");
        }
      });
    }
    const bool resumed = embedding_.step() > 0;
    locally([&] {
      if (!root()) return;
      std::ofstream(output_dir_ / "config.toml") << to_toml(config_);
      metrics_.emplace(output_dir_ / "metrics.jsonl",
                       KeptRecords{.step = resumed ? embedding_.step() : -1,
                                   .train_every = config_.train.log_every,
                                   .eval_every = config_.train.eval_every});
    });
    sync();
    summary_.rank = group_.rank();
    summary_.ranks = group_.size();
    summary_.first_step = embedding_.step();
    summary_.requested_steps = config_.train.steps;
    summary_.dense_isa = dense_isa_name(model_.dense_isa());
    summary_.embedding_bytes = embedding_bytes(embedding_);
    trained_position_ = prefetching_->position();
    describe_run();
    const int64_t total_steps = expected_last_step();

    const Clock::time_point start = Clock::now();
    if (!resumed) {
      const EvalRecord initial = evaluate();
      summary_.initial_auc = initial.auc;
      summary_.initial_log_loss = initial.log_loss;
    } else if (metrics_ && !metrics_->eval_records().empty()) {
      summary_.initial_auc = metrics_->eval_records().front().auc;
      summary_.initial_log_loss = metrics_->eval_records().front().log_loss;
    }
    // The progress line's rate counts the training steps only (evaluations and checkpoints
    // included), not the evaluation before them.
    const Clock::time_point steps_start = Clock::now();
    while (embedding_.step() < config_.train.steps) {
      StepBatch& batch = steps_[current_];
      if (ahead_ == Ahead::kNone) {
        const Clock::time_point t = Clock::now();
        locally([&] { read(batch); });
        summary_.data_seconds += seconds_since(t);  // not the wait for the other ranks below
      } else if (ahead_error_) {
        // The next batch's read failed during the step before: thrown where a serial loop reads.
        std::rethrow_exception(std::exchange(ahead_error_, nullptr));
      }
      int64_t count = batch.count;
      // A stop asked for (a signal) on any rank: every rank stops before this batch, whose
      // examples a resumed run then trains on (the checkpoint holds the position before it).
      int64_t stop = options_.stop_signal != nullptr ? options_.stop_signal->load() : 0;
      if (group_.size() > 1) {
        sync();
        const std::vector<int64_t> values = group_.all_gather(std::array{count, stop});
        expect_same_on_every_rank(
            values, 0, "examples in the batch of step " + std::to_string(embedding_.step() + 1));
        for (int q = 0; q < group_.size(); ++q) {
          stop = std::max(stop, values[2 * static_cast<size_t>(q) + 1]);
        }
      }
      if (stop != 0) {
        summary_.stop_signal = static_cast<int>(stop);
        progress_.message("stopping at step " + std::to_string(embedding_.step()) + " (signal " +
                          std::to_string(stop) + ")");
        break;
      }
      if (count == 0) {
        summary_.data_ended = true;
        if (summary_.examples == 0) {
          throw InvalidArgument(
              "no examples to train on: the training data ended at step " +
              std::to_string(embedding_.step()) + (resumed ? ", where this run resumed" : "") +
              " (" + data_.description +
              "): give more data, or continue a finished run from other data in a new run");
        }
        progress_.message("the training data ended at step " + std::to_string(embedding_.step()) +
                          ", before train.steps = " + std::to_string(config_.train.steps));
        break;
      }
      train_step(batch);
      trained_position_ = batch.position;
      const int64_t step = embedding_.step();
      if (step % config_.train.log_every == 0) record_loss(step);
      if (config_.train.eval_every > 0 && step % config_.train.eval_every == 0 &&
          step < config_.train.steps) {
        evaluate();
      }
      if (config_.checkpoint.every > 0 && step % config_.checkpoint.every == 0 &&
          step < config_.train.steps) {
        save();
      }
      const double elapsed = seconds_since(steps_start);
      const double rate = static_cast<double>(summary_.examples) / elapsed;
      const int64_t total = std::max(total_steps, step);
      progress_.update({.step = step,
                        .total_steps = total,
                        .examples_per_second = rate,
                        .loss = recent_loss_,
                        .eta_seconds = static_cast<double>(total - step) *
                                       static_cast<double>(config_.train.batch_size) / rate},
                       elapsed);
    }
    // Saved before the final records: a run resumed from here continues the loss window, and
    // MetricsLog drops these off-schedule records (see metrics_log.h).
    save();
    if (loss_window_count_ > 0) record_loss(embedding_.step());
    const EvalRecord final_eval = evaluate();
    summary_.seconds = seconds_since(start);
    summary_.steps = embedding_.step();
    summary_.examples_per_second = static_cast<double>(summary_.examples) / summary_.seconds;
    summary_.final_auc = final_eval.auc;
    summary_.final_log_loss = final_eval.log_loss;
    summary_.learned =
        final_eval.auc >= kLearnedAuc && !(final_eval.log_loss >= summary_.initial_log_loss);
    summary_.peak_resident_bytes = peak_resident_bytes();
    collect_vocabularies();
    collect_malformed_lines();
    locally([&] {
      if (!root()) return;
      write_training_svg(*metrics_, config_.train.log_every, output_dir_ / "training.svg");
      write_summary_json(summary_, output_dir_ / "summary.json");
    });
    sync();
    return summary_;
  }

 private:
  bool root() const { return group_.rank() == 0; }

  // Runs rank-local work (no collective inside). Alone, its exceptions propagate as they come.
  // With several ranks, an exception is kept until the next sync() instead: a rank that threw
  // here alone would leave the others waiting in their next collective. Once a rank keeps an
  // error, its local work is skipped until then (collectives still run, on valid inputs).
  template <class Work>
  void locally(Work&& work) {
    if (group_.size() == 1) {
      work();
      return;
    }
    if (error_) return;
    try {
      work();
    } catch (...) {
      error_ = std::current_exception();
    }
  }

  // Collective: when some rank keeps an error from locally(), every rank throws it ("rank R:
  // <message>"). Called before anything relies on the results of local work.
  void sync() { group_.agree(std::exchange(error_, nullptr)); }

  // Collective: throws InvalidArgument on every rank when the ranks' values differ (every rank
  // must read the same data).
  void expect_same_on_every_rank(int64_t value, const std::string& what) {
    expect_same_on_every_rank(group_.all_gather(std::array{value}), 0, what);
  }

  // Collective: throws InvalidArgument on every rank when the ranks' dense layers run different
  // instruction sets, which round differently: the replicas' parameters would drift apart
  // (docs/training.md, "Instruction set").
  void expect_same_dense_isa() {
    const std::vector<int64_t> isas =
        group_.all_gather(std::array{static_cast<int64_t>(model_.dense_isa())});
    const auto name = [](int64_t isa) {
      return std::string(dense_isa_name(static_cast<DenseIsa>(isa)));
    };
    for (int q = 1; q < group_.size(); ++q) {
      if (isas[static_cast<size_t>(q)] != isas[0]) {
        throw InvalidArgument("rank " + std::to_string(q) + "'s dense layers run " +
                              name(isas[static_cast<size_t>(q)]) + ", rank 0's " + name(isas[0]) +
                              ": data-parallel replicas must compute alike; set RECEMB_DENSE_ISA "
                              "to an instruction set every rank's CPU runs");
      }
    }
  }

  // The same for entry `index` of every rank's values gathered by RankGroup::all_gather (each
  // rank's values.size() / size() of them, in rank order): not itself a collective.
  void expect_same_on_every_rank(const std::vector<int64_t>& values, size_t index,
                                 const std::string& what) {
    const size_t stride = values.size() / static_cast<size_t>(group_.size());
    const int64_t first = values[index];
    for (int q = 1; q < group_.size(); ++q) {
      const int64_t value = values[static_cast<size_t>(q) * stride + index];
      if (value != first) {
        throw InvalidArgument("rank " + std::to_string(q) + " has " + std::to_string(value) + " " +
                              what + ", rank 0 has " + std::to_string(first) +
                              ": every rank must read the same data (data.path and "
                              "data.eval_path on a file system that every rank sees)");
      }
    }
  }

  // The step at which the data is expected to end, or train.steps if it is expected to last:
  // for plain Criteo files, from their bytes left and the held-out lines' mean length.
  int64_t expected_last_step() {
    const std::optional<int64_t> left = examples_left(data_, trained_position_);
    if (!left) return config_.train.steps;
    const int64_t examples = *left;
    const int64_t steps = (examples + config_.train.batch_size - 1) / config_.train.batch_size;
    if (embedding_.step() + steps >= config_.train.steps) return config_.train.steps;
    progress_.message(
        "the data will end before train.steps = " + std::to_string(config_.train.steps) +
        ": about " + std::to_string(examples) + " examples are left in " + data_.description +
        ", about " + std::to_string(steps) + " steps of " +
        std::to_string(config_.train.batch_size));
    return embedding_.step() + steps;
  }

  void collect_malformed_lines() {
    prefetching_->pause();  // the readers' counters are then ours to read
    for (const CriteoReader* reader : {data_.train_reader, data_.eval_reader.get()}) {
      if (reader == nullptr) continue;
      summary_.malformed_lines += reader->malformed_lines();
      summary_.short_lines += reader->short_lines();
      const auto messages = reader->malformed_messages();
      summary_.malformed_messages.insert(summary_.malformed_messages.end(), messages.begin(),
                                         messages.end());
    }
  }

  // Collective (vocabulary_stats gathers every rank's parts): the dynamic tables' vocabularies.
  void collect_vocabularies() {
    for (const TableConfig& table : embedding_.tables()) {
      if (!table.dynamic_vocabulary) continue;
      summary_.vocabularies.push_back({.table = table.name,
                                       .capacity = table.dynamic_vocabulary->capacity,
                                       .stats = embedding_.vocabulary_stats(table.name)});
    }
  }

  void describe_run() {
    int64_t rows = 0;
    for (const TableConfig& table : embedding_.tables()) {
      rows += table.dynamic_vocabulary ? table.dynamic_vocabulary->capacity : table.vocabulary_size;
    }
    const bool dynamic = dynamic_vocabulary(config_);
    char line[320];
    std::snprintf(
        line, sizeof line,
        "recemb train: 26 %s, %" PRId64 " %s x %" PRId64
        " dims, %.1f MiB with optimizer slots%s; %zu dense parameters (%s); data: %s",
        dynamic ? "dynamic tables" : "tables", rows, dynamic ? "keys at most" : "rows",
        config_.model.embedding_dim, static_cast<double>(summary_.embedding_bytes) / (1 << 20),
        dynamic ? " when full" : "", model_.parameters().size(),
        std::string(dense_isa_name(model_.dense_isa())).c_str(), data_.description.c_str());
    progress_.message(line);
    if (!data_.held_out_message.empty()) progress_.message("warning: " + data_.held_out_message);
    if (group_.size() > 1) {
      const Slice largest = rank_slice(config_.train.batch_size, group_.size() - 1, group_.size());
      progress_.message("data-parallel on " + std::to_string(group_.size()) +
                        " ranks: each trains on its share of every batch of " +
                        std::to_string(config_.train.batch_size) + " examples (up to " +
                        std::to_string(largest.count) + "); tables placed " +
                        strategy_counts(embedding_.placement()) +
                        " (embedding.sharding = " + config_.embedding.sharding + ")");
    }
  }

  // Reads the next batch of the training data into `batch`.
  void read(StepBatch& batch) {
    batch.count = 0;  // if next() throws
    batch.count = prefetching_->next(batch.examples, config_.train.batch_size);
    batch.position = prefetching_->position();
  }

  // With train.overlap: reads the batch of the step after this one into the other StepBatch and
  // prefetches its lookup, which runs during this step's dense step. A read error is kept for the
  // next iteration, which throws it where the serial loop would read (after this step's
  // evaluation and checkpoint); a prefetched lookup's validation error is thrown by
  // finish_lookup, where the serial loop's lookup would throw it.
  void read_ahead() {
    StepBatch& next = steps_[1 - current_];
    Clock::time_point t = Clock::now();
    try {
      read(next);
    } catch (...) {
      ahead_error_ = std::current_exception();
      next.count = 0;
    }
    summary_.data_seconds += seconds_since(t);
    ahead_ = Ahead::kRead;
    if (next.count == 0) return;  // the data end (or the error) is met at the next iteration
    t = Clock::now();
    next.buffers.bind(next.examples, 0, next.count);
    embedding_.prefetch(next.buffers.inputs(), next.buffers.activations(), next.lookup);
    summary_.lookup_seconds += seconds_since(t);
    ahead_ = Ahead::kPrefetched;
  }

  // Waits for the background work of a prefetched lookup (with one rank, overlap_'s only case,
  // the agreement itself is free): before the embedding update, to time the wait apart, and
  // before a checkpoint, so that the save never runs beside it.
  void wait_for_prefetch() {
    if (ahead_ == Ahead::kPrefetched) embedding_.agree_on_error(nullptr);
  }

  // One step on the global batch `batch`, of which this rank trains on its slice.
  void train_step(StepBatch& batch) {
    const Slice mine = group_.slice(batch.count);
    Clock::time_point t = Clock::now();
    if (ahead_ == Ahead::kPrefetched) {
      // Prefetched during the step before, whose embedding update it waited for: the rows are
      // read now, so the activations are bitwise those of a lookup made here (docs/training.md,
      // "One training step").
      embedding_.finish_lookup(batch.lookup);
    } else {
      batch.buffers.bind(batch.examples, mine.begin, mine.count);
      embedding_.lookup(batch.buffers.inputs(), batch.buffers.activations(), batch.lookup);
    }
    ahead_ = Ahead::kNone;
    summary_.lookup_seconds += seconds_since(t);
    if (overlap_ && embedding_.step() + 1 < config_.train.steps) read_ahead();

    t = Clock::now();
    float local_loss = 0.0f;
    if (mine.count > 0) {
      locally([&] {
        local_loss = model_.train_step(
            std::span(batch.examples.dense)
                .subspan(static_cast<size_t>(mine.begin * kNumDenseFeatures),
                         static_cast<size_t>(mine.count * kNumDenseFeatures)),
            std::span(batch.examples.labels)
                .subspan(static_cast<size_t>(mine.begin), static_cast<size_t>(mine.count)),
            batch.buffers.activation_views(), batch.buffers.gradients());
      });
    }
    double loss = local_loss;
    std::span<const float> dense_gradients = model_.gradients();
    if (group_.size() > 1) {
      // The model's gradients are of the mean loss over this rank's slice; the step's are of the
      // mean over the global batch: the slices' means weighted by their shares of it.
      sync();
      dense_gradients_.resize(model_.gradients().size());
      loss = group_.average(batch.count, local_loss, model_.gradients(), dense_gradients_);
      dense_gradients = dense_gradients_;
      const auto share =
          static_cast<float>(static_cast<double>(mine.count) / static_cast<double>(batch.count));
      for (std::span<float> gradient : batch.buffers.gradients()) {
        for (float& value : gradient) value *= share;
      }
    }
    dense_optimizer_.apply(model_.parameters(), dense_gradients);
    summary_.dense_seconds += seconds_since(t);

    // The part of the next batch's prefetched lookup that outlasted the dense step counts as
    // lookup time (apply_gradients would wait for it too).
    t = Clock::now();
    wait_for_prefetch();
    summary_.lookup_seconds += seconds_since(t);

    t = Clock::now();
    embedding_.apply_gradients(batch.lookup, batch.buffers.gradient_views());
    summary_.update_seconds += seconds_since(t);

    summary_.examples += batch.count;
    examples_total_ += batch.count;
    loss_window_sum_ += loss;
    ++loss_window_count_;
    recent_loss_ = loss_window_sum_ / static_cast<double>(loss_window_count_);
    if (ahead_ != Ahead::kNone) current_ = 1 - current_;
  }

  void record_loss(int64_t step) {
    locally([&] {
      if (metrics_) {
        metrics_->add(
            TrainRecord{.step = step, .examples = examples_total_, .train_loss = recent_loss_});
      }
    });
    loss_window_sum_ = 0;
    loss_window_count_ = 0;
  }

  // Each rank predicts its slice of the held-out set, in batches of up to train.batch_size; the
  // predictions are then gathered, so every rank computes the metrics of the whole set.
  EvalRecord evaluate() {
    const Clock::time_point t = Clock::now();
    update_held_out_set(data_, examples_total_);
    const Slice mine = group_.slice(data_.eval_set.size);
    // Lookups are collective: every rank makes as many as the largest slice needs (a rank whose
    // slice is shorter looks up empty batches).
    const int64_t largest = (data_.eval_set.size + group_.size() - 1) / group_.size();
    const int64_t batches = (largest + config_.train.batch_size - 1) / config_.train.batch_size;
    std::vector<float>& mine_predicted = group_.size() == 1 ? probabilities_ : local_probabilities_;
    // Not the buffers of a batch prefetched ahead (overlap_): its lookup still reads them.
    BatchBuffers& buffers = steps_[ahead_ == Ahead::kNone ? current_ : 1 - current_].buffers;
    mine_predicted.resize(static_cast<size_t>(mine.count));
    for (int64_t b = 0; b < batches; ++b) {
      const int64_t begin = std::min(b * config_.train.batch_size, mine.count);
      const int64_t count = std::min(config_.train.batch_size, mine.count - begin);
      buffers.bind(data_.eval_set, mine.begin + begin, count);
      embedding_.lookup(buffers.inputs(), buffers.activations());
      if (count == 0) continue;
      locally([&] {
        model_.predict(std::span(data_.eval_set.dense)
                           .subspan(static_cast<size_t>((mine.begin + begin) * kNumDenseFeatures),
                                    static_cast<size_t>(count * kNumDenseFeatures)),
                       buffers.activation_views(),
                       std::span(mine_predicted)
                           .subspan(static_cast<size_t>(begin), static_cast<size_t>(count)));
      });
    }
    if (group_.size() > 1) {
      sync();
      group_.all_gather(local_probabilities_, probabilities_);
    }
    const EvalRecord record{.step = embedding_.step(),
                            .auc = roc_auc(probabilities_, data_.eval_set.labels),
                            .log_loss = log_loss(probabilities_, data_.eval_set.labels)};
    locally([&] {
      if (metrics_) metrics_->add(record);
    });
    char line[160];
    std::snprintf(line, sizeof line,
                  "eval at step %" PRId64 ": AUC %.4f, log loss %.4f (%" PRId64
                  " held-out examples)",
                  record.step, record.auc, record.log_loss, data_.eval_set.size);
    progress_.message(line);
    summary_.eval_seconds += seconds_since(t);
    return record;
  }

  void save() {
    if (embedding_.step() == last_saved_step_) return;  // e.g. resumed at the final step
    last_saved_step_ = embedding_.step();
    const Clock::time_point t = Clock::now();
    // A batch prefetched ahead holds no key of a dynamic table yet (finish_lookup admits them):
    // the checkpoint is the state after this step, as the serial loop's.
    wait_for_prefetch();
    const std::filesystem::path path =
        save_checkpoint(embedding_, checkpoint_dir_,
                        trainer_save_options(config_, model_, dense_optimizer_,
                                             {.data_position = trained_position_,
                                              .examples = examples_total_,
                                              .loss_window_sum = loss_window_sum_,
                                              .loss_window_count = loss_window_count_},
                                             config_.checkpoint.keep));
    summary_.checkpoint_seconds += seconds_since(t);
    progress_.message("checkpoint " + path.string());
  }

  void resume() {
    // Rank 0's choice, so that every rank restores the same checkpoint.
    std::string newest;
    locally([&] {
      if (!root()) return;
      if (const auto found = latest_checkpoint(checkpoint_dir_)) newest = found->string();
    });
    sync();
    newest = group_.broadcast(newest);
    if (newest.empty()) {
      progress_.message("--resume: no checkpoint in " + checkpoint_dir_.string() +
                        "; starting from step 0");
      return;
    }
    const RestoredState state = restore_checkpoint(embedding_, newest);
    last_saved_step_ = embedding_.step();
    const TrainerProgress progress =
        restore_trainer_state(state, config_, newest, model_, dense_optimizer_);
    prefetching_->seek(progress.data_position);
    examples_total_ = progress.examples;
    loss_window_sum_ = progress.loss_window_sum;
    loss_window_count_ = progress.loss_window_count;
    progress_.message("resumed from " + newest + " at step " + std::to_string(embedding_.step()));
  }

  const TrainConfig& config_;
  const RunOptions& options_;
  RankGroup group_;
  std::ostream null_log_{nullptr};  // where the ranks other than 0 write (nowhere)
  std::ostream& log_;
  ProgressDisplay progress_;
  const bool overlap_;  // train.overlap, with one rank (docs/training.md, "One training step")
  // Two with overlap_: the batch trained on and the next one, prefetched. Declared before
  // embedding_, so that its destructor has waited for a prefetched lookup before they are freed.
  std::array<StepBatch, 2> steps_;
  int current_ = 0;                 // the index in steps_ of the next step's batch
  Ahead ahead_ = Ahead::kNone;      // where the next step's batch stands
  std::exception_ptr ahead_error_;  // the error of reading it ahead
  Embedding embedding_;
  // The tables' sizes, which the data sources hash into (or, dynamic, the synthetic data's items)
  std::vector<int64_t> sizes_;
  DlrmDenseModel model_;
  DenseOptimizer dense_optimizer_;
  std::filesystem::path output_dir_, checkpoint_dir_;
  TrainingData data_;
  // Reads data_.train_source one batch ahead on its own thread; the loop uses only this.
  std::optional<PrefetchingSource> prefetching_;
  std::vector<float> probabilities_;        // of the whole held-out set
  std::vector<float> local_probabilities_;  // of this rank's slice (several ranks)
  std::vector<float> dense_gradients_;      // averaged over the ranks (several ranks)
  std::exception_ptr error_;                // kept by locally() until sync()
  std::optional<MetricsLog> metrics_;
  TrainSummary summary_;
  int64_t examples_total_ = 0;  // over all runs (restored on resume)
  double loss_window_sum_ = 0;
  int64_t loss_window_count_ = 0;
  double recent_loss_ = std::nan("");
  int64_t last_saved_step_ = -1;
  // The data position after the last batch trained on (what a checkpoint saves).
  std::string trained_position_;
};

}  // namespace

TrainSummary run_training(const TrainConfig& config, const RunOptions& options) {
  return Trainer(config, options).run();
}

}  // namespace recemb::train
