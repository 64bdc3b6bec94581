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
//
// One implementation for every rank count and placement (one process with whole tables is one
// rank whose parts are whole). Each rank writes its own parts' rows at their places in the files
// (checkpoint/part_io.h), so no rank ever holds a whole table it does not own. Steps 1 to 3 run as
// phases, each ending with the ranks agreeing on the outcome (embedding/agreement.h), so an error
// on one rank throws on all, of its type, and nobody waits forever:
//   a. every rank validates the options; rank 0 checks that the checkpoint does not exist,
//      creates root and the temporary directory and every table variable's file at its full size;
//   b. every rank writes and fsyncs its parts' rows (a replicated table: rank 0's copy); a part
//      holding its whole table is written as one stream, checksummed on the way; rank 0 writes
//      the extra arrays (checksummed on the way too);
//      a dynamic table's part gathers its keys' rows and key arrays in file order and writes them
//      at its range of the files (checkpoint/dynamic_checkpoint.h; the ranks all-gather every
//      part's number of keys before phase a, which sizes the files);
//   c. the checksums of the wholly written files are all-gathered; the other files are dealt
//      round-robin to the ranks, which read them back for their block and whole-file checksums,
//      and those records are all-gathered too;
//   d. rank 0 writes the manifest, syncs and publishes the directory; then it prunes.
// Rank 0 removes the temporary directory when any phase fails on any rank.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <system_error>
#include <utility>

#include "recemb/checkpoint.h"
#include "recemb/error.h"

#include "checkpoint/data_file.h"
#include "checkpoint/dynamic_checkpoint.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/part_io.h"
#include "config/validate.h"
#include "embedding/parts.h"
#include "format/config_json.h"
#include "support/collectives.h"
#include "support/file_io.h"
#include "util/check.h"

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

void append_u64(std::vector<std::byte>& out, uint64_t value) {
  const auto* bytes = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof value);
}

uint64_t take_u64(std::span<const std::byte>& in) {
  uint64_t value = 0;
  RECEMB_CHECK(in.size() >= sizeof value);
  std::memcpy(&value, in.data(), sizeof value);
  in = in.subspan(sizeof value);
  return value;
}

// What the parts of a dynamic table write (checkpoint/dynamic_checkpoint.h): the sizes of the
// parts that write keys, by index in the table, and the table's counters.
struct DynamicSummary {
  std::map<size_t, internal::DynamicPartSize> parts;
  internal::VocabularyCounters counters;
  bool pending_sketch_in_use = false;

  // The keys and pending counts of the parts before `part`: where its rows go in the files.
  internal::DynamicPartSize offset_of(size_t part) const {
    internal::DynamicPartSize offset;
    for (auto it = parts.begin(); it != parts.end() && it->first < part; ++it) {
      offset.keys += it->second.keys;
      offset.pending += it->second.pending;
    }
    return offset;
  }
  internal::DynamicPartSize total() const { return offset_of(std::numeric_limits<size_t>::max()); }
};

// Every dynamic table's summary, by table index, on every rank (one all-gather of what each rank's
// key-writing parts hold).
std::map<size_t, DynamicSummary> summarize_dynamic_tables(const Embedding& embedding,
                                                          Communicator& communicator) {
  std::vector<std::byte> mine;
  for (const auto& local : internal::PartAccess::local_parts(embedding)) {
    if (local.dynamic == nullptr || !internal::writes_keys(local.part)) continue;
    const internal::DynamicPartSize size = internal::dynamic_part_size(*local.dynamic);
    const internal::VocabularyCounters& counters = local.dynamic->counters();
    for (const int64_t value :
         {static_cast<int64_t>(local.part.table), static_cast<int64_t>(local.part.index_in_table),
          size.keys, size.pending, counters.inserted, counters.evicted,
          counters.not_admitted_lookups,
          int64_t{local.dynamic->pending().sketch_in_use() ? 1 : 0}}) {
      append_u64(mine, static_cast<uint64_t>(value));
    }
  }
  std::vector<std::byte> all;
  std::vector<int64_t> counts(static_cast<size_t>(communicator.size()));
  communicator.all_gather(mine, all, counts);
  std::map<size_t, DynamicSummary> summaries;
  for (std::span<const std::byte> records = all; !records.empty();) {
    DynamicSummary& summary = summaries[static_cast<size_t>(take_u64(records))];
    internal::DynamicPartSize& size = summary.parts[static_cast<size_t>(take_u64(records))];
    size.keys = static_cast<int64_t>(take_u64(records));
    size.pending = static_cast<int64_t>(take_u64(records));
    summary.counters.inserted += static_cast<int64_t>(take_u64(records));
    summary.counters.evicted += static_cast<int64_t>(take_u64(records));
    summary.counters.not_admitted_lookups += static_cast<int64_t>(take_u64(records));
    summary.pending_sketch_in_use = summary.pending_sketch_in_use || take_u64(records) != 0;
  }
  return summaries;
}

