// export_serving_model: two passes over the tables (a dynamic table's keys, and the extra arrays
// after the tables, are written as given). The first encodes every table chunk by chunk
// (checking that each value can be stored) and checksums it; only then, with the manifest
// complete, is the file written front to back, encoding again. Encoding twice costs less than
// holding an encoded copy of every table, and no file is created for a model that cannot be
// exported.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "recemb/error.h"
#include "recemb/serving.h"

#include "embedding/parts.h"
#include "format/checksum.h"
#include "kernels/quantized_rows.h"
#include "serving/format.h"
#include "serving/table_encoder.h"
#include "support/collectives.h"
#include "support/file_io.h"
#include "support/json.h"

namespace recemb::internal {
namespace {

// The table's values: in place (zero-copy; a 16-bit table's rows as they are) when this process
// holds a static table whole, else assembled from its parts as float32 (read_variable,
// read_dynamic_table; always, when `collective`: every rank makes the same calls).
TableValues values_of(const Embedding& embedding, const TableConfig& table, bool collective) {
  TableValues values;
  if (table.dynamic_vocabulary) {
    DynamicTableContents contents = embedding.read_dynamic_table(table.name);
    values.keys = std::move(contents.keys);
    values.owned = std::move(contents.parameters);
    values.owned.resize(values.owned.size() + static_cast<size_t>(table.dim), 0.0f);
    values.num_rows = static_cast<int64_t>(values.keys.size()) + 1;
  } else if (!collective && embedding.has_whole_table(table.name)) {
    values.num_rows = table.vocabulary_size;
    if (table.dtype == DType::kFloat32) {
      values.rows = embedding.variable_data(table.name, "parameters");
      return values;
    }
    values.half_rows = embedding.half_parameter_data(table.name);
    values.half_dtype = table.dtype;
    return values;
  } else {
    values.owned.resize(static_cast<size_t>(table.vocabulary_size * table.dim));
    embedding.read_variable(table.name, "parameters", values.owned);
    values.num_rows = table.vocabulary_size;
  }
  values.rows = values.owned;
  return values;
}

}  // namespace

WrittenModel write_serving_model(const Embedding& embedding, const std::filesystem::path& path,
                                 const ExportOptions& options, bool collective) {
  try {
    serving_dtype_name(options.dtype);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(std::string("ExportOptions.dtype: ") + error.what());
  }
  check_extra_arrays(options.extra_arrays);
  ServingManifest manifest{.dtype = options.dtype,
                           .tables = embedding.tables(),
                           .features = embedding.features(),
                           .metadata = options.metadata};
  std::vector<TableValues> values;
  int64_t rows = 0;
  const std::string context = "serving model '" + path.string() + "'";
  TableEncoder encoder(options.dtype, context);
  BlobLayout layout;
  for (TableConfig& table : manifest.tables) {
    table.optimizer.reset();
    values.push_back(values_of(embedding, table, collective));
    rows += values.back().num_rows - (table.dynamic_vocabulary ? 1 : 0);
    manifest.key_blobs.emplace_back();
    if (table.dynamic_vocabulary) {
      manifest.key_blobs.back() = layout.whole(std::as_bytes(std::span(values.back().keys)));
    }
    manifest.blobs.push_back(layout.encoded(encoder, table, values.back()));
  }
  for (const ServingArray& array : options.extra_arrays) {
    manifest.extra_arrays.push_back({.name = array.name, .shape = array.shape});
    manifest.extra_blobs.push_back(layout.whole(std::as_bytes(array.values)));
  }
  std::string text;
  try {
    text = encode_manifest(manifest);
  } catch (const support::JsonError& error) {  // names that are not UTF-8
    throw InvalidArgument(context +
                          ": the configs, extra array names or metadata cannot be written as "
                          "JSON (UTF-8): " +
                          error.what());
  }
  const auto manifest_bytes = std::as_bytes(std::span(text));
  const ServingHeader header{
      .manifest_size = manifest_bytes.size(),
      .manifest_checksum = format::checksum(manifest_bytes),
      .file_size = kServingHeaderSize + manifest_bytes.size() + layout.data_size()};

  const auto write = [&](support::OutputFile& file) {
    file.write(encode_header(header));
    file.write(manifest_bytes);
    for (size_t t = 0; t < manifest.tables.size(); ++t) {
      if (manifest.key_blobs[t]) {
        const std::span<const int64_t> keys = values[t].keys;
        file.write(std::as_bytes(keys));
        file.write(padding_after(keys.size_bytes()));
      }
      encoder.encode(manifest.tables[t], values[t],
                     [&](std::span<const std::byte> bytes) { file.write(bytes); });
      file.write(padding_after(manifest.blobs[t].size));
    }
    for (const ServingArray& array : options.extra_arrays) {
      file.write(std::as_bytes(array.values));
      file.write(padding_after(array.values.size_bytes()));
    }
  };
  if (collective) {
    Communicator& communicator = PartAccess::communicator(embedding);
    support::agree(communicator, [&] {
      if (communicator.rank() == 0) support::write_file_atomically(path, write);
    });
  } else {
    support::write_file_atomically(path, write);
  }
  return {.manifest_checksum = header.manifest_checksum, .rows = rows};
}

}  // namespace recemb::internal

namespace recemb {

void export_serving_model(const Embedding& embedding, const std::filesystem::path& path,
                          const ExportOptions& options) {
  if (embedding.world_size() > 1) {
    throw FailedPrecondition("export_serving_model: the Embedding spans " +
                             std::to_string(embedding.world_size()) +
                             " ranks; export from a checkpoint (load_checkpoint) in one process");
  }
  internal::write_serving_model(embedding, path, options, false);
}

}  // namespace recemb
