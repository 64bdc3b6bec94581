// publish (recemb/publish.h): a base through export's writer, then deltas of the rows the
// Embedding's change tracking marked (TableStorage::changed_rows, DynamicPart::removed_keys),
// encoded by the exporter's TableEncoder (docs/serving.md, "Publishing deltas").
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "recemb/error.h"
#include "recemb/publish.h"

#include "embedding/embedding_impl.h"
#include "embedding/parts.h"
#include "format/checksum.h"
#include "format/file_io.h"
#include "format/file_system.h"
#include "serving/format.h"
#include "serving/table_encoder.h"

namespace recemb {
namespace {

namespace fs = std::filesystem;
using internal::Model;
using internal::TableState;

constexpr char kBaseFileName[] = "model.recemb";

// A version directory's name as its number: digits only, without a leading zero.
std::optional<int64_t> version_of(const std::string& name) {
  int64_t version = 0;
  if (name.empty() || name[0] == '0') return std::nullopt;
  const auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), version);
  if (error != std::errc() || end != name.data() + name.size()) return std::nullopt;
  return version;
}

std::string delta_file_name(int64_t sequence) {
  char name[48];
  std::snprintf(name, sizeof name, "delta-%08lld.recemb", static_cast<long long>(sequence));
  return name;
}

// 1 + the largest version directory in `dir` (1 if none), creating `dir` when absent.
int64_t next_version(const fs::path& dir) {
  if (!fs::is_directory(dir)) format::file_system().create_directory(dir);
  int64_t largest = 0;
  for (const fs::path& entry : format::file_system().list(dir)) {
    const std::optional<int64_t> version = version_of(entry.filename().string());
    if (version && fs::is_directory(entry)) largest = std::max(largest, *version);
  }
  return largest + 1;
}

PublishResult publish_base(Embedding& embedding, Model& model, const fs::path& dir,
                           const PublishOptions& options) {
  const int64_t version = next_version(dir);
  const fs::path directory = dir / std::to_string(version);
  const fs::path file = directory / kBaseFileName;
  format::file_system().create_directory(directory);
  uint64_t base_id = 0;
  try {
    base_id = internal::write_serving_model(embedding, file,
                                            {.dtype = options.dtype,
                                             .extra_arrays = options.extra_arrays,
                                             .metadata = options.metadata});
  } catch (...) {
    format::file_system().remove_all(directory);  // empty: the model is written atomically
    throw;
  }
  format::file_system().sync_directory(dir);
  int64_t rows = 0;
  for (TableState& state : model.states) {
    state.storage().start_tracking_changes();
    if (internal::DynamicPart* dynamic = state.dynamic()) {
      dynamic->start_tracking_removals();
      rows += dynamic->index().size();
    } else {
      rows += state.rows();
    }
  }
  model.untracked_writes = false;
  model.publication = internal::Publication{
      .dir = dir, .version = version, .sequence = 0, .base_id = base_id, .dtype = options.dtype};
  return {.file = file, .version = version, .sequence = 0, .rows = rows};
}

// One table's changes: its changed rows (static: row ids; dynamic: upserted keys) with their
// values, and a dynamic table's removed keys, increasing.
struct TableChanges {
  internal::TableValues values;
  std::vector<int64_t> removed;
};

TableChanges changes_of(const TableState& state) {
  TableChanges changes;
  internal::TableValues& values = changes.values;
  const internal::TableStorage& storage = state.storage();
  const std::span<const uint8_t> changed = storage.changed_rows();
  const int64_t dim = state.table().dim;
  std::vector<int64_t>& ids = state.dynamic() ? values.keys : values.row_ids;
  if (const internal::DynamicPart* dynamic = state.dynamic()) {
    const internal::KeyIndex& index = dynamic->index();
    std::vector<std::pair<int64_t, int64_t>> keyed;  // (key, slot)
    for (int64_t slot = 0; slot < index.slot_end(); ++slot) {
      if (changed[static_cast<size_t>(slot)] && index.occupied(slot)) {
        keyed.emplace_back(index.key_of(slot), slot);
      }
    }
    std::sort(keyed.begin(), keyed.end());
    for (const auto& [key, slot] : keyed) {
      ids.push_back(key);
      values.owned.insert(values.owned.end(), storage.row(slot), storage.row(slot) + dim);
    }
    // A key removed and not admitted again since; each once.
    for (const int64_t key : dynamic->removed_keys()) {
      if (index.find(key) == internal::KeyIndex::kAbsent) changes.removed.push_back(key);
    }
    std::sort(changes.removed.begin(), changes.removed.end());
    changes.removed.erase(std::unique(changes.removed.begin(), changes.removed.end()),
                          changes.removed.end());
  } else {
    for (int64_t row = 0; row < storage.num_rows(); ++row) {
      if (!changed[static_cast<size_t>(row)]) continue;
      ids.push_back(row);
      values.owned.insert(values.owned.end(), storage.row(row), storage.row(row) + dim);
    }
  }
  values.rows = values.owned;
  values.num_rows = std::ssize(ids);
  return changes;
}

