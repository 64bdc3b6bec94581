#include "serve/model_registry.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <new>
#include <system_error>
#include <thread>
#include <utility>
#include <variant>

#include "recemb/error.h"
#include "recemb/publish.h"

#include "dlrm/model_file.h"
#include "serve/request_codec.h"

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

// An entry of a directory, and whether it is a directory (symlinks followed).
struct DirectoryEntry {
  fs::path path;
  bool directory = false;
};

// The entries of `dir`, sorted by name. Throws std::system_error naming `dir` when it cannot be
// listed (EMFILE, EACCES, ...): a directory that cannot be read is not an empty one.
std::vector<DirectoryEntry> entries_in(const fs::path& dir) {
  std::vector<DirectoryEntry> entries;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    std::error_code type_error;
    entries.push_back({.path = it->path(), .directory = it->is_directory(type_error)});
  }
  if (error) throw std::system_error(error, "listing '" + dir.string() + "'");
  std::sort(entries.begin(), entries.end(),
            [](const DirectoryEntry& a, const DirectoryEntry& b) { return a.path < b.path; });
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
  served->feature_fingerprint = feature_fingerprint(served->model);
  try {  // the predictors share the model's tables
    served->predictor = std::make_unique<PredictorPool>(dlrm::Predictor::of(served->model));
  } catch (const InvalidArgument& error) {  // no dense part: lookups only
    served->no_predict_reason = error.what();
  }
  return served;
}

// `file` resolved inside `root`; InvalidArgument when it lies outside.
fs::path resolved_inside(const fs::path& file, const fs::path& root) {
  auto resolved = resolve_inside(file, root);
  if (auto* reason = std::get_if<std::string>(&resolved)) throw InvalidArgument(*reason);
  return std::get<fs::path>(std::move(resolved));
}

// The model in `file` (a version's model.recemb). Throws what opening it throws (ECANCELED once
// `stop` is requested), or InvalidArgument when it lies outside `root`.
std::shared_ptr<ServedModel> open_version(const std::string& name, int64_t version,
                                          const fs::path& file, const fs::path& root,
                                          const std::stop_token& stop) {
  const fs::path path = resolved_inside(file, root);
  return served_model(name, version, path, ServingModel::open(path, {.stop = stop}));
}

// The scans a file that failed `attempts` times in a row (for a failing system call) waits
// before it is tried again: 1 (the next scan), 2, 4, 8, then 16 (with a poll of a second, a
// file that reads again is read within 16 s, and a failing one costs a try every 16 s).
int64_t scans_before_retry(int attempts) { return int64_t{1} << std::min(attempts - 1, 4); }

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
                            std::span<dlrm::Prediction> results, dlrm::CriteoLabel labels) {
  std::unique_ptr<dlrm::Predictor> predictor = borrow();
  try {
    predictor->predict(lines, results, labels);
  } catch (...) {
    give_back(std::move(predictor));
    throw;
  }
  give_back(std::move(predictor));
}

std::unique_ptr<dlrm::Predictor> PredictorPool::borrow() {
  {
    const std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      std::unique_ptr<dlrm::Predictor> predictor = std::move(idle_.back());
      idle_.pop_back();
      return predictor;
    }
  }
  return std::make_unique<dlrm::Predictor>(prototype_);  // reads the prototype only
}

