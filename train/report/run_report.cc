#include "train/report/run_report.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <span>
#include <system_error>
#include <unistd.h>

#include "support/file_io.h"
#include "support/file_system.h"
#include "support/json.h"
#include "train/report/svg_plot.h"

namespace recemb::train {
namespace {

// "SIGINT", "SIGTERM", else "signal <n>".
std::string signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal);
}

// One line for the dynamic tables together and one for the one holding the most keys; nothing
// without dynamic tables.
std::string format_vocabularies(const std::vector<TableVocabulary>& vocabularies) {
  if (vocabularies.empty()) return {};
  VocabularyStats total;
  int64_t total_capacity = 0;
  const TableVocabulary* largest = &vocabularies.front();
  for (const TableVocabulary& v : vocabularies) {
    total.size += v.stats.size;
    total.inserted += v.stats.inserted;
    total.evicted += v.stats.evicted;
    total.not_admitted_lookups += v.stats.not_admitted_lookups;
    total_capacity += v.capacity;
    if (v.stats.size > largest->stats.size) largest = &v;
  }
  const auto line = [](const std::string& what, const VocabularyStats& stats, int64_t capacity) {
    return what + ": " + std::to_string(stats.size) + " keys held (capacity " +
           std::to_string(capacity) + "), " + std::to_string(stats.inserted) + " admitted, " +
           std::to_string(stats.evicted) + " evicted, " +
           std::to_string(stats.not_admitted_lookups) + " lookups of keys not admitted\n";
  };
  return line("vocabularies of " + std::to_string(vocabularies.size()) + " dynamic tables", total,
              total_capacity) +
         line("  largest, " + largest->table, largest->stats, largest->capacity);
}

// A share of the run spent writing checkpoints above which the summary warns.
constexpr double kCheckpointShareToWarn = 0.25;

// How far (relative) the held-out log loss must rise above its lowest to count as overfitting.
constexpr double kOverfittingRise = 0.01;

}  // namespace

std::string format_summary(const TrainSummary& s) {
  const double accounted = s.lookup_seconds + s.dense_seconds + s.update_seconds;
  const auto share = [&](double seconds) {
    return accounted > 0 ? 100 * seconds / accounted : 0.0;
  };
  char best[160] = "";
  if (std::isfinite(s.best_auc)) {
    std::snprintf(best, sizeof best,
                  "best possible on these synthetic data (the planted model): AUC %.4f, log loss "
                  "%.4f\n",
                  s.best_auc, s.best_log_loss);
  }
  char text[1024];
  std::snprintf(
      text, sizeof text,
      "trained steps %" PRId64 "..%" PRId64 ": %" PRId64
      " examples in %.1f s (%.0f examples/s)\n"
      "held-out AUC %.4f (before: %.4f), log loss %.4f\n%s"
      "time: embedding lookup %.2f s (%.0f%%), dense forward+backward+update %.2f s (%.0f%%), "
      "embedding update %.2f s (%.0f%%); data %.2f s, evaluation %.2f s, checkpoints %.2f s\n"
      "memory: tables + slots %.1f MiB, peak resident %.1f MiB\n",
      s.first_step, s.steps, s.examples, s.seconds, s.examples_per_second, s.final_auc,
      s.initial_auc, s.final_log_loss, best, s.lookup_seconds, share(s.lookup_seconds),
      s.dense_seconds, share(s.dense_seconds), s.update_seconds, share(s.update_seconds),
      s.data_seconds, s.eval_seconds, s.checkpoint_seconds,
      static_cast<double>(s.embedding_bytes) / (1 << 20),
      static_cast<double>(s.peak_resident_bytes) / (1 << 20));
  std::string summary = text + format_vocabularies(s.vocabularies);
  if (s.ranks > 1) {
    summary += "data-parallel on " + std::to_string(s.ranks) + " ranks (time and memory: rank " +
               std::to_string(s.rank) + "'s)\n";
  }
  if (s.stop_signal != 0) {
    summary += std::string("stopped by ") + signal_name(s.stop_signal) + " after step " +
               std::to_string(s.steps) + " of " + std::to_string(s.requested_steps) +
               ": continue with --resume\n";
  }
  if (s.data_ended) {
    summary += "the training data ended at step " + std::to_string(s.steps) +
               ", before train.steps = " + std::to_string(s.requested_steps) + "\n";
  }
  if (s.short_lines > 0) {
    summary += "read " + std::to_string(s.short_lines) +
               " short input lines (fewer than 40 fields: the missing trailing fields taken as "
               "empty)\n";
  }
  if (s.malformed_lines > 0) {
    summary += "skipped " + std::to_string(s.malformed_lines) + " malformed input lines";
    summary += s.malformed_messages.empty() ? "\n" : ", the first ones:\n";
    for (const std::string& message : s.malformed_messages) summary += "  " + message + "\n";
  }
  // Checkpoints are written at the disk's speed while training waits: say so when that is a large
  // share of the run (docs/training.md, "Checkpoints").
  // Only when more than the final checkpoint was written: that one, neither setting avoids.
  if (s.checkpoints > 1 && s.checkpoint_seconds > kCheckpointShareToWarn * s.seconds) {
    char line[512];
    std::snprintf(line, sizeof line,
                  "warning: writing %" PRId64
                  " checkpoints took %.1f s, %.0f%% of the run (%.0f MB/s of tables and slots); "
                  "training waits for them: raise checkpoint.every (now %" PRId64
                  " steps; 0 = only at the end)\n",
                  s.checkpoints, s.checkpoint_seconds, 100 * s.checkpoint_seconds / s.seconds,
                  static_cast<double>(s.embedding_bytes) * static_cast<double>(s.checkpoints) /
                      s.checkpoint_seconds / 1e6,
                  s.checkpoint_every);
    summary += line;
  }
  if (!s.learned && s.overfitting_from_step >= 0) {
    char line[512];
    std::snprintf(line, sizeof line,
                  "warning: the model did not learn (held-out AUC %.4f, log loss %.4f; before: "
                  "%.4f): the held-out log loss rose from %.4f at step %" PRId64
                  " while the training loss fell: the model overfits its training data; train "
                  "fewer steps or epochs (train.steps, train.epochs), or on more data\n",
                  s.final_auc, s.final_log_loss, s.initial_log_loss, s.lowest_log_loss,
                  s.overfitting_from_step);
    summary += line;
  } else if (!s.learned) {
    char line[512];
    std::snprintf(line, sizeof line,
                  "warning: the model did not learn (held-out AUC %.4f, log loss %.4f; before: "
                  "%.4f): try another embedding.learning_rate (each optimizer has its own: "
                  "docs/training.md, \"Learning rates\") or dense.learning_rate, more steps, or "
                  "check that the labels depend on the features\n",
                  s.final_auc, s.final_log_loss, s.initial_log_loss);
    summary += line;
  }
  return summary;
}

