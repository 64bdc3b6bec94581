#include "serve/model_registry.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>
#include <variant>

#include "recemb/error.h"
#include "recemb/publish.h"

#include "train/model_file.h"

namespace recemb::serve {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kLayout =
    "expected MODEL_DIR/NAME/VERSION/model.recemb (NAME of [A-Za-z0-9._-], VERSION a positive "
    "integer; recemb export CHECKPOINT MODEL_DIR/NAME/1 writes one)";

// Whether `path` (canonical) is `root` (canonical) or lies below it.
bool is_inside(const fs::path& path, const fs::path& root) {
  return std::mismatch(root.begin(), root.end(), path.begin(), path.end()).first == root.end();
}

// `path` with its symlinks resolved, inside `root` (and not root itself); else the reason why not.
std::variant<fs::path, std::string> resolve_inside(const fs::path& path, const fs::path& root) {
  std::error_code error;
  fs::path resolved = fs::canonical(path, error);
  if (error) return path.string() + ": " + error.message();
  if (!is_inside(resolved, root) || resolved == root) {
    return path.string() + " resolves to " + resolved.string() + ", outside the model directory " +
           root.string();
  }
  return resolved;
}

// The directories of `dir` (symlinks followed), sorted by name; none when it cannot be read.
std::vector<fs::directory_entry> directories_in(const fs::path& dir) {
  std::vector<fs::directory_entry> entries;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    std::error_code type_error;
    if (it->is_directory(type_error)) entries.push_back(*it);
  }
  std::sort(entries.begin(), entries.end());
  return entries;
}

// What tells one content of a file from the next: its size and modification time (both -1
// when it cannot be read).
std::pair<uintmax_t, int64_t> file_identity(const fs::path& file) {
  std::error_code error;
  const uintmax_t size = fs::file_size(file, error);
  if (error) return {static_cast<uintmax_t>(-1), -1};
  const auto time = fs::last_write_time(file, error);
  if (error) return {static_cast<uintmax_t>(-1), -1};
  return {size, static_cast<int64_t>(time.time_since_epoch().count())};
}

// The versions of `entries`, in their order.
template <typename Entries>
std::vector<int64_t> versions_of(const Entries& entries) {
  std::vector<int64_t> versions;
  for (const auto& entry : entries) versions.push_back(entry.version);
  return versions;
}

// `model` served as `name` version `version` from `file`, with its predictors when it has a
// dense part.
std::shared_ptr<ServedModel> served_model(const std::string& name, int64_t version,
                                          const fs::path& file, ServingModel model) {
  auto served = std::make_shared<ServedModel>(
      ServedModel{.name = name, .version = version, .file = file, .model = std::move(model)});
  try {  // the predictors share the model's tables
    served->predictor = std::make_unique<PredictorPool>(train::Predictor::of(served->model));
  } catch (const InvalidArgument& error) {  // no dense part: lookups only
    served->no_predict_reason = error.what();
  }
  return served;
}

// The model in `file` (a version's model.recemb). Throws what opening it throws, or
// InvalidArgument when it lies outside `root`.
std::shared_ptr<ServedModel> open_version(const std::string& name, int64_t version,
                                          const fs::path& file, const fs::path& root) {
  auto resolved = resolve_inside(file, root);
  if (auto* reason = std::get_if<std::string>(&resolved)) throw InvalidArgument(*reason);
  const fs::path& path = std::get<fs::path>(resolved);
  return served_model(name, version, path, ServingModel::open(path));
}

// The served model `retired` no longer is, once no request holds it (waiting for the requests
// in flight, at most `patience`); whether it was released.
bool release_when_unused(std::shared_ptr<const ServedModel>& retired,
                         std::chrono::milliseconds patience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (retired.use_count() > 1) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  retired.reset();
  return true;
}

}  // namespace

bool is_valid_model_name(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

void PredictorPool::predict(std::span<const std::string_view> lines,
                            std::span<train::Prediction> results) {
  std::unique_ptr<train::Predictor> predictor = borrow();
  try {
    predictor->predict(lines, results);
  } catch (...) {
    give_back(std::move(predictor));
    throw;
  }
  give_back(std::move(predictor));
}

std::unique_ptr<train::Predictor> PredictorPool::borrow() {
  {
    const std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      std::unique_ptr<train::Predictor> predictor = std::move(idle_.back());
      idle_.pop_back();
      return predictor;
    }
  }
  return std::make_unique<train::Predictor>(prototype_);  // reads the prototype only
}

