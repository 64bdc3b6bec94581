#include "tools/recemb/predict_command.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "recemb/error.h"

#include "tools/recemb/lookup_command.h"
#include "train/criteo_reader.h"
#include "train/float_text.h"
#include "train/predictor.h"

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
    if (line.size() <= static_cast<size_t>(train::kMaxLineBytes))
      line.push_back(static_cast<char>(c));
  }
  return any;
}

class Answerer {
 public:
  Answerer(train::Predictor& predictor, std::ostream& out) : predictor_(predictor), out_(out) {}

  // Predicts `lines`, named "<source><line number>" in messages, and writes the answers.
  void answer(const std::vector<std::string>& lines, const std::string& source,
              int64_t first_line_number) {
    views_.assign(lines.begin(), lines.end());
    results_.resize(lines.size());
    predictor_.predict(views_, results_);
    for (size_t i = 0; i < results_.size(); ++i) {
      const train::Prediction& result = results_[i];
      if (result.error.empty()) {
        out_ << train::float_text(result.probability) << '\n';
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
  train::Predictor& predictor_;
  std::ostream& out_;
  std::vector<std::string_view> views_;
  std::vector<train::Prediction> results_;
  int64_t failed_ = 0;
};

// The file `path` open for reading; InvalidArgument (without blocking on a FIFO) when it is not a
// regular file, std::system_error when it cannot be opened.
std::ifstream open_data(const std::string& path) {
  std::error_code error;
  if (std::filesystem::exists(path, error) && !std::filesystem::is_regular_file(path, error)) {
    throw InvalidArgument("--data '" + path +
                          "' is not a regular file (decompress or copy it first)");
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw std::system_error(errno, std::generic_category(), "--data: opening '" + path + "'");
  }
  return file;
}

}  // namespace

int run_predict_command(const PredictArguments& args, std::istream& in, std::ostream& out,
                        std::ostream& err) {
  train::Predictor predictor = train::Predictor::open(args.model, {.verify = args.verify});
  std::vector<std::ifstream> files;
  for (const std::string& path : args.data) files.push_back(open_data(path));

  Answerer answerer(predictor, out);
  int64_t total = 0;
  std::vector<std::string> lines;
  if (args.data.empty()) {
    lines.resize(1);
    for (int64_t number = 1; read_line(in, lines[0]); ++number, ++total) {
      answerer.answer(lines, "line ", number);
    }
  } else {
    for (size_t f = 0; f < files.size(); ++f) {
      const std::string source = args.data[f] + ":";
      int64_t first = 1;
      lines.clear();
      for (std::string line; read_line(files[f], line);) {
        lines.push_back(std::move(line));
        if (lines.size() == kFileBatchLines) {
          answerer.answer(lines, source, first);
          first += static_cast<int64_t>(lines.size());
          total += static_cast<int64_t>(lines.size());
          lines.clear();
        }
      }
      if (files[f].bad()) {
        throw std::system_error(errno, std::generic_category(),
                                "--data: reading '" + args.data[f] + "'");
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
