// The models `recemb serve` serves, read from a model directory laid out as TF Serving's
// (docs/serving.md, "recemb serve"): MODEL_DIR/NAME/VERSION/model.recemb, VERSION a positive
// integer; the newest version of each NAME that opens (checksums verified) is served.
//
//   const ModelRegistry registry("models", std::cerr);
//   std::shared_ptr<const ServedModel> model = registry.find("ctr");  // held for a request
//
// A request holds its model's shared_ptr for its duration: replacing a served model is an
// exchange of the pointer under the registry's lock, and the old model lives until its last
// request ends.
#ifndef RECEMB_SERVE_MODEL_REGISTRY_H_
#define RECEMB_SERVE_MODEL_REGISTRY_H_

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/serving.h"

#include "train/predictor.h"

namespace recemb::serve {

// A model's Predictor (sharing the model's tables), used by one request at a time: a Predictor's
// buffers serve one thread, so predictions of one model are serialised (docs/serving.md,
// "recemb serve").
class SharedPredictor {
 public:
  explicit SharedPredictor(train::Predictor predictor) : predictor_(std::move(predictor)) {}

  // Predictor::predict, under the lock.
  void predict(std::span<const std::string_view> lines, std::span<train::Prediction> results) {
    const std::lock_guard lock(mutex_);
    predictor_.predict(lines, results);
  }

 private:
  std::mutex mutex_;
  train::Predictor predictor_;
};

// One served version of a model.
struct ServedModel {
  std::string name = {};
  int64_t version = 0;
  std::vector<int64_t> versions = {};  // every version directory found, increasing
  std::filesystem::path file = {};     // its model.recemb (symlinks resolved)
  ServingModel model;
  // For a model with a dense part (exported from recemb train): its predictor; null otherwise.
  std::unique_ptr<SharedPredictor> predictor = {};
  std::string no_predict_reason = {};  // why there is no predictor
};

// Whether `name` may name a model: [A-Za-z0-9._-]+, not "." or "..".
bool is_valid_model_name(std::string_view name);

// The version a directory named `name` holds: a positive decimal integer (no sign, no leading
// zero, at most int64); nullopt otherwise.
std::optional<int64_t> parse_version(std::string_view name);

class ModelRegistry {
 public:
  // Scans `model_dir`: each valid NAME (is_valid_model_name) whose directory, symlinks resolved,
  // lies inside model_dir; in it the version directories (parse_version), newest first, until one
  // whose model.recemb (resolved inside model_dir) opens with its checksums verified (and, when it
  // has a dense part, whose dense part reads). Logs to `log` each model served and each entry
  // skipped and why. Throws InvalidArgument when model_dir is not a directory or no model could
  // be served, saying what layout is expected.
  ModelRegistry(const std::filesystem::path& model_dir, std::ostream& log);

  // The served model `name`; null when there is none.
  std::shared_ptr<const ServedModel> find(std::string_view name) const;
  // The names served, sorted.
  std::vector<std::string> names() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const ServedModel>, std::less<>> models_;
};

}  // namespace recemb::serve

#endif  // RECEMB_SERVE_MODEL_REGISTRY_H_
