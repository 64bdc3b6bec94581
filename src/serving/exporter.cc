// export_serving_model: two passes over the tables (the extra arrays are written as given, after
// them). The first encodes every table chunk by chunk
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

// The table's values: in place (zero-copy) when this process holds it whole, else assembled from
// its parts into `assembled`.
std::span<const float> parameters_of(const Embedding& embedding, const std::string& table,
                                     std::vector<float>& assembled) {
  if (embedding.has_whole_table(table)) return embedding.variable_data(table, "parameters");
  const std::vector<int64_t> shape = embedding.variable_shape(table, "parameters");
  assembled.resize(static_cast<size_t>(shape[0] * shape[1]));
  embedding.read_variable(table, "parameters", assembled);
  return assembled;
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

  // Calls sink(bytes) with the blob of `table` (its rows, without padding) in order. Throws
  // InvalidArgument naming the table, row, column and value that the dtype cannot hold.
  template <typename Sink>
  void encode(const TableConfig& table, std::span<const float> values, Sink&& sink) {
    const int64_t dim = table.dim;
    const int64_t chunk_rows = std::max<int64_t>(1, kChunkBytes / (dim * 4));
    for (int64_t first = 0; first < table.vocabulary_size; first += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, table.vocabulary_size - first);
      const float* chunk = values.data() + first * dim;
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
      if (bad) fail(table, first * dim + *bad, chunk[*bad]);
      sink(bytes);
    }
  }

 private:
  [[noreturn]] void fail(const TableConfig& table, int64_t index, float value) const {
    std::string rule = "values must be finite";
    if (dtype_ == ServingDtype::kFloat16) rule += " and of magnitude < 65520";
    if (dtype_ == ServingDtype::kInt8) rule += " and each row's max - min a finite float";
    throw InvalidArgument(
        context_ + ": table '" + table.name + "' row " + std::to_string(index / table.dim) +
        " column " + std::to_string(index % table.dim) + ": value " + format_value(value) +
        " cannot be stored as " + std::string(serving_dtype_name(dtype_)) + " (" + rule + ")");
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
  std::vector<std::span<const float>> values;
  std::vector<std::vector<float>> assembled(manifest.tables.size());
  const std::string context = "serving model '" + path.string() + "'";
  TableEncoder encoder(options.dtype, context);
  uint64_t data_size = 0;
  for (TableConfig& table : manifest.tables) {
    table.optimizer.reset();
    values.push_back(parameters_of(embedding, table.name, assembled[values.size()]));
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
    const std::span<const std::byte> bytes = std::as_bytes(array.values);
    format::StreamingChecksum checksum;
    checksum.update(bytes);
    checksum.update(padding_after(bytes.size()));
    manifest.extra_arrays.push_back({.name = array.name, .shape = array.shape});
    manifest.extra_blobs.push_back(
        {.offset = data_size, .size = bytes.size(), .checksum = checksum.digest()});
    data_size += padded_size(bytes.size());
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