// The manifest of a save of `embedding`, with every data file's name and size but no checksums.
Manifest describe(const Embedding& embedding, const SaveOptions& options,
                  const std::map<size_t, DynamicSummary>& dynamic_tables) {
  const EmbeddingOptions& embedding_options = embedding.options();
  Manifest manifest{
      .step = embedding.step(),
      .checksum_block_bytes = options.checksum_block_bytes,
      .optimizer = embedding_options.optimizer
                       ? format::optimizer_to_json(*embedding_options.optimizer)
                       : support::Json(),
      .seed = embedding_options.seed,
      .non_finite_gradients = embedding_options.non_finite_gradients,
      .features = embedding.features(),
      .metadata = options.metadata,
  };
  for (size_t t = 0; t < embedding.tables().size(); ++t) {
    internal::TableEntry table{.config = embedding.tables()[t]};
    const std::optional<Optimizer>& optimizer =
        internal::effective_optimizer(table.config, embedding_options.optimizer);
    const std::optional<std::string> trained_by =
        optimizer ? std::optional<std::string>(optimizer_name(*optimizer)) : std::nullopt;
    int64_t rows = table.config.vocabulary_size;
    if (table.config.dynamic_vocabulary) {
      const DynamicSummary& summary = dynamic_tables.at(t);  // some part writes its keys
      const internal::DynamicPartSize total = summary.total();
      rows = total.keys;
      table.dynamic = internal::expected_dynamic_entry(t, total.keys, total.pending);
      table.dynamic->counters = summary.counters;
      table.dynamic->pending_sketch_in_use = summary.pending_sketch_in_use;
    }
    if (table.config.optimizer) {
      table.optimizer = format::optimizer_to_json(*table.config.optimizer);
      table.config.optimizer.reset();
    }
    table.variables = internal::expected_variables(table.config, rows, trained_by);
    for (internal::ArrayEntry& variable : table.variables) {
      int64_t elements = 1;
      for (int64_t extent : variable.shape) elements *= extent;
      variable.data = {
          .file =
              internal::variable_file_name(t, variable.name, internal::value_dtype(variable.dtype)),
          .bytes = static_cast<uint64_t>(elements * internal::element_bytes(variable.dtype))};
    }
    manifest.tables.push_back(std::move(table));
  }
  manifest.format_version = internal::minimum_format_version(manifest);
  for (size_t i = 0; i < options.extra_arrays.size(); ++i) {
    const NamedArray& extra = options.extra_arrays[i];
    manifest.extra_arrays.push_back(
        {.name = extra.name,
         .shape = {static_cast<int64_t>(extra.values.size())},
         .data = {.file = internal::extra_array_file_name(i), .bytes = extra.values.size_bytes()}});
  }
  return manifest;
}

// Writes the extra arrays into `directory`, recording their checksums in `manifest`.
void write_extra_arrays(const SaveOptions& options, const fs::path& directory, Manifest& manifest) {
  for (size_t i = 0; i < options.extra_arrays.size(); ++i) {
    internal::DataFile& data = manifest.extra_arrays[i].data;
    data = internal::write_data_file(directory / data.file,
                                     std::as_bytes(options.extra_arrays[i].values),
                                     options.checksum_block_bytes);
  }
}

