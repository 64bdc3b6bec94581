#include "serving/format.h"

#include <bit>
#include <cstring>
#include <optional>

#include "recemb/embedding.h"
#include "recemb/error.h"

#include "config/validate.h"
#include "format/checksum.h"
#include "format/config_json.h"
#include "format/json.h"
#include "format/json_reader.h"
#include "kernels/quantized_rows.h"

namespace recemb {

// The blobs are read in place by the lookup kernels, so the file's byte order must be the host's.
static_assert(std::endian::native == std::endian::little,
              "serving models are little-endian and read in place");

namespace {

constexpr char kMagic[8] = {'R', 'E', 'C', 'E', 'M', 'B', 'S', 'V'};
constexpr ServingDtype kDtypes[] = {ServingDtype::kFloat32, ServingDtype::kFloat16,
                                    ServingDtype::kInt8};

}  // namespace

std::string_view serving_dtype_name(ServingDtype dtype) {
  switch (dtype) {
    case ServingDtype::kFloat32:
      return "float32";
    case ServingDtype::kFloat16:
      return "float16";
    case ServingDtype::kInt8:
      return "int8";
  }
  throw InvalidArgument("ServingDtype value " + std::to_string(static_cast<int>(dtype)) +
                        " is not one of kFloat32, kFloat16, kInt8");
}

ServingDtype parse_serving_dtype(std::string_view name) {
  for (const ServingDtype dtype : kDtypes) {
    if (serving_dtype_name(dtype) == name) return dtype;
  }
  throw InvalidArgument("serving dtype '" + std::string(name) +
                        "' is not one of 'float32', 'float16', 'int8'");
}

}  // namespace recemb

