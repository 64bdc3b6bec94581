// The memory of one table: its rows and its optimizer's slot variables.
//
// Layout: "parameters" is [num_rows, dim] row-major; slot i is [num_rows, width_i] row-major in
// its own buffer (width = dim, or 1 for row-wise slots). Row r of every variable is reached by
// pointer arithmetic only, so the kernels take raw pointers and never dispatch per row.
#ifndef RECEMB_STORAGE_TABLE_STORAGE_H_
#define RECEMB_STORAGE_TABLE_STORAGE_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "optimizers/slot_spec.h"
#include "storage/float_buffer.h"

namespace recemb::internal {

class TableStorage {
 public:
  // Allocates zero-filled parameters and slots; the caller initialises them (initialize_block).
  // When memory is short, throws ResourceExhausted naming `table_name` and the bytes asked for,
  // having freed what it allocated.
  TableStorage(std::string_view table_name, int64_t num_rows, int64_t dim,
               std::vector<SlotSpec> slot_specs);

  int64_t num_rows() const { return num_rows_; }
  int64_t dim() const { return dim_; }
  const std::vector<SlotSpec>& slot_specs() const { return slot_specs_; }

  float* row(int64_t r) { return parameters_.data() + r * dim_; }
  const float* row(int64_t r) const { return parameters_.data() + r * dim_; }
  const float* parameters() const { return parameters_.data(); }
  // The base pointer of every slot, in slot_specs() order; slot i of row r is
  // slot_bases()[i] + r * slot_specs()[i].width.
  const std::vector<float*>& slot_bases() const { return slot_bases_; }

  // "parameters" or a slot name; nullptr when the table has no such variable.
  FloatBuffer* variable(std::string_view name);
  const FloatBuffer* variable(std::string_view name) const;
  // Floats per row of that variable (dim, or the slot's width).
  int64_t variable_width(std::string_view name) const;

  // Sets every slot of rows [first_row, first_row + num_rows) to its initial value.
  void initialize_slots(int64_t first_row, int64_t num_rows);

 private:
  int64_t num_rows_;
  int64_t dim_;
  std::vector<SlotSpec> slot_specs_;
  FloatBuffer parameters_;
  std::vector<FloatBuffer> slots_;
  std::vector<float*> slot_bases_;
};

}  // namespace recemb::internal

#endif  // RECEMB_STORAGE_TABLE_STORAGE_H_
