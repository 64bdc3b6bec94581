#include "serving/format.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>
#include <set>

#include "recemb/embedding.h"
#include "recemb/error.h"

#include "config/validate.h"
#include "format/checksum.h"
#include "format/config_json.h"
#include "kernels/quantized_rows.h"
#include "support/json.h"

namespace recemb {

// The blobs are read in place by the lookup kernels, so the file's byte order must be the host's.
static_assert(std::endian::native == std::endian::little,
              "serving models are little-endian and read in place");

namespace {

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

using support::Json;
using support::JsonReader;

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

TableBlob blob_of(const JsonReader& entry) {
  entry.expect_only({"offset", "size", "checksum"});
  return TableBlob{.offset = entry.member("offset").unsigned_integer(),
                   .size = entry.member("size").unsigned_integer(),
                   .checksum = format::checksum_from_json(entry.member("checksum"))};
}

Json blob_json(const TableBlob& blob) {
  return {{"offset", blob.offset},
          {"size", blob.size},
          {"checksum", format::checksum_to_hex(blob.checksum)}};
}

Json extra_arrays_json(const std::vector<ServingArray>& arrays,
                       const std::vector<TableBlob>& blobs) {
  Json json = Json::array();
  for (size_t a = 0; a < arrays.size(); ++a) {
    const TableBlob& blob = blobs[a];
    json.push_back({{"name", arrays[a].name},
                    {"shape", arrays[a].shape},
                    {"offset", blob.offset},
                    {"size", blob.size},
                    {"checksum", format::checksum_to_hex(blob.checksum)}});
  }
  return json;
}

// Reads "extra_arrays" (names non-empty and unique) into `arrays` and `blobs`, with the byte size
// of each array's values from its shape (nullopt: beyond 64 bits), and "metadata".
std::vector<std::optional<uint64_t>> read_extra_arrays(
    const JsonReader& root, std::vector<ServingArray>& out, std::vector<TableBlob>& blobs,
    std::map<std::string, std::string>& metadata) {
  std::vector<std::optional<uint64_t>> array_sizes;
  const JsonReader arrays = root.member("extra_arrays");
  std::set<std::string> names;
  for (size_t a = 0; a < arrays.size(); ++a) {
    const JsonReader entry = arrays.element(a);
    entry.expect_only({"name", "shape", "offset", "size", "checksum"});
    ServingArray array{.name = entry.member("name").string()};
    if (array.name.empty() || !names.insert(array.name).second) {
      entry.member("name").fail("extra array name '" + support::excerpt(array.name) +
                                "' is empty or repeated");
    }
    const JsonReader shape = entry.member("shape");
    std::optional<uint64_t> bytes = sizeof(float);
    for (size_t i = 0; i < shape.size(); ++i) {
      array.shape.push_back(shape.element(i).integer(0));
      if (bytes &&
          __builtin_mul_overflow(*bytes, static_cast<uint64_t>(array.shape.back()), &*bytes)) {
        bytes.reset();
      }
    }
    out.push_back(std::move(array));
    blobs.push_back(TableBlob{.offset = entry.member("offset").unsigned_integer(),
                              .size = entry.member("size").unsigned_integer(),
                              .checksum = format::checksum_from_json(entry.member("checksum"))});
    array_sizes.push_back(bytes);
  }
  root.member("metadata").for_each_member([&](const std::string& key, const JsonReader& value) {
    metadata[key] = value.string();
  });
  return array_sizes;
}

// Checks that blobs come one after the other from offset 0 of a data section of `data_size`
// bytes, each of its expected size, and that they end with it.
class BlobLayout {
 public:
  BlobLayout(uint64_t data_size, const std::string& context)
      : data_size_(data_size), context_(context) {}

  // Checks that the blob of `owner` of `expected` bytes (`what` says how many it must be) comes
  // next, and moves past it.
  void place(const TableBlob& blob, std::optional<uint64_t> expected, const std::string& owner,
             const std::string& what) {
    if (!expected || blob.size != *expected) {
      fail(context_, owner + ": blob size " + std::to_string(blob.size) + " is not " + what);
    }
    if (blob.offset != end_) {
      fail(context_, owner + ": blob offset " + std::to_string(blob.offset) + " should be " +
                         std::to_string(end_) +
                         " (blobs are contiguous: the tables', then the extra arrays', in order)");
    }
    if (blob.size > data_size_ - end_ || padded_size(blob.size) > data_size_ - end_) {
      fail(context_, owner + ": its blob of " + std::to_string(blob.size) + " bytes at offset " +
                         std::to_string(blob.offset) + " ends after the data section's " +
                         std::to_string(data_size_) + " bytes (truncated?)");
    }
    end_ += padded_size(blob.size);
  }

