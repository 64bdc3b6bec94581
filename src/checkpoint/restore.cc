// restore_checkpoint and load_checkpoint (recemb/checkpoint.h).
//
// One implementation for every rank count and placement (one process with whole tables is one
// rank whose parts are whole), in three phases, so that every error in the checkpoint or in the
// request is found before the embedding changes:
//   1. plan: read the manifest, match tables and variables, check shapes, optimizers and the
//      resize policy;
//   2. verify: read every data file once and check its size and every checksum; the table
//      variables' files are dealt round-robin to the ranks, and every rank reads the small extra
//      arrays (which it returns);
//   2b. conversions into float16 (RestoreOptions::convert_dtype): their values read and checked;
//   2c. keys: each rank reads the keys of the dynamic tables that its parts hold
//      (checkpoint/dynamic_checkpoint.h) and checks that the parts have room for them;
//   3. load: each rank reads its parts' rows and columns straight into them, at their places in
//      the files (checkpoint/part_io.h; a whole part is one read of the whole file); a dynamic
//      table's part first takes its keys.
// The ranks agree on the outcome of each phase (embedding/agreement.h), so an error on one rank
// throws on all. Phase 3 is not verified again (a rank reads rows, not whole checksum blocks): an
// I/O error in it, or a file changed or truncated since phase 2, leaves the embedding partially
// restored (the message says so). Files are not kept open between the phases, as a model may have
// more variables than a process may open files.
#include <algorithm>
#include <map>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

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
#include "kernels/half_precision.h"
#include "support/collectives.h"
#include "support/file_io.h"
#include "support/number_text.h"
#include "util/check.h"