void PredictorPool::give_back(std::unique_ptr<train::Predictor> predictor) {
  const std::lock_guard lock(mutex_);
  idle_.push_back(std::move(predictor));
}

ModelRegistry::ModelRegistry(const fs::path& model_dir, std::ostream& log, bool may_start_empty)
    : root_([&] {
        std::error_code error;
        if (!fs::is_directory(model_dir, error)) {
          throw InvalidArgument("recemb serve: '" + model_dir.string() + "' is not a directory; " +
                                std::string(kLayout));
        }
        return fs::canonical(model_dir);
      }()),
      log_(log) {
  for (const auto& [name, entries] : scan(/*report=*/true)) {
    std::shared_ptr<ServedModel> served = newest_servable(name, entries, 0);
    if (served) {
      serve(std::move(served), versions_of(entries));
    } else {
      log_ << "recemb serve: no servable version of model '" << name << "'\n";
    }
  }
  if (models_.empty()) {
    const std::string message =
        "no model to serve in '" + model_dir.string() + "'; " + std::string(kLayout);
    if (!may_start_empty) throw InvalidArgument("recemb serve: " + message);
    log_ << "recemb serve: warning: " << message << "; serving none until one appears\n";
  }
}

std::map<std::string, std::vector<ModelRegistry::VersionEntry>> ModelRegistry::scan(
    bool report) const {
  std::map<std::string, std::vector<VersionEntry>> models;
  for (const fs::directory_entry& model_entry : directories_in(root_)) {
    const std::string name = model_entry.path().filename().string();
    if (!is_valid_model_name(name)) {
      if (report) {
        log_ << "recemb serve: skipping '" << name << "': not a model name ([A-Za-z0-9._-])\n";
      }
      continue;
    }
    const auto resolved = resolve_inside(model_entry.path(), root_);
    if (const auto* reason = std::get_if<std::string>(&resolved)) {
      if (report) log_ << "recemb serve: skipping '" << name << "': " << *reason << "\n";
      continue;
    }
    std::vector<VersionEntry>& entries = models[name];
    for (const fs::directory_entry& version_entry : directories_in(std::get<fs::path>(resolved))) {
      const std::string version_name = version_entry.path().filename().string();
      const auto version = model_version_of(version_name);
      if (!version) {
        if (report) {
          log_ << "recemb serve: skipping model '" << name << "' directory '" << version_name
               << "': not a version (a positive integer)\n";
        }
        continue;
      }
      entries.push_back({*version, version_entry.path() / train::kModelFileName});
    }
    std::sort(entries.begin(), entries.end(),
              [](const VersionEntry& a, const VersionEntry& b) { return a.version < b.version; });
  }
  return models;
}

std::shared_ptr<ServedModel> ModelRegistry::newest_servable(
    const std::string& name, const std::vector<VersionEntry>& entries, int64_t served) {
  for (auto it = entries.rbegin(); it != entries.rend() && it->version != served; ++it) {
    std::shared_ptr<ServedModel> model;
    if (use_unless_refused(it->file, "model '" + name + "' version " + std::to_string(it->version),
                           [&] { model = open_version(name, it->version, it->file, root_); })) {
      return model;
    }
  }
  return nullptr;
}

bool ModelRegistry::use_unless_refused(const fs::path& file, const std::string& what,
                                       const std::function<void()>& use) {
  const std::pair<uintmax_t, int64_t> identity = file_identity(file);
  if (const auto refused = refused_.find(file);
      refused != refused_.end() && refused->second == identity) {
    return false;  // refused before, unchanged since
  }
  try {
    use();
    refused_.erase(file);
    return true;
  } catch (const std::exception& error) {
    log_ << "recemb serve: refusing " << what << ": " << error.what() << "\n";
    refused_[file] = identity;
    return false;
  }
}

void ModelRegistry::serve(std::shared_ptr<ServedModel> model,
                          const std::vector<int64_t>& versions) {
  log_ << "recemb serve: serving model '" << model->name << "' version " << model->version << " ("
       << model->model.tables().size() << " tables, " << model->model.features().size()
       << " features, " << serving_dtype_name(model->model.dtype())
       << (model->predictor ? ", predict" : "") << ") from " << model->file.string() << "\n";
  const std::lock_guard lock(mutex_);
  versions_[model->name] = versions;
  models_[model->name] = std::move(model);
}

