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
  // Retention (docs/serving.md, "Retention"): a publish writes a new base (the next version)
  // instead of a delta once its base has base_every_deltas deltas, or once they hold
  // base_every_bytes bytes or more; 0: no such bound. A server restarting then applies at most
  // that many deltas and bytes beside the base.
  int64_t base_every_deltas = 360;              // >= 0; one hour of deltas every 10 s
  int64_t base_every_bytes = int64_t{1} << 30;  // >= 0; 1 GiB
  // After a new base, the versions of `dir` older than its keep_versions newest are removed
  // (each whole: its base and deltas). 2 keeps the one before the new base for a server still
  // serving it or catching up on its deltas; 0 keeps every version.
  int keep_versions = 2;  // >= 0
};

struct PublishResult {
  std::filesystem::path file;  // the file written
  int64_t version = 0;         // the version directory it is in
  int64_t sequence = 0;        // 0: a base; n: the n-th delta of that base
  int64_t rows = 0;            // rows and keys written (all of them in a base)
  int64_t bytes = 0;           // the file's size
  // A base: why this publish wrote one and not a delta ("the first publish into DIR", "the base
  // has 360 deltas (base_every_deltas)", "the base DIR/3/model.recemb was replaced since it was
  // written", ...). Empty for a delta.
  std::string base_reason = {};
  // A base: the versions removed after it (PublishOptions::keep_versions), increasing.
  std::vector<int64_t> removed_versions = {};
};

// Publishes `embedding`'s tables into the model directory `dir` (MODEL_DIR/NAME, as `recemb
// serve` reads it: version directories named by integers). The first publish of this Embedding
// into `dir`, and the next one after anything that forces it, writes a base:
// dir/<V>/model.recemb, the bytes export_serving_model writes, with V = 1 + the largest version
// already in dir (1 if none), sequence 0. Each later call writes dir/<V>/delta-<sequence, 8
// digits>.recemb (sequence 1, 2, ...): the rows of static tables, and the keys (with their rows)
// of dynamic tables, changed or admitted since the previous publish, the keys removed since
// (evicted, expired), and options.extra_arrays and options.metadata whole. A base is written
// instead (PublishResult::base_reason says why) when `dir` or options.dtype differ from the
// previous publish's, when the base file is gone or is not the file this Embedding wrote (its
// size and header, which holds the checksum deltas name, differ: replaced by another writer),
// when the rows were written since by anything but training steps (write_variable,
// write_dynamic_table, load_checkpoint into this Embedding, the mutable variable_data), or when
// the base's deltas reach options.base_every_deltas or base_every_bytes. Change tracking starts
// with the first publish (a byte a row, and the removed keys; nothing before): an Embedding that
// is never published pays nothing.
//
// Each file is written atomically (a temporary file, fsynced, renamed), so a reader never sees a
// partial one; a base is written into a directory of another name (".publishing-<V>"), renamed
// to <V> once complete, so that a version directory never lacks its base. After a base, the
// versions beyond options.keep_versions newest are removed, each renamed out of the versions'
// names (".removing-<V>") before it is deleted: a reader sees a version whole or not at all.
// Bad options throw (InvalidArgument, as export_serving_model's, and for a negative retention
// bound) before anything changes, and so does a `dir` holding the largest version (int64's
// maximum: FailedPrecondition, as no version can follow it). A publish that fails later,
// writing its file (std::system_error for a failing file-system call, naming it;
// InvalidArgument for a table value the dtype cannot hold), makes the next publish a base; one
// failing to remove an old version throws (std::system_error) with the base written. `dir` is
// created if absent (its parent must exist). No call that changes `embedding` may run
// concurrently; one writer at a time publishes into `dir`.
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
