#include "storage/table_storage.h"

#include <algorithm>
#include <utility>

namespace recemb::internal {

TableStorage::TableStorage(int64_t num_rows, int64_t dim, std::vector<SlotSpec> slot_specs)
    : num_rows_(num_rows),
      dim_(dim),
      slot_specs_(std::move(slot_specs)),
      parameters_(static_cast<size_t>(num_rows * dim)) {
  slots_.reserve(slot_specs_.size());
  for (const SlotSpec& spec : slot_specs_) {
    slots_.emplace_back(static_cast<size_t>(num_rows * spec.width));
    slot_bases_.push_back(slots_.back().data());
  }
}

FloatBuffer* TableStorage::variable(std::string_view name) {
  return const_cast<FloatBuffer*>(std::as_const(*this).variable(name));
}

const FloatBuffer* TableStorage::variable(std::string_view name) const {
  if (name == "parameters") return &parameters_;
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
