#include "train/run/trainer.h"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <utility>

#include "recemb/checkpoint.h"
#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/placement.h"
#include "recemb/publish.h"

#include "dlrm/criteo_profile.h"
#include "dlrm/dense_optimizer.h"
#include "dlrm/dlrm_dense_model.h"
#include "dlrm/model_file.h"
#include "support/collectives.h"
#include "support/thread_pool.h"
#include "train/config/embedding_model.h"
#include "train/config/resume_settings.h"
#include "train/data/prefetching_source.h"
#include "train/data/training_data.h"
#include "train/report/metrics_log.h"
#include "train/report/run_summary.h"
#include "train/run/checkpoint_schedule.h"
#include "train/run/data_parallel.h"
#include "train/run/held_out_evaluation.h"
#include "train/run/loss_window.h"
#include "train/run/publish_schedule.h"
#include "train/run/rank_errors.h"
#include "train/run/run_resources.h"
#include "train/run/step_pipeline.h"
#include "train/run/trainer_checkpoint.h"

namespace recemb::train {
namespace {

// The Embedding of every rank of `group`, running on `threads`: with several ranks, its tables
// placed over them as embedding.sharding says; alone, whole tables exactly as without a
// communicator.
Embedding make_embedding(const TrainConfig& config, EmbeddingModel model, const RankGroup& group,
                         std::shared_ptr<support::ThreadPool> threads) {
  // Checked here, before the Embedding's constructor (the first collective), from what every rank
  // knows alike: every rank throws the same error.
  if (config.train.batch_size < group.size()) {
    throw InvalidArgument("train.batch_size " + std::to_string(config.train.batch_size) +
                          " is smaller than the number of ranks (" + std::to_string(group.size()) +
                          "): every rank trains on its share of each batch");
  }
  EmbeddingOptions options{.optimizer = std::move(model.optimizer),
                           .executor = std::move(threads),
                           .seed = config.model.seed,
                           .communicator = group.embedding_communicator()};
  if (group.size() > 1) {
    options.placement = PlacementOptions{.num_shards = group.size(),
                                         .strategy = sharding_strategy(config.embedding.sharding)};
  }
  return Embedding(std::move(model.tables), std::move(model.features), std::move(options));
}

dlrm::DenseOptimizerConfig dense_optimizer_config(const TrainConfig::DenseOptimizer& dense) {
  if (dense.optimizer == "adagrad") {
    return dlrm::DenseAdagrad{.learning_rate = static_cast<float>(dense.learning_rate)};
  }
  return dlrm::DenseAdam{.learning_rate = static_cast<float>(dense.learning_rate)};
}

class Trainer {
 public:
  Trainer(const TrainConfig& config, const RunOptions& options)
      : config_(config),
        options_(options),
        group_(options.communicator),
        log_(group_.rank() != 0       ? null_log_
             : options.log != nullptr ? *options.log
                                      : std::cerr),
        errors_(group_),
        progress_(log_, options.progress),
        threads_(std::make_shared<support::ThreadPool>(config.embedding.threads)),
        embedding_(make_embedding(config, embedding_model(config), group_, threads_)),
        sizes_(embedding_model(config).sizes),
        model_(dlrm::DlrmDenseConfig{.num_dense_features = dlrm::kNumDenseFeatures,
                                     .num_sparse_features = dlrm::kNumCategoricalFeatures,
                                     .embedding_dim = config.model.embedding_dim,
                                     .bottom_mlp = config.model.bottom_mlp,
                                     .top_mlp = config.model.top_mlp,
                                     .seed = config.model.seed,
                                     .num_threads = 0,
                                     .pool = threads_}),
        dense_optimizer_(dense_optimizer_config(config.dense), model_.num_parameters(),
                         model_.dense_isa()),
        output_dir_(config.output.dir),
        checkpoints_(config,
                     config.checkpoint.dir.empty() ? output_dir_ / "checkpoints"
                                                   : std::filesystem::path(config.checkpoint.dir),
                     embedding_, model_, dense_optimizer_, progress_, summary_),
        publisher_(config, embedding_, model_, progress_, summary_),
        evaluator_(embedding_, model_, group_, errors_, config.train.batch_size) {
    // Checked by every rank and agreed on: ranks on other machines may have other limits.
    errors_.locally([&] {
      check_memory(config_, memory_limit());
      data_ = open_training_data(config_, sizes_);
      summary_.best_auc = data_.best_auc;
      summary_.best_log_loss = data_.best_log_loss;
    });
    errors_.sync();
    if (group_.size() > 1) {
      expect_same_on_every_rank(group_, data_.eval_set.size, "held-out examples");
    }
    if (group_.size() > 1) expect_same_dense_isa();
    prefetching_.emplace(*data_.train_source, config.train.batch_size);
    // train.overlap with one rank alone (docs/training.md, "One training step").
    pipeline_.emplace(config.model.embedding_dim, config.train.overlap && group_.size() == 1,
                      config.train.batch_size, *prefetching_, embedding_, errors_, summary_);
  }

