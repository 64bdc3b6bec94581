// `recemb lookup MODEL`: serving lookups from the shell, one example per line of JSON
// (docs/serving.md, "recemb lookup", specifies the protocol).
//
//   stdin:  {"C1": 5, "C2": [1, 2, 2], "C3": {"ids": [7, 8], "weights": [0.5, 2.0]}}
//   stdout: {"C1": [0.0132, ...], "C2": [...], "C3": [...]}
//
// Every feature of the model must be given, as one id, a list of ids (a bag, combined with the
// feature's table's combiner; [] is an empty bag) or an object of ids and weights. A dynamic
// table's features take any int64 key, or a string whose key is recemb::string_key of its UTF-8
// bytes (as Python's str ids); a key the table does not hold looks up a zero row. A sequence
// feature's output is a list of max_sequence_length rows. Floats are printed with 9 significant
// digits (float32 round-trips). Every input line gets exactly one output line, in order: the
// answer, or {"error": {"line": N, "code": "InvalidArgument", "message": "..."}}.
#ifndef RECEMB_TOOLS_RECEMB_LOOKUP_COMMAND_H_
#define RECEMB_TOOLS_RECEMB_LOOKUP_COMMAND_H_

#include <cstdint>
#include <istream>
#include <ostream>
#include <string>

namespace recemb::tools {

struct LookupArguments {
  // A serving model file, or a model directory: its model.recemb (dlrm::model_file_path)
  std::string model = {};
  bool verify = true;  // check every checksum when opening (memory speed)
};

// Answers each line of `in` with one line on `out`. A bad line (empty, not JSON, a missing or
// unknown feature, an id out of range, ...) is answered by an error object, also reported on
// `err` with its line number; the next lines go on. Returns 0 when every line was answered with
// activations, 1 when any was answered with an error. A model that cannot be opened throws
// (as ServingModel::open) before anything is read from `in`.
// Writes the answer to request line `line_number` that failed (docs/serving.md, "recemb lookup"):
//   {"error": {"line": 3, "code": "InvalidArgument", "message": "..."}}
// `message` may hold cut UTF-8 (a truncated quote of the request): bad bytes show as U+FFFD.
void write_error_answer(int64_t line_number, const std::string& message, std::ostream& out);

int run_lookup_command(const LookupArguments& args, std::istream& in, std::ostream& out,
                       std::ostream& err);

}  // namespace recemb::tools

#endif  // RECEMB_TOOLS_RECEMB_LOOKUP_COMMAND_H_
