// publish (recemb/publish.h): a base through export's writer, then deltas of the rows the
// Embedding's change tracking marked (TableStorage::changed_rows, DynamicPart::removed_keys),
// encoded by the exporter's TableEncoder (docs/serving.md, "Publishing deltas").

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
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

namespace recemb::internal {
namespace {

namespace fs = std::filesystem;

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
    base_id = write_serving_model(embedding, file,
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
    if (DynamicPart* dynamic = state.dynamic()) {
      dynamic->start_tracking_removals();
      rows += dynamic->index().size();
    } else {
      rows += state.rows();
    }
  }
  model.untracked_writes = false;
  model.publication = Publication{.dir = dir,
                                  .version = version,
                                  .sequence = 0,
                                  .base_id = base_id,
                                  .dtype = options.dtype,
                                  .failed_write = std::make_shared<std::atomic<bool>>(false)};
  return {.file = file, .version = version, .sequence = 0, .rows = rows};
}

// One table's changes: its changed rows (static: row ids; dynamic: upserted keys) with their
// values, and a dynamic table's removed keys, increasing.
struct TableChanges {
  TableValues values;
  std::vector<int64_t> removed;
};

TableChanges changes_of(const TableState& state) {
  TableChanges changes;
  TableValues& values = changes.values;
  const TableStorage& storage = state.storage();
  const std::span<const uint8_t> changed = storage.changed_rows();
  const int64_t dim = state.table().dim;
  std::vector<int64_t>& ids = state.dynamic() ? values.keys : values.row_ids;
  if (const DynamicPart* dynamic = state.dynamic()) {
    const KeyIndex& index = dynamic->index();
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
      if (index.find(key) == KeyIndex::kAbsent) changes.removed.push_back(key);
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

// A delta taken from the Embedding (its changed rows copied, the options' arrays and metadata
// too), written by write(): on any thread, while the Embedding trains on.
class DeltaWriter {
 public:
  DeltaWriter(Model& model, const PublishOptions& options)
      : tables_(model.tables), dtype_(options.dtype), metadata_(options.metadata) {
    Publication& publication = *model.publication;
    sequence_ = publication.sequence + 1;
    version_ = publication.version;
    base_id_ = publication.base_id;
    failed_ = publication.failed_write;
    file_ = publication.dir / std::to_string(version_) / delta_file_name(sequence_);
    for (size_t t = 0; t < model.tables.size(); ++t) {
      const TableState* state = model.whole_state(t);
      if (state == nullptr) {
        throw FailedPrecondition("publish: table '" + model.tables[t].name +
                                 "' is not held whole by this process");
      }
      changes_.push_back(changes_of(*state));
    }
    for (const ServingArray& array : options.extra_arrays) {
      array_values_.emplace_back(array.values.begin(), array.values.end());
      arrays_.push_back({.name = array.name, .shape = array.shape});
    }
    for (size_t a = 0; a < arrays_.size(); ++a) arrays_[a].values = array_values_[a];
    // Taken: the next delta holds the changes from here on.
    for (TableState& state : model.states) {
      state.storage().clear_changes();
      if (DynamicPart* dynamic = state.dynamic()) dynamic->clear_removed_keys();
    }
    publication.sequence = sequence_;
  }

  // Writes the delta file. On a throw, the next publish writes a base (the changes taken here
  // are in no file).
  PublishResult write() {
    try {
      return write_file();
    } catch (...) {
      failed_->store(true);
      throw;
    }
  }

 private:
  PublishResult write_file() {
    const std::string context = "serving delta '" + file_.string() + "'";
    DeltaManifest manifest{
        .base = base_id_, .sequence = sequence_, .dtype = dtype_, .metadata = metadata_};
    TableEncoder encoder(dtype_, context);
    uint64_t data_size = 0;
    int64_t rows = 0;
    // Places a blob of `bytes` (given whole) next in the data section.
    const auto whole_blob = [&](std::span<const std::byte> bytes) {
      format::StreamingChecksum checksum;
      checksum.update(bytes);
      checksum.update(padding_after(bytes.size()));
      const TableBlob blob{
          .offset = data_size, .size = bytes.size(), .checksum = checksum.digest()};
      data_size += padded_size(bytes.size());
      return blob;
    };
    for (size_t t = 0; t < tables_.size(); ++t) {
      const TableConfig& table = tables_[t];
      const TableValues& values = changes_[t].values;
      const bool dynamic = table.dynamic_vocabulary.has_value();
      DeltaTable& entry = manifest.tables.emplace_back(
          DeltaTable{.name = table.name, .dim = table.dim, .dynamic = dynamic});
      entry.ids = whole_blob(std::as_bytes(std::span(dynamic ? values.keys : values.row_ids)));
      format::StreamingChecksum checksum;
      uint64_t size = 0;
      encoder.encode(table, values, [&](std::span<const std::byte> bytes) {
        checksum.update(bytes);
        size += bytes.size();
      });
      checksum.update(padding_after(size));
      entry.rows = {.offset = data_size, .size = size, .checksum = checksum.digest()};
      data_size += padded_size(size);
      if (dynamic) entry.removed = whole_blob(std::as_bytes(std::span(changes_[t].removed)));
      rows += values.num_rows;
    }
    for (const ServingArray& array : arrays_) {
      manifest.extra_arrays.push_back({.name = array.name, .shape = array.shape});
      manifest.extra_blobs.push_back(whole_blob(std::as_bytes(array.values)));
    }
    std::string text;
    try {
      text = encode_delta_manifest(manifest);
    } catch (const format::JsonError& error) {  // names that are not UTF-8
      throw InvalidArgument(context +
                            ": the extra array names or metadata cannot be written as JSON "
                            "(UTF-8): " +
                            error.what());
    }
    const auto manifest_bytes = std::as_bytes(std::span(text));
    const ServingHeader header{.format_version = kDeltaFile.format_version,
                               .manifest_size = manifest_bytes.size(),
                               .manifest_checksum = format::checksum(manifest_bytes),
                               .file_size = kServingHeaderSize + manifest_bytes.size() + data_size};
    format::write_file_atomically(file_, [&](format::OutputFile& out) {
      out.write(encode_header(header, kDeltaFile));
      out.write(manifest_bytes);
      for (size_t t = 0; t < manifest.tables.size(); ++t) {
        const TableValues& values = changes_[t].values;
        const std::span<const int64_t> ids =
            manifest.tables[t].dynamic ? values.keys : values.row_ids;
        out.write(std::as_bytes(ids));
        out.write(padding_after(ids.size_bytes()));
        encoder.encode(tables_[t], values,
                       [&](std::span<const std::byte> bytes) { out.write(bytes); });
        out.write(padding_after(manifest.tables[t].rows.size));
        if (manifest.tables[t].dynamic) {
          const std::span<const int64_t> removed = changes_[t].removed;
          out.write(std::as_bytes(removed));
          out.write(padding_after(removed.size_bytes()));
        }
      }
      for (const ServingArray& array : arrays_) {
        out.write(std::as_bytes(array.values));
        out.write(padding_after(array.values.size_bytes()));
      }
    });
    return {.file = file_, .version = version_, .sequence = sequence_, .rows = rows};
  }

  std::vector<TableConfig> tables_;
  ServingDtype dtype_;
  std::map<std::string, std::string> metadata_;
  std::vector<std::vector<float>> array_values_;
  std::vector<ServingArray> arrays_;  // their values in array_values_
  std::vector<TableChanges> changes_;
  int64_t sequence_ = 0;
  int64_t version_ = 0;
  uint64_t base_id_ = 0;
  std::shared_ptr<std::atomic<bool>> failed_;
  fs::path file_;
};

}  // namespace

}  // namespace recemb::internal

namespace recemb {

std::function<PublishResult()> begin_publish(Embedding& embedding, const std::filesystem::path& dir,
                                             const PublishOptions& options) {
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
  internal::Model& model = internal::PartAccess::model(embedding);
  const std::optional<internal::Publication>& last = model.publication;
  const bool base =
      !last || model.untracked_writes || last->failed_write->load() || last->dir != dir ||
      last->dtype != options.dtype ||
      !std::filesystem::exists(last->dir / std::to_string(last->version) / internal::kBaseFileName);
  if (base) {
    PublishResult result = internal::publish_base(embedding, model, dir, options);
    return [result] { return result; };
  }
  auto writer = std::make_shared<internal::DeltaWriter>(model, options);
  return [writer] { return writer->write(); };
}

PublishResult publish(Embedding& embedding, const std::filesystem::path& dir,
                      const PublishOptions& options) {
  return begin_publish(embedding, dir, options)();
}

}  // namespace recemb
