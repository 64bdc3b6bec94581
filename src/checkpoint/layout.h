// The directory layout of checkpoints under a root (docs/formats.md, "Checkpoint format"):
//
//   root/
//     ckpt-000000001000/           a complete checkpoint of step 1000 (published by rename)
//       manifest.json              configs, step, and the name, size and checksums of every file
//       manifest.xxh3              XXH3-64 of manifest.json: 16 lowercase hex digits + "\n"
//       t0.parameters.f32          table 0's parameters, float32 little-endian, row-major
//       t0.accumulators.f32        table 0's slot "accumulators"
//       t1.keys.i64                a dynamic table 1's keys, int64 little-endian (and its other
//                                  key arrays: last_seen, count, pending_keys, pending_count)
//       x0.f32                     extra array 0
//     .tmp-ckpt-000000002000-...   a save in progress (or interrupted): never read
//
// Data files are named by table index, not table name, so that any table name is safe.
#ifndef RECEMB_CHECKPOINT_LAYOUT_H_
#define RECEMB_CHECKPOINT_LAYOUT_H_

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/config.h"

namespace recemb::internal {

inline constexpr std::string_view kManifestFile = "manifest.json";
inline constexpr std::string_view kManifestChecksumFile = "manifest.xxh3";
// Every name under a root that starts with this belongs to a save in progress or to a deletion.
inline constexpr std::string_view kTemporaryPrefix = ".tmp-";

// "ckpt-" + step, zero padded to 12 digits (more digits for steps >= 10^12).
std::string checkpoint_directory_name(int64_t step);
// The step of a checkpoint directory name, or nullopt for any other name.
std::optional<int64_t> checkpoint_step(std::string_view directory_name);

// A name for a temporary directory under a root, unique within the process and across
// processes: ".tmp-" + `purpose` + "-" + pid + "-" + counter.
std::string temporary_name(std::string_view purpose);

// A table variable's file: "t<index>.<variable>.f32", or ".bf16" / ".f16" for the parameters of a
// table whose dtype (the variable's) is 16-bit.
std::string variable_file_name(size_t table_index, std::string_view variable,
                               DType dtype = DType::kFloat32);
// A dynamic table's key array (checkpoint/manifest.h, DynamicArray): "t<index>.<array>.i64".
std::string key_array_file_name(size_t table_index, std::string_view array);
std::string extra_array_file_name(size_t index);

struct CheckpointDirectory {
  int64_t step = 0;
  std::filesystem::path path;
};

// The complete checkpoints under `root`, by increasing step; empty if root does not exist.
std::vector<CheckpointDirectory> list_checkpoints(const std::filesystem::path& root);

// `path` itself if it is a checkpoint directory (it holds a manifest file), else the latest
// checkpoint under it; std::system_error ENOENT if `path` does not exist, InvalidArgument naming
// `path` if it is neither.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path);

}  // namespace recemb::internal

#endif  // RECEMB_CHECKPOINT_LAYOUT_H_
