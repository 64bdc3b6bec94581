// Checkpoint data files: block checksums when writing, verification and partial reads when
// reading (src/checkpoint/data_file.cc).
#include "checkpoint/data_file.h"

#include <algorithm>
#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>

#include "recemb/error.h"

#include "format/checksum.h"
#include "testing/error_of.h"
#include "testing/files.h"
#include "testing/temporary_directory.h"

namespace recemb::internal {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::random_bytes;
using test::read_bytes;
using test::TemporaryDirectory;
using test::write_bytes;
using ::testing::HasSubstr;

TEST(DataFileTest, WritesTheBytesWithOneChecksumPerBlock) {
  TemporaryDirectory directory;
  std::mt19937_64 rng(41);
  for (const size_t size : {size_t{0}, size_t{4}, size_t{64}, size_t{65}, size_t{1000}}) {
    const std::vector<std::byte> data = random_bytes(rng, size);
    const fs::path path = directory.path() / ("data" + std::to_string(size) + ".f32");
    const DataFile entry = write_data_file(path, data, 64);
    EXPECT_EQ(entry.file, path.filename().string());
    EXPECT_EQ(entry.bytes, size);
    EXPECT_EQ(read_bytes(path), data);
    EXPECT_EQ(entry.checksum, format::checksum(data));
    ASSERT_EQ(entry.block_checksums.size(), (size + 63) / 64) << size;
    for (size_t block = 0; block < entry.block_checksums.size(); ++block) {
      const size_t begin = block * 64;
      EXPECT_EQ(entry.block_checksums[block], format::checksum(std::span(data).subspan(
                                                  begin, std::min<size_t>(64, size - begin))))
          << "size " << size << " block " << block;
    }
  }
}

TEST(DataFileTest, ChecksummingAWrittenFileGivesTheWritersRecord) {
  TemporaryDirectory directory;
  std::mt19937_64 rng(47);
  for (const size_t size : {size_t{0}, size_t{4}, size_t{64}, size_t{65}, size_t{1000}}) {
    const std::vector<std::byte> data = random_bytes(rng, size);
    const fs::path path = directory.path() / ("data" + std::to_string(size) + ".f32");
    const DataFile written = write_data_file(path, data, 64);
    const DataFile read = checksum_data_file(path, 64);
    EXPECT_EQ(read.file, written.file);
    EXPECT_EQ(read.bytes, written.bytes);
    EXPECT_EQ(read.checksum, written.checksum) << size;
    EXPECT_EQ(read.block_checksums, written.block_checksums) << size;
  }
  // Damage changes the record: the block holding it and the whole file.
  std::vector<std::byte> data = random_bytes(rng, 300);
  const DataFile before = write_data_file(directory.path() / "damaged.f32", data, 64);
  data[130] ^= std::byte{1};
  write_bytes(directory.path() / "damaged.f32", data);
  const DataFile after = checksum_data_file(directory.path() / "damaged.f32", 64);
  EXPECT_NE(after.checksum, before.checksum);
  for (size_t block = 0; block < before.block_checksums.size(); ++block) {
    EXPECT_EQ(after.block_checksums[block] != before.block_checksums[block], block == 2) << block;
  }
}

TEST(DataFileTest, ReadsAnyPrefixIntoTheDestinationAndVerifiesTheRest) {
  TemporaryDirectory directory;
  std::mt19937_64 rng(43);
  const std::vector<std::byte> data = random_bytes(rng, 1000);
  const fs::path path = directory.path() / "data.f32";
  const DataFile entry = write_data_file(path, data, 64);
  const support::InputFile file = support::InputFile::open(path);
  std::vector<std::byte> scratch;
  for (const size_t prefix : {size_t{0}, size_t{1}, size_t{64}, size_t{100}, size_t{1000}}) {
    std::vector<std::byte> destination(prefix + 8, std::byte{0x5a});
    read_data_file(file, entry, 64, "test", std::span(destination).first(prefix), scratch);
    EXPECT_TRUE(std::equal(destination.begin(),
                           destination.begin() + static_cast<ptrdiff_t>(prefix), data.begin()))
        << prefix;
    // Nothing past the destination is written.
    for (size_t i = prefix; i < destination.size(); ++i) EXPECT_EQ(destination[i], std::byte{0x5a});
  }
}

TEST(DataFileTest, DamageIsReportedWithTheFileWhatAndBlock) {
  TemporaryDirectory directory;
  std::mt19937_64 rng(47);
  const std::vector<std::byte> data = random_bytes(rng, 1000);
  const fs::path path = directory.path() / "t3.momenta.f32";
  const DataFile entry = write_data_file(path, data, 64);
  std::vector<std::byte> scratch;
  const std::string name = "checkpoint file '" + path.string() + "' (table 'x' variable 'momenta')";
  const auto read = [&] {
    read_data_file(support::InputFile::open(path), entry, 64, "table 'x' variable 'momenta'", {},
                   scratch);
  };
  for (const size_t position : {size_t{0}, size_t{63}, size_t{64}, size_t{700}, size_t{999}}) {
    std::vector<std::byte> damaged = data;
    damaged[position] ^= std::byte{0x10};
    write_bytes(path, damaged);
    const size_t block = position / 64;
    EXPECT_EQ(error_of<DataLoss>(read),
              name + " is damaged: block " + std::to_string(block) + " of 16 (bytes " +
                  std::to_string(block * 64) + ".." +
                  std::to_string(std::min<size_t>(1000, block * 64 + 64)) +
                  ") does not match its checksum");
  }
  write_bytes(path, std::span(data).first(999));
  EXPECT_EQ(error_of<DataLoss>(read),
            name + " has 999 bytes, the manifest records 1000 (truncated)");

  // Blocks that match but a wrong whole-file record (as from a damaged manifest).
  write_bytes(path, data);
  DataFile wrong_whole = entry;
  wrong_whole.checksum ^= 1;
  EXPECT_THAT(error_of<DataLoss>([&] {
                read_data_file(support::InputFile::open(path), wrong_whole, 64, "w", {}, scratch);
              }),
              HasSubstr("its blocks match but the whole-file checksum"));
  read();  // intact again
}

}  // namespace
}  // namespace recemb::internal
