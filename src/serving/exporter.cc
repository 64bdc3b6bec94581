// export_serving_model: two passes over the tables (a dynamic table's keys, and the extra arrays
// after the tables, are written as given). The first encodes every table chunk by chunk
// (checking that each value can be stored) and checksums it; only then, with the manifest
// complete, is the file written front to back, encoding again. Encoding twice costs less than
// holding an encoded copy of every table, and no file is created for a model that cannot be
// exported.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "recemb/error.h"
#include "recemb/serving.h"

#include "format/checksum.h"
#include "format/file_io.h"
#include "format/json.h"
#include "format/json_reader.h"
#include "kernels/quantized_rows.h"
#include "serving/format.h"

namespace recemb {
namespace {

using internal::padded_size;

// Rows are encoded in chunks of about this many float32 bytes: large enough for full-speed
// writes, small enough that the export needs little memory besides the tables.
constexpr int64_t kChunkBytes = int64_t{4} << 20;

// What a table's blobs hold: its rows (float32, [num_rows, dim]) and, for a dynamic table, its
// keys in increasing order (the rows being theirs, then one zero row: docs/serving.md).
struct TableValues {
  std::span<const float> rows;
  int64_t num_rows = 0;
  std::vector<int64_t> keys;  // dynamic tables only
  std::vector<float> owned;   // the rows when not read in place
};

// The table's values: in place (zero-copy) when this process holds a static table whole, else
// assembled from its parts (read_variable, read_dynamic_table).
TableValues values_of(const Embedding& embedding, const TableConfig& table) {
  TableValues values;
  if (table.dynamic_vocabulary) {
    DynamicTableContents contents = embedding.read_dynamic_table(table.name);
    values.keys = std::move(contents.keys);
    values.owned = std::move(contents.parameters);
    values.owned.resize(values.owned.size() + static_cast<size_t>(table.dim), 0.0f);
    values.num_rows = static_cast<int64_t>(values.keys.size()) + 1;
  } else if (embedding.has_whole_table(table.name)) {
    values.rows = embedding.variable_data(table.name, "parameters");
    values.num_rows = table.vocabulary_size;
    return values;
  } else {
    values.owned.resize(static_cast<size_t>(table.vocabulary_size * table.dim));
    embedding.read_variable(table.name, "parameters", values.owned);
    values.num_rows = table.vocabulary_size;
  }
  values.rows = values.owned;
  return values;
}

std::string format_value(float value) {
  std::ostringstream text;
  text << std::setprecision(9) << value;
  return text.str();
}

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
      const float* chunk = values.rows.data() + first * dim;
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
          bad = internal::encode_float16_rows(chunk, rows, dim, halves_.data());
          bytes = std::as_bytes(std::span(halves_));
          break;
        case ServingDtype::kInt8:
          codes_.resize(static_cast<size_t>(rows * internal::int8_row_bytes(dim)));
          bad = internal::encode_int8_rows(chunk, rows, dim, codes_.data());
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
                                                       : "row " + std::to_string(row);
    throw InvalidArgument(context_ + ": table '" + table.name + "' " + where + " column " +
                          std::to_string(index % table.dim) + ": value " + format_value(value) +
                          " cannot be stored as " + std::string(serving_dtype_name(dtype_)) + " (" +
                          rule + ")");
  }

  ServingDtype dtype_;
  std::string context_;
  std::vector<uint16_t> halves_;
  std::vector<uint8_t> codes_;
};

// Throws InvalidArgument, naming the array, unless `arrays` have non-empty, unique names, extents
// >= 0 whose product is the number of values, and finite values.
void check_extra_arrays(std::span<const ServingArray> arrays) {
  std::set<std::string_view> names;
  for (size_t a = 0; a < arrays.size(); ++a) {
    const ServingArray& array = arrays[a];
    const std::string owner = "ExportOptions.extra_arrays[" + std::to_string(a) + "] '" +
                              format::truncated(array.name) + "'";
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
                            " is " + format_value(*found) + " (values must be finite)");
    }
  }
}