// Creates `directory` and its missing parents, each made durable in its parent directory.
void create_directories_durably(const fs::path& directory) {
  const fs::path normal = fs::absolute(directory).lexically_normal();
  std::vector<fs::path> missing;
  for (fs::path path = normal.has_filename() ? normal : normal.parent_path(); !fs::exists(path);
       path = path.parent_path()) {
    missing.push_back(path);
  }
  std::reverse(missing.begin(), missing.end());  // outermost first
  for (const fs::path& path : missing) {
    support::file_system().create_directory(path);
    support::file_system().sync_directory(path.parent_path());
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
    support::file_system().rename(checkpoints[i].path, root / internal::temporary_name("delete"));
  }
  // Listed first: removing while listing may skip entries.
  for (const fs::path& entry : support::file_system().list(root)) {
    if (entry.filename().string().starts_with(internal::kTemporaryPrefix)) {
      support::file_system().remove_all(entry);
    }
  }
}

// Removes the temporary directory of a failed save; a failure to remove it is ignored (the error
// of the save matters, and the next save removes the leftover).
void remove_quietly(const fs::path& temporary) {
  try {
    support::file_system().remove_all(temporary);
  } catch (...) {
  }
}

// Throws FailedPrecondition unless `destination` is free.
void check_destination(const fs::path& destination, int64_t step) {
  if (fs::exists(destination)) {
    throw FailedPrecondition("a checkpoint of step " + std::to_string(step) + " already exists: '" +
                             destination.string() + "'");
  }
}

void prune_after_publishing(const fs::path& root, const fs::path& destination, int keep_last) {
  try {
    prune(root, keep_last);
  } catch (const std::system_error& error) {
    throw std::system_error(error.code(),
                            "checkpoint '" + destination.string() +
                                "' is saved, but deleting older ones failed: " + error.what());
  }
}

// Whether this rank writes `variable` of `part`: every part its own rows and columns, except that
// only rank 0's copy of a replicated table is written, and of a slot narrower than the table that
// a column-wise table keeps whole in every part, only the first part's.
bool writes(const internal::TablePart& part, const internal::PartVariable<const float>& variable,
            int64_t dim) {
  if (part.strategy == ShardingStrategy::kReplicated) return part.rank == 0;
  if (part.strategy == ShardingStrategy::kColumnWise && variable.width != dim) {
    return part.index_in_table == 0;
  }
  return true;
}

// Appends the record of the file at `index` (in manifest order) to `out`: the index, the
// whole-file checksum, the number of blocks and the block checksums.
void append_record(std::vector<std::byte>& out, size_t index, const internal::DataFile& record) {
  append_u64(out, index);
  append_u64(out, record.checksum);
  append_u64(out, record.block_checksums.size());
  for (uint64_t block : record.block_checksums) append_u64(out, block);
}

// All-gathers every rank's records (append_record) into `files`; returns which files got one.
std::vector<bool> gather_records(Communicator& communicator, std::span<const std::byte> mine,
                                 const std::vector<internal::DataFile*>& files) {
  std::vector<std::byte> all;
  std::vector<int64_t> counts(static_cast<size_t>(communicator.size()));
  communicator.all_gather(mine, all, counts);
  std::vector<bool> recorded(files.size(), false);
  std::span<const std::byte> records = all;
  while (!records.empty()) {
    const auto index = static_cast<size_t>(take_u64(records));
    internal::DataFile& file = *files[index];
    file.checksum = take_u64(records);
    file.block_checksums.resize(take_u64(records));
    for (uint64_t& block : file.block_checksums) block = take_u64(records);
    recorded[index] = true;
  }
  return recorded;
}

// Phase c: the checksums of the table variables' files on every rank, in `files`. Those a rank
// wrote whole in phase b (`written_whole`, checksummed while writing) are shared as they are; the
// others are dealt round-robin to the ranks, which read them back, and shared in turn.
void checksum_files(Communicator& communicator, const fs::path& directory, int64_t block_bytes,
                    const std::vector<internal::DataFile*>& files,
                    const std::vector<std::pair<size_t, internal::DataFile>>& written_whole) {
  std::vector<std::byte> mine;
  for (const auto& [index, record] : written_whole) append_record(mine, index, record);
  const std::vector<bool> recorded = gather_records(communicator, mine, files);
  std::vector<size_t> unrecorded;
  for (size_t i = 0; i < files.size(); ++i) {
    if (!recorded[i]) unrecorded.push_back(i);
  }
  mine.clear();
  support::agree(communicator, [&] {
    for (size_t k = static_cast<size_t>(communicator.rank()); k < unrecorded.size();
         k += static_cast<size_t>(communicator.size())) {
      const internal::DataFile& expected = *files[unrecorded[k]];
      const internal::DataFile record =
          internal::checksum_data_file(directory / expected.file, block_bytes);
      if (record.bytes != expected.bytes) {
        throw DataLoss("checkpoint file '" + (directory / expected.file).string() + "' has " +
                       std::to_string(record.bytes) + " bytes after writing, not " +
                       std::to_string(expected.bytes));
      }
      append_record(mine, unrecorded[k], record);
    }
  });
  gather_records(communicator, mine, files);
}

}  // namespace