PublishResult publish_delta(Model& model, const PublishOptions& options) {
  internal::Publication& publication = *model.publication;
  const int64_t sequence = publication.sequence + 1;
  const fs::path file =
      publication.dir / std::to_string(publication.version) / delta_file_name(sequence);
  const std::string context = "serving delta '" + file.string() + "'";
  internal::DeltaManifest manifest{.base = publication.base_id,
                                   .sequence = sequence,
                                   .dtype = options.dtype,
                                   .metadata = options.metadata};
  std::vector<TableChanges> changes;
  for (size_t t = 0; t < model.tables.size(); ++t) {
    const TableState* state = model.whole_state(t);
    if (state == nullptr) {
      throw FailedPrecondition("publish: table '" + model.tables[t].name +
                               "' is not held whole by this process");
    }
    changes.push_back(changes_of(*state));
  }
  internal::TableEncoder encoder(options.dtype, context);
  uint64_t data_size = 0;
  int64_t rows = 0;
  // Places a blob of `bytes` (given whole) next in the data section.
  const auto whole_blob = [&](std::span<const std::byte> bytes) {
    format::StreamingChecksum checksum;
    checksum.update(bytes);
    checksum.update(internal::padding_after(bytes.size()));
    const internal::TableBlob blob{
        .offset = data_size, .size = bytes.size(), .checksum = checksum.digest()};
    data_size += internal::padded_size(bytes.size());
    return blob;
  };
  for (size_t t = 0; t < model.tables.size(); ++t) {
    const TableConfig& table = model.tables[t];
    const internal::TableValues& values = changes[t].values;
    const bool dynamic = table.dynamic_vocabulary.has_value();
    internal::DeltaTable& entry = manifest.tables.emplace_back(
        internal::DeltaTable{.name = table.name, .dim = table.dim, .dynamic = dynamic});
    entry.ids = whole_blob(std::as_bytes(std::span(dynamic ? values.keys : values.row_ids)));
    format::StreamingChecksum checksum;
    uint64_t size = 0;
    encoder.encode(table, values, [&](std::span<const std::byte> bytes) {
      checksum.update(bytes);
      size += bytes.size();
    });
    checksum.update(internal::padding_after(size));
    entry.rows = {.offset = data_size, .size = size, .checksum = checksum.digest()};
    data_size += internal::padded_size(size);
    if (dynamic) entry.removed = whole_blob(std::as_bytes(std::span(changes[t].removed)));
    rows += values.num_rows;
  }
  for (const ServingArray& array : options.extra_arrays) {
    manifest.extra_arrays.push_back({.name = array.name, .shape = array.shape});
    manifest.extra_blobs.push_back(whole_blob(std::as_bytes(array.values)));
  }
  std::string text;
  try {
    text = internal::encode_delta_manifest(manifest);
  } catch (const format::JsonError& error) {  // names that are not UTF-8
    throw InvalidArgument(context +
                          ": the extra array names or metadata cannot be written as "
                          "JSON (UTF-8): " +
                          error.what());
  }
  const auto manifest_bytes = std::as_bytes(std::span(text));
  const internal::ServingHeader header{
      .format_version = internal::kDeltaFile.format_version,
      .manifest_size = manifest_bytes.size(),
      .manifest_checksum = format::checksum(manifest_bytes),
      .file_size = internal::kServingHeaderSize + manifest_bytes.size() + data_size};
  format::write_file_atomically(file, [&](format::OutputFile& out) {
    out.write(internal::encode_header(header, internal::kDeltaFile));
    out.write(manifest_bytes);
    for (size_t t = 0; t < manifest.tables.size(); ++t) {
      const internal::TableValues& values = changes[t].values;
      const std::span<const int64_t> ids =
          manifest.tables[t].dynamic ? values.keys : values.row_ids;
      out.write(std::as_bytes(ids));
      out.write(internal::padding_after(ids.size_bytes()));
      encoder.encode(model.tables[t], values,
                     [&](std::span<const std::byte> bytes) { out.write(bytes); });
      out.write(internal::padding_after(manifest.tables[t].rows.size));
      if (manifest.tables[t].dynamic) {
        const std::span<const int64_t> removed = changes[t].removed;
        out.write(std::as_bytes(removed));
        out.write(internal::padding_after(removed.size_bytes()));
      }
    }
    for (const ServingArray& array : options.extra_arrays) {
      out.write(std::as_bytes(array.values));
      out.write(internal::padding_after(array.values.size_bytes()));
    }
  });
  // Written: the changes are published.
  for (TableState& state : model.states) {
    state.storage().clear_changes();
    if (internal::DynamicPart* dynamic = state.dynamic()) dynamic->clear_removed_keys();
  }
  publication.sequence = sequence;
  return {.file = file, .version = publication.version, .sequence = sequence, .rows = rows};
}

}  // namespace

PublishResult publish(Embedding& embedding, const fs::path& dir, const PublishOptions& options) {
  try {
    serving_dtype_name(options.dtype);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(std::string("PublishOptions.dtype: ") + error.what());
  }
  internal::check_extra_arrays(options.extra_arrays);
  if (embedding.world_size() > 1) {
    throw FailedPrecondition("publish: the Embedding spans " +
                             std::to_string(embedding.world_size()) +
                             " ranks; publish from one process");
  }
  Model& model = internal::PartAccess::model(embedding);
  const std::optional<internal::Publication>& last = model.publication;
  const bool base = !last || model.untracked_writes || last->dir != dir ||
                    last->dtype != options.dtype ||
                    !fs::exists(last->dir / std::to_string(last->version) / kBaseFileName);
  if (base) return publish_base(embedding, model, dir, options);
  return publish_delta(model, options);
}

}  // namespace recemb
