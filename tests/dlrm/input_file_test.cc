// InputFile (dlrm/input_file.h): plain and gzip files read alike, gzip found by its magic
// bytes, seeking by decompressed offset, and the errors of missing, truncated and corrupt files.
#include "dlrm/input_file.h"

#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "recemb/error.h"

#include "testing/gzip_text.h"
#include "testing/temporary_directory.h"

namespace recemb::dlrm {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string random_text(size_t size, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::string text(size, ' ');
  // Digits and tabs: compressible as Criteo text is, not trivially.
  for (char& c : text) c = "0123456789abcdef\t\n"[random() % 18];
  return text;
}

std::string read_all(InputFile& file, size_t chunk) {
  std::string text;
  std::string buffer(chunk, '\0');
  while (const size_t read = file.read(buffer.data(), buffer.size())) text.append(buffer, 0, read);
  return text;
}

TEST(InputFileTest, PlainAndGzipReadAlikeAndSeekByDecompressedOffset) {
  const test::TemporaryDirectory dir;
  const std::string text = random_text(3'000'000, 1);
  std::ofstream(dir / "plain.tsv", std::ios::binary) << text;
  std::ofstream(dir / "named.tsv", std::ios::binary)
      << test::gzip_member(text);  // gzip, not by name
  for (const bool ahead : {false, true})
    for (const char* name : {"plain.tsv", "named.tsv"}) {
      SCOPED_TRACE(::testing::Message() << name << (ahead ? ", decompressed ahead" : ""));
      const std::string path = (dir / name).string();
      InputFile file(path, ahead);
      EXPECT_EQ(file.compressed(), std::string(name) == "named.tsv");
      EXPECT_EQ(read_all(file, 65'536), text);
      for (const int64_t offset : {int64_t{2'500'000}, int64_t{7}, int64_t{3'000'000}}) {
        file.seek(offset);
        EXPECT_EQ(read_all(file, 100'000), text.substr(static_cast<size_t>(offset)));
      }
      file.seek(5'000'000);  // past the end: at the end
      char byte = 0;
      EXPECT_EQ(file.read(&byte, 1), 0u);
    }
  EXPECT_EQ(plain_file_size((dir / "plain.tsv").string()), 3'000'000);
  EXPECT_EQ(plain_file_size((dir / "named.tsv").string()), std::nullopt);
  std::ofstream(dir / "empty", std::ios::binary) << "";
  InputFile empty((dir / "empty").string());
  EXPECT_FALSE(empty.compressed());
  EXPECT_EQ(read_all(empty, 10), "");
}

TEST(InputFileTest, MissingTruncatedAndCorruptFilesNameThePath) {
  const test::TemporaryDirectory dir;
  EXPECT_THROW(InputFile((dir / "missing").string()), std::system_error);
  const std::string text = random_text(1'000'000, 2);
  const std::string gzip = test::gzip_member(text);
  std::ofstream(dir / "truncated.gz", std::ios::binary) << gzip.substr(0, gzip.size() / 2);
  std::string flipped = gzip;
  for (size_t k = gzip.size() / 3; k < gzip.size() / 3 + 32; ++k) flipped[k] ^= 0x33;
  std::ofstream(dir / "corrupt.gz", std::ios::binary) << flipped;
  std::string tail_cut = gzip;
  tail_cut.resize(gzip.size() - 4);  // the length field of the trailer gone
  std::ofstream(dir / "no_trailer.gz", std::ios::binary) << tail_cut;
  for (const auto& [name, what] :
       {std::pair{"truncated.gz", "truncated"}, std::pair{"corrupt.gz", "corrupt"},
        std::pair{"no_trailer.gz", "truncated"}}) {
    SCOPED_TRACE(name);
    const std::string path = (dir / name).string();
    InputFile file(path);
    try {
      read_all(file, 65'536);
      FAIL() << "no error";
    } catch (const DataLoss& error) {
      EXPECT_THAT(error.what(), AllOf(HasSubstr("'" + path + "'"), HasSubstr(what)));
    }
  }
}

// Concatenated members read as one text; a second member whose header is damaged, and bytes after
// the last member, are damaged data naming the file and the byte offset: never the end of the
// data (zcat only warns of "trailing garbage").
TEST(InputFileTest, BytesAfterAMemberThatStartNoOtherAreDataLoss) {
  const test::TemporaryDirectory dir;
  const std::string day0 = random_text(400'000, 3);
  const std::string day1 = random_text(300'000, 4);
  const std::string first = test::gzip_member(day0);
  const std::string second = test::gzip_member(day1);
  const auto first_size = static_cast<int64_t>(first.size());
  std::ofstream(dir / "concat.gz", std::ios::binary) << first << second;
  for (const bool ahead : {false, true}) {
    InputFile file((dir / "concat.gz").string(), ahead);
    EXPECT_EQ(read_all(file, 65'536), day0 + day1);
    file.seek(450'000);  // inside the second member
    EXPECT_EQ(read_all(file, 10'000), (day0 + day1).substr(450'000));
  }
  // (name, contents, the byte offset named): the second member's magic bytes, its compression
  // method and its flags damaged; garbage or zeros after the last member.
  struct Damage {
    std::string name;
    std::string bytes;
    int64_t offset;
  };
  std::vector<Damage> damages;
  for (const size_t at : {size_t{0}, size_t{1}, size_t{2}, size_t{3}}) {
    std::string bytes = first + second;
    bytes[first.size() + at] ^= 0x5a;
    damages.push_back({"header_" + std::to_string(at) + ".gz", bytes, first_size});
  }
  std::mt19937_64 random(5);
  std::string garbage(160, '\0');
  for (char& c : garbage) c = static_cast<char>(random());
  garbage[0] = 'x';  // not a gzip magic byte
  damages.push_back(
      {"garbage.gz", first + second + garbage, first_size + static_cast<int64_t>(second.size())});
  damages.push_back({"zeros.gz", first + std::string(512, '\0'), first_size});
  damages.push_back({"one_byte.gz", first + std::string(1, '\x1f'), first_size});
  for (const Damage& damage : damages) {
    SCOPED_TRACE(damage.name);
    std::ofstream(dir / damage.name, std::ios::binary) << damage.bytes;
    for (const bool ahead : {false, true}) {
      const std::string path = (dir / damage.name).string();
      InputFile file(path, ahead);
      std::string text;
      try {
        std::string buffer(65'536, '\0');
        while (const size_t read = file.read(buffer.data(), buffer.size())) {
          text.append(buffer, 0, read);
        }
        FAIL() << "no error";
      } catch (const DataLoss& error) {
        EXPECT_THAT(error.what(), HasSubstr("'" + path + "'"));
        // A damaged header's bytes are found at the member's start, or (the method, the flags)
        // by zlib a few bytes into it.
        if (damage.name.starts_with("header_1") || damage.name.starts_with("header_0") ||
            !damage.name.starts_with("header")) {
          EXPECT_THAT(error.what(), AllOf(HasSubstr("at byte " + std::to_string(damage.offset)),
                                          HasSubstr("do not start another")));
        } else {
          EXPECT_THAT(error.what(), HasSubstr("corrupt"));
        }
      }
      // What was read before the damage is the first members' text, whole.
      EXPECT_TRUE((day0 + day1).starts_with(text));
      EXPECT_GE(text.size(), day0.size());
    }
  }
}

}  // namespace
}  // namespace recemb::dlrm
