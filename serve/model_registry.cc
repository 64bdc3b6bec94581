#include "serve/model_registry.h"

#include <algorithm>
#include <charconv>

#include "recemb/error.h"

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

// `path` with its symlinks resolved, or nullopt (and a log line naming why) when it does not
// exist or resolves outside `root`.
std::optional<fs::path> resolve_inside(const fs::path& path, const fs::path& root,
                                       const std::string& what, std::ostream& log) {
  std::error_code error;
  fs::path resolved = fs::canonical(path, error);
  if (error) {
    log << "recemb serve: skipping " << what << ": " << path.string() << ": " << error.message()
        << "\n";
    return std::nullopt;
  }
  if (!is_inside(resolved, root) || resolved == root) {
    log << "recemb serve: skipping " << what << ": " << path.string() << " resolves to "
        << resolved.string() << ", outside the model directory " << root.string() << "\n";
    return std::nullopt;
  }
  return resolved;
}

// The directories of `dir` (symlinks followed), sorted by name.
std::vector<fs::directory_entry> directories_in(const fs::path& dir) {
  std::vector<fs::directory_entry> entries;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    std::error_code error;
    if (entry.is_directory(error)) entries.push_back(entry);
  }
  std::sort(entries.begin(), entries.end());
  return entries;
}

// The version `version` of model `name`, or null (logged) when it cannot be served.
std::shared_ptr<ServedModel> open_version(const std::string& name, int64_t version,
                                          const fs::path& version_dir, const fs::path& root,
                                          std::ostream& log) {
  const std::string what = "model '" + name + "' version " + std::to_string(version);
  const auto file = resolve_inside(version_dir / train::kModelFileName, root, what, log);
  if (!file) return nullptr;
  try {
    auto served = std::make_shared<ServedModel>(ServedModel{
        .name = name, .version = version, .file = *file, .model = ServingModel::open(*file)});
    try {  // the predictor shares the model's tables
      served->predictor = std::make_unique<SharedPredictor>(train::Predictor::of(served->model));
    } catch (const InvalidArgument& error) {  // no dense part: lookups only
      served->no_predict_reason = error.what();
    }
    return served;
  } catch (const std::exception& error) {
    log << "recemb serve: refusing " << what << ": " << error.what() << "\n";
    return nullptr;
  }
}

}  // namespace

bool is_valid_model_name(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

std::optional<int64_t> parse_version(std::string_view name) {
  if (name.empty() || name[0] < '1' || name[0] > '9') return std::nullopt;
  int64_t version = 0;
  const auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), version);
  if (error != std::errc() || end != name.data() + name.size()) return std::nullopt;
  return version;
}

ModelRegistry::ModelRegistry(const fs::path& model_dir, std::ostream& log) {
  std::error_code error;
  if (!fs::is_directory(model_dir, error)) {
    throw InvalidArgument("recemb serve: '" + model_dir.string() + "' is not a directory; " +
                          std::string(kLayout));
  }
  const fs::path root = fs::canonical(model_dir);
  for (const fs::directory_entry& model_entry : directories_in(root)) {
    const std::string name = model_entry.path().filename().string();
    if (!is_valid_model_name(name)) {
      log << "recemb serve: skipping '" << name << "': not a model name ([A-Za-z0-9._-])\n";
      continue;
    }
    const auto model_dir_resolved = resolve_inside(model_entry.path(), root, "'" + name + "'", log);
    if (!model_dir_resolved) continue;
    std::vector<std::pair<int64_t, fs::path>> versions;
    for (const fs::directory_entry& version_entry : directories_in(*model_dir_resolved)) {
      const std::string version_name = version_entry.path().filename().string();
      const auto version = parse_version(version_name);
      if (!version) {
        log << "recemb serve: skipping model '" << name << "' directory '" << version_name
            << "': not a version (a positive integer)\n";
        continue;
      }
      versions.emplace_back(*version, version_entry.path());
    }
    std::sort(versions.begin(), versions.end());
    std::shared_ptr<ServedModel> served;
    for (auto it = versions.rbegin(); it != versions.rend() && !served; ++it) {
      served = open_version(name, it->first, it->second, root, log);
    }
    if (!served) {
      log << "recemb serve: no servable version of model '" << name << "'\n";
      continue;
    }
    for (const auto& [version, path] : versions) served->versions.push_back(version);
    log << "recemb serve: serving model '" << name << "' version " << served->version << " ("
        << served->model.tables().size() << " tables, " << served->model.features().size()
        << " features, " << serving_dtype_name(served->model.dtype())
        << (served->predictor ? ", predict" : "") << ") from " << served->file.string() << "\n";
    models_.emplace(name, std::move(served));
  }
  if (models_.empty()) {
    throw InvalidArgument("recemb serve: no model to serve in '" + model_dir.string() + "'; " +
                          std::string(kLayout));
  }
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

}  // namespace recemb::serve
