// Reading and writing the rows of one rank's table parts (embedding/parts.h) at their places in a
// checkpoint's data files, so that under several ranks each rank writes and reads only its own
// rows and columns, in parallel with the others, and no rank ever holds a whole table.
//
// A whole-variable data file is row-major: row r, columns [c, c + n) of a variable `width` values
// of b bytes wide (4 for float32, 2 for bfloat16 and float16) are the bytes [b * (r * width + c),
// b * (r * width + c + n)). A part's local rows map to
// such ranges (one per row, merged where consecutive: a whole table is one range); each range is
// one positioned read or write of the part's memory itself, without a copy. Positioned writes of
// disjoint byte ranges by different processes are safe on a local file system and on the shared
// file systems of clusters (Lustre, GPFS; NFS with close-to-open consistency: each writer fsyncs
// and closes its files before the checksums are read back).
#ifndef RECEMB_CHECKPOINT_PART_IO_H_
#define RECEMB_CHECKPOINT_PART_IO_H_

#include <cstdint>
#include <filesystem>

#include "embedding/parts.h"
#include "support/file_io.h"

namespace recemb::internal {

// Creates the file `path` (which must not exist) with `bytes` zero bytes (ftruncate), syncs and
// closes it. std::system_error naming the call and the path on failure.
void create_sized_file(const std::filesystem::path& path, uint64_t bytes);

// Writes the local rows of `variable` (of `part`) at their places in the existing file `path` (a
// whole variable: part's table rows of variable.width values of its dtype), then fsyncs and
// closes it. std::system_error naming the call and the path on failure.
void write_part_rows(const std::filesystem::path& path, const TablePart& part,
                     const PartVariable<const float>& variable);

// Reads from `file` (a whole variable, as above) the local rows of `variable` (of `part`) whose
// table row is below `num_rows` (the rows the file and the table share), straight into the part's
// memory; the other local rows are left as they are. DataLoss if the file is too short;
// std::system_error for I/O failures.
void read_part_rows(const support::InputFile& file, const TablePart& part,
                    const PartVariable<float>& variable, int64_t num_rows);

// out = the n values `in` of type `from` as type `to`: their bytes when the types are the same,
// else each exactly as float32 (through `scratch`, n floats), then rounded to nearest (ties to
// even) in `to` (float16: values of magnitude 65520 or more become infinities). The bytes are
// little-endian values (checkpoint data, docs/formats.md), aligned or not.
void convert_values(DType from, const std::byte* in, DType to, std::byte* out, int64_t n,
                    float* scratch);

// As read_part_rows, from a file whose values are of `file_dtype`, another type than
// variable.dtype: each value converted exactly to float32, then rounded to nearest (ties to even)
// in variable.dtype (checkpoint conversion: docs/semantics.md, "16-bit tables"). Float16 holds
// values below 65520 in magnitude only; larger ones become infinities: callers check first.
void read_converted_part_rows(const support::InputFile& file, const TablePart& part,
                              const PartVariable<float>& variable, DType file_dtype,
                              int64_t num_rows);

}  // namespace recemb::internal

#endif  // RECEMB_CHECKPOINT_PART_IO_H_
