// save_checkpoint (recemb/checkpoint.h).
//
// Order of a save, and why a crash anywhere leaves the earlier checkpoints loadable:
//   1. every file is written into root/.tmp-ckpt-<step>-<pid>-<n>/ and fsynced; the manifest
//      (which lists the data files' checksums) last, then the directory itself is fsynced;
//   2. one rename publishes the directory as root/ckpt-<step>, and root is fsynced;
//   3. checkpoints beyond keep_last are renamed to .tmp-delete-* names, then deleted, and the
//      leftovers of interrupted saves are deleted.
// A ckpt-* name therefore only ever names a complete, synced directory; everything partial is a
// .tmp-* name, which readers ignore and the next save removes.
#include <bit>
#include <set>
#include <system_error>

#include "recemb/checkpoint.h"
#include "recemb/error.h"

#include "checkpoint/data_file.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "format/config_json.h"
#include "format/file_io.h"

namespace recemb {
namespace {

namespace fs = std::filesystem;
using internal::Manifest;

static_assert(std::endian::native == std::endian::little,
              "checkpoints store float32 little-endian, written straight from memory");

void validate_options(const SaveOptions& options) {
  if (options.keep_last < 1) {
    throw InvalidArgument("SaveOptions.keep_last must be >= 1, got " +
                          std::to_string(options.keep_last));
  }
  if (options.checksum_block_bytes <= 0 || options.checksum_block_bytes % 4 != 0) {
    throw InvalidArgument(
        "SaveOptions.checksum_block_bytes must be a positive multiple of 4, got " +
        std::to_string(options.checksum_block_bytes));
  }
  std::set<std::string_view> names;
  for (size_t i = 0; i < options.extra_arrays.size(); ++i) {
    const std::string& name = options.extra_arrays[i].name;
    if (name.empty()) {
      throw InvalidArgument("SaveOptions.extra_arrays[" + std::to_string(i) + "]: empty name");
    }
    if (!names.insert(name).second) {
      throw InvalidArgument("SaveOptions.extra_arrays: the name '" + name + "' appears twice");
    }
  }
}

// Writes every data file into `directory` and returns the manifest that describes them.
Manifest write_data(const Embedding& embedding, const SaveOptions& options,
                    const fs::path& directory) {
  const EmbeddingOptions& embedding_options = embedding.options();
  Manifest manifest{
      .step = embedding.step(),
      .checksum_block_bytes = options.checksum_block_bytes,
      .optimizer = embedding_options.optimizer
                       ? format::optimizer_to_json(*embedding_options.optimizer)
                       : format::Json(),
      .seed = embedding_options.seed,
      .non_finite_gradients = embedding_options.non_finite_gradients,
      .features = embedding.features(),
      .metadata = options.metadata,
  };
  for (size_t t = 0; t < embedding.tables().size(); ++t) {
    internal::TableEntry table{.config = embedding.tables()[t]};
    if (table.config.optimizer) {
      table.optimizer = format::optimizer_to_json(*table.config.optimizer);
      table.config.optimizer.reset();
    }
    for (const std::string& variable : embedding.variable_names(table.config.name)) {
      const std::span<const float> values = embedding.variable_data(table.config.name, variable);
      table.variables.push_back(
          {.name = variable,
           .shape = embedding.variable_shape(table.config.name, variable),
           .data = internal::write_data_file(directory / internal::variable_file_name(t, variable),
                                             std::as_bytes(values), options.checksum_block_bytes)});
    }
    manifest.tables.push_back(std::move(table));
  }
  for (size_t i = 0; i < options.extra_arrays.size(); ++i) {
    const NamedArray& extra = options.extra_arrays[i];
    manifest.extra_arrays.push_back(
        {.name = extra.name,
         .shape = {static_cast<int64_t>(extra.values.size())},
         .data =
             internal::write_data_file(directory / internal::extra_array_file_name(i),
                                       std::as_bytes(extra.values), options.checksum_block_bytes)});
  }
  return manifest;
}

// Creates `directory` and its missing parents, each made durable in its parent directory.
void create_directories_durably(const fs::path& directory) {
  const fs::path normal = fs::absolute(directory).lexically_normal();
  std::vector<fs::path> missing;
  for (fs::path path = normal.has_filename() ? normal : normal.parent_path(); !fs::exists(path);
       path = path.parent_path()) {
    missing.push_back(path);
  }
  for (auto path = missing.rbegin(); path != missing.rend(); ++path) {
    fs::create_directory(*path);
    format::sync_directory(path->parent_path());
  }
}

// Deletes the checkpoints before the newest keep_last and every temporary directory.
void prune(const fs::path& root, int keep_last) {
  const std::vector<internal::CheckpointDirectory> checkpoints = internal::list_checkpoints(root);
  const size_t excess = checkpoints.size() > static_cast<size_t>(keep_last)
                            ? checkpoints.size() - static_cast<size_t>(keep_last)
                            : 0;
  // A rename first, so that a deletion interrupted half way leaves a .tmp-* name, not a damaged
  // checkpoint under a ckpt-* name.
  for (size_t i = 0; i < excess; ++i) {
    fs::rename(checkpoints[i].path, root / internal::temporary_name("delete"));
  }
  std::vector<fs::path> temporaries;  // collected first: removing while listing may skip entries
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    if (entry.path().filename().string().starts_with(internal::kTemporaryPrefix)) {
      temporaries.push_back(entry.path());
    }
  }
  for (const fs::path& temporary : temporaries) fs::remove_all(temporary);
}

}  // namespace

fs::path save_checkpoint(const Embedding& embedding, const fs::path& root,
                         const SaveOptions& options) {
  validate_options(options);
  const fs::path destination = root / internal::checkpoint_directory_name(embedding.step());
  if (fs::exists(destination)) {
    throw FailedPrecondition("a checkpoint of step " + std::to_string(embedding.step()) +
                             " already exists: '" + destination.string() + "'");
  }
  create_directories_durably(root);
  const fs::path temporary =
      root / internal::temporary_name(internal::checkpoint_directory_name(embedding.step()));
  fs::create_directory(temporary);
  try {
    internal::write_manifest(temporary, write_data(embedding, options, temporary));
    format::sync_directory(temporary);
    format::publish(temporary, destination);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(temporary, ignored);
    throw;
  }
  try {
    prune(root, options.keep_last);
  } catch (const std::system_error& error) {
    throw std::system_error(error.code(),
                            "checkpoint '" + destination.string() +
                                "' is saved, but deleting older ones failed: " + error.what());
  }
  return destination;
}

}  // namespace recemb