  void place_extra_arrays(const std::vector<ServingArray>& arrays,
                          const std::vector<TableBlob>& blobs,
                          const std::vector<std::optional<uint64_t>>& sizes) {
    for (size_t a = 0; a < arrays.size(); ++a) {
      place(blobs[a], sizes[a], "extra array '" + support::excerpt(arrays[a].name) + "'",
            "4 bytes (float32) per value of its shape");
    }
  }

  void finish() const {
    if (end_ != data_size_) {
      fail(context_, "the data section has " + std::to_string(data_size_) +
                         " bytes but the tables and extra arrays use " + std::to_string(end_));
    }
  }

 private:
  uint64_t data_size_;
  const std::string& context_;
  uint64_t end_ = 0;  // of the blobs so far, padding included
};

ServingDtype read_dtype(const JsonReader& root) {
  const JsonReader dtype = root.member("dtype");
  try {
    // A long name is cut, so that the message quotes a few dozen characters; it stays invalid.
    return parse_serving_dtype(support::excerpt(dtype.string()));
  } catch (const InvalidArgument& error) {
    dtype.fail(error.what());
  }
}

}  // namespace

std::optional<uint64_t> serving_blob_size(ServingDtype dtype, int64_t num_rows, int64_t dim) {
  const auto rows = static_cast<uint64_t>(num_rows);
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

std::array<std::byte, kServingHeaderSize> encode_header(const ServingHeader& header,
                                                        const ServingFileKind& kind) {
  std::array<std::byte, kServingHeaderSize> bytes{};
  std::memcpy(bytes.data(), kind.magic.data(), kind.magic.size());
  store<uint32_t>(bytes, 8, header.format_version);
  store<uint64_t>(bytes, 16, header.manifest_size);
  store<uint64_t>(bytes, 24, header.manifest_checksum);
  store<uint64_t>(bytes, 32, header.file_size);
  store<uint64_t>(bytes, 56, format::checksum(std::span(bytes).first(56)));
  return bytes;
}

ServingHeader decode_header(std::span<const std::byte> start, uint64_t file_size,
                            const std::string& context, const ServingFileKind& kind) {
  const std::string name(kind.name);
  if (file_size < kServingHeaderSize || start.size() < kServingHeaderSize) {
    fail(context, "the file has " + std::to_string(std::min<uint64_t>(file_size, start.size())) +
                      " bytes, fewer than a " + name + "'s 64-byte header (truncated?)");
  }
  const std::span<const std::byte> file = start.first(kServingHeaderSize);
  if (std::memcmp(file.data(), kind.magic.data(), kind.magic.size()) != 0) {
    fail(context, "not a recemb " + name + " (it does not start with \"" +
                      std::string(kind.magic.data(), kind.magic.size()) + "\")");
  }
  const uint32_t version = load<uint32_t>(file, 8);
  const bool known = version >= 1 && version <= kind.format_version;
  const std::string unsupported = "format version " + std::to_string(version) +
                                  " is not supported (this recemb reads versions 1 to " +
                                  std::to_string(kind.format_version) + ")";
  if (format::checksum(file.first(56)) != load<uint64_t>(file, 56)) {
    if (!known) fail(context, unsupported + ", or the header is damaged");
    fail(context, "the header checksum does not match: the header is damaged");
  }
  if (!known) fail(context, unsupported);
  if (load<uint32_t>(file, 12) != 0 || load<uint64_t>(file, 40) != 0 ||
      load<uint64_t>(file, 48) != 0) {
    fail(context, "the header's reserved bytes are not zero");
  }
  const ServingHeader header{.format_version = version,
                             .manifest_size = load<uint64_t>(file, 16),
                             .manifest_checksum = load<uint64_t>(file, 24),
                             .file_size = load<uint64_t>(file, 32)};
  if (header.file_size != file_size) {
    fail(context, "the file has " + std::to_string(file_size) + " bytes but its header says " +
                      std::to_string(header.file_size) +
                      (file_size < header.file_size ? " (truncated)" : " (bytes were appended)"));
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
    Json entry = {{"config", format::table_to_json(manifest.tables[t])},
                  {"offset", blob.offset},
                  {"size", blob.size},
                  {"checksum", format::checksum_to_hex(blob.checksum)}};
    if (const std::optional<TableBlob>& keys = manifest.key_blobs[t]) {
      entry["keys"] = blob_json(*keys);
    }
    tables.push_back(std::move(entry));
  }
  Json features = Json::array();
  for (const FeatureConfig& feature : manifest.features) {
    features.push_back(format::feature_to_json(feature));
  }
  const Json json = {
      {"dtype", serving_dtype_name(manifest.dtype)},
      {"tables", std::move(tables)},
      {"features", std::move(features)},
      {"extra_arrays", extra_arrays_json(manifest.extra_arrays, manifest.extra_blobs)},
      {"metadata", manifest.metadata}};
  std::string text = json.dump(1) + "\n";
  text.resize(padded_size(text.size()), ' ');
  return text;
}

ServingManifest decode_manifest(std::string_view text, uint32_t version, uint64_t data_size,
                                const std::string& context) {
  const support::JsonDocument document{.name = context + ": manifest",
                                       .source = support::JsonSource::kFile};
  const Json json = support::parse_json(text, document);
  const JsonReader root(json, document);
  if (version == 1) {
    root.expect_only({"dtype", "tables", "features"});
  } else {
    root.expect_only({"dtype", "tables", "features", "extra_arrays", "metadata"});
  }
  ServingManifest manifest;
  manifest.dtype = read_dtype(root);
  const JsonReader tables = root.member("tables");
  for (size_t t = 0; t < tables.size(); ++t) {
    const JsonReader entry = tables.element(t);
    entry.expect_only({"config", "offset", "size", "checksum", "keys"});
    manifest.tables.push_back(format::table_from_json(entry.member("config")));
    manifest.blobs.push_back(
        TableBlob{.offset = entry.member("offset").unsigned_integer(),
                  .size = entry.member("size").unsigned_integer(),
                  .checksum = format::checksum_from_json(entry.member("checksum"))});
    const std::optional<JsonReader> keys = entry.find("keys");
    const bool dynamic = manifest.tables.back().dynamic_vocabulary.has_value();
    if (dynamic && version < 3) {
      entry.member("config").fail("a dynamic table in a file of format version " +
                                  std::to_string(version) + " (dynamic tables need version 3)");
    }
    if (keys.has_value() != dynamic) {
      entry.fail(dynamic ? "a dynamic table needs its \"keys\" blob"
                         : "only a dynamic table has a \"keys\" blob");
    }
    if (keys) {
      manifest.key_blobs.emplace_back(blob_of(*keys));
    } else {
      manifest.key_blobs.emplace_back();
    }
  }
  const JsonReader features = root.member("features");
  for (size_t f = 0; f < features.size(); ++f) {
    manifest.features.push_back(format::feature_from_json(features.element(f)));
  }
  try {
    validate_configs(manifest.tables, manifest.features, EmbeddingOptions{});
  } catch (const InvalidArgument& error) {
    support::fail(document, error.what());
  }
  // The byte size of each extra array's values, from its shape (nullopt: beyond 64 bits).
  std::vector<std::optional<uint64_t>> array_sizes;
  if (version >= 2) {
    array_sizes =
        read_extra_arrays(root, manifest.extra_arrays, manifest.extra_blobs, manifest.metadata);
  }

  BlobLayout layout(data_size, context);
  const std::string rows_of =
      " x " + std::string(serving_dtype_name(manifest.dtype)) + " rows of dim ";
  for (size_t t = 0; t < manifest.tables.size(); ++t) {
    const TableConfig& table = manifest.tables[t];
    const std::string owner = "table '" + table.name + "'";
    if (const std::optional<TableBlob>& keys = manifest.key_blobs[t]) {
      layout.place(*keys,
                   keys->size % sizeof(int64_t) == 0 ? std::optional(keys->size) : std::nullopt,
                   owner + " keys", "a multiple of 8 (int64 keys)");
      const auto num_keys = static_cast<int64_t>(keys->size / sizeof(int64_t));
      layout.place(
          manifest.blobs[t], serving_blob_size(manifest.dtype, num_keys + 1, table.dim), owner,
          std::to_string(num_keys) + " keys + 1 zero row" + rows_of + std::to_string(table.dim));
    } else {
      layout.place(manifest.blobs[t],
                   serving_blob_size(manifest.dtype, table.vocabulary_size, table.dim), owner,
                   "vocabulary_size " + std::to_string(table.vocabulary_size) + rows_of +
                       std::to_string(table.dim));
    }
  }
  layout.place_extra_arrays(manifest.extra_arrays, manifest.extra_blobs, array_sizes);
  layout.finish();
  return manifest;
}

std::string encode_delta_manifest(const DeltaManifest& manifest) {
  Json tables = Json::array();
  for (const DeltaTable& table : manifest.tables) {
    Json entry = {{"name", table.name}, {"dim", table.dim}};
    entry[table.dynamic ? "keys" : "ids"] = blob_json(table.ids);
    entry["rows"] = blob_json(table.rows);
    if (table.removed) entry["removed"] = blob_json(*table.removed);
    tables.push_back(std::move(entry));
  }
  const Json json = {
      {"base", format::checksum_to_hex(manifest.base)},
      {"sequence", manifest.sequence},
      {"dtype", serving_dtype_name(manifest.dtype)},
      {"tables", std::move(tables)},
      {"extra_arrays", extra_arrays_json(manifest.extra_arrays, manifest.extra_blobs)},
      {"metadata", manifest.metadata}};
  std::string text = json.dump(1) + "\n";
  text.resize(padded_size(text.size()), ' ');
  return text;
}

DeltaManifest decode_delta_manifest(std::string_view text, uint64_t data_size,
                                    const std::string& context) {
  const support::JsonDocument document{.name = context + ": manifest",
                                       .source = support::JsonSource::kFile};
  const Json json = support::parse_json(text, document);
  const JsonReader root(json, document);
  root.expect_only({"base", "sequence", "dtype", "tables", "extra_arrays", "metadata"});
  DeltaManifest manifest{.base = format::checksum_from_json(root.member("base")),
                         .sequence = root.member("sequence").integer(1),
                         .dtype = read_dtype(root)};
  BlobLayout layout(data_size, context);
  const JsonReader tables = root.member("tables");
  for (size_t t = 0; t < tables.size(); ++t) {
    const JsonReader entry = tables.element(t);
    DeltaTable table{.name = entry.member("name").string(),
                     .dim = entry.member("dim").integer(1),
                     .dynamic = entry.find("keys").has_value()};
    const std::string owner = "table '" + support::excerpt(table.name) + "'";
    if (table.dynamic) {
      entry.expect_only({"name", "dim", "keys", "rows", "removed"});
      table.ids = blob_of(entry.member("keys"));
      table.removed = blob_of(entry.member("removed"));
    } else {
      entry.expect_only({"name", "dim", "ids", "rows"});
      table.ids = blob_of(entry.member("ids"));
    }
    table.rows = blob_of(entry.member("rows"));
    const std::string ids = table.dynamic ? " keys" : " ids";
    const auto int64s = [](const TableBlob& blob) {
      return blob.size % sizeof(int64_t) == 0 ? std::optional(blob.size) : std::nullopt;
    };
    layout.place(table.ids, int64s(table.ids), owner + ids, "a multiple of 8 (int64" + ids + ")");
    const auto count = static_cast<int64_t>(table.ids.size / sizeof(int64_t));
    layout.place(table.rows, serving_blob_size(manifest.dtype, count, table.dim), owner + " rows",
                 std::to_string(count) + ids + " x " +
                     std::string(serving_dtype_name(manifest.dtype)) + " rows of dim " +
                     std::to_string(table.dim));
    if (table.removed) {
      layout.place(*table.removed, int64s(*table.removed), owner + " removed keys",
                   "a multiple of 8 (int64 keys)");
    }
    manifest.tables.push_back(std::move(table));
  }
  const std::vector<std::optional<uint64_t>> array_sizes =
      read_extra_arrays(root, manifest.extra_arrays, manifest.extra_blobs, manifest.metadata);
  layout.place_extra_arrays(manifest.extra_arrays, manifest.extra_blobs, array_sizes);
  layout.finish();
  return manifest;
}

}  // namespace recemb::internal
