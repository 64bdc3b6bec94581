// `recemb hash`: the table rows `recemb train` uses for raw Criteo categorical values, so that a
// client holding raw values can build `recemb lookup` requests (docs/serving.md, "recemb hash").
//
//   stdin:  one raw value of feature C3 per line, as in the Criteo TSV: 1 to 16 hexadecimal
//           digits, or an empty line (a missing value)
//   stdout: one line per input line: the row id, or {"error": {"line": N, "code": ..., ...}}
//
// The mapping is the trainer's (dlrm/criteo_reader.h, categorical_field_id): it depends on the
// feature and on its table's vocabulary_size, taken from a serving model or from the training
// settings (the ones `recemb train` was given: --config, --set, --preset).
#ifndef RECEMB_TOOLS_RECEMB_HASH_COMMAND_H_
#define RECEMB_TOOLS_RECEMB_HASH_COMMAND_H_

#include <istream>
#include <ostream>
#include <string>
#include <vector>

namespace recemb::tools {

struct HashArguments {
  std::string feature = {};      // C1 .. C26
  std::string model = {};        // a serving model exported from recemb train; else the settings:
  std::string config_path = {};  // as recemb train: TOML settings file
  std::vector<std::string> overrides = {};  // as recemb train: "section.key=value"
  std::string preset = {};                  // shortcut for data.preset
};

// Answers each line of `in` with one line on `out`, in order. Returns 0 when every value was
// valid, 1 when any line was answered with an error (also reported on `err` with its line
// number). Throws InvalidArgument, before reading `in`, for a feature that is not C1..C26 or not
// in the model, or bad settings; a model that cannot be opened throws as ServingModel::open.
int run_hash_command(const HashArguments& args, std::istream& in, std::ostream& out,
                     std::ostream& err);

}  // namespace recemb::tools

#endif  // RECEMB_TOOLS_RECEMB_HASH_COMMAND_H_
