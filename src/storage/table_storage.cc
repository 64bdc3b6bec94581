#include "storage/table_storage.h"

#include <algorithm>
#include <iomanip>
#include <limits>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "recemb/error.h"

#include "kernels/half_precision.h"
#include "util/checked_math.h"

namespace recemb::internal {
namespace {

// "table 't': cannot allocate 32000000000000 bytes (29802.3 GiB) for 1000000000000 rows of 8
// values, 32 bytes (parameters and optimizer slots); ...".
std::string allocation_failure(std::string_view table_name, int64_t num_rows,
                               int64_t floats_per_row, int64_t bytes_per_row) {
  const std::optional<int64_t> bytes = checked_multiply(num_rows, bytes_per_row);
  const double gib = static_cast<double>(num_rows) * static_cast<double>(bytes_per_row) /
                     static_cast<double>(int64_t{1} << 30);
  std::ostringstream message;
  message << "table '" << table_name << "': cannot allocate ";
  if (bytes) {
    message << *bytes << " bytes";
  } else {
    message << "more than " << std::numeric_limits<int64_t>::max() << " bytes";
  }
  message << " (" << std::fixed << std::setprecision(1) << gib << " GiB) for " << num_rows
          << " rows of " << floats_per_row << " values, " << bytes_per_row
          << " bytes (parameters and optimizer slots): out of memory; lower vocabulary_size or "
             "dim, or shard the table over more processes";
  return message.str();
}

}  // namespace

TableStorage::TableStorage(std::string_view table_name, int64_t num_rows, int64_t dim,
                           std::vector<SlotSpec> slot_specs, DType dtype)
    : num_rows_(num_rows), dim_(dim), dtype_(dtype), slot_specs_(std::move(slot_specs)) {
  try {
    if (dtype == DType::kFloat32) {
      parameters_ = FloatBuffer(static_cast<size_t>(num_rows * dim));
    } else {
      halves_ = HalfBuffer(static_cast<size_t>(num_rows * dim));
    }
    slots_.reserve(slot_specs_.size());
    for (const SlotSpec& spec : slot_specs_) {
      slots_.emplace_back(static_cast<size_t>(num_rows * spec.width));
      slot_bases_.push_back(slots_.back().data());
    }
  } catch (const std::bad_alloc&) {
    // The buffers allocated so far are freed as the members are destroyed.
    int64_t floats_per_row = dim;
    int64_t bytes_per_row = dim * dtype_bytes(dtype);
    for (const SlotSpec& spec : slot_specs_) {
      floats_per_row += spec.width;
      bytes_per_row += spec.width * 4;
    }
    throw ResourceExhausted(
        allocation_failure(table_name, num_rows, floats_per_row, bytes_per_row));
  }
}

TableRows TableStorage::rows() const {
  switch (dtype_) {
    case DType::kBFloat16:
      return BFloat16Rows{halves_.data()};
    case DType::kFloat16:
      return Float16Rows{halves_.data()};
    default:
      return parameters_.data();
  }
}

void TableStorage::read_rows(int64_t first_row, int64_t num_rows, float* out) const {
  if (dtype_ == DType::kFloat32) {
    std::copy_n(row(first_row), num_rows * dim_, out);
  } else {
    decode_half_values(dtype_, half_row(first_row), num_rows * dim_, out);
  }
}

std::vector<float> TableStorage::rows_as_float32() const {
  std::vector<float> values(static_cast<size_t>(num_rows_ * dim_));
  read_rows(0, num_rows_, values.data());
  return values;
}

std::span<std::byte> TableStorage::parameter_bytes() {
  const std::span<const std::byte> bytes = std::as_const(*this).parameter_bytes();
  return {const_cast<std::byte*>(bytes.data()), bytes.size()};
}

std::span<const std::byte> TableStorage::parameter_bytes() const {
  return dtype_ == DType::kFloat32 ? std::as_bytes(parameters_.span())
                                   : std::as_bytes(halves_.span());
}

void TableStorage::write_rows(int64_t first_row, int64_t num_rows, const float* values) {
  if (dtype_ == DType::kFloat32) {
    std::copy_n(values, num_rows * dim_, row(first_row));
  } else {
    encode_half_values_nearest(dtype_, values, num_rows * dim_, half_row(first_row));
  }
}

FloatBuffer* TableStorage::variable(std::string_view name) {
  return const_cast<FloatBuffer*>(std::as_const(*this).variable(name));
}

const FloatBuffer* TableStorage::variable(std::string_view name) const {
  if (name == "parameters") return dtype_ == DType::kFloat32 ? &parameters_ : nullptr;
  for (size_t i = 0; i < slot_specs_.size(); ++i) {
    if (slot_specs_[i].name == name) return &slots_[i];
  }
  return nullptr;
}

int64_t TableStorage::variable_width(std::string_view name) const {
  for (const SlotSpec& spec : slot_specs_) {
    if (spec.name == name) return spec.width;
  }
  return dim_;
}

void TableStorage::initialize_slots(int64_t first_row, int64_t num_rows) {
  for (size_t i = 0; i < slot_specs_.size(); ++i) {
    const int64_t width = slot_specs_[i].width;
    std::fill_n(slot_bases_[i] + first_row * width, num_rows * width, slot_specs_[i].initial_value);
  }
}

}  // namespace recemb::internal