  TrainSummary run() {
    const bool resumed = begin();
    int64_t total_steps = expected_last_step();
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
    publish();  // the base: the served model from the start
    while (run_step() < config_.train.steps) {
      StepBatch& batch = pipeline_->next();
      if (stops_before(batch, resumed, steps_start)) break;
      train_step(batch);
      trained_position_ = batch.position;
      const int64_t step = run_step();
      if (step % config_.train.log_every == 0) record_loss(step);
      if (config_.train.eval_every > 0 && step % config_.train.eval_every == 0 &&
          step < config_.train.steps) {
        evaluate();
      }
      if (checkpoints_.due(step)) save();
      if (publisher_.due()) publish();
      total_steps = reestimate_last_step(total_steps);
      show_progress(total_steps, steps_start);
    }
    return finish(start);
  }

 private:
  // Before the first step: checks and creates the run's directories, resumes or initialises from
  // a checkpoint, opens metrics.jsonl and says what the run is. Returns whether it resumed.
  bool begin() {
    // Rank 0 alone writes output.dir and looks into the checkpoint directory; the other ranks
    // learn of its errors at sync() and of its findings by broadcast. Every directory the run
    // writes is checked before the first step (docs/training.md, "What a run prints and writes").
    // --init-from is checked before anything is written: a refused one leaves no file.
    if (!options_.init_from.empty()) initialize_from(options_.init_from);
    errors_.locally([&] {
      if (!root()) return;
      create_writable_directory(output_dir_, "output.dir");
      if (publisher_.enabled()) {
        if (group_.size() > 1) {
          throw InvalidArgument(
              "serving.publish_dir: publishing runs in one process (this run has " +
              std::to_string(group_.size()) +
              " ranks): export its checkpoints with `recemb export` instead");
        }
        create_writable_directory(config_.serving.publish_dir, "serving.publish_dir");
      }
      create_writable_directory(checkpoints_.dir(), "checkpoint.dir");
    });
    if (options_.resume) {
      resume();
    } else {
      errors_.locally([&] {
        if (!root()) return;
        if (const auto earlier = latest_checkpoint(checkpoints_.dir())) {
          throw InvalidArgument(checkpoints_.dir().string() +
                                " holds checkpoints of an earlier run (" +
                                earlier->filename().string() +
                                "): continue it with --resume, or choose another output.dir or "
                                "checkpoint.dir");
        }
      });
    }
    const bool resumed = run_step() > 0;
    errors_.locally([&] {
      if (!root()) return;
      write_run_file(output_dir_ / "config.toml", to_toml(config_));
      metrics_.emplace(output_dir_ / "metrics.jsonl",
                       KeptRecords{.step = resumed ? run_step() : -1,
                                   .train_every = config_.train.log_every,
                                   .eval_every = config_.train.eval_every});
    });
    errors_.sync();
    summary_.rank = group_.rank();
    summary_.ranks = group_.size();
    summary_.first_step = run_step();
    summary_.requested_steps = config_.train.steps;
    summary_.checkpoint_every = config_.checkpoint.every;
    summary_.dense_isa = dlrm::dense_isa_name(model_.dense_isa());
    summary_.embedding_bytes = embedding_bytes(embedding_);
    trained_position_ = prefetching_->position();
    describe_run();
    return resumed;
  }