void PredictorPool::give_back(std::unique_ptr<dlrm::Predictor> predictor) {
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
  for (const auto& [name, entries] : scan().models) {
    std::shared_ptr<ServedModel> served = newest_servable(name, entries, 0, {});
    if (served) {
      serve(std::move(served), versions_of(entries));
      apply_deltas(name, {});
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

ModelRegistry::Scan ModelRegistry::scan() {
  Scan found;
  for (const DirectoryEntry& model_entry : entries_in(root_)) {
    const std::string name = model_entry.path.filename().string();
    if (!model_entry.directory) {
      log_once_per_appearance("recemb serve: skipping '" + name + "': not a directory");
      continue;
    }
    if (!is_valid_model_name(name)) {
      log_once_per_appearance("recemb serve: skipping '" + name +
                              "': not a model name ([A-Za-z0-9._-])");
      continue;
    }
    const auto resolved = resolve_inside(model_entry.path, root_);
    if (const auto* reason = std::get_if<std::string>(&resolved)) {
      log_once_per_appearance("recemb serve: skipping '" + name + "': " + *reason);
      continue;
    }
    std::vector<DirectoryEntry> version_entries;
    try {
      version_entries = entries_in(std::get<fs::path>(resolved));
    } catch (const std::system_error& error) {
      log_once_per_appearance("recemb serve: cannot list model '" + name +
                              "' (a version served goes on being served; listed again at the "
                              "next scan): " +
                              error.what());
      found.unreadable.insert(name);
      continue;
    }
    std::vector<VersionEntry>& entries = found.models[name];
    for (const DirectoryEntry& version_entry : version_entries) {
      const std::string version_name = version_entry.path.filename().string();
      const auto version = model_version_of(version_name);
      if (!version) {
        log_once_per_appearance("recemb serve: skipping model '" + name + "' entry '" +
                                version_name + "': not a version (a positive integer)");
      } else if (!version_entry.directory) {
        log_once_per_appearance("recemb serve: skipping model '" + name + "' entry '" +
                                version_name + "': not a directory");
      } else {
        entries.push_back({*version, version_entry.path / dlrm::kModelFileName});
      }
    }
    std::sort(entries.begin(), entries.end(),
              [](const VersionEntry& a, const VersionEntry& b) { return a.version < b.version; });
  }
  end_of_scan();
  return found;
}

void ModelRegistry::log_once_per_appearance(const std::string& message) {
  logged_now_.insert(message);
  if (!logged_.contains(message)) log_ << message << "\n";
}

void ModelRegistry::end_of_scan() {
  logged_ = std::move(logged_now_);
  logged_now_.clear();
}

std::shared_ptr<ServedModel> ModelRegistry::newest_servable(
    const std::string& name, const std::vector<VersionEntry>& entries, int64_t served,
    const std::stop_token& stop) {
  for (auto it = entries.rbegin();
       it != entries.rend() && it->version != served && !stop.stop_requested(); ++it) {
    std::shared_ptr<ServedModel> model;
    if (use_file(
            it->file, "model '" + name + "' version " + std::to_string(it->version),
            [&] { model = open_version(name, it->version, it->file, root_, stop); }, stop)) {
      return model;
    }
  }
  return nullptr;
}

bool ModelRegistry::use_file(const fs::path& file, const std::string& what,
                             const std::function<void()>& use, const std::stop_token& stop) {
  const std::pair<uintmax_t, int64_t> identity = file_identity(file);
  const auto failed = failures_.find(file);
  if (failed != failures_.end() && failed->second.identity == identity &&
      (failed->second.content || scans_ < failed->second.retry_at)) {
    return false;  // refused and unchanged since, or not to be tried again yet
  }
  // A failing system call or memory: tried again at later scans, logged when a series begins.
  const auto retry_later = [&](const std::string& error) {
    const int attempts =
        failed != failures_.end() && !failed->second.content ? failed->second.attempts + 1 : 1;
    if (attempts == 1) {
      log_ << "recemb serve: cannot read " << what << " (tried again at later scans): " << error
           << "\n";
    }
    failures_[file] = {.identity = identity,
                       .content = false,
                       .attempts = attempts,
                       .retry_at = scans_ + scans_before_retry(attempts)};
  };
  try {
    use();
  } catch (const std::system_error& error) {
    if (!stop.stop_requested()) retry_later(error.what());  // else stopped: nothing to remember
    return false;
  } catch (const std::bad_alloc& error) {
    retry_later(std::string("out of memory (") + error.what() + ")");
    return false;
  } catch (const std::exception& error) {  // the file's content: until it changes
    log_ << "recemb serve: refusing " << what << ": " << error.what() << "\n";
    failures_[file] = {.identity = identity, .content = true};
    return false;
  }
  if (failed != failures_.end()) {
    if (!failed->second.content) {
      log_ << "recemb serve: read " << what << " after " << failed->second.attempts
           << " failed attempt" << (failed->second.attempts > 1 ? "s" : "") << "\n";
    }
    failures_.erase(failed);
  }
  return true;
}

void ModelRegistry::serve(std::shared_ptr<ServedModel> model,
                          const std::vector<int64_t>& versions) {
  log_ << "recemb serve: serving model '" << model->name << "' version " << model->version << " ("
       << model->model.tables().size() << " tables, " << model->model.features().size()
       << " features, " << serving_dtype_name(model->model.dtype())
       << (model->predictor ? ", predict" : "") << ") from " << model->file.string() << "\n";
  replicas_.erase(model->name);  // the previous version's: none of them is this version's
  const std::lock_guard lock(mutex_);
  versions_[model->name] = versions;
  models_[model->name] = std::move(model);
}

int ModelRegistry::refresh(const std::stop_token& stop) {
  const std::lock_guard refreshing(refresh_mutex_);
  ++scans_;
  Scan found;
  try {
    found = scan();
  } catch (const std::system_error& error) {  // not an empty directory: nothing changes
    const std::string message =
        "recemb serve: cannot scan the model directory (the models served go on being served; "
        "scanned again at the next poll): " +
        std::string(error.what());
    if (logged_.insert(message).second) log_ << message << "\n";
    return 0;
  }
  int swapped = 0;
  for (const std::string& name : names()) {  // served models whose directory is gone
    if (found.models.contains(name)) {
      gone_.erase(name);
    } else if (!found.unreadable.contains(name) && gone_.insert(name).second) {
      log_ << "recemb serve: model '" << name << "' is no longer in the model directory; still "
           << "serving version " << find(name)->version << "\n";
    }
  }
  for (const auto& [name, entries] : found.models) {
    if (stop.stop_requested()) break;
    const std::vector<int64_t> versions = versions_of(entries);
    const std::shared_ptr<const ServedModel> current = find(name);
    const bool current_present =
        current && std::find(versions.begin(), versions.end(), current->version) != versions.end();
    std::shared_ptr<ServedModel> newer =
        newest_servable(name, entries, current_present ? current->version : 0, stop);
    if (newer) {
      if (current) {
        log_ << "recemb serve: model '" << name << "': replacing version " << current->version
             << "\n";
      }
      serve(std::move(newer), versions);
      apply_deltas(name, stop);  // its deltas, from the first
      ++swapped;
    } else {
      {
        const std::lock_guard lock(mutex_);
        if (models_.contains(name)) versions_[name] = versions;
      }
      if (current && apply_deltas(name, stop)) ++swapped;
    }
  }
  return swapped;
}

bool ModelRegistry::apply_deltas(const std::string& name, const std::stop_token& stop) {
  const std::shared_ptr<const ServedModel> current = find(name);
  const fs::path directory = current->file.parent_path();
  const auto delta_file = [&](int64_t sequence) { return directory / delta_file_name(sequence); };
  const auto apply = [&](ServingModel& replica, int64_t sequence) {
    replica.apply_delta(resolved_inside(delta_file(sequence), root_));
  };
  if (!fs::exists(delta_file(current->model.delta_sequence() + 1))) return false;
  Replicas& replicas = replicas_[name];
  if (replicas.retired) {  // the replica served before the last swap becomes the spare
    if (!release_when_unused(replicas.retired, std::chrono::seconds(2))) return false;
    replicas.spare = std::move(replicas.retired_model);
    replicas.retired_model.reset();
  }
  if (!replicas.spare) replicas.spare = current->model.clone();  // the first delta of a version
  ServingModel& spare = *replicas.spare;
  // The deltas the served replica holds and the spare lacks. One that cannot be applied again
  // (its file removed since) does not hold the model back: the spare is then copied from the
  // served replica.
  while (spare.delta_sequence() < current->model.delta_sequence()) {
    const int64_t sequence = spare.delta_sequence() + 1;
    try {
      apply(spare, sequence);
    } catch (const std::exception& error) {
      log_ << "recemb serve: model '" << name << "' version " << current->version << ": delta "
           << sequence << " cannot be applied again to the spare replica (" << error.what()
           << "); copying the served replica instead\n";
      spare = current->model.clone();
    }
  }
  while (!stop.stop_requested() && fs::exists(delta_file(spare.delta_sequence() + 1))) {
    const int64_t sequence = spare.delta_sequence() + 1;
    const std::string what = "model '" + name + "' version " + std::to_string(current->version) +
                             " delta " + std::to_string(sequence);
    if (!use_file(
            delta_file(sequence), what, [&] { apply(spare, sequence); }, stop))
      break;
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
