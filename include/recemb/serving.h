// Serving models: an Embedding's tables, frozen into one read-only file in float32, float16 or
// int8, and looked up in memory (TF's TPUEmbeddingForServing, without the training state).
//
//   recemb::export_serving_model(layer, "model.recemb", {.dtype = recemb::ServingDtype::kInt8});
//   const recemb::ServingModel model = recemb::ServingModel::open("model.recemb");
//   model.lookup(inputs, activations);  // as Embedding::lookup; from any number of threads
//
// The file holds the tables (no optimizer slots; a dynamic table's keys and their rows, indexed
// when the model is opened) and the table and feature configs, and may hold
// the caller's named float32 arrays and string metadata beside them (the dense part of a ranking
// model and its settings, so that one file serves the whole model):
//
//   recemb::export_serving_model(layer, "model.recemb",
//                                {.extra_arrays = {{.name = "top/weights", .shape = {64, 1},
//                                                   .values = weights}},
//                                 .metadata = {{"top/activation", "sigmoid"}}});
//   model.extra_array("top/weights").values;  model.metadata().at("top/activation");
//
// Its format (header, JSON manifest, 64-byte-aligned blobs, XXH3-64 checksums covering every
// byte) is specified in docs/serving.md, with the error bounds of float16 and int8.
#ifndef RECEMB_SERVING_H_
#define RECEMB_SERVING_H_

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/batch.h"
#include "recemb/config.h"
#include "recemb/embedding.h"
#include "recemb/export.h"

namespace recemb {

namespace internal {
struct ServingModelAccess;
}  // namespace internal

// How a serving model stores table values.
//   kFloat32: as trained; lookups equal Embedding::lookup bitwise.
//   kFloat16: IEEE binary16, rounded to nearest even: each value within max(2^-11 |x|, 2^-25).
//   kInt8:    FBGEMM's 8-bit row-wise format, a uint8 code per value plus a float scale and bias
//             per row: each value within scale / 2 + 2^-20 max(|min|, |max|) of its row, where
//             scale = (max - min) / 255. Activations err by the combination of these per-value
//             bounds (docs/serving.md).
enum class ServingDtype { kFloat32, kFloat16, kInt8 };

// "float32", "float16", "int8".
RECEMB_EXPORT std::string_view serving_dtype_name(ServingDtype dtype);
// The inverse of serving_dtype_name; anything else throws InvalidArgument listing the valid
// names.
RECEMB_EXPORT ServingDtype parse_serving_dtype(std::string_view name);

// A named float32 array stored in a serving model beside the tables (as SaveOptions::extra_arrays
// beside a checkpoint's), with its shape.
struct ServingArray {
  std::string name = {};            // non-empty, unique among the model's extra arrays
  std::vector<int64_t> shape = {};  // row-major extents, each >= 0; {} holds one value
  // product(shape) values. Given to export_serving_model: borrowed for the call only. Read from
  // a ServingModel: in the model's memory, valid as long as any copy of the model.
  std::span<const float> values = {};
};

struct ExportOptions {
  ServingDtype dtype = ServingDtype::kFloat32;  // how table values are stored
  // Stored in float32 whatever the dtype (read back bitwise), in this order, and checksummed as
  // the tables are.
  std::vector<ServingArray> extra_arrays = {};
  // Small caller strings (the settings a model was trained with, how to read its inputs, ...).
  std::map<std::string, std::string> metadata = {};
};

// Writes `embedding`'s tables ("parameters" only, no slots) in options.dtype, with its table
// configs (without optimizers: a serving model is not trained) and feature configs, to the file
// `path`. The write is atomic: the model goes to a temporary file next to `path`, is fsynced, then
// renamed over `path` (whose directory is fsynced), so `path` never holds a partial model.
// Throws, before creating any file, InvalidArgument for an options.dtype that is not a
// ServingDtype or a table value that the dtype cannot hold (any non-finite value; |x| >= 65520
// for kFloat16; a row whose max - min overflows float for kInt8), naming the table, row, column
// and value; for an extra array with an empty or repeated name, a negative extent, a shape whose
// product is not values.size(), or a non-finite value (naming the array and the index); for
// names, keys or values that are not UTF-8. A failing file-system call throws std::system_error
// with its errno, naming the call and the file (an existing directory is needed). On any throw
// `path` is as it was (absent, or the previous file) and the temporary file is removed, except when
// only the fsync of the directory after the rename failed: `path` then holds the new, complete
// model. Reads the tables while it runs: no call that changes `embedding` may run concurrently.
RECEMB_EXPORT void export_serving_model(const Embedding& embedding,
                                        const std::filesystem::path& path,
                                        const ExportOptions& options = {});

struct OpenOptions {
  // What ServingModel::open checks, as InspectOptions::verify for checkpoints. Always the header,
  // the manifest (checksummed, parsed, configs validated) and that every blob lies inside the
  // file. true: also the checksum of every blob (tables and extra arrays), one more pass over the
  // bytes read, at the speed of memory. false: skips that pass; damaged blob bytes then go
  // undetected and give wrong activations or array values (never an access outside the model).
  // Either way open reads the whole file (its 64-byte header first: a file whose header is not a
  // serving model's, or whose size is not the header's, is refused before the rest is read).
  bool verify = true;
  // Looked at between the chunks (64 MiB) of the read: once stop is requested, open throws
  // std::system_error ECANCELED (a server stopping while it opens a large file).
  std::stop_token stop = {};
};

// A serving model opened read-only: open reads the whole file into memory the model owns (as many
// bytes as the file, plus a hash index of at most 16 bytes a key for each dynamic table, built
// there) and its tables are looked up there. Immutable after open but for apply_delta: every
// other method is const and may run concurrently from any number of threads. Copies share that
// memory (a shared_ptr), which lives as long as the last copy; moving or copying a model never
// invalidates another copy. Once open, the model no longer reads the file: it may be replaced,
// rewritten in place, truncated or deleted without any effect on the model (docs/serving.md). A
// moved-from ServingModel may only be assigned to or destroyed.
class RECEMB_EXPORT ServingModel {
 public:
  // Reads and checks `path` (see OpenOptions::verify), through the library's file system
  // (as checkpoints are read). Throws, naming the file: DataLoss when it is
  // not a serving model, of an unsupported format version, truncated, or damaged (a checksum
  // mismatch, naming the header, the manifest, the table or the extra array), or when its manifest
  // or configs are invalid (naming the field, table or feature) or a dynamic table's keys are not
  // strictly increasing (checked whatever OpenOptions::verify); InvalidArgument when it is not a
  // regular file (a directory, a FIFO: found without blocking); std::system_error with the errno
  // for a failing system call (open, read; ENOENT: a missing file), ECANCELED when options.stop
  // was requested; std::bad_alloc when the file does not fit in memory.
  static ServingModel open(const std::filesystem::path& path, const OpenOptions& options = {});

