// The checkpoint manifest: what a checkpoint holds and how to verify it (docs/formats.md,
// "Checkpoint format"). manifest.json is JSON; manifest.xxh3 holds its checksum:
//
//   {"format": "recemb-checkpoint", "format_version": 1, "step": 1000,
//    "placement": {"kind": "single"}, "byte_order": "little", "checksum": "xxh3-64",
//    "checksum_block_bytes": 67108864,
//    "embedding": {"optimizer": <optimizer JSON> | null, "seed": 0,
//                  "non_finite_gradients": "reject" | "skip_rows"},
//    "tables": [{"config": <table JSON>,
//                "variables": [<array>, ...],       "parameters", then the slots in TF's order
//                "dynamic": <dynamic>}],            only for a dynamic table (format version 2)
//                                                   (a 16-bit table's parameters: version 3)
//    "features": [<feature JSON>, ...],
//    "extra_arrays": [<array>, ...],
//    "metadata": {"key": "value", ...}}
//   <array> = {"name", "dtype": "float32" | "int64" | "bfloat16" | "float16", "shape": [...],
//              "file", "bytes",
//              "checksum": "<16 hex>", "block_checksums": ["<16 hex>", ...]}
//   <dynamic> = {"arrays": [<array> "keys", "last_seen", "count", "pending_keys", "pending_count"],
//                "inserted", "evicted", "not_admitted_lookups", "pending_sketch_in_use"}
// Config JSON as format/config_json.h writes it.
#ifndef RECEMB_CHECKPOINT_MANIFEST_H_
#define RECEMB_CHECKPOINT_MANIFEST_H_

#include <cstdint>
#include <filesystem>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/config.h"
#include "recemb/embedding.h"

#include "checkpoint/data_file.h"
#include "embedding/vocabulary_counters.h"
#include "support/json.h"

namespace recemb::internal {

// The newest format version this code reads and writes. A change that an older reader would
// misread bumps it. Version 2 added dynamic tables (TableEntry::dynamic, int64 arrays), version 3
// 16-bit tables (their parameters stored as bfloat16 or float16 values). A checkpoint is written
// with the lowest version that holds it (minimum_format_version), so that older readers read what
// they can.
inline constexpr int kCheckpointFormatVersion = 3;

enum class ArrayType { kFloat32, kInt64, kBFloat16, kFloat16 };

// The type a table's values of `dtype` are stored as, and back (float32 for kFloat32 and kInt64).
ArrayType array_type(DType dtype);
DType value_dtype(ArrayType dtype);

struct ArrayEntry {
  std::string name;  // a table variable ("parameters" or a slot), a key array or an extra array
  ArrayType dtype = ArrayType::kFloat32;
  std::vector<int64_t> shape;  // product(shape) * element bytes == data.bytes
  DataFile data;
};

// The arrays of a dynamic table's keys (docs/formats.md, "Dynamic tables"), in this order: its n
// keys, their last_seen steps and counts ([n] each), and the m exactly counted keys not yet
// admitted with their counts ([m] each); every one int64, keys in (key_bucket, key) order.
enum DynamicArray : size_t { kKeys, kLastSeen, kCounts, kPendingKeys, kPendingCounts };
inline constexpr std::string_view kDynamicArrayNames[] = {"keys", "last_seen", "count",
                                                          "pending_keys", "pending_count"};
inline constexpr size_t kNumDynamicArrays = std::size(kDynamicArrayNames);

struct DynamicEntry {
  std::vector<ArrayEntry> arrays;  // kNumDynamicArrays, in DynamicArray order
  VocabularyCounters counters;     // all parts together
  // Whether a part counted keys not yet admitted in its sketch, whose counts are not saved.
  bool pending_sketch_in_use = false;

  int64_t num_keys() const { return arrays[kKeys].shape[0]; }
  int64_t num_pending() const { return arrays[kPendingKeys].shape[0]; }
};

struct TableEntry {
  TableConfig config;       // without its optimizer, which is kept as JSON below
  support::Json optimizer;  // the table's own optimizer (optimizer_to_json), or null
  // "parameters" then the slots: [rows, width] (or [rows] for width 1), rows being the
  // vocabulary_size of a static table, the number of keys of a dynamic one.
  std::vector<ArrayEntry> variables;
  std::optional<DynamicEntry> dynamic;  // set for a dynamic table

  // The variable named `name`, which the table has.
  const ArrayEntry& variable(std::string_view name) const;
  // Its data files' records: the variables', then the dynamic arrays'.
  std::vector<const ArrayEntry*> arrays() const;
  std::vector<ArrayEntry*> arrays();
};

struct Manifest {
  int format_version = kCheckpointFormatVersion;
  int64_t step = 0;
  int64_t checksum_block_bytes = 0;
  // EmbeddingOptions, except num_threads. Optimizers stay JSON until an Embedding is built from
  // them (load_checkpoint), because a learning-rate callback has no JSON form to read back.
  support::Json optimizer;  // or null
  uint64_t seed = 0;
  NonFiniteGradients non_finite_gradients = NonFiniteGradients::kReject;
  std::vector<TableEntry> tables;
  std::vector<FeatureConfig> features;
  std::vector<ArrayEntry> extra_arrays;
  std::map<std::string, std::string> metadata;
};

// The name of the optimizer that trains `table` (its own, else the global one), or nullopt.
std::optional<std::string> effective_optimizer_name(const Manifest& manifest,
                                                    const TableEntry& table);

// The variables a table of `rows` rows (its vocabulary_size, or a dynamic table's number of keys)
// and this optimizer has, in order, with their types and shapes and no data: "parameters" [rows,
// dim] of the table's dtype, then each slot [rows, width], or [rows] when width is 1 (as
// Embedding::variable_shape), float32.
std::vector<ArrayEntry> expected_variables(const TableConfig& table, int64_t rows,
                                           const std::optional<std::string>& optimizer_name);

// The arrays of a dynamic table of `num_keys` keys and `num_pending` pending counts, with their
// shapes and file names (table `table_index`) and no checksums.
DynamicEntry expected_dynamic_entry(size_t table_index, int64_t num_keys, int64_t num_pending);

// The bytes of one element of `dtype`.
int64_t element_bytes(ArrayType dtype);

// The lowest format version that holds `manifest`'s tables: 1, 2 with a dynamic table, 3 with a
// 16-bit one.
int minimum_format_version(const Manifest& manifest);

support::Json manifest_to_json(const Manifest& manifest);

// Parses and checks the manifest's structure and consistency: format and version, field types,
// variables matching each table's shape and optimizer, file names that stay inside the
// checkpoint directory and are unique, sizes matching shapes, one checksum per block. Throws the
// document's exception, "<document>: <path>: <problem>". Configs are checked for form, not
// validated.
Manifest manifest_from_json(const support::JsonReader& json);

// Writes manifest.json and manifest.xxh3 into `directory`, each fsynced.
void write_manifest(const std::filesystem::path& directory, const Manifest& manifest);

// Reads manifest.json of the checkpoint `directory`, checks it against manifest.xxh3 and parses
// it. A damaged, foreign or newer manifest (or one nested deeper than support::kMaxJsonDepth) is a
// DataLoss naming the checkpoint, the file and the field's path.
struct ManifestFile {
  std::string text;
  Manifest manifest;
};
ManifestFile read_manifest(const std::filesystem::path& directory);

}  // namespace recemb::internal

#endif  // RECEMB_CHECKPOINT_MANIFEST_H_
