// Encoding a table's rows into a serving dtype, and the pieces of a serving file's data section,
// shared by export_serving_model (serving/exporter.cc) and publish (serving/publisher.cc): one
// implementation, so that a delta's rows are the bytes an export writes for them.
#ifndef RECEMB_SERVING_TABLE_ENCODER_H_
#define RECEMB_SERVING_TABLE_ENCODER_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "recemb/error.h"
#include "recemb/serving.h"

#include "format/checksum.h"
#include "kernels/half_precision.h"
#include "kernels/quantized_rows.h"
#include "serving/format.h"
#include "support/json.h"
#include "support/number_text.h"

namespace recemb::internal {

// Rows are encoded in chunks of about this many float32 bytes: large enough for full-speed
// writes, small enough that the export needs little memory besides the tables.
inline constexpr int64_t kChunkBytes = int64_t{4} << 20;

// What a table's blobs hold: its rows (float32, [num_rows, dim]) and, for a dynamic table, its
// keys in increasing order (the rows being theirs, then one zero row: docs/serving.md).
struct TableValues {
  std::span<const float> rows;
  // Or a 16-bit table's rows where it holds them (`rows` empty), decoded a chunk at a time while
  // encoding (exactly: docs/semantics.md, "16-bit tables").
  std::span<const uint16_t> half_rows;
  DType half_dtype = DType::kBFloat16;
  int64_t num_rows = 0;
  std::vector<int64_t> keys;     // dynamic tables only
  std::vector<int64_t> row_ids;  // a static table's rows that `rows` holds; empty: all of them
  std::vector<float> owned;      // the rows when not read in place
};

// Encodes tables into one dtype, chunk by chunk, reusing its buffers.
class TableEncoder {
 public:
  // `context` starts the messages of errors (the file being exported).
  TableEncoder(ServingDtype dtype, std::string context)
      : dtype_(dtype), context_(std::move(context)) {}

  // Calls sink(bytes) with the rows blob of `table` (without padding) in order. Throws
  // InvalidArgument naming the table, row (a dynamic table's key), column and value that the
  // dtype cannot hold.
  template <typename Sink>
  void encode(const TableConfig& table, const TableValues& values, Sink&& sink) {
    const int64_t dim = table.dim;
    const int64_t chunk_rows = std::max<int64_t>(1, kChunkBytes / (dim * 4));
    for (int64_t first = 0; first < values.num_rows; first += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, values.num_rows - first);
      const float* chunk = nullptr;
      if (values.half_rows.empty()) {
        chunk = values.rows.data() + first * dim;
      } else {
        floats_.resize(static_cast<size_t>(rows * dim));
        decode_half_values(values.half_dtype, values.half_rows.data() + first * dim, rows * dim,
                           floats_.data());
        chunk = floats_.data();
      }
      std::optional<int64_t> bad;
      std::span<const std::byte> bytes;
      switch (dtype_) {
        case ServingDtype::kFloat32: {
          const float* end = chunk + rows * dim;
          const float* found = std::find_if(chunk, end, [](float x) { return !std::isfinite(x); });
          if (found != end) bad = found - chunk;
          bytes = std::as_bytes(std::span(chunk, end));
          break;
        }
        case ServingDtype::kFloat16:
          halves_.resize(static_cast<size_t>(rows * dim));
          bad = encode_float16_rows(chunk, rows, dim, halves_.data());
          bytes = std::as_bytes(std::span(halves_));
          break;
        case ServingDtype::kInt8:
          codes_.resize(static_cast<size_t>(rows * int8_row_bytes(dim)));
          bad = encode_int8_rows(chunk, rows, dim, codes_.data());
          bytes = std::as_bytes(std::span(codes_));
          break;
      }
      if (bad) fail(table, values, first * dim + *bad, chunk[*bad]);
      sink(bytes);
    }
  }

 private:
  [[noreturn]] void fail(const TableConfig& table, const TableValues& values, int64_t index,
                         float value) const {
    std::string rule = "values must be finite";
    if (dtype_ == ServingDtype::kFloat16) rule += " and of magnitude < 65520";
    if (dtype_ == ServingDtype::kInt8) rule += " and each row's max - min a finite float";
    const auto row = static_cast<size_t>(index / table.dim);
    // Only a key's row can fail: the zero row after them is always stored.
    const std::string where = table.dynamic_vocabulary ? "key " + std::to_string(values.keys[row])
                              : values.row_ids.empty()
                                  ? "row " + std::to_string(row)
                                  : "row " + std::to_string(values.row_ids[row]);
    throw InvalidArgument(context_ + ": table '" + table.name + "' " + where + " column " +
                          std::to_string(index % table.dim) + ": value " +
                          support::float_text(value) + " cannot be stored as " +
                          std::string(serving_dtype_name(dtype_)) + " (" + rule + ")");
  }

