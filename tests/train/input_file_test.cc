// InputFile (train/input_file.h): plain and gzip files read alike, gzip found by its magic
// bytes, seeking by decompressed offset, and the errors of missing, truncated and corrupt files.
#include "train/input_file.h"

#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <system_error>
#include <zlib.h>

#include "recemb/error.h"

#include "testing/temporary_directory.h"

namespace recemb::train {
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

std::string compressed(const std::string& text) {
  // gzip framing (windowBits 15 + 16), as gzip(1) writes it.
  z_stream stream{};
  EXPECT_EQ(deflateInit2(&stream, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&stream, text.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
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
  std::ofstream(dir / "named.tsv", std::ios::binary) << compressed(text);  // gzip, not by name
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
  const std::string gzip = compressed(text);
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

}  // namespace
}  // namespace recemb::train
