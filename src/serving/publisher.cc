// publish (recemb/publish.h): a base through export's writer, then deltas of the rows the
// Embedding's change logs marked (embedding/change_log.h, reached through ChangeAccess), encoded
// by the exporter's TableEncoder (docs/serving.md, "Publishing deltas").

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "recemb/error.h"
#include "recemb/publish.h"

#include "embedding/parts.h"
#include "format/checksum.h"
#include "serving/format.h"
#include "serving/table_encoder.h"
#include "support/collectives.h"
#include "support/file_io.h"
#include "support/file_system.h"

namespace recemb::internal {

// Where an Embedding last published: the model directory, the version it wrote a base in, the
// sequence of the last delta taken (0: the base), the base's identity (its manifest checksum) and
// the dtype of them all. The Embedding keeps it (Model::publication) without knowing what it is.
struct PublicationState {
  std::filesystem::path dir;
  int64_t version = 0;
  int64_t sequence = 0;
  uint64_t base_id = 0;
  ServingDtype dtype = ServingDtype::kFloat32;
  // Set by a delta's write that failed (possibly on another thread): the next publish is a base.
  std::shared_ptr<std::atomic<bool>> failed_write;
  // The bytes of the deltas written since the base (added by each delta's write, possibly on
  // another thread), for PublishOptions::base_every_bytes.
  std::shared_ptr<std::atomic<int64_t>> delta_bytes;
  // What identifies the base file written: its size and its first bytes (the header, holding the
  // manifest's checksum that deltas name as their base).
  uint64_t base_size = 0;
  std::vector<std::byte> base_header;
};

namespace {

namespace fs = std::filesystem;

// The names a publish gives a version directory while it writes its base, and while it removes
// it: not versions, so that a reader (recemb serve) never lists a version without its base, nor
// one half removed.
constexpr char kStagingPrefix[] = ".publishing-";
constexpr char kRemovingPrefix[] = ".removing-";

// The versions in `dir`, increasing.
std::vector<int64_t> versions_in(const fs::path& dir) {
  std::vector<int64_t> versions;
  for (const fs::path& entry : support::file_system().list(dir)) {
    const std::optional<int64_t> version = model_version_of(entry.filename().string());
    if (version && fs::is_directory(entry)) versions.push_back(*version);
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

// 1 + the largest version directory in `dir` (1 if none), creating `dir` when absent.
// FailedPrecondition when the largest is int64's maximum: no version can follow it.
int64_t next_version(const fs::path& dir) {
  if (!fs::is_directory(dir)) support::file_system().create_directory(dir);
  const std::vector<int64_t> versions = versions_in(dir);
  if (versions.empty()) return 1;
  if (versions.back() == std::numeric_limits<int64_t>::max()) {
    throw FailedPrecondition("publish into '" + dir.string() + "': it holds version " +
                             std::to_string(versions.back()) +
                             ", the largest a version can be: no base can follow it; publish "
                             "into another model directory, or remove that version");
  }
  return versions.back() + 1;
}

// Removes the versions of `dir` beyond its `keep` newest (keep >= 1), each renamed out of the
// versions' names first, and what interrupted removals left. Returns the versions removed.
std::vector<int64_t> remove_superseded_versions(const fs::path& dir, int keep) {
  support::FileSystem& files = support::file_system();
  for (const fs::path& entry : files.list(dir)) {
    if (entry.filename().string().starts_with(kRemovingPrefix)) files.remove_all(entry);
  }
  std::vector<int64_t> versions = versions_in(dir);
  if (std::ssize(versions) <= keep) return {};
  versions.resize(versions.size() - static_cast<size_t>(keep));
  for (const int64_t version : versions) {
    const fs::path removing = dir / (kRemovingPrefix + std::to_string(version));
    files.rename(dir / std::to_string(version), removing);
    files.remove_all(removing);
  }
  files.sync_directory(dir);
  return versions;
}

// The size and the first kServingHeaderSize bytes of the file `path` (fewer if it is shorter);
// nullopt when there is no such file.
std::optional<std::pair<uint64_t, std::vector<std::byte>>> file_identity(const fs::path& path) {
  std::unique_ptr<support::ReadableFile> file;
  try {
    file = support::file_system().open(path);
  } catch (const std::system_error& error) {
    if (error.code() == std::errc::no_such_file_or_directory) return std::nullopt;
    throw;
  }
  const uint64_t size = file->size();
  std::vector<std::byte> header(static_cast<size_t>(std::min(size, kServingHeaderSize)));
  header.resize(file->read_at(0, header));
  return std::pair{size, std::move(header)};
}

// Collective with several ranks: rank 0 chooses the version, writes the base into a staging
// directory, renames it to the version's name and removes the versions beyond
// options.keep_versions; every rank gathers the tables and agrees on rank 0's errors.
PublishResult publish_base(Embedding& embedding, const fs::path& dir, const PublishOptions& options,
                           std::string reason) {
  Communicator& communicator = PartAccess::communicator(embedding);
  const bool root = communicator.rank() == 0;
  int64_t version = 0;
  support::agree(communicator, [&] {
    if (!root) return;
    version = next_version(dir);
    const fs::path staging = dir / (kStagingPrefix + std::to_string(version));
    support::file_system().remove_all(staging);  // left by an interrupted publish
    support::file_system().create_directory(staging);
  });
  version = support::union_over_ranks(communicator, {version}).back();  // rank 0's, the largest
  const fs::path staging = dir / (kStagingPrefix + std::to_string(version));
  const fs::path directory = dir / std::to_string(version);
  WrittenModel written;
  std::optional<std::pair<uint64_t, std::vector<std::byte>>> identity;
  try {
    written = write_serving_model(embedding, staging / kModelFileName,
                                  {.dtype = options.dtype,
                                   .extra_arrays = options.extra_arrays,
                                   .metadata = options.metadata},
                                  communicator.size() > 1);
    support::agree(communicator, [&] {
      if (!root) return;
      identity = file_identity(staging / kModelFileName);
      support::file_system().rename(staging, directory);
      support::file_system().sync_directory(dir);
    });
  } catch (...) {
    // The staging directory, empty or holding a complete model no version names.
    if (root) support::file_system().remove_all(staging);
    throw;
  }
  ChangeAccess::start_tracking(embedding);
  ChangeAccess::publication(embedding) = std::make_shared<PublicationState>(
      PublicationState{.dir = dir,
                       .version = version,
                       .sequence = 0,
                       .base_id = written.manifest_checksum,
                       .dtype = options.dtype,
                       .failed_write = std::make_shared<std::atomic<bool>>(false),
                       .delta_bytes = std::make_shared<std::atomic<int64_t>>(0),
                       .base_size = identity ? identity->first : 0,
                       .base_header = identity ? identity->second : std::vector<std::byte>()});
  PublishResult result{.file = directory / kModelFileName,
                       .version = version,
                       .sequence = 0,
                       .rows = written.rows,
                       .bytes = static_cast<int64_t>(identity ? identity->first : 0),
                       .base_reason = std::move(reason)};
  // The base is published; a failure removing older versions throws with it in place.
  if (options.keep_versions > 0) {
    support::agree(communicator, [&] {
      if (root) result.removed_versions = remove_superseded_versions(dir, options.keep_versions);
    });
  }
  return result;
}

// Why the next publish into `dir` of an Embedding whose last publish was `publication` (null:
// none) and whose parts have `changes` must be a base; empty: a delta will do. `root`: this rank
// writes the files, and alone knows of a failed write and of the base file's state.
std::string base_reason(const PublicationState* publication,
                        const std::vector<PartChanges>& changes, const fs::path& dir,
                        const PublishOptions& options, bool root) {
  if (publication == nullptr) {
    return "the first publish of this Embedding into '" + dir.string() + "'";
  }
  const PublicationState& last = *publication;
  if (last.dir != dir) {
    return "another directory than the previous publish's ('" + last.dir.string() + "')";
  }
  if (last.dtype != options.dtype) {
    return "dtype " + std::string(serving_dtype_name(options.dtype)) + ", the base's " +
           std::string(serving_dtype_name(last.dtype));
  }
  if (std::any_of(changes.begin(), changes.end(),
                  [](const PartChanges& part) { return part.untracked; })) {
    return "rows written since by other than training steps (write_variable, "
           "write_dynamic_table, a restored checkpoint, variable_data)";
  }
  if (options.base_every_deltas > 0 && last.sequence >= options.base_every_deltas) {
    return "the base has " + std::to_string(last.sequence) + " deltas (base_every_deltas " +
           std::to_string(options.base_every_deltas) + ")";
  }
  const int64_t delta_bytes = last.delta_bytes->load();
  if (options.base_every_bytes > 0 && delta_bytes >= options.base_every_bytes) {
    return "the base's deltas hold " + std::to_string(delta_bytes) + " bytes (base_every_bytes " +
           std::to_string(options.base_every_bytes) + ")";
  }
  if (!root) return {};
  if (last.failed_write->load()) return "the previous delta's write failed";
  const fs::path base = dir / std::to_string(last.version) / kModelFileName;
  std::optional<std::pair<uint64_t, std::vector<std::byte>>> identity;
  try {
    identity = file_identity(base);
  } catch (const std::system_error& error) {  // a base, rather than this rank's error alone
    return "the base '" + base.string() + "' cannot be read (" + error.what() + ")";
  }
  if (!identity) return "the base '" + base.string() + "' is gone";
  if (identity->first != last.base_size || identity->second != last.base_header) {
    return "the base '" + base.string() +
           "' is not the file this Embedding wrote (replaced since): no server could apply a "
           "delta of it";
  }
  return {};
}

// One table's changes: its changed rows (static: row ids; dynamic: upserted keys) with their
// values, and a dynamic table's removed keys, increasing.
struct TableChanges {
  TableValues values;
  std::vector<int64_t> removed;
};

// Table t's changes on every rank (collective with several): the rows each rank's parts marked
// (a static table's rows, a dynamic table's keys that hold one), and a dynamic table's keys
// removed and not admitted again since. Their values come from this process's own storage when
// it holds the table whole alone, else from the whole table gathered (read_variable,
// read_dynamic_table).
TableChanges changes_of(const Embedding& embedding, const std::vector<PartChanges>& parts,
                        size_t t) {
  const TableConfig& table = embedding.tables()[t];
  const bool dynamic = table.dynamic_vocabulary.has_value();
  std::vector<int64_t> ids;
  std::vector<int64_t> removed;
  const PartChanges* whole = nullptr;  // a part holding table t whole
  for (const PartChanges& state : parts) {
    if (state.part.table != t) continue;
    if (state.whole) whole = &state;
    const std::span<const uint8_t> changed = state.changed_rows;
    if (const DynamicPart* part = state.dynamic) {
      const KeyIndex& index = part->index();
      for (int64_t slot = 0; slot < index.slot_end(); ++slot) {
        if (changed[static_cast<size_t>(slot)] && index.occupied(slot)) {
          ids.push_back(index.key_of(slot));
        }
      }
      for (const int64_t key : state.removed_keys) {
        if (index.find(key) == KeyIndex::kAbsent) removed.push_back(key);
      }
    } else {
      for (int64_t row = 0; row < state.part.rows; ++row) {
        if (changed[static_cast<size_t>(row)]) ids.push_back(state.part.global_row(row));
      }
    }
  }
  Communicator& communicator = PartAccess::communicator(embedding);
  TableChanges changes;
  TableValues& values = changes.values;
  (dynamic ? values.keys : values.row_ids) =
      support::union_over_ranks(communicator, std::move(ids));
  const std::vector<int64_t>& changed_ids = dynamic ? values.keys : values.row_ids;
  const int64_t dim = table.dim;
  values.owned.reserve(changed_ids.size() * static_cast<size_t>(dim));
  // Other ranks' changed rows come from read_variable; a part's own are read from its storage,
  // a row at a time (decoded exactly from a 16-bit table's).
  if (communicator.size() > 1) whole = nullptr;
  const auto append_own_row = [&](int64_t local_row) {
    values.owned.resize(values.owned.size() + static_cast<size_t>(dim));
    whole->storage->read_rows(local_row, 1, values.owned.data() + values.owned.size() - dim);
  };
  if (dynamic) {
    changes.removed = support::union_over_ranks(communicator, std::move(removed));
    if (whole != nullptr) {
      for (const int64_t key : changed_ids) append_own_row(whole->dynamic->index().find(key));
    } else {
      const DynamicTableContents contents = embedding.read_dynamic_table(table.name);
      for (const int64_t key : changed_ids) {
        const auto at = std::lower_bound(contents.keys.begin(), contents.keys.end(), key);
        const float* row = contents.parameters.data() + (at - contents.keys.begin()) * dim;
        values.owned.insert(values.owned.end(), row, row + dim);
      }
    }
  } else if (whole != nullptr) {
    for (const int64_t id : changed_ids) append_own_row(id);
  } else {
    std::vector<float> gathered(static_cast<size_t>(table.vocabulary_size * dim));
    embedding.read_variable(table.name, "parameters", gathered);
    for (const int64_t id : changed_ids) {
      const float* row = gathered.data() + id * dim;
      values.owned.insert(values.owned.end(), row, row + dim);
    }
  }
  values.rows = values.owned;
  values.num_rows = std::ssize(changed_ids);
  return changes;
}

// A delta taken from the Embedding (its changed rows copied, the options' arrays and metadata
// too), written by write(): on any thread, while the Embedding trains on.
class DeltaWriter {
 public:
  DeltaWriter(Embedding& embedding, const std::vector<PartChanges>& parts,
              const PublishOptions& options)
      : tables_(embedding.tables()),
        dtype_(options.dtype),
        metadata_(options.metadata),
        writes_file_(embedding.rank() == 0) {
    PublicationState& publication = *ChangeAccess::publication(embedding);
    sequence_ = publication.sequence + 1;
    version_ = publication.version;
    base_id_ = publication.base_id;
    failed_ = publication.failed_write;
    delta_bytes_ = publication.delta_bytes;
    file_ = publication.dir / std::to_string(version_) / delta_file_name(sequence_);
    for (size_t t = 0; t < tables_.size(); ++t) changes_.push_back(changes_of(embedding, parts, t));
    for (const ServingArray& array : options.extra_arrays) {
      array_values_.emplace_back(array.values.begin(), array.values.end());
      arrays_.push_back({.name = array.name, .shape = array.shape});
    }
    for (size_t a = 0; a < arrays_.size(); ++a) arrays_[a].values = array_values_[a];
    // Taken: the next delta holds the changes from here on.
    ChangeAccess::clear(embedding);
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
    BlobLayout layout;
    int64_t rows = 0;
    for (size_t t = 0; t < tables_.size(); ++t) {
      const TableConfig& table = tables_[t];
      const TableValues& values = changes_[t].values;
      const bool dynamic = table.dynamic_vocabulary.has_value();
      DeltaTable& entry = manifest.tables.emplace_back(
          DeltaTable{.name = table.name, .dim = table.dim, .dynamic = dynamic});
      entry.ids = layout.whole(std::as_bytes(std::span(dynamic ? values.keys : values.row_ids)));
      entry.rows = layout.encoded(encoder, table, values);
      if (dynamic) entry.removed = layout.whole(std::as_bytes(std::span(changes_[t].removed)));
      rows += values.num_rows;
    }
    for (const ServingArray& array : arrays_) {
      manifest.extra_arrays.push_back({.name = array.name, .shape = array.shape});
      manifest.extra_blobs.push_back(layout.whole(std::as_bytes(array.values)));
    }
    std::string text;
    try {
      text = encode_delta_manifest(manifest);
    } catch (const support::JsonError& error) {  // names that are not UTF-8
      throw InvalidArgument(context +
                            ": the extra array names or metadata cannot be written as JSON "
                            "(UTF-8): " +
                            error.what());
    }
    const auto manifest_bytes = std::as_bytes(std::span(text));
    const ServingHeader header{
        .format_version = kDeltaFile.format_version,
        .manifest_size = manifest_bytes.size(),
        .manifest_checksum = format::checksum(manifest_bytes),
        .file_size = kServingHeaderSize + manifest_bytes.size() + layout.data_size()};
    PublishResult result{.file = file_,
                         .version = version_,
                         .sequence = sequence_,
                         .rows = rows,
                         .bytes = static_cast<int64_t>(header.file_size)};
    delta_bytes_->fetch_add(result.bytes);  // every rank counts, so that every rank agrees
    if (!writes_file_) return result;       // rank 0 writes
    support::write_file_atomically(file_, [&](support::OutputFile& out) {
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
    return result;
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
  std::shared_ptr<std::atomic<int64_t>> delta_bytes_;
  fs::path file_;
  bool writes_file_;
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
  if (options.base_every_deltas < 0 || options.base_every_bytes < 0 || options.keep_versions < 0) {
    throw InvalidArgument("PublishOptions: base_every_deltas (" +
                          std::to_string(options.base_every_deltas) + "), base_every_bytes (" +
                          std::to_string(options.base_every_bytes) + ") and keep_versions (" +
                          std::to_string(options.keep_versions) + ") must be >= 0 (0: no bound)");
  }
  const std::vector<internal::PartChanges> changes = internal::ChangeAccess::changes(embedding);
  // Rank 0 alone writes, so it alone knows of a failed write or a missing base; any rank's
  // reason for a base is every rank's.
  std::string reason = internal::base_reason(internal::ChangeAccess::publication(embedding).get(),
                                             changes, dir, options, embedding.rank() == 0);
  const bool base = support::union_over_ranks(internal::PartAccess::communicator(embedding),
                                              {reason.empty() ? 0 : 1})
                        .back() == 1;
  if (base) {
    if (reason.empty()) reason = "rank 0's reason";
    PublishResult result = internal::publish_base(embedding, dir, options, std::move(reason));
    return [result] { return result; };
  }
  auto writer = std::make_shared<internal::DeltaWriter>(embedding, changes, options);
  return [writer] { return writer->write(); };
}

PublishResult publish(Embedding& embedding, const std::filesystem::path& dir,
                      const PublishOptions& options) {
  return begin_publish(embedding, dir, options)();
}

std::optional<int64_t> model_version_of(std::string_view name) {
  if (name.empty() || name[0] < '1' || name[0] > '9') return std::nullopt;
  int64_t version = 0;
  const auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), version);
  if (error != std::errc() || end != name.data() + name.size()) return std::nullopt;
  return version;
}

std::string delta_file_name(int64_t sequence) {
  char name[48];
  std::snprintf(name, sizeof name, "delta-%08lld.recemb", static_cast<long long>(sequence));
  return name;
}

}  // namespace recemb
