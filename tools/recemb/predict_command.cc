#include "tools/recemb/predict_command.h"

#include <filesystem>
#include <string_view>

#include "recemb/error.h"

#include "dlrm/criteo_reader.h"
#include "dlrm/predictor.h"
#include "support/number_text.h"
#include "tools/recemb/lookup_command.h"

namespace recemb::tools {
namespace {

// Lines predicted together from a file.
constexpr size_t kFileBatchLines = 1024;

// Reads the next line of `in` (without '\n') into `line`, keeping at most kMaxLineBytes + 1
// bytes of it (a longer line is refused as too long; its rest is skipped, not stored). False at
// the end of the input.
bool read_line(std::istream& in, std::string& line) {
  line.clear();
  bool any = false;
  for (int c = in.get(); c != std::char_traits<char>::eof(); c = in.get()) {
    any = true;
    if (c == '\n') return true;
    if (line.size() <= static_cast<size_t>(dlrm::kMaxLineBytes))
      line.push_back(static_cast<char>(c));
  }
  return any;
}

class Answerer {
 public:
  Answerer(dlrm::Predictor& predictor, dlrm::CriteoLabel labels, std::ostream& out)
      : predictor_(predictor), labels_(labels), out_(out) {}

  // Predicts `lines`, named "<source><line number>" in messages, and writes the answers.
  void answer(const std::vector<std::string>& lines, const std::string& source,
              int64_t first_line_number) {
    views_.assign(lines.begin(), lines.end());
    results_.resize(lines.size());
    predictor_.predict(views_, results_, labels_);
    for (size_t i = 0; i < results_.size(); ++i) {
      const dlrm::Prediction& result = results_[i];
      if (result.error.empty()) {
        out_ << support::float_text(result.probability) << '\n';
        continue;
      }
      ++failed_;
      const int64_t line_number = first_line_number + static_cast<int64_t>(i);
      write_error_answer(line_number, source + std::to_string(line_number) + ": " + result.error,
                         out_);
    }
    out_.flush();
  }

  int64_t failed() const { return failed_; }

 private:
  dlrm::Predictor& predictor_;
  dlrm::CriteoLabel labels_;
  std::ostream& out_;
  std::vector<std::string_view> views_;
  std::vector<dlrm::Prediction> results_;
  int64_t failed_ = 0;
};

// Checks that `path` is a readable regular file: InvalidArgument (without blocking on a FIFO)
// when it is not a regular file, std::system_error naming it when it cannot be opened.
void check_data_file(const std::string& path) {
  std::error_code error;
  if (std::filesystem::exists(path, error) && !std::filesystem::is_regular_file(path, error)) {
    throw InvalidArgument("--data '" + path + "' is not a regular file (copy it first)");
  }
  dlrm::plain_file_size(path);
}

}  // namespace

int run_predict_command(const PredictArguments& args, std::istream& in, std::ostream& out,
                        std::ostream& err) {
  dlrm::Predictor predictor = dlrm::Predictor::open(args.model, {.verify = args.verify});
  for (const std::string& path : args.data) check_data_file(path);

  Answerer answerer(predictor, args.labels, out);
  int64_t total = 0;
  std::vector<std::string> lines;
  if (args.data.empty()) {
    lines.resize(1);
    for (int64_t number = 1; read_line(in, lines[0]); ++number, ++total) {
      if (number == 1 && lines[0].starts_with("\x1f\x8b")) {
        throw InvalidArgument(
            "stdin is gzip-compressed: give the file as --data (read as the trainer reads it)");
      }
      answerer.answer(lines, "line ", number);
    }
  } else {
    for (const std::string& path : args.data) {
      // The trainer's reader frames the lines (plain or gzip); the categorical ids are the
      // predictor's, so the reader is told none.
      dlrm::CriteoReader reader({path}, {.ids = dlrm::CategoricalIds::kRawKeys});
      const std::string source = path + ":";
      int64_t first = 1;
      lines.clear();
      for (std::string_view line; reader.next_line(line);) {
        lines.emplace_back(line);
        if (lines.size() == kFileBatchLines) {
          answerer.answer(lines, source, first);
          first += static_cast<int64_t>(lines.size());
          total += static_cast<int64_t>(lines.size());
          lines.clear();
        }
      }
      if (!lines.empty()) answerer.answer(lines, source, first);
      total += static_cast<int64_t>(lines.size());
    }
  }
  if (answerer.failed() > 0) {
    err << "recemb predict: " << answerer.failed() << " of " << total
        << " lines could not be predicted (their answers are error objects)\n";
    return 1;
  }
  return 0;
}

}  // namespace recemb::tools
