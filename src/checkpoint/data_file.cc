#include "checkpoint/data_file.h"

#include <algorithm>

#include "recemb/error.h"

#include "format/checksum.h"
#include "util/check.h"

namespace recemb::internal {
namespace {

// Bytes read per call outside the destination: large enough for sequential disk speed, small
// enough not to matter next to the tables.
constexpr uint64_t kScratchBytes = uint64_t{4} << 20;

std::string describe(const support::InputFile& file, std::string_view what) {
  return "checkpoint file '" + file.path().string() + "' (" + std::string(what) + ")";
}

}  // namespace

DataFile write_data_file(const std::filesystem::path& path, std::span<const std::byte> bytes,
                         int64_t block_bytes) {
  RECEMB_CHECK(block_bytes > 0);
  DataFile entry{.file = path.filename().string(), .bytes = bytes.size()};
  support::OutputFile file = support::OutputFile::create(path);
  format::StreamingChecksum whole;
  for (size_t offset = 0; offset < bytes.size(); offset += static_cast<size_t>(block_bytes)) {
    const std::span<const std::byte> block =
        bytes.subspan(offset, std::min(bytes.size() - offset, static_cast<size_t>(block_bytes)));
    file.write(block);
    entry.block_checksums.push_back(format::checksum(block));
    whole.update(block);
  }
  entry.checksum = whole.digest();
  file.sync();
  file.close();
  return entry;
}

DataFile checksum_data_file(const std::filesystem::path& path, int64_t block_bytes) {
  RECEMB_CHECK(block_bytes > 0);
  const support::InputFile file = support::InputFile::open(path);
  DataFile entry{.file = path.filename().string(), .bytes = file.size()};
  const auto block_size = static_cast<uint64_t>(block_bytes);
  std::vector<std::byte> buffer(std::min(kScratchBytes, block_size));
  format::StreamingChecksum whole;
  for (uint64_t begin = 0; begin < entry.bytes; begin += block_size) {
    const uint64_t end = std::min(entry.bytes, begin + block_size);
    format::StreamingChecksum block;
    for (uint64_t offset = begin; offset < end;) {
      const std::span<std::byte> piece =
          std::span(buffer).first(std::min<uint64_t>(end - offset, buffer.size()));
      file.read_at(offset, piece);
      block.update(piece);
      whole.update(piece);
      offset += piece.size();
    }
    entry.block_checksums.push_back(block.digest());
  }
  entry.checksum = whole.digest();
  return entry;
}

void check_data_file_size(const support::InputFile& file, const DataFile& entry,
                          std::string_view what) {
  if (file.size() != entry.bytes) {
    throw DataLoss(describe(file, what) + " has " + std::to_string(file.size()) +
                   " bytes, the manifest records " + std::to_string(entry.bytes) +
                   (file.size() < entry.bytes ? " (truncated)" : " (damaged)"));
  }
}

void read_data_file(const support::InputFile& file, const DataFile& entry, int64_t block_bytes,
                    std::string_view what, std::span<std::byte> destination,
                    std::vector<std::byte>& scratch) {
  RECEMB_CHECK(block_bytes > 0 && destination.size() <= entry.bytes);
  check_data_file_size(file, entry, what);
  const std::string name = describe(file, what);
  const auto block_size = static_cast<uint64_t>(block_bytes);
  const uint64_t num_blocks = (entry.bytes + block_size - 1) / block_size;
  RECEMB_CHECK(entry.block_checksums.size() == num_blocks);
  format::StreamingChecksum whole;
  for (uint64_t block = 0; block < num_blocks; ++block) {
    const uint64_t begin = block * block_size;
    const uint64_t end = std::min(entry.bytes, begin + block_size);
    format::StreamingChecksum block_checksum;
    for (uint64_t offset = begin; offset < end;) {
      std::span<std::byte> target;
      if (offset < destination.size()) {
        target = destination.subspan(offset, std::min<uint64_t>(end, destination.size()) - offset);
      } else {
        scratch.resize(std::min(kScratchBytes, block_size));
        target = std::span(scratch).first(std::min<uint64_t>(end - offset, scratch.size()));
      }
      file.read_at(offset, target);
      block_checksum.update(target);
      whole.update(target);
      offset += target.size();
    }
    if (block_checksum.digest() != entry.block_checksums[block]) {
      throw DataLoss(name + " is damaged: block " + std::to_string(block) + " of " +
                     std::to_string(num_blocks) + " (bytes " + std::to_string(begin) + ".." +
                     std::to_string(end) + ") does not match its checksum");
    }
  }
  if (whole.digest() != entry.checksum) {
    throw DataLoss(name + " is damaged: its blocks match but the whole-file checksum " +
                   format::checksum_to_hex(whole.digest()) + " differs from the recorded " +
                   format::checksum_to_hex(entry.checksum));
  }
}

}  // namespace recemb::internal