  // Whether the run ends before `batch`: a stop asked for (a signal) on any rank, or the data's
  // end (every rank agrees on both). A run that ends before its first example throws.
  bool stops_before(const StepBatch& batch, bool resumed, Clock::time_point steps_start) {
    const int64_t count = batch.count;
    // A stop asked for on any rank: every rank stops before this batch, whose examples a resumed
    // run then trains on (the checkpoint holds the position before it).
    int64_t stop = options_.stop_signal != nullptr ? options_.stop_signal->load() : 0;
    if (group_.size() > 1) {
      errors_.sync();
      const std::vector<int64_t> values = group_.all_gather(std::array{count, stop});
      expect_same_on_every_rank(values, group_.size(), 0,
                                "examples in the batch of step " + std::to_string(run_step() + 1));
      for (int q = 0; q < group_.size(); ++q) {
        stop = std::max(stop, values[2 * static_cast<size_t>(q) + 1]);
      }
    }
    if (stop != 0) {
      summary_.stop_signal = static_cast<int>(stop);
      progress_.message("stopping at step " + std::to_string(run_step()) + " (signal " +
                        std::to_string(stop) + ")");
      return true;
    }
    if (count > 0) return false;
    summary_.data_ended = true;
    if (summary_.examples == 0) {
      throw InvalidArgument(
          "no examples to train on: the training data ended at step " + std::to_string(run_step()) +
          (resumed ? ", where this run resumed" : "") + " (" + data_.description +
          "): give more data, or continue the model on other data in a new run with "
          "--init-from " +
          checkpoints_.dir().string() + " --output <another dir>");
    }
    show_progress(run_step(), steps_start);  // the bar's end, reached once
    progress_.message("the training data ended at step " + std::to_string(run_step()) +
                      ", before train.steps = " + std::to_string(config_.train.steps));
    return true;
  }

  // After the last step: the final checkpoint, publish, records and evaluation, and the files
  // that report the run. `start`: when the run's work began (its initial evaluation).
  TrainSummary finish(Clock::time_point start) {
    // Saved before the final records: a run resumed from here continues the loss window, and
    // MetricsLog drops these off-schedule records (see metrics_log.h).
    save();
    if (run_step() != publisher_.published_step()) publish();
    errors_.locally([&] {
      publisher_.finish();
      publisher_.report_deltas();
    });
    if (!loss_window_.empty()) record_loss(run_step());
    // A run stopped right after a scheduled evaluation has it already: evaluated (and recorded)
    // again, metrics.jsonl would hold it twice, and so would the resumed run's.
    const EvalRecord final_eval =
        last_eval_ && last_eval_->step == run_step() ? *last_eval_ : evaluate();
    summary_.seconds = seconds_since(start);
    summary_.steps = run_step();
    summary_.examples_per_second = static_cast<double>(summary_.examples) / summary_.seconds;
    summary_.final_auc = final_eval.auc;
    summary_.final_log_loss = final_eval.log_loss;
    summary_.learned = learned(final_eval.auc, final_eval.log_loss, summary_.initial_log_loss);
    summary_.peak_resident_bytes = peak_resident_bytes();
    summary_.vocabularies = table_vocabularies(embedding_);
    prefetching_->pause();  // the readers' counters are then ours to read
    add_malformed_lines(data_, summary_);
    errors_.locally([&] {
      if (!root()) return;
      metrics_->close();
      note_overfitting(*metrics_, summary_);
      write_training_svg(*metrics_, config_.train.log_every, output_dir_ / "training.svg");
      write_summary_json(summary_, output_dir_ / "summary.json");
    });
    errors_.sync();
    return summary_;
  }

  // The data lasts longer than estimated (lines longer than the held-out ones, epochs): the last
  // step estimated again once the run reaches the estimate, so that the progress bar reaches its
  // end once, when the run does.
  int64_t reestimate_last_step(int64_t total_steps) {
    const int64_t step = run_step();
    if (step < total_steps || step >= config_.train.steps) return total_steps;
    const std::optional<int64_t> left = examples_left(data_, trained_position_);
    const int64_t size = config_.train.batch_size;
    return std::min(config_.train.steps,
                    step + std::max<int64_t>(1, (left.value_or(0) + size - 1) / size));
  }

  // Saves the state after this step (the checkpoint is the state after it, as the serial
  // loop's: a prefetched lookup of the next batch is waited for first).
  void save() {
    pipeline_->wait_for_prefetch();
    checkpoints_.save(run_step(), progress_made());
  }

  // Publishes at this step boundary, when the run publishes (the tables at rest).
  void publish() {
    if (!publisher_.enabled()) return;
    pipeline_->wait_for_prefetch();
    publisher_.publish(run_step());
  }

  // What a checkpoint saves of the run beside the models.
  TrainerProgress progress_made() const {
    return {.data_position = trained_position_,
            .examples = examples_total_,
            .loss_window_sum = loss_window_.sum(),
            .loss_window_count = loss_window_.count(),
            .first_step = first_step_};
  }

  bool root() const { return group_.rank() == 0; }

  // This run's step: the tables' (Embedding::step) less the step they had when it began.
  int64_t run_step() const { return embedding_.step() - first_step_; }

