#include "train/metrics_log.h"

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <span>
#include <string>

#include "recemb/error.h"

#include "support/file_io.h"
#include "support/file_system.h"

namespace recemb::train {
namespace {

// Doubles with 17 significant digits: a record read back is the value written.
std::string format(const TrainRecord& r) {
  char line[160];
  std::snprintf(line, sizeof line,
                "{\"step\": %" PRId64 ", \"examples\": %" PRId64 ", \"train_loss\": %.17g}", r.step,
                r.examples, r.train_loss);
  return line;
}

std::string format(const EvalRecord& r) {
  char line[160];
  std::snprintf(line, sizeof line,
                "{\"step\": %" PRId64 ", \"eval_auc\": %.17g, \"eval_log_loss\": %.17g}", r.step,
                r.auc, r.log_loss);
  return line;
}

// Parses a line written by format(); a record must print back to exactly the same line.
template <typename Record>
bool parse(const std::string& line, const char* pattern, Record& record);

template <>
bool parse(const std::string& line, const char* pattern, TrainRecord& r) {
  return std::sscanf(line.c_str(), pattern, &r.step, &r.examples, &r.train_loss) == 3 &&
         format(r) == line;
}

template <>
bool parse(const std::string& line, const char* pattern, EvalRecord& r) {
  return std::sscanf(line.c_str(), pattern, &r.step, &r.auc, &r.log_loss) == 3 && format(r) == line;
}

}  // namespace

MetricsLog::MetricsLog(const std::filesystem::path& path, const KeptRecords& keep) : path_(path) {
  const auto kept_train = [&](int64_t step) {
    return step < keep.step || (step == keep.step && step % keep.train_every == 0);
  };
  const auto kept_eval = [&](int64_t step) {
    return step < keep.step ||
           (step == keep.step &&
            (step == 0 || (keep.eval_every > 0 && step % keep.eval_every == 0)));
  };
  std::vector<std::string> kept;
  if (keep.step >= 0) {
    std::ifstream in(path);
    std::string line;
    for (int line_number = 1; std::getline(in, line); ++line_number) {
      TrainRecord train;
      EvalRecord eval;
      if (parse(line, "{\"step\": %" SCNd64 ", \"examples\": %" SCNd64 ", \"train_loss\": %lf}",
                train)) {
        if (!kept_train(train.step)) continue;
        train_.push_back(train);
      } else if (parse(line, "{\"step\": %" SCNd64 ", \"eval_auc\": %lf, \"eval_log_loss\": %lf}",
                       eval)) {
        if (!kept_eval(eval.step)) continue;
        eval_.push_back(eval);
      } else {
        throw InvalidArgument(path.string() + ":" + std::to_string(line_number) +
                              ": not a metrics record: " + line.substr(0, 80));
      }
      kept.push_back(line);
    }
  }
  std::string text;
  for (const std::string& line : kept) text += line + '\n';
  support::write_file_atomically(
      path, [&](support::OutputFile& file) { file.write(std::as_bytes(std::span(text))); });
  size_ = text.size();
  file_ = support::file_system().open_for_writing(path);
}

MetricsLog::~MetricsLog() = default;

void MetricsLog::append(const std::string& line) {
  const std::string text = line + '\n';
  file_->write_at(size_, std::as_bytes(std::span(text)));
  size_ += text.size();
}

void MetricsLog::add(const TrainRecord& record) {
  append(format(record));
  train_.push_back(record);
}

void MetricsLog::add(const EvalRecord& record) {
  append(format(record));
  eval_.push_back(record);
}

void MetricsLog::close() {
  file_->sync();
  file_->close();
}

}  // namespace recemb::train
