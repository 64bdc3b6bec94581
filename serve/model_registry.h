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
#include <string>
#include <string_view>
#include <vector>

#include "recemb/serving.h"

#include "train/predictor.h"

namespace recemb::serve {

// A model's Predictor for concurrent requests: a Predictor's buffers serve one thread, so each
// request borrows a copy of its own (the copies share the model's tables; one is made the first
// time more requests predict at once than there are copies, so there are at most as many as
// request threads).
class PredictorPool {
 public:
  explicit PredictorPool(train::Predictor prototype) : prototype_(std::move(prototype)) {}

  // Predictor::predict on a copy no other request is using.
  void predict(std::span<const std::string_view> lines, std::span<train::Prediction> results);

 private:
  std::unique_ptr<train::Predictor> borrow();
  void give_back(std::unique_ptr<train::Predictor> predictor);

  std::mutex mutex_;
  const train::Predictor prototype_;  // never predicts: only copied
  std::vector<std::unique_ptr<train::Predictor>> idle_;
};

// One served version of a model.
struct ServedModel {
  std::string name = {};
  int64_t version = 0;
  std::filesystem::path file = {};  // its model.recemb (symlinks resolved)
  ServingModel model;
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
  // it has a dense part, whose dense part reads). Logs to `log` each model served and each entry
  // skipped and why. Throws InvalidArgument when model_dir is not a directory, or, unless
  // `may_start_empty` (a server that scans again later: refresh), when no model could be served,
  // saying what layout is expected; with `may_start_empty` that is logged as a warning instead.
  ModelRegistry(const std::filesystem::path& model_dir, std::ostream& log,
                bool may_start_empty = false);

  // Scans model_dir again and swaps in, for each model, the newest version that opens when it is
  // not the one served: a newer version, or an older one when the served version's directory was
  // removed (a rollback); a new NAME starts being served. A version that cannot be served is
  // refused and logged once, and tried again only when its model.recemb changes (size or
  // modification time: a copy still being written is retried when it completes). A model whose
  // directories are all removed keeps being served (logged once). Then, for each model whose
  // version directory holds deltas (recemb/publish.h) past the ones applied, applies them in
  // sequence to a replica no request holds and swaps it in (docs/serving.md, "Deltas in the
  // server"); a delta that cannot be applied is refused and logged once, and the model stays at
  // the deltas before it. Logs every swap. Returns the number of models swapped in or added.
  // Calls are serialised; lookups go on meanwhile.
  int refresh();

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
  // The models found by a scan, each with its versions, increasing (`report` logs the entries
  // skipped).
  std::map<std::string, std::vector<VersionEntry>> scan(bool report) const;
  // The newest version of `entries` that opens, trying those above `served` (all of them when
  // `served` is not among the entries) down to it; null when none opens or `served` is the
  // newest.
  std::shared_ptr<ServedModel> newest_servable(const std::string& name,
                                               const std::vector<VersionEntry>& entries,
                                               int64_t served);
  void serve(std::shared_ptr<ServedModel> model, const std::vector<int64_t>& versions);
  // Runs `use` on `file` unless `file` was refused before and has not changed since; if `use`
  // throws, refuses `file`, logging "refusing <what>: <error>". Whether `use` ran to its end.
  bool use_unless_refused(const std::filesystem::path& file, const std::string& what,
                          const std::function<void()>& use);
  // Applies the deltas past the ones `name`'s served model holds and swaps the result in;
  // whether it did.
  bool apply_deltas(const std::string& name);

  // The replicas of a model that receives deltas: the served model's, another one no request
  // holds (`spare`, brought up to date and swapped in at the next delta), and the one served
  // before the last swap until its last request ends (it then becomes the spare).
  struct Replicas {
    std::optional<ServingModel> served;  // a handle of the served model's replica
    std::optional<ServingModel> spare;   // the only handle of its replica
    std::shared_ptr<const ServedModel> retired;
    std::optional<ServingModel> retired_model;  // retired's replica
  };

  const std::filesystem::path root_;  // model_dir, canonical
  std::ostream& log_;
  std::mutex refresh_mutex_;  // one refresh at a time; guards refused_, gone_ and replicas_
  // The files refused (a version's model.recemb, a delta): the size and modification time each had.
  std::map<std::filesystem::path, std::pair<uintmax_t, int64_t>> refused_;
  std::set<std::string> gone_;                // models served whose directories are gone
  std::map<std::string, Replicas> replicas_;  // per model
  mutable std::mutex mutex_;                  // guards models_ and versions_
  std::map<std::string, std::shared_ptr<const ServedModel>, std::less<>> models_;
  std::map<std::string, std::vector<int64_t>, std::less<>> versions_;
};

}  // namespace recemb::serve

#endif  // RECEMB_SERVE_MODEL_REGISTRY_H_