namespace recemb {
namespace {

namespace fs = std::filesystem;
using internal::ArrayEntry;
using internal::Manifest;
using internal::TableEntry;

std::string variable_description(const std::string& table, const std::string& variable) {
  return "table '" + table + "' variable '" + variable + "'";
}

// One variable to load: the first `rows` rows of its file into the same rows of the embedding's
// variable (the rows both have).
struct VariableLoad {
  const ArrayEntry* saved;  // the manifest's record of the variable
  std::string table;
  std::string variable;
  int64_t rows;
  // The values' type in the embedding (a table's parameters are of its dtype, slots float32);
  // another than the checkpoint's (saved->dtype) only with RestoreOptions::convert_dtype.
  DType dtype = DType::kFloat32;
};

// Phase 2: verifies every data file; returns the extra arrays, read on the way (they are not
// embedding state, so reading them changes nothing).
// With `rank` and `size`, only the table variables' files whose index (in manifest order) is
// rank modulo size.
std::map<std::string, std::vector<float>> verify_files(const fs::path& directory,
                                                       const Manifest& manifest, int rank = 0,
                                                       int size = 1) {
  std::vector<std::byte> scratch;
  size_t index = 0;
  for (const TableEntry& table : manifest.tables) {
    for (const ArrayEntry* array : table.arrays()) {
      if (index++ % static_cast<size_t>(size) != static_cast<size_t>(rank)) continue;
      internal::read_data_file(support::InputFile::open(directory / array->data.file), array->data,
                               manifest.checksum_block_bytes,
                               variable_description(table.config.name, array->name), {}, scratch);
    }
  }
  std::map<std::string, std::vector<float>> extra_arrays;
  for (const ArrayEntry& extra : manifest.extra_arrays) {
    std::vector<float> values(extra.data.bytes / sizeof(float));
    internal::read_data_file(support::InputFile::open(directory / extra.data.file), extra.data,
                             manifest.checksum_block_bytes, "extra array '" + extra.name + "'",
                             std::as_writable_bytes(std::span(values)), scratch);
    extra_arrays.emplace(extra.name, std::move(values));
  }
  return extra_arrays;
}

std::optional<std::string> optimizer_name_of(const Embedding& embedding, const TableConfig& table) {
  const std::optional<Optimizer>& optimizer =
      internal::effective_optimizer(table, embedding.options().optimizer);
  if (!optimizer) return std::nullopt;
  return std::string(optimizer_name(*optimizer));
}

// Phase 1: what to load where; throws InvalidArgument for any mismatch.
std::vector<VariableLoad> plan_loads(const Embedding& embedding, const Manifest& manifest,
                                     const RestoreOptions& options, const std::string& prefix) {
  std::map<std::string, const TableEntry*> saved_tables;
  std::string checkpoint_names;
  for (const TableEntry& table : manifest.tables) {
    saved_tables.emplace(table.config.name, &table);
    checkpoint_names += (checkpoint_names.empty() ? "'" : ", '") + table.config.name + "'";
  }
  std::string embedding_names;
  for (const TableConfig& config : embedding.tables()) {
    embedding_names += (embedding_names.empty() ? "'" : ", '") + config.name + "'";
  }
  for (const TableEntry& table : manifest.tables) {
    const auto& tables = embedding.tables();
    if (std::none_of(tables.begin(), tables.end(), [&table](const TableConfig& config) {
          return config.name == table.config.name;
        })) {
      throw InvalidArgument(prefix + "it has table '" + table.config.name +
                            "', which the embedding does not have (its tables: " + embedding_names +
                            ")");
    }
  }

  std::vector<VariableLoad> loads;
  for (const TableConfig& config : embedding.tables()) {
    const std::string owner = prefix + "table '" + config.name + "': ";
    const auto found = saved_tables.find(config.name);
    if (found == saved_tables.end()) {
      throw InvalidArgument(owner + "not in the checkpoint (its tables: " + checkpoint_names + ")");
    }
    const TableEntry& saved = *found->second;
    if (saved.dynamic && !config.dynamic_vocabulary) {
      throw InvalidArgument(owner + "the checkpoint holds a dynamic table (" +
                            std::to_string(saved.dynamic->num_keys()) +
                            " keys), the embedding a static one (vocabulary_size " +
                            std::to_string(config.vocabulary_size) +
                            "): keys do not restore into rows; give the table a DynamicVocabulary");
    }
    if (!saved.dynamic && config.dynamic_vocabulary) {
      throw InvalidArgument(
          owner + "the checkpoint holds a static table (vocabulary_size " +
          std::to_string(saved.config.vocabulary_size) +
          "), the embedding a dynamic one: convert it with read_static_table_as_dynamic and "
          "Embedding::write_dynamic_table (recemb/checkpoint.h)");
    }
    // The rows of keys admitted from now on are initialised from (table seed, key): a restored run
    // continues as the saved one only with its seed.
    if (config.dynamic_vocabulary && manifest.seed != embedding.options().seed) {
      throw InvalidArgument(owner + "a dynamic table needs the checkpoint's seed, " +
                            std::to_string(manifest.seed) + " (EmbeddingOptions::seed), for the " +
                            "initial rows of the keys it admits; the embedding's is " +
                            std::to_string(embedding.options().seed));
    }
    if (config.dynamic_vocabulary && internal::PartAccess::has_pending_training_lookup(embedding)) {
      throw FailedPrecondition(owner +
                               "a training lookup is not applied yet (its batch holds slots of the "
                               "table's keys); apply it first");
    }
    if (saved.config.dim != config.dim) {
      throw InvalidArgument(owner + "the checkpoint has dim " + std::to_string(saved.config.dim) +
                            ", the embedding " + std::to_string(config.dim));
    }
    if (saved.config.dtype != config.dtype && !options.convert_dtype) {
      throw InvalidArgument(owner + "the checkpoint's rows are " +
                            std::string(dtype_name(saved.config.dtype)) + ", the embedding's " +
                            std::string(dtype_name(config.dtype)) +
                            "; set RestoreOptions::convert_dtype to convert them");
    }
    // A dynamic table's keys are checked against its parts' capacity once the files are verified
    // (read_dynamic_keys).
    const int64_t saved_rows =
        saved.dynamic ? saved.dynamic->num_keys() : saved.config.vocabulary_size;
    const int64_t rows = saved.dynamic ? saved_rows : config.vocabulary_size;
    const bool allowed = rows == saved_rows ||
                         (rows > saved_rows && options.resize != VocabularyResize::kError) ||
                         (rows < saved_rows && options.resize == VocabularyResize::kGrowOrShrink);
    if (!allowed) {
      throw InvalidArgument(
          owner + "the checkpoint has vocabulary_size " + std::to_string(saved_rows) +
          ", the embedding " + std::to_string(rows) + "; resize=\"" +
          std::string(vocabulary_resize_name(rows > saved_rows ? VocabularyResize::kGrow
                                                               : VocabularyResize::kGrowOrShrink)) +
          "\" restores the first " + std::to_string(std::min(rows, saved_rows)) + " rows");
    }
    const std::optional<std::string> optimizer = optimizer_name_of(embedding, config);
    const std::optional<std::string> saved_optimizer =
        internal::effective_optimizer_name(manifest, saved);
    // A lookup-only table takes the parameters alone: variable_names lists no slots for it.
    if (optimizer && optimizer != saved_optimizer) {
      throw InvalidArgument(owner + "the checkpoint's optimizer is " +
                            saved_optimizer.value_or("none") + ", the embedding's is " +
                            *optimizer + " (their slots differ)");
    }
    for (const std::string& variable : embedding.variable_names(config.name)) {
      const auto position =
          std::find_if(saved.variables.begin(), saved.variables.end(),
                       [&variable](const ArrayEntry& entry) { return entry.name == variable; });
      RECEMB_CHECK(position != saved.variables.end());  // same optimizer: same slots
      loads.push_back({.saved = &*position,
                       .table = config.name,
                       .variable = variable,
                       .rows = std::min(rows, saved_rows),
                       .dtype = variable == "parameters" ? config.dtype : DType::kFloat32});
    }
  }
  return loads;
}

// Phase 2b: a table converted into float16 (RestoreOptions::convert_dtype) from a type with a
// wider range: every value it takes is read and checked first, so that a value float16 cannot
// hold (magnitude 65520 or more) is an InvalidArgument naming it before the embedding changes.
void check_float16_conversions(const fs::path& directory, const std::vector<VariableLoad>& loads,
                               const std::string& prefix) {
  constexpr int64_t kChunkValues = int64_t{1} << 20;
  for (const VariableLoad& load : loads) {
    const DType saved_dtype = internal::value_dtype(load.saved->dtype);
    if (load.dtype != DType::kFloat16 || saved_dtype == DType::kFloat16) continue;
    const support::InputFile file = support::InputFile::open(directory / load.saved->data.file);
    const int64_t width = load.saved->shape.size() > 1 ? load.saved->shape[1] : 1;
    const int64_t total = load.rows * width;
    std::vector<float> values;
    std::vector<uint16_t> halves;
    for (int64_t begin = 0; begin < total; begin += kChunkValues) {
      const int64_t count = std::min(kChunkValues, total - begin);
      values.resize(static_cast<size_t>(count));
      if (saved_dtype == DType::kFloat32) {
        file.read_at(static_cast<uint64_t>(begin) * sizeof(float),
                     std::as_writable_bytes(std::span(values)));
      } else {
        halves.resize(static_cast<size_t>(count));
        file.read_at(static_cast<uint64_t>(begin) * sizeof(uint16_t),
                     std::as_writable_bytes(std::span(halves)));
        internal::decode_half_values(saved_dtype, halves.data(), count, values.data());
      }
      const auto beyond = std::find_if(values.begin(), values.end(),
                                       [](float value) { return !internal::fits_float16(value); });
      if (beyond != values.end()) {
        const int64_t index = begin + (beyond - values.begin());
        throw InvalidArgument(prefix + "table '" + load.table + "': row " +
                              std::to_string(index / width) + " holds " +
                              support::float_text(*beyond) +
                              ", which float16 cannot hold (magnitude below 65520); nothing "
                              "changed");
      }
    }
  }
}

// Phase 2c: the keys of the checkpoint's dynamic tables that each of this rank's parts holds (in
// local_parts order; empty for a static table's part), read and checked against the parts.
std::vector<internal::PartKeys> read_dynamic_keys(Embedding& embedding, const fs::path& directory,
                                                  const Manifest& manifest,
                                                  const std::string& prefix) {
  std::map<std::string_view, const TableEntry*> saved_tables;
  for (const TableEntry& table : manifest.tables) saved_tables.emplace(table.config.name, &table);
  std::vector<internal::PartKeys> keys;
  for (const internal::LocalPart<float>& local : internal::PartAccess::local_parts(embedding)) {
    keys.emplace_back();
    if (local.dynamic == nullptr) continue;
    keys.back() = internal::read_part_keys(
        directory, *saved_tables.at(embedding.tables()[local.part.table].name), local.part,
        manifest.step, prefix);
  }
  return keys;
}

// Phase 3: each of this rank's parts' rows straight from the files; a dynamic table's part also
// its keys (`keys`, read_dynamic_keys).
void load_parts(Embedding& embedding, const fs::path& directory, const Manifest& manifest,
                const std::vector<VariableLoad>& loads,
                const std::vector<internal::PartKeys>& keys) {
  std::map<std::pair<std::string_view, std::string_view>, const VariableLoad*> by_name;
  for (const VariableLoad& variable_load : loads) {
    by_name.emplace(
        std::pair<std::string_view, std::string_view>(variable_load.table, variable_load.variable),
        &variable_load);
  }
  const std::vector<internal::LocalPart<float>> parts =
      internal::PartAccess::local_parts(embedding);
  RECEMB_CHECK(keys.size() == parts.size());
  for (size_t p = 0; p < parts.size(); ++p) {
    const internal::LocalPart<float>& local = parts[p];
    const std::string& table = embedding.tables()[local.part.table].name;
    const auto partially_restored = [&](auto&& load, const std::string& what) {
      try {
        load();
      } catch (const DataLoss& error) {
        throw DataLoss(std::string(error.what()) + " (" + what +
                       "); the file changed after it was verified, and the embedding is now "
                       "partially restored");
      } catch (const std::system_error& error) {
        throw std::system_error(
            error.code(), std::string(error.what()) + "; the embedding is now partially restored");
      }
    };
    if (local.dynamic != nullptr) {
      const auto saved =
          std::find_if(manifest.tables.begin(), manifest.tables.end(),
                       [&table](const TableEntry& entry) { return entry.config.name == table; });
      RECEMB_CHECK(saved != manifest.tables.end());
      partially_restored([&] { internal::load_dynamic_part(directory, *saved, local, keys[p]); },
                         "table '" + table + "'");
      continue;
    }
    for (const internal::PartVariable<float>& variable : local.variables) {
      const auto found = by_name.find({table, variable.name});
      RECEMB_CHECK(found != by_name.end());
      const VariableLoad& variable_load = *found->second;
      partially_restored(
          [&] {
            const support::InputFile file =
                support::InputFile::open(directory / variable_load.saved->data.file);
            const DType saved_dtype = internal::value_dtype(variable_load.saved->dtype);
            if (saved_dtype == variable.dtype) {
              internal::read_part_rows(file, local.part, variable, variable_load.rows);
            } else {
              internal::read_converted_part_rows(file, local.part, variable, saved_dtype,
                                                 variable_load.rows);
            }
          },
          variable_description(table, variable.name));
    }
  }
}

// An optimizer the manifest records (its embedding's or a table's); prefix names the checkpoint and
// the owner. One that cannot be rebuilt (a learning-rate callback) is InvalidArgument: load with
// tables_only.
Optimizer parse_saved_optimizer(const support::Json& json, const std::string& prefix) {
  return format::optimizer_from_json(support::JsonReader(json, {.name = prefix + "optimizer"}));
}

}  // namespace

RestoredState restore_checkpoint(Embedding& embedding, const fs::path& checkpoint,
                                 const RestoreOptions& options) {
  Communicator& communicator = internal::PartAccess::communicator(embedding);
  fs::path directory;
  Manifest manifest;
  std::vector<VariableLoad> loads;  // points into manifest
  std::map<std::string, std::vector<float>> extra_arrays;
  support::agree(communicator, [&] {
    directory = internal::resolve_checkpoint(checkpoint);
    manifest = internal::read_manifest(directory).manifest;
    loads = plan_loads(embedding, manifest, options, "checkpoint '" + directory.string() + "': ");
  });
  support::agree(communicator, [&] {
    extra_arrays = verify_files(directory, manifest, communicator.rank(), communicator.size());
  });
  support::agree(communicator, [&] {
    check_float16_conversions(directory, loads, "checkpoint '" + directory.string() + "': ");
  });
  std::vector<internal::PartKeys> keys;
  support::agree(communicator, [&] {
    keys = read_dynamic_keys(embedding, directory, manifest,
                             "checkpoint '" + directory.string() + "': ");
  });
  support::agree(communicator, [&] { load_parts(embedding, directory, manifest, loads, keys); });
  embedding.set_step(manifest.step);
  return {.step = manifest.step,
          .extra_arrays = std::move(extra_arrays),
          .metadata = manifest.metadata};
}

Embedding load_checkpoint(const fs::path& checkpoint, const LoadOptions& options) {
  const fs::path directory = internal::resolve_checkpoint(checkpoint);
  const Manifest manifest = internal::read_manifest(directory).manifest;
  const std::string prefix = "checkpoint '" + directory.string() + "': ";
  std::vector<TableConfig> tables;
  for (const TableEntry& table : manifest.tables) {
    tables.push_back(table.config);
    if (!options.tables_only && !table.optimizer.is_null()) {
      tables.back().optimizer =
          parse_saved_optimizer(table.optimizer, prefix + "table '" + table.config.name + "': ");
    }
  }
  EmbeddingOptions embedding_options{.num_threads = options.num_threads,
                                     .seed = manifest.seed,
                                     .non_finite_gradients = manifest.non_finite_gradients};
  if (!options.tables_only && !manifest.optimizer.is_null()) {
    embedding_options.optimizer = parse_saved_optimizer(manifest.optimizer, prefix + "embedding: ");
  }
  // Verified before the Embedding allocates tables of the sizes the manifest claims.
  verify_files(directory, manifest);
  std::optional<Embedding> embedding;
  try {
    embedding.emplace(std::move(tables), manifest.features, std::move(embedding_options));
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(prefix + "its configs do not build an Embedding: " + error.what());
  }
  const std::vector<VariableLoad> loads = plan_loads(*embedding, manifest, {}, prefix);
  load_parts(*embedding, directory, manifest, loads,
             read_dynamic_keys(*embedding, directory, manifest, prefix));
  embedding->set_step(manifest.step);
  return std::move(*embedding);
}

}  // namespace recemb
