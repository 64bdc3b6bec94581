// `recemb predict MODEL_DIR [--data FILE...]`: click probabilities for raw Criteo lines, from a
// model directory (or its model.recemb) written by `recemb export` of a `recemb train` checkpoint
// (dlrm/predictor.h).
//
//   in:   Criteo lines (tab-separated; with the label field, which is ignored, or without it), on
//         stdin or from the --data files in order (plain or gzip, read as the trainer reads them:
//         CriteoReader::next_line). Whether lines hold the label is told by their field count
//         (40: they do; 39 is refused as ambiguous) unless --labels says it (yes: short lines read
//         as the trainer reads them; no: lines of 39 fields).
//   out:  one line per input line, in order: the probability ("0.0273"), or for a line that
//         cannot be predicted the error object of `recemb lookup` (write_error_answer)
//         {"error": {"line": 3, "code": "InvalidArgument", "message": "line 3: C7 'xyz' is not 1
//         to 16 hexadecimal digits"}}
// Every input line gets exactly one output line, so answers pair with lines by position.
// Probabilities are the shortest decimal text that reads back as the same float32.
#ifndef RECEMB_TOOLS_RECEMB_PREDICT_COMMAND_H_
#define RECEMB_TOOLS_RECEMB_PREDICT_COMMAND_H_

#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "dlrm/criteo_reader.h"

namespace recemb::tools {

struct PredictArguments {
  std::string model = {};              // a model directory or its model file (recemb export)
  std::vector<std::string> data = {};  // Criteo files; none: stdin
  bool verify = true;                  // check every checksum of the tables when opening
  // --labels yes (kPresent), no (kAbsent); default: told by each line's field count.
  dlrm::CriteoLabel labels = dlrm::CriteoLabel::kFromFieldCount;
};

// Answers every line as above: stdin line by line (each answer is written and flushed before the
// next line is read, so a client may converse over a pipe), files in batches. Returns 0 when
// every line got a probability, 1 when some got an error (their count is reported on `err`). A
// model that cannot be opened, or a --data path that is not a readable regular file, throws
// before any output (DataLoss, InvalidArgument, std::system_error naming the file); so does gzip
// data on stdin (InvalidArgument: give the file as --data). Damaged gzip data in a --data file
// throws DataLoss naming the file, after the answers of the lines before it.
int run_predict_command(const PredictArguments& args, std::istream& in, std::ostream& out,
                        std::ostream& err);

}  // namespace recemb::tools

#endif  // RECEMB_TOOLS_RECEMB_PREDICT_COMMAND_H_
