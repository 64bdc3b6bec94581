#include "tools/recemb/checkpoint_commands.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>

#include "recemb/checkpoint.h"
#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/serving.h"

#include "dlrm/model_file.h"

namespace recemb::tools {
namespace {

std::string bytes_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

}  // namespace

int run_inspect_command(const InspectArguments& args, std::ostream& out) {
  const CheckpointInfo info = inspect_checkpoint(args.checkpoint, {.verify = args.verify});
  // A root stands for its newest checkpoint: name the one described.
  const std::filesystem::path described =
      latest_checkpoint(args.checkpoint).value_or(args.checkpoint);
  out << "checkpoint " << described.string() << "\n"
      << "format version " << info.format_version << ", step " << info.step << "\n";
  if (!info.tables.empty()) {
    out << "tables:\n";
    for (const CheckpointTable& table : info.tables) {
      char line[256];
      // A dynamic table: the keys it holds.
      std::snprintf(line, sizeof line, "  %-20s %12" PRId64 " %s x %4" PRId64 "  %s%s\n",
                    table.name.c_str(), table.dynamic ? table.num_keys : table.vocabulary_size,
                    table.dynamic ? "keys" : "rows", table.dim,
                    table.optimizer.empty() ? "(no optimizer)" : table.optimizer.c_str(),
                    table.dynamic ? "  (dynamic)" : "");
      out << line;
    }
  }
  out << "files:\n";
  uint64_t total = 0;
  int damaged = 0;
  for (const CheckpointFile& file : info.files) {
    total += file.bytes;
    if (!file.ok) ++damaged;
    // The file's name, and what it holds ("x0.f32" is "extra array 'dense/parameters'").
    char line[768];
    std::snprintf(line, sizeof line, "  %-7s %-20s %-44s %10s  %s\n", file.ok ? "ok" : "DAMAGED",
                  file.path.c_str(), file.holds.c_str(),
                  bytes_text(static_cast<double>(file.bytes)).c_str(),
                  file.ok ? file.checksum.c_str() : file.error.c_str());
    out << line;
  }
  out << info.files.size() << " files, " << bytes_text(static_cast<double>(total)) << "; ";
  if (damaged > 0) {
    out << damaged << " damaged\n";
    return 1;
  }
  out << (args.verify ? "all checksums verified\n" : "sizes checked (checksums not verified)\n");
  return 0;
}

int run_export_command(const ExportArguments& args, std::ostream& out) {
  const ServingDtype dtype = parse_serving_dtype(args.dtype);
  const auto start = std::chrono::steady_clock::now();
  const dlrm::ExportedModel exported =
      dlrm::export_checkpoint(args.checkpoint, args.output, dtype, args.threads);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string dense_part =
      exported.dense_parameters > 0
          ? " and the dense model (" + std::to_string(exported.dense_parameters) + " parameters)"
          : "";
  char line[512];
  std::snprintf(line, sizeof line,
                "exported %" PRId64 " tables (%" PRId64 " rows) as %s%s to %s: %s in %.2f s\n",
                exported.tables, exported.rows, std::string(serving_dtype_name(dtype)).c_str(),
                dense_part.c_str(), exported.path.c_str(),
                bytes_text(static_cast<double>(exported.bytes)).c_str(), seconds);
  out << line;
  return 0;
}

}  // namespace recemb::tools
