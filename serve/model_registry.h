// The models `recemb serve` serves, read from a model directory laid out as TF Serving's
// (docs/serving.md, "recemb serve"): MODEL_DIR/NAME/VERSION/model.recemb, VERSION a positive
// integer; the newest version of each NAME that opens (checksums verified) is served, and
// refresh() swaps in versions that appear later (hot swap).
//
//   ModelRegistry registry("models", std::cerr);
//   std::shared_ptr<const ServedModel> model = registry.find("ctr");  // held for a request
//   registry.refresh();  // from one thread, every few seconds
//
// A request holds its model's shared_ptr for its duration: replacing a served model is an
// exchange of the pointer under the registry's lock, and the old model lives until its last
// request ends. Models are opened outside the lock, so lookups never wait for a load.
#ifndef RECEMB_SERVE_MODEL_REGISTRY_H_
#define RECEMB_SERVE_MODEL_REGISTRY_H_

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <set>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/serving.h"

#include "dlrm/predictor.h"

namespace recemb::serve {

// A model's Predictor for concurrent requests: a Predictor's buffers serve one thread, so each
// request borrows a copy of its own (the copies share the model's tables; one is made the first
// time more requests predict at once than there are copies, so there are at most as many as
// request threads).
class PredictorPool {
 public:
  explicit PredictorPool(dlrm::Predictor prototype) : prototype_(std::move(prototype)) {}

  // Predictor::predict on a copy no other request is using.
  void predict(std::span<const std::string_view> lines, std::span<dlrm::Prediction> results,
               dlrm::CriteoLabel labels = dlrm::CriteoLabel::kFromFieldCount);

 private:
  std::unique_ptr<dlrm::Predictor> borrow();
  void give_back(std::unique_ptr<dlrm::Predictor> predictor);

  std::mutex mutex_;
  const dlrm::Predictor prototype_;  // never predicts: only copied
  std::vector<std::unique_ptr<dlrm::Predictor>> idle_;
};

// One served version of a model.
struct ServedModel {
  std::string name = {};
  int64_t version = 0;
  std::filesystem::path file = {};  // its model.recemb (symlinks resolved)
  ServingModel model;
  uint64_t feature_fingerprint = 0;  // of `model` (request_codec.h), computed once when served
  // For a model with a dense part (exported from recemb train): its predictors; null otherwise.
  std::unique_ptr<PredictorPool> predictor = {};
  std::string no_predict_reason = {};  // why there is no predictor
};

// Whether `name` may name a model: [A-Za-z0-9._-]+, not "." or "..".
bool is_valid_model_name(std::string_view name);

class ModelRegistry {
 public:
  // Scans `model_dir`: each valid NAME (is_valid_model_name) whose directory, symlinks resolved,
  // lies inside model_dir; in it the version directories (model_version_of), newest first, until
  // one whose model.recemb (resolved inside model_dir) opens with its checksums verified (and, when
  // it has a dense part, whose dense part reads), and applies the deltas beside it as refresh does.
  // Logs to `log` each model served and each entry skipped and why. Throws std::system_error
  // when model_dir cannot be listed; InvalidArgument when model_dir is not a directory, or, unless
  // `may_start_empty` (a server that scans again later: refresh), when no model could be served,
  // saying what layout is expected; with `may_start_empty` that is logged as a warning instead.
  ModelRegistry(const std::filesystem::path& model_dir, std::ostream& log,
                bool may_start_empty = false);

  // Scans model_dir again and swaps in, for each model, the newest version that opens when it is
  // not the one served: a newer version, or an older one when the served version's directory was
  // removed (a rollback); a new NAME starts being served. A model's replicas (below) belong to the
  // version served: a version swapped in starts from its base, and the deltas beside it are
  // applied from the first in the same scan.
  // A file (a version's model.recemb, a delta) that cannot be used is handled by why
  // (docs/serving.md, "Hot swap"): refused for its content (DataLoss, InvalidArgument,
  // FailedPrecondition: not a model, damaged, of another base) and logged once, then tried again
  // only when it changes (size or modification time: a copy still being written is retried when
  // it completes); not read for a failing system call (std::system_error: EMFILE, EIO, ENOENT, ...)
  // or memory (std::bad_alloc), logged once and tried again at later scans, the 2nd failure in a
  // row after 2 scans, then 4, 8, then every 16 (at once when the file changes). Entries skipped
  // (not a model name, not a version, not a directory, outside model_dir) are logged once when
  // first seen. A model whose directories are all removed keeps being served (logged once); a scan
  // that cannot list model_dir (or a model's directory) changes nothing (for that model), logged
  // once until a scan succeeds. Then, for each model whose version directory holds deltas
  // (recemb/publish.h) past the ones applied, applies them in sequence to a replica no request
  // holds and swaps it in (docs/serving.md, "Deltas in the server"); the model stays at the deltas
  // before one that cannot be applied. Logs every swap. Returns the number of models swapped in or
  // added. Once `stop` is requested, returns at the next file or model (a model file being read
  // stops within a chunk: OpenOptions::stop) without remembering the file it stopped. Calls are
  // serialised; lookups go on meanwhile.
  int refresh(const std::stop_token& stop = {});

