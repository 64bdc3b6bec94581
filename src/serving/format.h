// The serving model file: its layout, header and manifest (docs/serving.md is the specification).
//
//   offset                       bytes          content
//   0                            64             header
//   64                           manifest_size  manifest: JSON (UTF-8), padded with spaces to a
//                                               multiple of 64 bytes
//   64 + manifest_size           data_size      table blobs in table order (a dynamic table's keys
//                                               blob, then its rows blob), then the extra arrays'
//                                               blobs in their order, each starting at a multiple
//                                               of 64 and padded with zeros to one
//
//   header:  0  char[8]   magic "RECEMBSV"
//            8  uint32    format_version (kServingFormatVersion; version 1 is read too)
//           12  uint32    reserved, 0
//           16  uint64    manifest_size
//           24  uint64    manifest_checksum   XXH3-64 of the manifest_size manifest bytes
//           32  uint64    file_size           64 + manifest_size + data_size
//           40  uint64[2] reserved, 0
//           56  uint64    header_checksum     XXH3-64 of header bytes [0, 56)
//   manifest: {"dtype": "float32" | "float16" | "int8",
//              "tables": [{"config": <TableConfig, format/config_json.h>,
//                          "offset": <bytes from the start of the data section>,
//                          "size": <vocabulary_size * row_bytes, without padding; a dynamic
//                                   table's (num_keys + 1) * row_bytes>,
//                          "checksum": <16 hex digits: XXH3-64 of the padded blob>,
//                          "keys": {"offset", "size": <8 * num_keys>, "checksum"}
//                                  (dynamic tables only)}, ...],
//              "features": [<FeatureConfig>, ...],
//              "extra_arrays": [{"name": <non-empty, unique>, "shape": [<extent >= 0>, ...],
//                                "offset", "size": <4 * product(shape)>, "checksum"}, ...],
//              "metadata": {<key>: <string value>, ...}}
//            Version 1 has neither "extra_arrays" nor "metadata" (and no extra array blobs);
//            versions 1 and 2 have no dynamic tables (no "keys").
//   keys:    a dynamic table's num_keys int64 keys, strictly increasing.
//   blob:    vocabulary_size rows (a dynamic table: the rows of its keys in their order, then one
//            zero row, the row every absent key reads) of row_bytes(dtype, dim) bytes: dim float32
//            | dim binary16 | dim uint8 codes + float32 scale + float32 bias
//            (kernels/quantized_rows.h); an extra array's: its values, float32 whatever the dtype.
// Integers and floats are little-endian; the blobs are read in place (in memory), which needs a
// little-endian host. The blobs are contiguous (the first at offset 0, each next one where the
// padding of the previous ends, the last ending at file_size), so the three checksums together
// cover every byte of the file.
#ifndef RECEMB_SERVING_FORMAT_H_
#define RECEMB_SERVING_FORMAT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/config.h"
#include "recemb/serving.h"