  // Collective: throws InvalidArgument on every rank when the ranks' dense layers run different
  // instruction sets, which round differently: the replicas' parameters would drift apart
  // (docs/training.md, "Instruction set").
  void expect_same_dense_isa() {
    const auto name = [](uint64_t isa) {
      return std::string(dlrm::dense_isa_name(static_cast<dlrm::DenseIsa>(isa)));
    };
    support::agree_on_value(
        group_.communicator(), static_cast<uint64_t>(model_.dense_isa()),
        [&](int rank, uint64_t isa, uint64_t rank0_isa) {
          return "rank " + std::to_string(rank) + "'s dense layers run " + name(isa) +
                 ", rank 0's " + name(rank0_isa) +
                 ": data-parallel replicas must compute alike; set RECEMB_DENSE_ISA to an "
                 "instruction set every rank's CPU runs";
        });
  }

  // The step at which the data is expected to end, or train.steps if it is expected to last:
  // for plain Criteo files, from their bytes left and the held-out lines' mean length.
  int64_t expected_last_step() {
    const std::optional<int64_t> left = examples_left(data_, trained_position_);
    if (!left) return config_.train.steps;
    const int64_t examples = *left;
    const int64_t steps = (examples + config_.train.batch_size - 1) / config_.train.batch_size;
    if (run_step() + steps >= config_.train.steps) return config_.train.steps;
    progress_.message(
        "the data will end before train.steps = " + std::to_string(config_.train.steps) +
        ": about " + std::to_string(examples) + " examples are left in " + data_.description +
        ", about " + std::to_string(steps) + " steps of " +
        std::to_string(config_.train.batch_size));
    return run_step() + steps;
  }

  // The progress line at this step, of `total_steps` (at least this step).
  void show_progress(int64_t total_steps, Clock::time_point steps_start) {
    const int64_t step = run_step();
    const double elapsed = seconds_since(steps_start);
    const double rate = static_cast<double>(summary_.examples) / elapsed;
    const int64_t total = std::max(total_steps, step);
    progress_.update({.step = step,
                      .total_steps = total,
                      .examples_per_second = rate,
                      .loss = loss_window_.recent(),
                      .eta_seconds = static_cast<double>(total - step) *
                                     static_cast<double>(config_.train.batch_size) / rate},
                     elapsed);
  }