void write_run_file(const std::filesystem::path& path, const std::string& text) {
  support::write_file_atomically(
      path, [&](support::OutputFile& file) { file.write(std::as_bytes(std::span(text))); });
}

void note_overfitting(const MetricsLog& metrics, TrainSummary& summary) {
  const std::vector<EvalRecord>& evals = metrics.eval_records();
  const std::vector<TrainRecord>& trains = metrics.train_records();
  if (evals.size() < 2 || trains.size() < 2) return;
  const auto lowest =
      std::min_element(evals.begin(), evals.end(),
                       [](const auto& a, const auto& b) { return a.log_loss < b.log_loss; });
  const EvalRecord& last = evals.back();
  if (!(last.log_loss > lowest->log_loss * (1 + kOverfittingRise))) return;
  // The training loss then: its last record at or before that step (or its first).
  const TrainRecord* then = &trains.front();
  for (const TrainRecord& r : trains) {
    if (r.step <= lowest->step) then = &r;
  }
  if (trains.back().step <= then->step || !(trains.back().train_loss < then->train_loss)) return;
  summary.overfitting_from_step = lowest->step;
  summary.lowest_log_loss = lowest->log_loss;
}

std::string published_base_line(const PublishResult& base) {
  char size[64];
  std::snprintf(size, sizeof size, "%.1f MiB, %" PRId64 " rows",
                static_cast<double>(base.bytes) / (1 << 20), base.rows);
  std::string line =
      "published a base: " + base.file.string() + " (" + size + "; " + base.base_reason + ")";
  if (!base.removed_versions.empty()) {
    line += "; removed older version";
    for (const int64_t version : base.removed_versions) line += " " + std::to_string(version);
  }
  return line;
}

