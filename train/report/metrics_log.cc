#include "train/report/metrics_log.h"

#include <algorithm>
#include <limits>
#include <span>
#include <string>
#include <variant>

#include "recemb/error.h"

#include "support/file_io.h"
#include "support/file_system.h"
#include "support/json.h"

namespace recemb::train {
namespace {

// The largest metrics file a resumed run reads (DataLoss beyond): a record a step for 50 million
// steps.
constexpr uint64_t kMaxFileBytes = uint64_t{4} << 30;

std::string format(const TrainRecord& r) {
  support::JsonWriter json;
  json.begin_object().key("step").integer(r.step).key("examples").integer(r.examples);
  return json.key("train_loss").number(r.train_loss).end_object().take();
}

std::string format(const EvalRecord& r) {
  support::JsonWriter json;
  json.begin_object().key("step").integer(r.step).key("eval_auc").number(r.auc);
  return json.key("eval_log_loss").number(r.log_loss).end_object().take();
}

// A number of a record, null for the NaN a diverged run records (JSON has no NaN).
double number_or_nan(const support::JsonReader& value) {
  return value.json().is_null() ? std::numeric_limits<double>::quiet_NaN() : value.number();
}

// A line of the file, a train record or an eval record (by its keys); InvalidArgument naming the
// file, the line and what is wrong with it otherwise.
std::variant<TrainRecord, EvalRecord> parse(const std::string& line,
                                            const support::JsonDocument& document) {
  const support::Json json = support::parse_json(line, document);
  const support::JsonReader record(json, document);
  if (record.json().is_object() && record.json().contains("eval_auc")) {
    record.expect_only({"step", "eval_auc", "eval_log_loss"});
    return EvalRecord{.step = record.member("step").integer(0),
                      .auc = number_or_nan(record.member("eval_auc")),
                      .log_loss = number_or_nan(record.member("eval_log_loss"))};
  }
  record.expect_only({"step", "examples", "train_loss"});
  return TrainRecord{.step = record.member("step").integer(0),
                     .examples = record.member("examples").integer(0),
                     .train_loss = number_or_nan(record.member("train_loss"))};
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
  if (keep.step >= 0 && std::filesystem::exists(path)) {
    const std::string text = support::read_file(path, kMaxFileBytes);
    size_t line_start = 0;
    for (int64_t line_number = 1; line_start < text.size(); ++line_number) {
      const size_t line_end = std::min(text.find('\n', line_start), text.size());
      std::string line = text.substr(line_start, line_end - line_start);
      line_start = line_end + 1;
      const auto record = parse(line, {.name = path.string() + ":" + std::to_string(line_number),
                                       .source = support::JsonSource::kInput});
      if (const auto* train = std::get_if<TrainRecord>(&record)) {
        if (!kept_train(train->step)) continue;
        train_.push_back(*train);
      } else {
        const auto& eval = std::get<EvalRecord>(record);
        if (!kept_eval(eval.step)) continue;
        eval_.push_back(eval);
      }
      kept.push_back(std::move(line));
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
