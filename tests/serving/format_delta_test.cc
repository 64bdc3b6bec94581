// A delta's header and manifest (src/serving/format.cc, docs/serving.md "Publishing deltas"):
// round trips, its own magic, and the layout checks naming the table and blob.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <string>
#include <vector>

#include "recemb/error.h"

#include "serving/format.h"
#include "testing/error_of.h"

namespace recemb::internal {
namespace {

using test::error_of;
using ::testing::HasSubstr;

const std::string kContext = "serving delta 'd.recemb'";

// A static table of 2 changed rows of dim 3, a dynamic one of 1 upserted key of dim 5 and 2
// removed keys, and one extra array of 4 values; blobs contiguous.
DeltaManifest sample_delta(ServingDtype dtype) {
  DeltaManifest manifest{.base = 0x0123456789abcdefu, .sequence = 7, .dtype = dtype};
  uint64_t end = 0;
  const auto next = [&end](uint64_t size, uint64_t checksum) {
    const TableBlob blob{.offset = end, .size = size, .checksum = checksum};
    end += padded_size(size);
    return blob;
  };
  DeltaTable video{.name = "video", .dim = 3};
  video.ids = next(16, 1);
  video.rows = next(*serving_blob_size(dtype, 2, 3), 2);
  DeltaTable user{.name = "user", .dim = 5, .dynamic = true};
  user.ids = next(8, 3);
  user.rows = next(*serving_blob_size(dtype, 1, 5), 4);
  user.removed = next(16, 5);
  manifest.tables = {video, user};
  manifest.extra_arrays = {{.name = "top/w", .shape = {2, 2}}};
  manifest.extra_blobs = {next(16, 6)};
  manifest.metadata = {{"step", "12"}};
  return manifest;
}

uint64_t data_size_of(const DeltaManifest& manifest) {
  return manifest.extra_blobs.back().offset + padded_size(manifest.extra_blobs.back().size);
}

TEST(DeltaManifestTest, RoundTrips) {
  for (const ServingDtype dtype :
       {ServingDtype::kFloat32, ServingDtype::kFloat16, ServingDtype::kInt8}) {
    const DeltaManifest manifest = sample_delta(dtype);
    const std::string text = encode_delta_manifest(manifest);
    EXPECT_EQ(text.size() % 64, 0u);
    const DeltaManifest decoded = decode_delta_manifest(text, data_size_of(manifest), kContext);
    EXPECT_EQ(decoded.base, manifest.base);
    EXPECT_EQ(decoded.sequence, 7);
    EXPECT_EQ(decoded.dtype, dtype);
    ASSERT_EQ(decoded.tables.size(), 2u);
    EXPECT_EQ(decoded.tables[0].name, "video");
    EXPECT_FALSE(decoded.tables[0].dynamic);
    EXPECT_FALSE(decoded.tables[0].removed.has_value());
    EXPECT_EQ(decoded.tables[0].rows.size, manifest.tables[0].rows.size);
    EXPECT_TRUE(decoded.tables[1].dynamic);
    EXPECT_EQ(decoded.tables[1].removed->offset, manifest.tables[1].removed->offset);
    EXPECT_EQ(decoded.tables[1].removed->checksum, 5u);
    EXPECT_EQ(decoded.extra_arrays[0].shape, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(decoded.metadata, manifest.metadata);
  }
}

TEST(DeltaManifestTest, LayoutErrorsNameTheTableAndBlob) {
  DeltaManifest manifest = sample_delta(ServingDtype::kInt8);
  manifest.tables[0].rows.size += 1;  // not 2 rows of dim 3
  EXPECT_THAT(error_of<DataLoss>([&] {
                decode_delta_manifest(encode_delta_manifest(manifest), data_size_of(manifest),
                                      kContext);
              }),
              HasSubstr("table 'video' rows: blob size"));
  manifest = sample_delta(ServingDtype::kInt8);
  manifest.tables[1].ids.size = 12;  // not whole int64 keys
  EXPECT_THAT(error_of<DataLoss>([&] {
                decode_delta_manifest(encode_delta_manifest(manifest), data_size_of(manifest),
                                      kContext);
              }),
              HasSubstr("table 'user' keys"));
  manifest = sample_delta(ServingDtype::kInt8);
  EXPECT_THAT(error_of<DataLoss>([&] {
                decode_delta_manifest(encode_delta_manifest(manifest), data_size_of(manifest) + 64,
                                      kContext);
              }),
              HasSubstr("the data section has"));
}

TEST(DeltaHeaderTest, HasItsOwnMagicSoModelsAndDeltasAreNeverMistaken) {
  const ServingHeader header{.format_version = kDeltaFile.format_version,
                             .manifest_size = 64,
                             .manifest_checksum = 9,
                             .file_size = 128};
  std::vector<std::byte> file(128);
  const auto bytes = encode_header(header, kDeltaFile);
  std::copy(bytes.begin(), bytes.end(), file.begin());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file.data()), 8), "RECEMBDL");
  EXPECT_EQ(decode_header(file, file.size(), kContext, kDeltaFile).manifest_checksum, 9u);
  EXPECT_THAT(error_of<DataLoss>([&] { decode_header(file, file.size(), kContext); }),
              HasSubstr("not a recemb serving model (it does not start with \"RECEMBSV\")"));
  const auto model = encode_header(header);
  std::copy(model.begin(), model.end(), file.begin());
  EXPECT_THAT(error_of<DataLoss>([&] { decode_header(file, file.size(), kContext, kDeltaFile); }),
              HasSubstr("not a recemb serving delta (it does not start with \"RECEMBDL\")"));
}

}  // namespace
}  // namespace recemb::internal
