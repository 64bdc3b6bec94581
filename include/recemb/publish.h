// Online publishing: an Embedding's tables written as a serving model once (a base), then as
// deltas holding only the rows changed since the previous file, which a server applies to the
// base it serves (ServingModel::apply_delta) within seconds of the training step.
//
//   recemb::publish(layer, "models/ctr");  // models/ctr/1/model.recemb: a base
//   ... train ...
//   recemb::publish(layer, "models/ctr");  // models/ctr/1/delta-00000001.recemb
//
//   recemb::ServingModel model = recemb::ServingModel::open("models/ctr/1/model.recemb");
//   model.apply_delta("models/ctr/1/delta-00000001.recemb");  // now equal to a fresh export
//
// The directory layout and the delta format are specified in docs/serving.md, "Publishing deltas".
#ifndef RECEMB_PUBLISH_H_
#define RECEMB_PUBLISH_H_

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/export.h"
#include "recemb/serving.h"

namespace recemb {

struct PublishOptions {
  // How table values are stored. Deltas are in their base's dtype: a publish with another dtype
  // than the previous one writes a new base.
  ServingDtype dtype = ServingDtype::kFloat32;
  // Written whole in every file (base and deltas), as ExportOptions::extra_arrays. A delta's
  // arrays must have the base's names and shapes (ServingModel::apply_delta refuses others):
  // change them with a new base (a publish into another directory).
  std::vector<ServingArray> extra_arrays = {};
  // Written whole in every file, replacing the model's when a delta is applied.
  std::map<std::string, std::string> metadata = {};
};

struct PublishResult {
  std::filesystem::path file;  // the file written
  int64_t version = 0;         // the version directory it is in
  int64_t sequence = 0;        // 0: a base; n: the n-th delta of that base
  int64_t rows = 0;            // rows and keys written (all of them in a base)
};

// Publishes `embedding`'s tables into the model directory `dir` (MODEL_DIR/NAME, as `recemb
// serve` reads it: version directories named by integers). The first publish of this Embedding
// into `dir`, and the next one after anything that forces it, writes a base:
// dir/<V>/model.recemb, the bytes export_serving_model writes, with V = 1 + the largest version
// already in dir (1 if none), sequence 0. Each later call writes dir/<V>/delta-<sequence, 8
// digits>.recemb (sequence 1, 2, ...): the rows of static tables, and the keys (with their rows)
// of dynamic tables, changed or admitted since the previous publish, the keys removed since
// (evicted, expired), and options.extra_arrays and options.metadata whole. A base is written
// instead when `dir` or options.dtype differ from the previous publish's, when the base file is
// gone, or when the rows were written since by anything but training steps (write_variable,
// write_dynamic_table, load_checkpoint into this Embedding, the mutable variable_data). Change
// tracking starts with the first publish (a byte a row, and the removed keys; nothing before):
// an Embedding that is never published pays nothing.
//
// Each file is written atomically (a temporary file, fsynced, renamed), so a reader never sees a
// partial one. Bad options throw (InvalidArgument, as export_serving_model's) before anything
// changes; a publish that fails later, writing its file (std::system_error for a failing
// file-system call, naming it; InvalidArgument for a table value the dtype cannot hold), makes
// the next publish a base. `dir` is created if absent (its parent must exist). No call that
// changes `embedding` may run concurrently.
//
// Several ranks: collective (every rank calls it with the same `dir` and options). Each rank's
// changes are gathered (the ids and keys: an all-gather; their rows: the whole table gathered, as
// read_variable and read_dynamic_table do, on every rank) and rank 0 writes the files; every rank
// returns the same result. An error of rank 0's writing a base is every rank's; a failure writing
// a delta throws on rank 0 alone, and every rank's next publish writes a base.
RECEMB_EXPORT PublishResult publish(Embedding& embedding, const std::filesystem::path& dir,
                                    const PublishOptions& options = {});

// publish in two halves, so that a trainer writes a delta on another thread while it trains on:
// begin_publish(embedding, dir, options)() is publish(embedding, dir, options). The first half,
// at a step boundary, validates as publish does, then writes a base there (it reads the tables),
// or, for a delta, copies the changed rows (and options' arrays and metadata) and clears the
// change tracking. It returns the second half, which returns the base's result, or encodes and
// writes the delta: it may run on any thread, concurrently with any call on `embedding`. Call it
// (to its end) before the next begin_publish or publish of `embedding`. Should it throw, the
// next publish writes a base.
RECEMB_EXPORT std::function<PublishResult()> begin_publish(Embedding& embedding,
                                                           const std::filesystem::path& dir,
                                                           const PublishOptions& options = {});

// The names of a model directory (docs/serving.md, "recemb serve"), as publish writes them and
// `recemb serve` reads them. A version directory's model (a base):
inline constexpr char kModelFileName[] = "model.recemb";
// The version a directory named `name` holds: a positive decimal integer (no sign, no leading
// zero, at most int64); nullopt for any other name.
RECEMB_EXPORT std::optional<int64_t> model_version_of(std::string_view name);
// The file of a version's delta `sequence` (>= 1): "delta-" and at least 8 digits, ".recemb".
RECEMB_EXPORT std::string delta_file_name(int64_t sequence);

}  // namespace recemb

#endif  // RECEMB_PUBLISH_H_