  // The served model `name`; null when there is none.
  std::shared_ptr<const ServedModel> find(std::string_view name) const;
  // The names served, sorted.
  std::vector<std::string> names() const;
  // The version directories of `name` found by the last scan, increasing (empty for an unknown
  // name).
  std::vector<int64_t> versions(std::string_view name) const;

 private:
  // A version directory of a model; `file` its model.recemb (symlinks not resolved).
  struct VersionEntry {
    int64_t version = 0;
    std::filesystem::path file;
  };
  struct Scan {
    // The models found, each with its versions, increasing.
    std::map<std::string, std::vector<VersionEntry>> models;
    // The models whose directory could not be listed (a failing system call; logged).
    std::set<std::string> unreadable;
  };
  // Lists model_dir (throwing std::system_error when it cannot), logging each entry skipped the
  // first time a scan finds it.
  Scan scan();
  // Logs `message` unless the previous scan logged it too; forgets messages not logged again by
  // the scan that ends (end_of_scan), so an entry removed and back is logged again.
  void log_once_per_appearance(const std::string& message);
  void end_of_scan();
  // The newest version of `entries` that opens, trying those above `served` (all of them when
  // `served` is not among the entries) down to it; null when none opens or `served` is the
  // newest.
  std::shared_ptr<ServedModel> newest_servable(const std::string& name,
                                               const std::vector<VersionEntry>& entries,
                                               int64_t served, const std::stop_token& stop);
  // Serves `model` in place of the model of its name, whose replicas are let go.
  void serve(std::shared_ptr<ServedModel> model, const std::vector<int64_t>& versions);
  // Runs `use` on `file` unless it failed before and is not to be tried again yet (refresh's
  // rules); records and logs a failure ("refusing <what>: <error>" or "cannot read <what> ...").
  // Whether `use` ran to its end.
  bool use_file(const std::filesystem::path& file, const std::string& what,
                const std::function<void()>& use, const std::stop_token& stop);
  // Applies the deltas past the ones `name`'s served model holds and swaps the result in;
  // whether it did.
  bool apply_deltas(const std::string& name, const std::stop_token& stop);

  // The replicas of the version served of a model that receives deltas: the served model's,
  // another one no request holds (`spare`, brought up to date and swapped in at the next delta),
  // and the one served before the last swap until its last request ends (it then becomes the
  // spare). Reset (erased) when another version is served.
  struct Replicas {
    std::optional<ServingModel> served;  // a handle of the served model's replica
    std::optional<ServingModel> spare;   // the only handle of its replica
    std::shared_ptr<const ServedModel> retired;
    std::optional<ServingModel> retired_model;  // retired's replica
  };
  // A file that could not be used.
  struct Failure {
    std::pair<uintmax_t, int64_t> identity;  // the file's size and modification time then
    bool content = false;  // refused for its content: until it changes; else retried
    int attempts = 0;      // failures in a row (retried ones)
    int64_t retry_at = 0;  // the scan (scans_) from which it is tried again
  };

  const std::filesystem::path root_;  // model_dir, canonical
  std::ostream& log_;
  // One refresh at a time; guards scans_, failures_, logged_, logged_now_, gone_, replicas_.
  std::mutex refresh_mutex_;
  int64_t scans_ = 0;                                  // scans done
  std::map<std::filesystem::path, Failure> failures_;  // per file
  std::set<std::string> logged_, logged_now_;          // log_once_per_appearance's
  std::set<std::string> gone_;                         // models served whose directories are gone
  std::map<std::string, Replicas> replicas_;           // per model
  mutable std::mutex mutex_;                           // guards models_ and versions_
  std::map<std::string, std::shared_ptr<const ServedModel>, std::less<>> models_;
  std::map<std::string, std::vector<int64_t>, std::less<>> versions_;
};

}  // namespace recemb::serve

#endif  // RECEMB_SERVE_MODEL_REGISTRY_H_
