// `recemb checkpoint inspect DIR` and `recemb export CKPT OUT`: a checkpoint's contents and
// health, and its conversion into a model directory for serving (include/recemb/checkpoint.h,
// serving.h, dlrm/model_file.h).
#ifndef RECEMB_TOOLS_RECEMB_CHECKPOINT_COMMANDS_H_
#define RECEMB_TOOLS_RECEMB_CHECKPOINT_COMMANDS_H_

#include <ostream>
#include <string>

namespace recemb::tools {

struct InspectArguments {
  std::string checkpoint = {};  // a ckpt-* directory, or a root (its newest checkpoint)
  bool verify = true;           // read every file and check its checksums
};

// Prints the format version, step, tables and every file with its size and state. Returns 0 when
// every file is intact, 1 when some are not (each named with the reason). A missing or damaged
// manifest throws InvalidArgument.
int run_inspect_command(const InspectArguments& args, std::ostream& out);

struct ExportArguments {
  std::string checkpoint = {};    // a ckpt-* directory, or a root (its newest checkpoint)
  std::string output = {};        // the model directory to write (created if missing)
  std::string dtype = "float32";  // float32 | float16 | int8
  int threads = 0;                // for loading the checkpoint; 0 = one per core
};

// Writes the checkpoint's tables (verified) and, for a checkpoint of `recemb train`, its dense
// model as the one model file OUT/model.recemb, atomically (dlrm::export_checkpoint), and prints
// what it wrote. Returns 0. Errors: InvalidArgument when OUT is a file or the dtype is unknown;
// DataLoss (naming the checkpoint and part) for a damaged checkpoint; std::system_error for a
// failing system call.
int run_export_command(const ExportArguments& args, std::ostream& out);

}  // namespace recemb::tools

#endif  // RECEMB_TOOLS_RECEMB_CHECKPOINT_COMMANDS_H_