  ServingDtype dtype_;
  std::string context_;
  std::vector<float> floats_;  // a chunk of 16-bit rows, decoded
  std::vector<uint16_t> halves_;
  std::vector<uint8_t> codes_;
};

// Throws InvalidArgument, naming the array, unless `arrays` have non-empty, unique names, extents
// >= 0 whose product is the number of values, and finite values.
inline void check_extra_arrays(std::span<const ServingArray> arrays) {
  std::set<std::string_view> names;
  for (size_t a = 0; a < arrays.size(); ++a) {
    const ServingArray& array = arrays[a];
    const std::string owner = "ExportOptions.extra_arrays[" + std::to_string(a) + "] '" +
                              support::excerpt(array.name) + "'";
    if (array.name.empty() || !names.insert(array.name).second) {
      throw InvalidArgument(owner + ": the name is empty or repeated (names must be unique)");
    }
    uint64_t count = 1;
    for (const int64_t extent : array.shape) {
      if (extent < 0 || __builtin_mul_overflow(count, static_cast<uint64_t>(extent), &count)) {
        throw InvalidArgument(owner + ": the shape has a negative extent or overflows");
      }
    }
    if (count != array.values.size()) {
      throw InvalidArgument(owner + ": the shape holds " + std::to_string(count) + " values but " +
                            std::to_string(array.values.size()) + " were given");
    }
    const auto found = std::find_if(array.values.begin(), array.values.end(),
                                    [](float x) { return !std::isfinite(x); });
    if (found != array.values.end()) {
      throw InvalidArgument(owner + ": value " + std::to_string(found - array.values.begin()) +
                            " is " + support::float_text(*found) + " (values must be finite)");
    }
  }
}

// The zero bytes that pad a blob of `size` bytes to the alignment.
inline std::span<const std::byte> padding_after(uint64_t size) {
  static constexpr std::byte kZeros[kServingAlignment] = {};
  return std::span(kZeros).first(padded_size(size) - size);
}

// Lays out the blobs of a data section one after another, each at a multiple of the alignment and
// checksummed with its padding (docs/serving.md, "Table and array blobs"), as the manifest
// describes them before the file is written.
class BlobLayout {
 public:
  // The next blob: `bytes`, given whole.
  TableBlob whole(std::span<const std::byte> bytes) {
    format::StreamingChecksum checksum;
    checksum.update(bytes);
    return next(checksum, bytes.size());
  }
  // The next blob: the rows of `table` as `encoder` encodes them (chunk by chunk; throws what it
  // throws).
  TableBlob encoded(TableEncoder& encoder, const TableConfig& table, const TableValues& values) {
    format::StreamingChecksum checksum;
    uint64_t size = 0;
    encoder.encode(table, values, [&](std::span<const std::byte> bytes) {
      checksum.update(bytes);
      size += bytes.size();
    });
    return next(checksum, size);
  }
  // The bytes of the blobs laid out so far, padding included.
  uint64_t data_size() const { return data_size_; }

 private:
  TableBlob next(format::StreamingChecksum& checksum, uint64_t size) {
    checksum.update(padding_after(size));
    const TableBlob blob{.offset = data_size_, .size = size, .checksum = checksum.digest()};
    data_size_ += padded_size(size);
    return blob;
  }

  uint64_t data_size_ = 0;
};

// export_serving_model, returning the checksum of the manifest written (the identity of the
// model, that a delta names as its base: docs/serving.md, "Publishing deltas") and the rows (and
// keys) written. `collective`: every rank of the Embedding calls it (the tables gathered on every
// rank), rank 0 writes the file, and its error is every rank's (support/collectives.h).
struct WrittenModel {
  uint64_t manifest_checksum = 0;
  int64_t rows = 0;
};
WrittenModel write_serving_model(const Embedding& embedding, const std::filesystem::path& path,
                                 const ExportOptions& options, bool collective);

}  // namespace recemb::internal

#endif  // RECEMB_SERVING_TABLE_ENCODER_H_