namespace recemb::internal {

// The version written; readers accept every version from 1 to it (docs/serving.md, "Versioning").
inline constexpr uint32_t kServingFormatVersion = 3;
inline constexpr uint64_t kServingHeaderSize = 64;
inline constexpr uint64_t kServingAlignment = 64;

// `size` rounded up to a multiple of kServingAlignment.
inline constexpr uint64_t padded_size(uint64_t size) {
  return (size + kServingAlignment - 1) / kServingAlignment * kServingAlignment;
}

// The bytes of a table's blob without padding: `rows` rows of dim float32, dim binary16
// or dim + 8 bytes (int8); nullopt if that does not fit in 64 bits.
std::optional<uint64_t> serving_blob_size(ServingDtype dtype, int64_t rows, int64_t dim);

// What a file of the serving format holds: a model (this file's layout) or a delta of a model's
// rows (docs/serving.md, "Publishing deltas": the same header, with its own magic so that one can
// never be opened as the other, a manifest of its own, and blobs laid out alike).
struct ServingFileKind {
  std::array<char, 8> magic;
  uint32_t format_version;  // the version written; readers accept 1 to it
  std::string_view name;    // how messages name the kind of file
};
inline constexpr ServingFileKind kModelFile{
    {'R', 'E', 'C', 'E', 'M', 'B', 'S', 'V'}, kServingFormatVersion, "serving model"};
inline constexpr ServingFileKind kDeltaFile{
    {'R', 'E', 'C', 'E', 'M', 'B', 'D', 'L'}, 1, "serving delta"};

struct ServingHeader {
  uint32_t format_version = kServingFormatVersion;
  uint64_t manifest_size = 0;
  uint64_t manifest_checksum = 0;
  uint64_t file_size = 0;
};

// header.format_version is written as given, after kind's magic.
std::array<std::byte, kServingHeaderSize> encode_header(const ServingHeader& header,
                                                        const ServingFileKind& kind = kModelFile);

// Reads the header of a file of `file_size` bytes from `start`, its first bytes (at least the
// 64 of a header when it has them; the rest is not read), so that a reader checks a file before
// reading the rest of it. Throws DataLoss starting with `context` (e.g. "serving model
// 'm.recemb'") when the file is shorter than a header, lacks the magic (kind's), fails the header
// checksum, has a format version outside [1, kind.format_version], is not file_size bytes long
// (truncated or extended) or its manifest_size is not a multiple of 64 inside the file.
ServingHeader decode_header(std::span<const std::byte> start, uint64_t file_size,
                            const std::string& context, const ServingFileKind& kind = kModelFile);

// Where a table's (or an extra array's) blob lies in the data section.
struct TableBlob {
  uint64_t offset = 0;    // from the start of the data section; a multiple of 64
  uint64_t size = 0;      // without the padding
  uint64_t checksum = 0;  // XXH3-64 of the padded blob, [offset, offset + padded_size(size))
};

struct ServingManifest {
  ServingDtype dtype = ServingDtype::kFloat32;
  std::vector<TableConfig> tables;
  std::vector<TableBlob> blobs;  // one per table: its rows
  // One per table: a dynamic table's keys (int64, strictly increasing), nullopt for a static one.
  std::vector<std::optional<TableBlob>> key_blobs;
  std::vector<FeatureConfig> features;
  // The extra arrays' names and shapes (their `values` are left empty here) and blobs.
  std::vector<ServingArray> extra_arrays;
  std::vector<TableBlob> extra_blobs;  // one per extra array
  std::map<std::string, std::string> metadata;
};

// The manifest's JSON text (of kServingFormatVersion) padded with spaces to a multiple of 64 bytes.
std::string encode_manifest(const ServingManifest& manifest);

// Parses and validates a manifest of format `version` for a data section of `data_size` bytes:
// JSON structure (unknown keys are errors, nesting bounded by support::kMaxJsonDepth), the configs
// (as an Embedding validates them), the extra arrays' names (non-empty, unique) and shapes, and
// the layout (each table blob of exactly vocabulary_size * row_bytes bytes, a dynamic table's keys
// blob of 8 bytes a key and rows blob of num_keys + 1 rows, each array blob of 4 bytes a value, the
// blobs contiguous from 0 to data_size; dynamic tables from version 3 on). The keys' order is
// checked when they are read (serving/key_rows.h). Throws DataLoss starting with `context`
// and naming the field's path ("<context>: manifest: tables[1].size: ..."), the table, the
// feature or the array.
ServingManifest decode_manifest(std::string_view text, uint32_t version, uint64_t data_size,
                                const std::string& context);

// A delta's manifest (docs/serving.md, "Publishing deltas"): the base it applies to and its
// sequence, then per table (every table of the base, in its order) the rows changed since the
// previous file: a static table's row ids, a dynamic table's upserted keys, and their rows in the
// base's dtype, and a dynamic table's removed keys (ids and keys int64, strictly increasing:
// checked when applied); then the extra arrays and metadata, whole. The blobs lie in that order:
// per table its ids (or keys), rows and removed keys; then the extra arrays'.
struct DeltaTable {
  std::string name;
  int64_t dim = 0;
  bool dynamic = false;
  TableBlob ids;                     // static: row ids; dynamic: the upserted keys
  TableBlob rows;                    // their rows
  std::optional<TableBlob> removed;  // dynamic tables only
};

struct DeltaManifest {
  uint64_t base = 0;  // the base model's manifest checksum
  int64_t sequence = 0;
  ServingDtype dtype = ServingDtype::kFloat32;
  std::vector<DeltaTable> tables;
  std::vector<ServingArray> extra_arrays;  // names and shapes, values empty
  std::vector<TableBlob> extra_blobs;
  std::map<std::string, std::string> metadata;
};

// The JSON text padded with spaces to a multiple of 64 bytes.
std::string encode_delta_manifest(const DeltaManifest& manifest);
// Parses and checks a delta's manifest for a data section of `data_size` bytes: its structure,
// each blob's size against its row count and dim, and the blobs' contiguity (as decode_manifest).
// Throws DataLoss starting with `context` and naming the field, table or array.
DeltaManifest decode_delta_manifest(std::string_view text, uint64_t data_size,
                                    const std::string& context);

}  // namespace recemb::internal

#endif  // RECEMB_SERVING_FORMAT_H_
