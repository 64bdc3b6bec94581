// Checkpoint data files: raw bytes (float32 little-endian, row-major) checksummed in blocks, so
// that writing and verifying stream through files larger than memory.
#ifndef RECEMB_CHECKPOINT_DATA_FILE_H_
#define RECEMB_CHECKPOINT_DATA_FILE_H_

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "support/file_io.h"

namespace recemb::internal {

// A data file as the manifest records it.
struct DataFile {
  std::string file;  // name inside the checkpoint directory
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // XXH3-64 of the whole file
  // XXH3-64 of bytes [i * block_bytes, min((i + 1) * block_bytes, bytes)); ceil(bytes /
  // block_bytes) entries.
  std::vector<uint64_t> block_checksums;
};

// Writes `bytes` as the new file `path` in blocks of block_bytes (> 0) straight from memory,
// fsyncs and closes it; returns its record (file = path's file name). std::system_error on I/O
// failure.
DataFile write_data_file(const std::filesystem::path& path, std::span<const std::byte> bytes,
                         int64_t block_bytes);

// The record of the existing file `path` (written by other means, e.g. by several ranks at once):
// reads it in blocks of block_bytes (> 0) and checksums them. std::system_error on I/O failure.
DataFile checksum_data_file(const std::filesystem::path& path, int64_t block_bytes);

// Throws DataLoss naming the file and `what` (e.g. "table 'video' variable 'parameters'")
// unless `file` has the size `entry` records.
void check_data_file_size(const support::InputFile& file, const DataFile& entry,
                          std::string_view what);

// Reads the data file `entry` from `file` and checks its size, every block checksum and the
// whole-file checksum. Bytes [0, destination.size()) are read into `destination`
// (destination.size() <= entry.bytes), the rest only through `scratch` (resized as needed), so an
// empty destination just verifies. On a mismatch throws DataLoss naming the file, `what` and
// the damaged block; `destination` may then hold
// part of the file.
void read_data_file(const support::InputFile& file, const DataFile& entry, int64_t block_bytes,
                    std::string_view what, std::span<std::byte> destination,
                    std::vector<std::byte>& scratch);

}  // namespace recemb::internal

#endif  // RECEMB_CHECKPOINT_DATA_FILE_H_