namespace recemb::internal {
namespace {

using format::Json;
using format::JsonReader;

// The file is damaged, truncated or not a serving model.
[[noreturn]] void fail(const std::string& context, const std::string& problem) {
  throw DataLoss(context + ": " + problem);
}

template <typename T>
T load(std::span<const std::byte> bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

template <typename T>
void store(std::span<std::byte> bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

}  // namespace

std::optional<uint64_t> serving_blob_size(ServingDtype dtype, int64_t vocabulary_size,
                                          int64_t dim) {
  const auto rows = static_cast<uint64_t>(vocabulary_size);
  const auto width = static_cast<uint64_t>(dim);
  uint64_t row_bytes = 0;
  switch (dtype) {
    case ServingDtype::kFloat32:
      if (__builtin_mul_overflow(width, 4, &row_bytes)) return std::nullopt;
      break;
    case ServingDtype::kFloat16:
      if (__builtin_mul_overflow(width, 2, &row_bytes)) return std::nullopt;
      break;
    case ServingDtype::kInt8:
      if (__builtin_add_overflow(width, 2 * sizeof(float), &row_bytes)) return std::nullopt;
      break;
  }
  uint64_t size = 0;
  if (__builtin_mul_overflow(rows, row_bytes, &size)) return std::nullopt;
  return size;
}

std::array<std::byte, kServingHeaderSize> encode_header(const ServingHeader& header) {
  std::array<std::byte, kServingHeaderSize> bytes{};
  std::memcpy(bytes.data(), kMagic, sizeof kMagic);
  store<uint32_t>(bytes, 8, kServingFormatVersion);
  store<uint64_t>(bytes, 16, header.manifest_size);
  store<uint64_t>(bytes, 24, header.manifest_checksum);
  store<uint64_t>(bytes, 32, header.file_size);
  store<uint64_t>(bytes, 56, format::checksum(std::span(bytes).first(56)));
  return bytes;
}

ServingHeader decode_header(std::span<const std::byte> file, const std::string& context) {
  if (file.size() < kServingHeaderSize) {
    fail(context, "the file has " + std::to_string(file.size()) +
                      " bytes, fewer than a serving model's 64-byte header (truncated?)");
  }
  if (std::memcmp(file.data(), kMagic, sizeof kMagic) != 0) {
    fail(context, "not a recemb serving model (it does not start with \"RECEMBSV\")");
  }
  const uint32_t version = load<uint32_t>(file, 8);
  if (format::checksum(file.first(56)) != load<uint64_t>(file, 56)) {
    if (version != kServingFormatVersion) {
      fail(context, "format version " + std::to_string(version) +
                        " is not supported (this recemb reads version 1), or the header is "
                        "damaged");
    }
    fail(context, "the header checksum does not match: the header is damaged");
  }
  if (version != kServingFormatVersion) {
    fail(context, "format version " + std::to_string(version) +
                      " is not supported (this recemb reads version 1)");
  }
  if (load<uint32_t>(file, 12) != 0 || load<uint64_t>(file, 40) != 0 ||
      load<uint64_t>(file, 48) != 0) {
    fail(context, "the header's reserved bytes are not zero");
  }
  const ServingHeader header{.manifest_size = load<uint64_t>(file, 16),
                             .manifest_checksum = load<uint64_t>(file, 24),
                             .file_size = load<uint64_t>(file, 32)};
  if (header.file_size != file.size()) {
    fail(context, "the file has " + std::to_string(file.size()) + " bytes but its header says " +
                      std::to_string(header.file_size) +
                      (file.size() < header.file_size ? " (truncated)" : " (bytes were appended)"));
  }
  if (header.manifest_size % kServingAlignment != 0 ||
      header.manifest_size > header.file_size - kServingHeaderSize) {
    fail(context, "the header's manifest size " + std::to_string(header.manifest_size) +
                      " is not a multiple of 64 inside the file");
  }
  return header;
}

std::string encode_manifest(const ServingManifest& manifest) {
  Json tables = Json::array();
  for (size_t t = 0; t < manifest.tables.size(); ++t) {
    const TableBlob& blob = manifest.blobs[t];
    tables.push_back({{"config", format::table_to_json(manifest.tables[t])},
                      {"offset", blob.offset},
                      {"size", blob.size},
                      {"checksum", format::checksum_to_hex(blob.checksum)}});
  }
  Json features = Json::array();
  for (const FeatureConfig& feature : manifest.features) {
    features.push_back(format::feature_to_json(feature));
  }
  const Json json = {{"dtype", serving_dtype_name(manifest.dtype)},
                     {"tables", std::move(tables)},
                     {"features", std::move(features)}};
  std::string text = json.dump(1) + "\n";
  text.resize(padded_size(text.size()), ' ');
  return text;
}

ServingManifest decode_manifest(std::string_view text, uint64_t data_size,
                                const std::string& context) {
  const format::JsonDocument document{.name = context + ": manifest",
                                      .source = format::JsonSource::kFile};
  const Json json = format::parse_json(text, document);
  const JsonReader root(json, document);
  root.expect_only({"dtype", "tables", "features"});
  ServingManifest manifest;
  const JsonReader dtype = root.member("dtype");
  try {
    // A long name is cut, so that the message quotes a few dozen characters; it stays invalid.
    manifest.dtype = parse_serving_dtype(format::truncated(dtype.string()));
  } catch (const InvalidArgument& error) {
    dtype.fail(error.what());
  }
  const JsonReader tables = root.member("tables");
  for (size_t t = 0; t < tables.size(); ++t) {
    const JsonReader entry = tables.element(t);
    entry.expect_only({"config", "offset", "size", "checksum"});
    manifest.tables.push_back(format::table_from_json(entry.member("config")));
    manifest.blobs.push_back({.offset = entry.member("offset").unsigned_integer(),
                              .size = entry.member("size").unsigned_integer(),
                              .checksum = format::checksum_from_json(entry.member("checksum"))});
  }
  const JsonReader features = root.member("features");
  for (size_t f = 0; f < features.size(); ++f) {
    manifest.features.push_back(format::feature_from_json(features.element(f)));
  }
  try {
    validate_configs(manifest.tables, manifest.features, EmbeddingOptions{});
  } catch (const InvalidArgument& error) {
    format::fail(document, error.what());
  }

  uint64_t end = 0;  // of the blobs so far, padding included
  for (size_t t = 0; t < manifest.tables.size(); ++t) {
    const TableConfig& table = manifest.tables[t];
    const TableBlob& blob = manifest.blobs[t];
    const std::string owner = "table '" + table.name + "'";
    const std::optional<uint64_t> expected =
        serving_blob_size(manifest.dtype, table.vocabulary_size, table.dim);
    if (!expected || blob.size != *expected) {
      fail(context, owner + ": blob size " + std::to_string(blob.size) +
                        " is not vocabulary_size " + std::to_string(table.vocabulary_size) + " x " +
                        std::string(serving_dtype_name(manifest.dtype)) + " rows of dim " +
                        std::to_string(table.dim));
    }
    if (blob.offset != end) {
      fail(context, owner + ": blob offset " + std::to_string(blob.offset) + " should be " +
                        std::to_string(end) + " (blobs are contiguous, in table order)");
    }
    if (blob.size > data_size - end || padded_size(blob.size) > data_size - end) {
      fail(context, owner + ": its blob of " + std::to_string(blob.size) + " bytes at offset " +
                        std::to_string(blob.offset) + " ends after the data section's " +
                        std::to_string(data_size) + " bytes (truncated?)");
    }
    end += padded_size(blob.size);
  }
  if (end != data_size) {
    fail(context, "the data section has " + std::to_string(data_size) +
                      " bytes but the tables use " + std::to_string(end));
  }
  return manifest;
}

}  // namespace recemb::internal