int ModelRegistry::refresh() {
  const std::lock_guard refreshing(refresh_mutex_);
  std::map<std::string, std::vector<VersionEntry>> found = scan(/*report=*/false);
  int swapped = 0;
  for (const std::string& name : names()) {  // served models whose directory is gone
    if (found.contains(name)) {
      gone_.erase(name);
    } else if (gone_.insert(name).second) {
      log_ << "recemb serve: model '" << name << "' is no longer in the model directory; still "
           << "serving version " << find(name)->version << "\n";
    }
  }
  for (const auto& [name, entries] : found) {
    const std::vector<int64_t> versions = versions_of(entries);
    const std::shared_ptr<const ServedModel> current = find(name);
    const bool current_present =
        current && std::find(versions.begin(), versions.end(), current->version) != versions.end();
    std::shared_ptr<ServedModel> newer =
        newest_servable(name, entries, current_present ? current->version : 0);
    if (newer) {
      if (current) {
        log_ << "recemb serve: model '" << name << "': replacing version " << current->version
             << "\n";
      }
      serve(std::move(newer), versions);
      ++swapped;
    } else {
      {
        const std::lock_guard lock(mutex_);
        if (models_.contains(name)) versions_[name] = versions;
      }
      if (current && apply_deltas(name)) ++swapped;
    }
  }
  return swapped;
}

bool ModelRegistry::apply_deltas(const std::string& name) {
  const std::shared_ptr<const ServedModel> current = find(name);
  const fs::path directory = current->file.parent_path();
  const auto delta_file = [&](int64_t sequence) { return directory / delta_file_name(sequence); };
  if (!fs::exists(delta_file(current->model.delta_sequence() + 1))) return false;
  Replicas& replicas = replicas_[name];
  if (replicas.retired) {  // the replica served before the last swap becomes the spare
    if (!release_when_unused(replicas.retired, std::chrono::seconds(2))) return false;
    replicas.spare = std::move(replicas.retired_model);
    replicas.retired_model.reset();
  }
  if (!replicas.spare) replicas.spare = current->model.clone();  // the first delta of a version
  ServingModel& spare = *replicas.spare;
  while (spare.delta_sequence() < current->model.delta_sequence() ||
         fs::exists(delta_file(spare.delta_sequence() + 1))) {
    const int64_t sequence = spare.delta_sequence() + 1;
    const fs::path file = delta_file(sequence);
    const bool applied =
        use_unless_refused(file,
                           "model '" + name + "' version " + std::to_string(current->version) +
                               " delta " + std::to_string(sequence),
                           [&] {
                             auto resolved = resolve_inside(file, root_);
                             if (auto* reason = std::get_if<std::string>(&resolved))
                               throw InvalidArgument(*reason);
                             spare.apply_delta(std::get<fs::path>(resolved));
                           });
    if (!applied) break;
  }
  if (spare.delta_sequence() <= current->model.delta_sequence()) return false;
  std::shared_ptr<ServedModel> updated = served_model(name, current->version, current->file, spare);
  log_ << "recemb serve: model '" << name << "' version " << current->version << ": delta "
       << spare.delta_sequence() << " applied\n";
  replicas.retired_model = std::move(replicas.served);
  replicas.served = std::move(replicas.spare);
  replicas.spare.reset();
  {
    const std::lock_guard lock(mutex_);
    replicas.retired = std::exchange(models_[name], std::move(updated));
  }
  return true;
}

std::shared_ptr<const ServedModel> ModelRegistry::find(std::string_view name) const {
  const std::lock_guard lock(mutex_);
  const auto found = models_.find(name);
  return found == models_.end() ? nullptr : found->second;
}

std::vector<std::string> ModelRegistry::names() const {
  const std::lock_guard lock(mutex_);
  std::vector<std::string> names;
  for (const auto& [name, model] : models_) names.push_back(name);
  return names;
}

std::vector<int64_t> ModelRegistry::versions(std::string_view name) const {
  const std::lock_guard lock(mutex_);
  const auto found = versions_.find(name);
  return found == versions_.end() ? std::vector<int64_t>{} : found->second;
}

}  // namespace recemb::serve