fs::path save_checkpoint(const Embedding& embedding, const fs::path& root,
                         const SaveOptions& options) {
  Communicator& communicator = internal::PartAccess::communicator(embedding);
  const bool first = communicator.rank() == 0;
  const int64_t step = embedding.step();
  fs::path destination = root / internal::checkpoint_directory_name(step);
  support::agree(communicator, [&] { validate_options(options); });
  const std::map<size_t, DynamicSummary> dynamic_tables =
      summarize_dynamic_tables(embedding, communicator);
  Manifest manifest = describe(embedding, options, dynamic_tables);
  std::vector<internal::DataFile*> files;    // the tables' arrays, in manifest order
  std::map<std::string, size_t> file_index;  // by file name
  for (internal::TableEntry& table : manifest.tables) {
    for (internal::ArrayEntry* array : table.arrays()) {
      file_index.emplace(array->data.file, files.size());
      files.push_back(&array->data);
    }
  }

  fs::path temporary;  // rank 0: the directory to remove if the save fails
  bool published = false;
  try {
    support::agree(communicator, [&] {  // phase a
      if (!first) return;
      check_destination(destination, step);
      create_directories_durably(root);
      temporary = root / internal::temporary_name(internal::checkpoint_directory_name(step));
      support::file_system().create_directory(temporary);
      for (const internal::DataFile* file : files) {
        internal::create_sized_file(temporary / file->file, file->bytes);
      }
      support::file_system().sync_directory(temporary);
    });
    const fs::path directory = support::broadcast(communicator, temporary.string());

    // Phase b. A part holding its whole table (always, for one process with whole tables) is
    // written as one stream and checksummed on the way, so that phase c need not read it back.
    std::vector<std::pair<size_t, internal::DataFile>> written_whole;
    support::agree(communicator, [&] {
      for (const auto& local : internal::PartAccess::local_parts(embedding)) {
        const int64_t dim = embedding.tables()[local.part.table].dim;
        if (local.dynamic != nullptr) {
          // Rows gathered in file order: not checksummed on the way (phase c reads them back).
          std::vector<bool> written;
          for (const internal::PartVariable<const float>& variable : local.variables) {
            written.push_back(writes(local.part, variable, dim));
          }
          const size_t writer = internal::writes_keys(local.part) ? local.part.index_in_table : 0;
          const internal::DynamicPartSize offset =
              dynamic_tables.at(local.part.table).offset_of(writer);
          internal::write_dynamic_part(directory, manifest.tables[local.part.table], local, written,
                                       offset.keys, offset.pending);
          continue;
        }
        for (const internal::PartVariable<const float>& variable : local.variables) {
          if (!writes(local.part, variable, dim) || local.part.rows == 0) continue;
          const std::string& file =
              manifest.tables[local.part.table].variable(variable.name).data.file;
          const fs::path path = directory / file;
          if (local.part.whole) {
            written_whole.emplace_back(
                file_index.at(file),
                internal::write_data_file(path, variable.bytes, options.checksum_block_bytes));
          } else {
            internal::write_part_rows(path, local.part, variable);
          }
        }
      }
      if (first) write_extra_arrays(options, directory, manifest);
    });

    checksum_files(communicator, directory, options.checksum_block_bytes, files,
                   written_whole);  // phase c

    support::agree(communicator, [&] {  // phase d
      if (!first) return;
      internal::write_manifest(directory, manifest);
      support::file_system().sync_directory(directory);
      support::publish(directory, destination);
      published = true;
    });
  } catch (...) {
    if (!temporary.empty() && !published) remove_quietly(temporary);
    throw;
  }
  support::agree(communicator, [&] {
    if (first) prune_after_publishing(root, destination, options.keep_last);
  });
  return destination;
}

}  // namespace recemb
