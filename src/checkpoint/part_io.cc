#include "checkpoint/part_io.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/half_precision.h"
#include "util/check.h"

namespace recemb::internal {
namespace {

// The bytes of local rows [first, first + count) of `variable`.
template <class Float>
auto local_rows(const PartVariable<Float>& variable, int64_t first, int64_t count) {
  const auto row_bytes = static_cast<size_t>(variable.columns * dtype_bytes(variable.dtype));
  return variable.bytes.subspan(static_cast<size_t>(first) * row_bytes,
                                static_cast<size_t>(count) * row_bytes);
}

// Calls run(file_offset, first_local_row, num_local_rows) for the byte ranges of the local rows
// of `variable` whose table row is below num_rows, in local row order; consecutive rows whose
// ranges touch are one call.
template <class Float, class Run>
void for_each_run(const TablePart& part, const PartVariable<Float>& variable, int64_t num_rows,
                  Run&& run) {
  const auto value_bytes = static_cast<uint64_t>(dtype_bytes(variable.dtype));
  const uint64_t row_bytes = static_cast<uint64_t>(variable.columns) * value_bytes;
  auto offset_of = [&](int64_t local) {
    return static_cast<uint64_t>(part.global_row(local) * variable.width + variable.first_column) *
           value_bytes;
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
                 file->write_at(offset, local_rows(variable, first, count));
               });
  file->sync();
  file->close();
}

void read_part_rows(const support::InputFile& file, const TablePart& part,
                    const PartVariable<float>& variable, int64_t num_rows) {
  for_each_run(part, variable, num_rows, [&](uint64_t offset, int64_t first, int64_t count) {
    file.read_at(offset, local_rows(variable, first, count));
  });
}

void convert_values(DType from, const std::byte* in, DType to, std::byte* out, int64_t n,
                    float* scratch) {
  if (from == to) {
    std::memcpy(out, in, static_cast<size_t>(n * dtype_bytes(from)));
    return;
  }
  const auto count = static_cast<size_t>(n);
  if (from == DType::kFloat32) {
    std::memcpy(scratch, in, count * sizeof(float));
  } else {
    for (size_t i = 0; i < count; ++i) {
      uint16_t bits = 0;
      std::memcpy(&bits, in + i * sizeof(bits), sizeof(bits));
      scratch[i] = from == DType::kBFloat16 ? bfloat16_to_float(bits) : float16_to_float(bits);
    }
  }
  if (to == DType::kFloat32) {
    std::memcpy(out, scratch, count * sizeof(float));
  } else {
    // The rows' encoder, a block at a time (out need not be aligned for uint16_t).
    constexpr size_t kBlock = 256;
    uint16_t codes[kBlock];
    for (size_t i = 0; i < count; i += kBlock) {
      const size_t block = std::min(kBlock, count - i);
      encode_half_values_nearest(to, scratch + i, static_cast<int64_t>(block), codes);
      std::memcpy(out + i * sizeof(uint16_t), codes, block * sizeof(uint16_t));
    }
  }
}

void read_converted_part_rows(const support::InputFile& file, const TablePart& part,
                              const PartVariable<float>& variable, DType file_dtype,
                              int64_t num_rows) {
  RECEMB_CHECK(file_dtype != variable.dtype);
  const auto columns = static_cast<size_t>(variable.columns);
  const int64_t file_row_bytes = variable.columns * dtype_bytes(file_dtype);
  const int64_t row_bytes = variable.columns * dtype_bytes(variable.dtype);
  // The part's rows as the file holds them.
  std::vector<std::byte> as_saved_bytes(static_cast<size_t>(part.rows * file_row_bytes));
  PartVariable<float> as_saved = variable;
  as_saved.dtype = file_dtype;
  as_saved.bytes = as_saved_bytes;
  read_part_rows(file, part, as_saved, num_rows);
  std::vector<float> scratch(columns);
  for (int64_t local = 0; local < part.rows && part.global_row(local) < num_rows; ++local) {
    convert_values(file_dtype, as_saved_bytes.data() + local * file_row_bytes, variable.dtype,
                   variable.bytes.data() + local * row_bytes, variable.columns, scratch.data());
  }
}

}  // namespace recemb::internal
