// inspect_checkpoint (recemb/checkpoint.h).
#include <algorithm>
#include <string>
#include <system_error>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/error.h"

#include "checkpoint/data_file.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "format/checksum.h"
#include "support/file_io.h"

namespace recemb {

CheckpointInfo inspect_checkpoint(const std::filesystem::path& checkpoint,
                                  const InspectOptions& options) {
  const std::filesystem::path directory = internal::resolve_checkpoint(checkpoint);
  internal::ManifestFile manifest_file = internal::read_manifest(directory);
  const internal::Manifest& manifest = manifest_file.manifest;
  CheckpointInfo info{.format_version = manifest.format_version,
                      .step = manifest.step,
                      .metadata = manifest.metadata,
                      .files = {{.path = std::string(internal::kManifestFile),
                                 .holds = "manifest",
                                 .bytes = manifest_file.text.size(),
                                 .checksum = format::checksum_to_hex(format::checksum(
                                     std::as_bytes(std::span(manifest_file.text)))),
                                 .ok = true}}};
  info.manifest_json = std::move(manifest_file.text);
  for (const internal::TableEntry& table : manifest.tables) {
    info.tables.push_back(
        {.name = table.config.name,
         .vocabulary_size = table.config.vocabulary_size,
         .dim = table.config.dim,
         .optimizer = internal::effective_optimizer_name(manifest, table).value_or(std::string()),
         .dynamic = table.dynamic.has_value(),
         .num_keys = table.dynamic ? table.dynamic->num_keys() : 0});
  }
  info.features = manifest.features;

  std::vector<std::byte> scratch;
  const auto check = [&](const internal::DataFile& data, const std::string& what) {
    CheckpointFile file{.path = data.file,
                        .holds = what,
                        .bytes = data.bytes,
                        .checksum = format::checksum_to_hex(data.checksum)};
    try {
      const support::InputFile input = support::InputFile::open(directory / data.file);
      if (options.verify) {
        internal::read_data_file(input, data, manifest.checksum_block_bytes, what, {}, scratch);
      } else {
        internal::check_data_file_size(input, data, what);
      }
      file.ok = true;
    } catch (const DataLoss& error) {
      file.error = error.what();
    } catch (const std::system_error& error) {
      if (error.code() != std::errc::no_such_file_or_directory) throw;
      file.error = error.what();  // a missing file is damage to the checkpoint
    }
    info.files.push_back(std::move(file));
  };
  for (const internal::TableEntry& table : manifest.tables) {
    for (const internal::ArrayEntry* array : table.arrays()) {
      check(array->data, "table '" + table.config.name + "' variable '" + array->name + "'");
    }
  }
  for (const internal::ArrayEntry& extra : manifest.extra_arrays) {
    check(extra.data, "extra array '" + extra.name + "'");
  }
  info.ok = std::all_of(info.files.begin(), info.files.end(),
                        [](const CheckpointFile& file) { return file.ok; });
  return info;
}

}  // namespace recemb
