#include "checkpoint/layout.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <system_error>
#include <unistd.h>

#include "recemb/checkpoint.h"
#include "recemb/error.h"

namespace recemb {
namespace internal {
namespace {

constexpr std::string_view kCheckpointPrefix = "ckpt-";
constexpr int kStepDigits = 12;

}  // namespace

std::string checkpoint_directory_name(int64_t step) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%0*lld", kStepDigits, static_cast<long long>(step));
  return std::string(kCheckpointPrefix) + digits;
}

std::optional<int64_t> checkpoint_step(std::string_view directory_name) {
  if (!directory_name.starts_with(kCheckpointPrefix)) return std::nullopt;
  const std::string_view digits = directory_name.substr(kCheckpointPrefix.size());
  // Exactly the names checkpoint_directory_name writes: a copy such as "ckpt-1" is not ours.
  if (digits.size() < kStepDigits || (digits.size() > kStepDigits && digits.front() == '0') ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  int64_t step = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return step;
}

std::string temporary_name(std::string_view purpose) {
  static std::atomic<uint64_t> counter{0};
  return std::string(kTemporaryPrefix) + std::string(purpose) + "-" + std::to_string(::getpid()) +
         "-" + std::to_string(++counter);
}

std::string variable_file_name(size_t table_index, std::string_view variable, DType dtype) {
  const std::string_view extension = dtype == DType::kBFloat16  ? ".bf16"
                                     : dtype == DType::kFloat16 ? ".f16"
                                                                : ".f32";
  return "t" + std::to_string(table_index) + "." + std::string(variable) + std::string(extension);
}

std::string key_array_file_name(size_t table_index, std::string_view array) {
  return "t" + std::to_string(table_index) + "." + std::string(array) + ".i64";
}

std::string extra_array_file_name(size_t index) { return "x" + std::to_string(index) + ".f32"; }

std::vector<CheckpointDirectory> list_checkpoints(const std::filesystem::path& root) {
  std::vector<CheckpointDirectory> checkpoints;
  std::error_code error;
  std::filesystem::directory_iterator entries(root, error);
  if (error == std::errc::no_such_file_or_directory || error == std::errc::not_a_directory) {
    return checkpoints;
  }
  if (error) throw std::filesystem::filesystem_error("list checkpoints", root, error);
  for (const std::filesystem::directory_entry& entry : entries) {
    const std::optional<int64_t> step = checkpoint_step(entry.path().filename().string());
    if (step && entry.is_directory()) checkpoints.push_back({*step, entry.path()});
  }
  std::sort(
      checkpoints.begin(), checkpoints.end(),
      [](const CheckpointDirectory& a, const CheckpointDirectory& b) { return a.step < b.step; });
  return checkpoints;
}

std::filesystem::path resolve_checkpoint(const std::filesystem::path& path) {
  if (std::filesystem::exists(path / kManifestFile) ||
      std::filesystem::exists(path / kManifestChecksumFile)) {
    return path;
  }
  if (std::optional<std::filesystem::path> latest = latest_checkpoint(path)) return *latest;
  if (!std::filesystem::exists(path)) {
    throw std::system_error(ENOENT, std::generic_category(),
                            "no checkpoint at '" + path.string() + "'");
  }
  throw InvalidArgument("no checkpoint at '" + path.string() +
                        "': it is neither a checkpoint (no " + std::string(kManifestFile) +
                        ") nor a root holding ckpt-* checkpoints");
}

}  // namespace internal

std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& root) {
  const std::vector<internal::CheckpointDirectory> checkpoints = internal::list_checkpoints(root);
  if (checkpoints.empty()) return std::nullopt;
  return checkpoints.back().path;
}

}  // namespace recemb