std::string published_deltas_line(int64_t deltas, int64_t bytes,
                                  const std::filesystem::path& last) {
  char size[32];
  std::snprintf(size, sizeof size, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return "published " + std::to_string(deltas) + " deltas (" + size +
         ") beside the bases; the last: " + last.string();
}

void create_writable_directory(const std::filesystem::path& directory, const std::string& setting) {
  try {
    std::filesystem::create_directories(directory);
    const std::filesystem::path probe =
        directory / (".recemb-write-check-" + std::to_string(::getpid()));
    support::write_file_atomically(probe, [](support::OutputFile& file) {
      const std::byte byte{0};
      file.write(std::span(&byte, 1));
    });
    support::file_system().remove_all(probe);
  } catch (const std::system_error& error) {
    throw std::system_error(error.code(),
                            setting + " '" + directory.string() +
                                "' cannot be written (checked before training): " + error.what());
  }
}

void write_summary_json(const TrainSummary& s, const std::filesystem::path& path) {
  support::JsonWriter json(support::JsonWriter::Layout::kIndented);
  json.begin_object();
  json.key("ranks").integer(s.ranks).key("dense_isa").string(s.dense_isa);
  json.key("first_step").integer(s.first_step).key("steps").integer(s.steps);
  json.key("requested_steps").integer(s.requested_steps).key("data_ended").boolean(s.data_ended);
  json.key("stop_signal").integer(s.stop_signal).key("examples").integer(s.examples);
  json.key("seconds").number(s.seconds).key("examples_per_second").number(s.examples_per_second);
  json.key("initial_auc").number(s.initial_auc).key("initial_log_loss").number(s.initial_log_loss);
  json.key("learned").boolean(s.learned);
  json.key("overfitting_from_step").integer(s.overfitting_from_step);
  json.key("lowest_log_loss").number(s.lowest_log_loss);
  json.key("final_auc").number(s.final_auc).key("final_log_loss").number(s.final_log_loss);
  json.key("best_auc").number(s.best_auc).key("best_log_loss").number(s.best_log_loss);
  json.key("data_seconds").number(s.data_seconds).key("lookup_seconds").number(s.lookup_seconds);
  json.key("dense_seconds").number(s.dense_seconds);
  json.key("update_seconds").number(s.update_seconds).key("eval_seconds").number(s.eval_seconds);
  json.key("checkpoint_seconds").number(s.checkpoint_seconds);
  json.key("checkpoints").integer(s.checkpoints);
  json.key("publish_seconds").number(s.publish_seconds).key("publishes").integer(s.publishes);
  json.key("embedding_bytes").integer(s.embedding_bytes);
  json.key("peak_resident_bytes").integer(s.peak_resident_bytes);
  json.key("malformed_lines").integer(s.malformed_lines).key("short_lines").integer(s.short_lines);
  if (!s.vocabularies.empty()) {
    json.key("vocabularies").begin_object();
    for (const TableVocabulary& v : s.vocabularies) {
      json.key(v.table).begin_object().key("capacity").integer(v.capacity);
      json.key("keys").integer(v.stats.size).key("admitted").integer(v.stats.inserted);
      json.key("evicted").integer(v.stats.evicted);
      json.key("not_admitted_lookups").integer(v.stats.not_admitted_lookups).end_object();
    }
    json.end_object();
  }
  write_run_file(path, json.end_object().take() + "\n");
}

void write_training_svg(const MetricsLog& metrics, int64_t log_every,
                        const std::filesystem::path& path) {
  std::vector<double> loss_steps, losses, eval_steps, aucs, eval_losses;
  for (const TrainRecord& r : metrics.train_records()) {
    loss_steps.push_back(static_cast<double>(r.step));
    losses.push_back(r.train_loss);
  }
  for (const EvalRecord& r : metrics.eval_records()) {
    eval_steps.push_back(static_cast<double>(r.step));
    aucs.push_back(r.auc);
    eval_losses.push_back(r.log_loss);
  }
  // The held-out log loss beside the training loss: a rise of the one while the other falls
  // (overfitting) shows. Each evaluation is marked: with few, the line alone would hide them.
  const std::vector<Chart> charts{
      {.title = "Log loss",
       .x_label = "step",
       .y_label = "log loss",
       .series = {{.label = "train (mean over " + std::to_string(log_every) + " steps)",
                   .x = loss_steps,
                   .y = losses},
                  {.label = "held-out",
                   .x = eval_steps,
                   .y = eval_losses,
                   .color = "#ff7f0e",
                   .markers = true}}},
      {.title = "Held-out AUC",
       .x_label = "step",
       .y_label = "AUC",
       .series = {
           {.label = "eval", .x = eval_steps, .y = aucs, .color = "#d62728", .markers = true}}}};
  write_run_file(path, render_svg(charts));
}

}  // namespace recemb::train
