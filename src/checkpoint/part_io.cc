#include "checkpoint/part_io.h"

#include <limits>
#include <memory>

namespace recemb::internal {
namespace {

// Calls run(file_offset, first_local_row, num_local_rows) for the byte ranges of the local rows
// of `variable` whose table row is below num_rows, in local row order; consecutive rows whose
// ranges touch are one call.
template <class Float, class Run>
void for_each_run(const TablePart& part, const PartVariable<Float>& variable, int64_t num_rows,
                  Run&& run) {
  const auto row_bytes = static_cast<uint64_t>(variable.columns) * sizeof(float);
  auto offset_of = [&](int64_t local) {
    return static_cast<uint64_t>(part.global_row(local) * variable.width + variable.first_column) *
           sizeof(float);
  };
  int64_t first = 0;
  int64_t count = 0;
  for (int64_t local = 0; local < part.rows && part.global_row(local) < num_rows; ++local) {
    if (count > 0 &&
        offset_of(first) + static_cast<uint64_t>(count) * row_bytes == offset_of(local)) {
      ++count;
      continue;
    }
    if (count > 0) run(offset_of(first), first, count);
    first = local;
    count = 1;
  }
  if (count > 0) run(offset_of(first), first, count);
}

}  // namespace

void create_sized_file(const std::filesystem::path& path, uint64_t bytes) {
  const std::unique_ptr<support::WritableFile> file =
      support::file_system().create(path, support::ExistingFile::kFail);
  file->resize(bytes);
  file->sync();
  file->close();
}

void write_part_rows(const std::filesystem::path& path, const TablePart& part,
                     const PartVariable<const float>& variable) {
  const std::unique_ptr<support::WritableFile> file = support::file_system().open_for_writing(path);
  for_each_run(part, variable, std::numeric_limits<int64_t>::max(),
               [&](uint64_t offset, int64_t first, int64_t count) {
                 file->write_at(offset, std::as_bytes(variable.values.subspan(
                                            static_cast<size_t>(first * variable.columns),
                                            static_cast<size_t>(count * variable.columns))));
               });
  file->sync();
  file->close();
}

void read_part_rows(const support::InputFile& file, const TablePart& part,
                    const PartVariable<float>& variable, int64_t num_rows) {
  for_each_run(part, variable, num_rows, [&](uint64_t offset, int64_t first, int64_t count) {
    file.read_at(offset, std::as_writable_bytes(variable.values.subspan(
                             static_cast<size_t>(first * variable.columns),
                             static_cast<size_t>(count * variable.columns))));
  });
}

}  // namespace recemb::internal
