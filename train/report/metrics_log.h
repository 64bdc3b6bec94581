// metrics.jsonl of a training run: one JSON object per line, appended as the run goes, so a crash
// loses nothing written before it:
//   {"step": 10, "examples": 20480, "train_loss": 0.69314718}       every train.log_every steps
//   {"step": 500, "eval_auc": 0.7712, "eval_log_loss": 0.4873}       at each evaluation
// Numbers are written so that they read back exactly (support/json.h's JsonWriter); a NaN (a
// diverged run's loss) as null.
// On resume, the records after the resumed step are dropped, and so are those the interrupted run
// wrote at that step only because it ended there, so the file of a resumed run equals that of an
// uninterrupted one. The file is written through the file system in use (support/file_system.h):
// the kept records are rewritten atomically (a temporary file renamed over it), then each record
// is appended with one checked write; a failing write throws std::system_error naming the call,
// the file and the errno's text.
#ifndef RECEMB_TRAIN_REPORT_METRICS_LOG_H_
#define RECEMB_TRAIN_REPORT_METRICS_LOG_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace recemb::support {
class WritableFile;  // support/file_system.h
}  // namespace recemb::support

namespace recemb::train {

struct TrainRecord {
  int64_t step = 0;
  int64_t examples = 0;   // training examples seen up to this step
  double train_loss = 0;  // mean loss of the steps since the previous record
};

struct EvalRecord {
  int64_t step = 0;
  double auc = 0;
  double log_loss = 0;
};

// The records of an existing file a resumed run keeps: those before `step`, and those at `step`
// that an uninterrupted run writes there too (train records when step is a multiple of
// train_every, eval records when it is 0 or a multiple of eval_every > 0).
struct KeptRecords {
  int64_t step = -1;  // negative: none (a new run)
  int64_t train_every = 1;
  int64_t eval_every = 0;
};

class MetricsLog {
 public:
  // Opens `path` for appending, keeping the records `kept` says (read back into train_records()
  // and eval_records()) and dropping the others. Lines that are not records of this format are an
  // error (InvalidArgument naming the file and line, the file left as it was): a metrics file is
  // never guessed at. A file that cannot be written throws std::system_error (see the top).
  MetricsLog(const std::filesystem::path& path, const KeptRecords& kept);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Appends the record's line; std::system_error (ENOSPC, EIO, ...) naming the file when the
  // write fails, the record then not kept in memory either.
  void add(const TrainRecord& record);
  void add(const EvalRecord& record);
  // fsyncs and closes the file, reporting a delayed write error; add() may not follow.
  void close();

  const std::vector<TrainRecord>& train_records() const { return train_; }
  const std::vector<EvalRecord>& eval_records() const { return eval_; }

 private:
  void append(const std::string& line);

  std::filesystem::path path_;
  std::unique_ptr<support::WritableFile> file_;
  uint64_t size_ = 0;  // the file's bytes written
  std::vector<TrainRecord> train_;
  std::vector<EvalRecord> eval_;
};

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_REPORT_METRICS_LOG_H_