// The zero bytes that pad a blob of `size` bytes to the alignment.
std::span<const std::byte> padding_after(uint64_t size) {
  static constexpr std::byte kZeros[internal::kServingAlignment] = {};
  return std::span(kZeros).first(padded_size(size) - size);
}

}  // namespace

void export_serving_model(const Embedding& embedding, const std::filesystem::path& path,
                          const ExportOptions& options) {
  try {
    serving_dtype_name(options.dtype);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(std::string("ExportOptions.dtype: ") + error.what());
  }
  check_extra_arrays(options.extra_arrays);
  internal::ServingManifest manifest{.dtype = options.dtype,
                                     .tables = embedding.tables(),
                                     .features = embedding.features(),
                                     .metadata = options.metadata};
  if (embedding.world_size() > 1) {
    throw FailedPrecondition("export_serving_model: the Embedding spans " +
                             std::to_string(embedding.world_size()) +
                             " ranks; export from a checkpoint (load_checkpoint) in one process");
  }
  std::vector<TableValues> values;
  const std::string context = "serving model '" + path.string() + "'";
  TableEncoder encoder(options.dtype, context);
  uint64_t data_size = 0;
  // Places a blob of `bytes` (given whole) next in the data section.
  const auto whole_blob = [&](std::span<const std::byte> bytes) {
    format::StreamingChecksum checksum;
    checksum.update(bytes);
    checksum.update(padding_after(bytes.size()));
    const internal::TableBlob blob{
        .offset = data_size, .size = bytes.size(), .checksum = checksum.digest()};
    data_size += padded_size(bytes.size());
    return blob;
  };
  for (TableConfig& table : manifest.tables) {
    table.optimizer.reset();
    values.push_back(values_of(embedding, table));
    manifest.key_blobs.emplace_back();
    if (table.dynamic_vocabulary) {
      manifest.key_blobs.back() = whole_blob(std::as_bytes(std::span(values.back().keys)));
    }
    format::StreamingChecksum checksum;
    uint64_t size = 0;
    encoder.encode(table, values.back(), [&](std::span<const std::byte> bytes) {
      checksum.update(bytes);
      size += bytes.size();
    });
    checksum.update(padding_after(size));
    manifest.blobs.push_back({.offset = data_size, .size = size, .checksum = checksum.digest()});
    data_size += padded_size(size);
  }
  for (const ServingArray& array : options.extra_arrays) {
    manifest.extra_arrays.push_back({.name = array.name, .shape = array.shape});
    manifest.extra_blobs.push_back(whole_blob(std::as_bytes(array.values)));
  }
  std::string text;
  try {
    text = internal::encode_manifest(manifest);
  } catch (const format::JsonError& error) {  // names that are not UTF-8
    throw InvalidArgument(context +
                          ": the configs, extra array names or metadata cannot be written as "
                          "JSON (UTF-8): " +
                          error.what());
  }
  const auto manifest_bytes = std::as_bytes(std::span(text));
  const internal::ServingHeader header{
      .manifest_size = manifest_bytes.size(),
      .manifest_checksum = format::checksum(manifest_bytes),
      .file_size = internal::kServingHeaderSize + manifest_bytes.size() + data_size};

  format::write_file_atomically(path, [&](format::OutputFile& file) {
    file.write(internal::encode_header(header));
    file.write(manifest_bytes);
    for (size_t t = 0; t < manifest.tables.size(); ++t) {
      if (manifest.key_blobs[t]) {
        const std::span<const int64_t> keys = values[t].keys;
        file.write(std::as_bytes(keys));
        file.write(padding_after(keys.size_bytes()));
      }
      encoder.encode(manifest.tables[t], values[t],
                     [&](std::span<const std::byte> bytes) { file.write(bytes); });
      file.write(padding_after(manifest.blobs[t].size));
    }
    for (const ServingArray& array : options.extra_arrays) {
      file.write(std::as_bytes(array.values));
      file.write(padding_after(array.values.size_bytes()));
    }
  });
}

}  // namespace recemb