  ServingModel(const ServingModel&);
  ServingModel& operator=(const ServingModel&);
  ServingModel(ServingModel&&) noexcept;
  ServingModel& operator=(ServingModel&&) noexcept;
  ~ServingModel();

  const std::filesystem::path& path() const;
  ServingDtype dtype() const;
  // The exported configs, in the Embedding's order; tables have no optimizer.
  const std::vector<TableConfig>& tables() const;
  const std::vector<FeatureConfig>& features() const;
  // ExportOptions::extra_arrays as exported (names, shapes, values bitwise), in their order, and
  // ExportOptions::metadata. None in a file of format version 1.
  const std::vector<ServingArray>& extra_arrays() const;
  const std::map<std::string, std::string>& metadata() const;
  // The extra array named `name`; InvalidArgument listing the model's array names otherwise.
  const ServingArray& extra_array(std::string_view name) const;

  // Whether table `table` is dynamic (its config has a DynamicVocabulary; docs/serving.md,
  // "Dynamic tables"): looked up by any int64 key, a key the table does not hold giving a zero row
  // (its weight still counting in mean and sqrtn), as Embedding::lookup without a LookupBatch.
  // InvalidArgument listing the tables when there is no table `table`.
  bool is_dynamic(std::string_view table) const;
  // The keys dynamic table `table` holds (exported as Embedding::read_dynamic_table gave them).
  // InvalidArgument for a static table or no table `table`.
  int64_t num_keys(std::string_view table) const;

  // As Embedding::activation_shape: output shape + [dim]; InvalidArgument if `feature` is out of
  // range or the input does not fit the feature's config.
  std::vector<int64_t> activation_shape(size_t feature, const FeatureInput& input) const;

  // Embedding::lookup's contract (inputs and activations one per feature in feature order,
  // activations[f] of exactly product(activation_shape(f, inputs[f])) floats, row-major; combiners,
  // weights, sequence features, output_shape, simulated quantization), and its validation: a bad
  // input throws the same InvalidArgument naming the feature, the example and the value, before
  // any activation is written. A dynamic table's features take any int64 key where ids go (no
  // range check), a key the table does not hold reading a zero row, as Embedding::lookup without
  // a LookupBatch. Each value is looked up as stored (decoded from float16 or int8) and pooled in
  // float32 in the Embedding's order, so a kFloat32 model gives the Embedding's activations
  // bitwise. Runs on the calling thread; concurrent calls are independent.
  void lookup(std::span<const FeatureInput> inputs,
              std::span<const std::span<float>> activations) const;

  // Online publishing (recemb/publish.h; docs/serving.md, "Publishing deltas").
  //
  // A deep copy, with memory of its own (a replica for a server that applies deltas): the same
  // tables, extra arrays, metadata and delta_sequence(), dynamic tables' indexes rebuilt. Copies
  // and clones of a model are independent afterwards.
  ServingModel clone() const;
  // Applies the delta file `delta` (written by publish) in place: the rows and dynamic keys it
  // holds replace the model's, the keys it removes are dropped (a key the model does not hold is
  // ignored), its extra arrays' values and metadata replace the model's. Throws
  // FailedPrecondition unless this handle is the only one of its model (no copy, so that no
  // concurrent lookup can see the change: a server applies deltas to a replica no request
  // holds), or when the delta is for another base or is not the next sequence (naming both);
  // DataLoss, naming the file and the item, for a file that is not a delta, is damaged
  // (checksums), truncated, or whose tables, dims or dtype are not the model's; InvalidArgument
  // when its extra arrays' names or shapes are not the model's; std::system_error for a failing
  // read. Everything is verified before anything changes: on a throw the model is as it was.
  // Static tables' rows are overwritten in place (O(rows in the delta)); a dynamic table with
  // upserted or removed keys is rebuilt (its keys merged, its index rebuilt: O(table), in new
  // memory). Not concurrent with any other call on this model.
  void apply_delta(const std::filesystem::path& delta);
  // Deltas applied: 0 for a model opened from a base.
  int64_t delta_sequence() const;

 private:
  friend struct internal::ServingModelAccess;
  struct State;
  explicit ServingModel(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace recemb

#endif  // RECEMB_SERVING_H_
