// The memory of one table: its rows and its optimizer's slot variables.
//
// Layout: "parameters" is [num_rows, dim] row-major, float32 or 16-bit (bfloat16, float16: the
// table's DType); slot i is [num_rows, width_i] float32 row-major in its own buffer (width = dim,
// or 1 for row-wise slots). Row r of every variable is reached by pointer arithmetic only, so the
// kernels take raw pointers and never dispatch per row.
#ifndef RECEMB_STORAGE_TABLE_STORAGE_H_
#define RECEMB_STORAGE_TABLE_STORAGE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "recemb/config.h"

#include "kernels/pool.h"
#include "optimizers/slot_spec.h"
#include "storage/aligned_buffer.h"

namespace recemb::internal {

class TableStorage {
 public:
  // Allocates zero-filled parameters and slots; the caller initialises them (initialize_block).
  // When memory is short, throws ResourceExhausted naming `table_name` and the bytes asked for,
  // having freed what it allocated.
  TableStorage(std::string_view table_name, int64_t num_rows, int64_t dim,
               std::vector<SlotSpec> slot_specs, DType dtype = DType::kFloat32);

  int64_t num_rows() const { return num_rows_; }
  int64_t dim() const { return dim_; }
  DType dtype() const { return dtype_; }
  const std::vector<SlotSpec>& slot_specs() const { return slot_specs_; }

  // A float32 table's rows (nullptr for a 16-bit table).
  float* row(int64_t r) { return parameters_.data() + r * dim_; }
  const float* row(int64_t r) const { return parameters_.data() + r * dim_; }
  // A 16-bit table's rows (nullptr for a float32 table).
  uint16_t* half_row(int64_t r) { return halves_.data() + r * dim_; }
  const uint16_t* half_row(int64_t r) const { return halves_.data() + r * dim_; }
  // The parameters' memory, every row, in the table's type (checkpoints read and write it as is).
  std::span<std::byte> parameter_bytes();
  std::span<const std::byte> parameter_bytes() const;
  // The parameters as the pooling kernel reads them, in the table's type.
  TableRows rows() const;
  // out = rows [first_row, first_row + num_rows) as float32 (exact from 16 bits).
  void read_rows(int64_t first_row, int64_t num_rows, float* out) const;
  // Every row as float32: a copy of a 16-bit table's parameters (read_variable).
  std::vector<float> rows_as_float32() const;
  // Rows [first_row, first_row + num_rows) = values, rounded to nearest (ties to even) in a 16-bit
  // table. Finite values beyond float16's range become infinities: callers check first.
  void write_rows(int64_t first_row, int64_t num_rows, const float* values);
  // The base pointer of every slot, in slot_specs() order; slot i of row r is
  // slot_bases()[i] + r * slot_specs()[i].width.
  const std::vector<float*>& slot_bases() const { return slot_bases_; }

  // "parameters" or a slot name; nullptr when the table has no such variable, or for a 16-bit
  // table's parameters (read_rows and write_rows convert them).
  FloatBuffer* variable(std::string_view name);
  const FloatBuffer* variable(std::string_view name) const;
  // Floats per row of that variable (dim, or the slot's width).
  int64_t variable_width(std::string_view name) const;

  // Sets every slot of rows [first_row, first_row + num_rows) to its initial value.
  void initialize_slots(int64_t first_row, int64_t num_rows);

 private:
  int64_t num_rows_;
  int64_t dim_;
  DType dtype_;
  std::vector<SlotSpec> slot_specs_;
  FloatBuffer parameters_;  // float32 tables
  HalfBuffer halves_;       // 16-bit tables
  std::vector<FloatBuffer> slots_;
  std::vector<float*> slot_bases_;
};

}  // namespace recemb::internal

#endif  // RECEMB_STORAGE_TABLE_STORAGE_H_