  void describe_run() {
    progress_.message(run_description(config_, embedding_.tables(), summary_.embedding_bytes,
                                      model_.parameters().size(), model_.dense_isa(),
                                      data_.description));
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

  // One step on the global batch `batch`, of which this rank trains on its slice.
  void train_step(StepBatch& batch) {
    const Slice mine = group_.slice(batch.count);
    pipeline_->look_up(batch, mine, run_step() + 1 < config_.train.steps);

    Clock::time_point t = Clock::now();
    float local_loss = 0.0f;
    if (mine.count > 0) {
      errors_.locally([&] {
        local_loss = model_.train_step(
            std::span(batch.examples.dense)
                .subspan(static_cast<size_t>(mine.begin * dlrm::kNumDenseFeatures),
                         static_cast<size_t>(mine.count * dlrm::kNumDenseFeatures)),
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
      errors_.sync();
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
    pipeline_->wait_for_prefetch();
    summary_.lookup_seconds += seconds_since(t);

    t = Clock::now();
    embedding_.apply_gradients(batch.lookup, batch.buffers.gradient_views());
    summary_.update_seconds += seconds_since(t);

    summary_.examples += batch.count;
    examples_total_ += batch.count;
    loss_window_.add(loss);
    pipeline_->advance();
  }

  void record_loss(int64_t step) {
    const double loss = loss_window_.take();
    errors_.locally([&] {
      if (metrics_) {
        metrics_->add(TrainRecord{.step = step, .examples = examples_total_, .train_loss = loss});
      }
    });
  }

  EvalRecord evaluate() {
    const Clock::time_point t = Clock::now();
    update_held_out_set(data_, examples_total_);
    // Not the buffers of a batch prefetched ahead: its lookup still reads them.
    EvalRecord record = evaluator_.evaluate(data_.eval_set, pipeline_->idle_buffers());
    record.step -= first_step_;  // the evaluator counts the tables' steps
    errors_.locally([&] {
      if (metrics_) metrics_->add(record);
    });
    char line[160];
    std::snprintf(line, sizeof line,
                  "eval at step %" PRId64 ": AUC %.4f, log loss %.4f (%" PRId64
                  " held-out examples)",
                  record.step, record.auc, record.log_loss, data_.eval_set.size);
    progress_.message(line);
    summary_.eval_seconds += seconds_since(t);
    last_eval_ = record;
    return record;
  }

  void resume() {
    // Rank 0's choice, so that every rank restores the same checkpoint.
    std::string newest;
    errors_.locally([&] {
      if (!root()) return;
      if (const auto found = latest_checkpoint(checkpoints_.dir())) newest = found->string();
    });
    errors_.sync();
    newest = group_.broadcast(newest);
    if (newest.empty()) {
      progress_.message("--resume: no checkpoint in " + checkpoints_.dir().string() +
                        "; starting from step 0");
      return;
    }
    const RestoredState state = restore_checkpoint(embedding_, newest);
    const TrainerProgress progress =
        restore_trainer_state(state, config_, newest, model_, dense_optimizer_);
    first_step_ = progress.first_step;
    checkpoints_.resumed_at(run_step());
    prefetching_->seek(progress.data_position);
    examples_total_ = progress.examples;
    loss_window_.restore(progress.loss_window_sum, progress.loss_window_count);
    progress_.message("resumed from " + newest + " at step " + std::to_string(run_step()));
  }

  // --init-from: checks that `checkpoint`'s model has this run's shape (every rank reads its
  // manifest), then restores its tables, slots and dense state; this run's step 0 is its step.
  void initialize_from(const std::string& checkpoint) {
    if (options_.resume) {
      throw InvalidArgument("--init-from and --resume: --resume continues this run (" +
                            checkpoints_.dir().string() + "), --init-from starts a new one from " +
                            checkpoint + ": give one");
    }
    // Rank 0's choice of the newest checkpoint, so that every rank restores the same one.
    std::string chosen;
    errors_.locally([&] {
      if (!root()) return;
      chosen = latest_checkpoint(checkpoint).value_or(checkpoint).string();
      const CheckpointInfo info = inspect_checkpoint(chosen, {.verify = false});
      check_init_settings(info, embedding_model(config_), model_.config(), config_.dense.optimizer,
                          chosen);
    });
    errors_.sync();
    chosen = group_.broadcast(chosen);
    const RestoredState state = restore_checkpoint(embedding_, chosen);
    restore_dense_state(state, chosen, model_, dense_optimizer_);
    first_step_ = embedding_.step();
    progress_.message("initialised from " + chosen + " (step " + std::to_string(first_step_) +
                      " of its run): tables, optimizer slots and the dense model");
  }

  const TrainConfig& config_;
  const RunOptions& options_;
  RankGroup group_;
  std::ostream null_log_{nullptr};  // where the ranks other than 0 write (nowhere)
  std::ostream& log_;
  RankErrors errors_;
  ProgressDisplay progress_;
  // The threads of the embedding's and the dense model's loops (embedding.threads of them): with
  // train.overlap, the next batch's lookup and the dense step run on them at once.
  std::shared_ptr<support::ThreadPool> threads_;
  // The steps' batches, read by prefetching_ and looked up in embedding_ (set once they exist).
  // Declared before embedding_, so that its destructor has waited for a prefetched lookup before
  // the batches are freed.
  std::optional<StepPipeline> pipeline_;
  Embedding embedding_;
  // The tables' sizes, which the data sources hash into (or, dynamic, the synthetic data's items)
  std::vector<int64_t> sizes_;
  dlrm::DlrmDenseModel model_;
  dlrm::DenseOptimizer dense_optimizer_;
  std::filesystem::path output_dir_;
  CheckpointSchedule checkpoints_;
  PublishSchedule publisher_;
  TrainingData data_;
  // Reads data_.train_source one batch ahead on its own thread; the loop uses only this.
  std::optional<PrefetchingSource> prefetching_;
  HeldOutEvaluator evaluator_;
  std::vector<float> dense_gradients_;  // averaged over the ranks (several ranks)
  std::optional<MetricsLog> metrics_;
  TrainSummary summary_;
  int64_t examples_total_ = 0;  // over all runs (restored on resume)
  LossWindow loss_window_;
  int64_t first_step_ = 0;               // the tables' step at this run's step 0 (--init-from)
  std::optional<EvalRecord> last_eval_;  // this run's latest evaluation
  // The data position after the last batch trained on (what a checkpoint saves).
  std::string trained_position_;
};

}  // namespace

TrainSummary run_training(const TrainConfig& config, const RunOptions& options) {
  return Trainer(config, options).run();
}

}  // namespace recemb::train
