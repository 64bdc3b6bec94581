// The serving model's header and manifest (src/serving/format.cc): round trips, the layout the
// spec (docs/serving.md) requires, and every rejection naming the file and the item.
#include "serving/format.h"

#include <cstring>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>

#include "recemb/error.h"

#include "format/checksum.h"
#include "support/json.h"
#include "testing/error_of.h"

namespace recemb::internal {
namespace {

using test::error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kContext = "serving model 'test.recemb'";

TEST(ServingDtypeTest, NamesRoundTripAndUnknownNamesAreListed) {
  for (const ServingDtype dtype :
       {ServingDtype::kFloat32, ServingDtype::kFloat16, ServingDtype::kInt8}) {
    EXPECT_EQ(parse_serving_dtype(serving_dtype_name(dtype)), dtype);
  }
  EXPECT_EQ(serving_dtype_name(ServingDtype::kFloat16), "float16");
  EXPECT_THAT(error_of<InvalidArgument>([] { parse_serving_dtype("fp16"); }),
              AllOf(HasSubstr("'fp16'"), HasSubstr("'float32', 'float16', 'int8'")));
  EXPECT_THAT(error_of<InvalidArgument>([] { serving_dtype_name(static_cast<ServingDtype>(9)); }),
              HasSubstr("value 9"));
}

TEST(ServingFormatTest, BlobSizes) {
  EXPECT_EQ(serving_blob_size(ServingDtype::kFloat32, 3, 7), 84u);
  EXPECT_EQ(serving_blob_size(ServingDtype::kFloat16, 3, 7), 42u);
  EXPECT_EQ(serving_blob_size(ServingDtype::kInt8, 3, 7), 45u);
  EXPECT_EQ(serving_blob_size(ServingDtype::kFloat32, int64_t{1} << 61, 2), std::nullopt);
  EXPECT_EQ(serving_blob_size(ServingDtype::kInt8, int64_t{1} << 61, 1), std::nullopt);
  EXPECT_EQ(serving_blob_size(ServingDtype::kFloat16, int64_t{1} << 61, 2), uint64_t{1} << 63);
  EXPECT_EQ(padded_size(0), 0u);
  EXPECT_EQ(padded_size(1), 64u);
  EXPECT_EQ(padded_size(64), 64u);
  EXPECT_EQ(padded_size(65), 128u);
}

// A file of `file_size` bytes (zeros) starting with an encoded header.
std::vector<std::byte> file_with_header(const ServingHeader& header, size_t file_size) {
  std::vector<std::byte> file(file_size);
  const auto bytes = encode_header(header);
  std::copy(bytes.begin(), bytes.end(), file.begin());
  return file;
}

TEST(ServingHeaderTest, RoundTripsWithTheSpecifiedLayout) {
  const ServingHeader header{
      .manifest_size = 192, .manifest_checksum = 0x0123456789abcdefu, .file_size = 1024};
  const std::vector<std::byte> file = file_with_header(header, 1024);
  const auto field = [&](size_t offset, size_t size) {
    uint64_t value = 0;
    std::memcpy(&value, file.data() + offset, size);
    return value;
  };
  EXPECT_EQ(std::memcmp(file.data(), "RECEMBSV", 8), 0);
  EXPECT_EQ(field(8, 4), kServingFormatVersion);
  EXPECT_EQ(kServingFormatVersion, 3u);
  EXPECT_EQ(field(12, 4), 0u);
  EXPECT_EQ(field(16, 8), 192u);
  EXPECT_EQ(field(24, 8), 0x0123456789abcdefu);
  EXPECT_EQ(field(32, 8), 1024u);
  EXPECT_EQ(field(40, 8), 0u);
  EXPECT_EQ(field(48, 8), 0u);
  EXPECT_EQ(field(56, 8), format::checksum(std::span(file).first(56)));
  const ServingHeader decoded = decode_header(file, file.size(), kContext);
  EXPECT_EQ(decoded.manifest_size, 192u);
  EXPECT_EQ(decoded.manifest_checksum, 0x0123456789abcdefu);
  EXPECT_EQ(decoded.file_size, 1024u);
  EXPECT_EQ(decoded.format_version, kServingFormatVersion);
  // Version 1 (files written before the extra arrays) is read too, and says so.
  EXPECT_EQ(decode_header(file_with_header({.format_version = 1,
                                            .manifest_size = 192,
                                            .manifest_checksum = 1,
                                            .file_size = 1024},
                                           1024),
                          1024, kContext)
                .format_version,
            1u);
}

TEST(ServingHeaderTest, EveryDamagedHeaderByteIsDetected) {
  const std::vector<std::byte> good =
      file_with_header({.manifest_size = 64, .file_size = 256}, 256);
  std::mt19937_64 rng(5);
  for (size_t i = 0; i < 64; ++i) {
    std::vector<std::byte> file = good;
    file[i] ^= static_cast<std::byte>(1 + rng() % 255);
    const std::string message =
        error_of<DataLoss>([&] { decode_header(file, file.size(), kContext); });
    EXPECT_THAT(message, HasSubstr(kContext)) << "byte " << i;
    EXPECT_THAT(message, i < 8 ? HasSubstr("not a recemb serving model") : HasSubstr("header"))
        << "byte " << i;
  }
}

TEST(ServingHeaderTest, RejectsShortTruncatedExtendedAndOtherVersions) {
  const ServingHeader header{.manifest_size = 64, .file_size = 256};
  EXPECT_THAT(error_of<DataLoss>([] { decode_header({}, 0, kContext); }),
              AllOf(HasSubstr(kContext), HasSubstr("0 bytes"), HasSubstr("truncated")));
  std::vector<std::byte> file = file_with_header(header, 256);
  file.resize(200);
  EXPECT_THAT(error_of<DataLoss>([&] { decode_header(file, file.size(), kContext); }),
              AllOf(HasSubstr("200 bytes"), HasSubstr("256"), HasSubstr("truncated")));
  file.resize(300);
  EXPECT_THAT(error_of<DataLoss>([&] { decode_header(file, file.size(), kContext); }),
              HasSubstr("appended"));
  // The size is the one given, not the bytes handed over (a reader passes the header only).
  file.resize(256);
  EXPECT_EQ(decode_header(std::span(file).first(64), 256, kContext).file_size, 256u);
  EXPECT_THAT(
      error_of<DataLoss>([&] { decode_header(std::span(file).first(64), 3u << 30, kContext); }),
      AllOf(HasSubstr("3221225472 bytes"), HasSubstr("appended")));
  EXPECT_THAT(error_of<DataLoss>([&] { decode_header(std::span(file).first(63), 256, kContext); }),
              HasSubstr("63 bytes, fewer than a serving model's 64-byte header"));

  // A valid header of another version (checksum recomputed): not supported, not "damaged".
  for (const uint32_t version : {0u, 4u}) {
    file = file_with_header(header, 256);
    std::memcpy(file.data() + 8, &version, 4);
    EXPECT_THAT(error_of<DataLoss>([&] { decode_header(file, file.size(), kContext); }),
                AllOf(HasSubstr("version " + std::to_string(version)),
                      HasSubstr("or the header is damaged")));
    const uint64_t fixed = format::checksum(std::span(file).first(56));
    std::memcpy(file.data() + 56, &fixed, 8);
    EXPECT_EQ(error_of<DataLoss>([&] { decode_header(file, file.size(), kContext); }),
              kContext + ": format version " + std::to_string(version) +
                  " is not supported (this recemb reads versions 1 to 3)");
  }

  // Reserved bytes set by some other writer.
  file = file_with_header(header, 256);
  file[44] = std::byte{1};
  const uint64_t rechecked = format::checksum(std::span(file).first(56));
  std::memcpy(file.data() + 56, &rechecked, 8);
  EXPECT_THAT(error_of<DataLoss>([&] { decode_header(file, file.size(), kContext); }),
              HasSubstr("reserved"));
}

TEST(ServingHeaderTest, RejectsManifestSizesOutsideTheFile) {
  for (const uint64_t manifest_size : {uint64_t{100}, uint64_t{256}, uint64_t{1} << 63}) {
    const std::vector<std::byte> file =
        file_with_header({.manifest_size = manifest_size, .file_size = 256}, 256);
    EXPECT_THAT(
        error_of<DataLoss>([&] { decode_header(file, file.size(), kContext); }),
        AllOf(HasSubstr("manifest size " + std::to_string(manifest_size)), HasSubstr(kContext)));
  }
  const std::vector<std::byte> fits =
      file_with_header({.manifest_size = 192, .file_size = 256}, 256);
  EXPECT_EQ(decode_header(fits, fits.size(), kContext).manifest_size, 192u);
}

// ------------------------------------------------------------------------------------------------
// Manifest.

ServingManifest sample_manifest(ServingDtype dtype) {
  ServingManifest manifest;
  manifest.dtype = dtype;
  manifest.tables = {
      {.name = "video", .vocabulary_size = 10, .dim = 3, .combiner = Combiner::kSqrtn},
      {.name = "user",
       .vocabulary_size = 4,
       .dim = 33,
       .quantization_config = QuantizationConfig{.num_buckets = 5, .lower = -1, .upper = 2}}};
  const auto size = [dtype](int64_t rows, int64_t dim) {
    return *serving_blob_size(dtype, rows, dim);
  };
  manifest.blobs = {{.offset = 0, .size = size(10, 3), .checksum = 0xfedcba9876543210u},
                    {.offset = padded_size(size(10, 3)), .size = size(4, 33), .checksum = 42}};
  manifest.key_blobs = {std::nullopt, std::nullopt};
  manifest.features = {{.name = "watched", .table = "video", .max_sequence_length = 4},
                       {.name = "who", .table = "user", .output_shape = {2, 3}}};
  return manifest;
}

uint64_t data_size_of(const ServingManifest& manifest) {
  return manifest.blobs.back().offset + padded_size(manifest.blobs.back().size);
}

TEST(ServingManifestTest, RoundTripsPaddedWithSpaces) {
  for (const ServingDtype dtype :
       {ServingDtype::kFloat32, ServingDtype::kFloat16, ServingDtype::kInt8}) {
    const ServingManifest manifest = sample_manifest(dtype);
    const std::string text = encode_manifest(manifest);
    EXPECT_EQ(text.size() % 64, 0u);
    const support::Json json = support::Json::parse(text);  // the padding is JSON whitespace
    EXPECT_EQ(json["dtype"], serving_dtype_name(dtype));
    EXPECT_EQ(json["tables"][0]["checksum"], "fedcba9876543210");
    EXPECT_EQ(json["tables"][1]["offset"], manifest.blobs[1].offset);

    const ServingManifest decoded =
        decode_manifest(text, kServingFormatVersion, data_size_of(manifest), kContext);
    EXPECT_EQ(decoded.dtype, dtype);
    ASSERT_EQ(decoded.tables.size(), 2u);
    EXPECT_EQ(decoded.tables[0].name, "video");
    EXPECT_EQ(decoded.tables[0].combiner, Combiner::kSqrtn);
    EXPECT_EQ(decoded.tables[1].dim, 33);
    ASSERT_TRUE(decoded.tables[1].quantization_config.has_value());
    EXPECT_EQ(decoded.tables[1].quantization_config->num_buckets, 5);
    for (size_t t = 0; t < 2; ++t) {
      EXPECT_EQ(decoded.blobs[t].offset, manifest.blobs[t].offset);
      EXPECT_EQ(decoded.blobs[t].size, manifest.blobs[t].size);
      EXPECT_EQ(decoded.blobs[t].checksum, manifest.blobs[t].checksum);
    }
    ASSERT_EQ(decoded.features.size(), 2u);
    EXPECT_EQ(decoded.features[0].max_sequence_length, 4);
    EXPECT_EQ(decoded.features[1].output_shape, (std::vector<int64_t>{2, 3}));
  }
}

// A dynamic table's entry holds its keys blob, placed before its rows (num_keys + 1 rows).
TEST(ServingManifestTest, RoundTripsADynamicTablesKeys) {
  ServingManifest manifest = sample_manifest(ServingDtype::kInt8);
  const uint64_t end = data_size_of(manifest);
  manifest.tables.push_back(
      {.name = "session", .dim = 5, .dynamic_vocabulary = DynamicVocabulary{.capacity = 100}});
  manifest.key_blobs.push_back(TableBlob{.offset = end, .size = 7 * 8, .checksum = 9});
  manifest.blobs.push_back(
      {.offset = end + 64, .size = *serving_blob_size(ServingDtype::kInt8, 8, 5), .checksum = 3});
  const std::string text = encode_manifest(manifest);
  const support::Json json = support::Json::parse(text);
  EXPECT_FALSE(json["tables"][0].contains("keys"));
  EXPECT_EQ(json["tables"][2]["keys"]["size"], 56);
  const ServingManifest decoded =
      decode_manifest(text, kServingFormatVersion, data_size_of(manifest), kContext);
  ASSERT_EQ(decoded.key_blobs.size(), 3u);
  EXPECT_FALSE(decoded.key_blobs[0].has_value());
  ASSERT_TRUE(decoded.key_blobs[2].has_value());
  EXPECT_EQ(decoded.key_blobs[2]->offset, end);
  EXPECT_EQ(decoded.key_blobs[2]->size, 56u);
  EXPECT_EQ(decoded.key_blobs[2]->checksum, 9u);
  EXPECT_EQ(decoded.tables[2].dynamic_vocabulary->capacity, 100);
  // Rows for the keys only (no zero row) do not fit the layout.
  manifest.blobs[2].size = *serving_blob_size(ServingDtype::kInt8, 7, 5);
  EXPECT_THAT(error_of<DataLoss>([&] {
                decode_manifest(encode_manifest(manifest), kServingFormatVersion,
                                data_size_of(manifest), kContext);
              }),
              HasSubstr("table 'session': blob size 91 is not 7 keys + 1 zero row x int8"));
}

// The manifest of sample_manifest(kFloat16) as JSON, to be edited by the error tests.
support::Json sample_json() {
  return support::Json::parse(encode_manifest(sample_manifest(ServingDtype::kFloat16)));
}

std::string decode_error(const support::Json& json, uint64_t data_size) {
  return error_of<DataLoss>(
      [&] { decode_manifest(json.dump(), kServingFormatVersion, data_size, kContext); });
}

TEST(ServingManifestTest, RejectsBadStructureNamingTheField) {
  const uint64_t data_size = data_size_of(sample_manifest(ServingDtype::kFloat16));
  EXPECT_THAT(error_of<DataLoss>([&] { decode_manifest("{\"dtype\": ", 2, data_size, kContext); }),
              AllOf(HasSubstr(kContext), HasSubstr("not valid JSON")));
  EXPECT_THAT(error_of<DataLoss>([&] { decode_manifest("[1, 2]", 2, data_size, kContext); }),
              HasSubstr(kContext + ": manifest: expected an object, got [1,2]"));

  struct Edit {
    std::function<void(support::Json&)> apply;
    std::vector<std::string> fragments;
  };
  const std::vector<Edit> edits = {
      {[](support::Json& j) { j["extra"] = 1; },
       {"manifest: extra: not a known field (known: dtype, tables, features, extra_arrays, "
        "metadata)"}},
      {[](support::Json& j) { j.erase("features"); }, {"manifest: features: required but missing"}},
      {[](support::Json& j) { j["dtype"] = 16; }, {"manifest: dtype: expected a string, got 16"}},
      {[](support::Json& j) { j["dtype"] = "bfloat16"; },
       {"manifest: dtype: ", "'bfloat16'", "'int8'"}},
      {[](support::Json& j) { j["tables"] = "video"; },
       {"manifest: tables: expected an array, got \"video\""}},
      {[](support::Json& j) { j["tables"][1]["offset"] = -64; },
       {"manifest: tables[1].offset: expected an integer >= 0, got -64"}},
      {[](support::Json& j) { j["tables"][0]["size"] = "60"; },
       {"manifest: tables[0].size: expected an integer >= 0, got \"60\""}},
      {[](support::Json& j) { j["tables"][0]["checksum"] = "XYZ"; },
       {"manifest: tables[0].checksum: expected 16 lowercase hex digits, got \"XYZ\""}},
      {[](support::Json& j) { j["tables"][0].erase("checksum"); },
       {"manifest: tables[0].checksum: required but missing"}},
      {[](support::Json& j) { j["tables"][1]["config"]["dim"] = "wide"; },
       {"manifest: tables[1].config.dim: expected a 64-bit integer, got \"wide\""}},
      {[](support::Json& j) { j["tables"][1]["config"]["dim"] = 0; },
       {"table 'user'", "dim must be >= 1"}},
      {[](support::Json& j) { j["tables"][1]["config"]["name"] = "video"; },
       {"'video' is used more than once"}},
      {[](support::Json& j) { j["features"][0]["table"] = "movie"; }, {"'watched'", "'movie'"}},
      {[](support::Json& j) { j["features"][1]["colour"] = 1; },
       {"manifest: features[1].colour: not a known field"}},
      {[](support::Json& j) { j["features"] = support::Json::array(); }, {"at least one feature"}},
  };
  for (const Edit& edit : edits) {
    support::Json json = sample_json();
    edit.apply(json);
    const std::string message = decode_error(json, data_size);
    EXPECT_THAT(message, HasSubstr(kContext)) << json.dump();
    for (const std::string& fragment : edit.fragments) {
      EXPECT_THAT(message, HasSubstr(fragment)) << json.dump();
    }
  }
}

TEST(ServingManifestTest, RejectsBlobsThatDoNotTileTheDataSection) {
  const ServingManifest manifest = sample_manifest(ServingDtype::kFloat16);
  const uint64_t data_size = data_size_of(manifest);  // 64 + 320
  support::Json json = sample_json();
  json["tables"][0]["size"] = 62;
  EXPECT_THAT(decode_error(json, data_size),
              AllOf(HasSubstr("table 'video'"), HasSubstr("blob size 62"),
                    HasSubstr("vocabulary_size 10 x float16 rows of dim 3")));
  json = sample_json();
  json["tables"][1]["config"]["vocabulary_size"] = 5;  // blob size no longer matches
  EXPECT_THAT(decode_error(json, data_size), HasSubstr("table 'user': blob size 264"));
  json = sample_json();
  json["tables"][1]["offset"] = 128;
  EXPECT_THAT(decode_error(json, data_size),
              AllOf(HasSubstr("table 'user'"), HasSubstr("offset 128 should be 64")));
  json = sample_json();
  json["tables"][0]["offset"] = 64;
  EXPECT_THAT(decode_error(json, data_size), HasSubstr("offset 64 should be 0"));
  // A data section shorter than the blobs (truncated), or longer (uncovered bytes).
  EXPECT_THAT(decode_error(sample_json(), data_size - 64),
              AllOf(HasSubstr("table 'user'"), HasSubstr("ends after"), HasSubstr("truncated")));
  EXPECT_THAT(decode_error(sample_json(), data_size - 1), HasSubstr("table 'user'"));
  EXPECT_THAT(decode_error(sample_json(), data_size + 64),
              AllOf(HasSubstr(std::to_string(data_size + 64) + " bytes"),
                    HasSubstr("tables and extra arrays use " + std::to_string(data_size))));
  // Sizes too large for 64 bits never overflow into a small, valid-looking size.
  json = sample_json();
  json["dtype"] = "int8";
  json["tables"][0]["config"]["vocabulary_size"] = int64_t{1} << 62;  // x 9 bytes per row
  json["tables"][0]["config"]["dim"] = 1;
  EXPECT_THAT(decode_error(json, data_size), HasSubstr("table 'video': blob size 60 is not"));
  EXPECT_EQ(decode_manifest(sample_json().dump(), 2, data_size, kContext).tables.size(), 2u);
}

// sample_manifest with two extra arrays after the tables and some metadata.
ServingManifest sample_with_extras() {
  ServingManifest manifest = sample_manifest(ServingDtype::kInt8);
  const uint64_t tables_end = data_size_of(manifest);
  manifest.extra_arrays = {{.name = "dense/weights", .shape = {2, 3}}, {.name = "bias"}};
  manifest.extra_blobs = {{.offset = tables_end, .size = 24, .checksum = 7},
                          {.offset = tables_end + 64, .size = 4, .checksum = 8}};
  manifest.metadata = {{"settings", "[model]\nembedding_dim = 8\n"}, {"run", ""}};
  return manifest;
}

TEST(ServingManifestTest, ExtraArraysAndMetadataRoundTripAfterTheTables) {
  const ServingManifest manifest = sample_with_extras();
  const uint64_t data_size = manifest.extra_blobs[1].offset + 64;
  const std::string text = encode_manifest(manifest);
  const support::Json json = support::Json::parse(text);
  EXPECT_EQ(json["extra_arrays"][0]["name"], "dense/weights");
  EXPECT_EQ(json["extra_arrays"][0]["shape"], support::Json::parse("[2, 3]"));
  EXPECT_EQ(json["extra_arrays"][1]["shape"], support::Json::array());
  EXPECT_EQ(json["extra_arrays"][1]["checksum"], "0000000000000008");
  EXPECT_EQ(json["metadata"]["run"], "");

  const ServingManifest decoded = decode_manifest(text, 2, data_size, kContext);
  ASSERT_EQ(decoded.extra_arrays.size(), 2u);
  for (size_t a = 0; a < 2; ++a) {
    EXPECT_EQ(decoded.extra_arrays[a].name, manifest.extra_arrays[a].name);
    EXPECT_EQ(decoded.extra_arrays[a].shape, manifest.extra_arrays[a].shape);
    EXPECT_EQ(decoded.extra_blobs[a].offset, manifest.extra_blobs[a].offset);
    EXPECT_EQ(decoded.extra_blobs[a].size, manifest.extra_blobs[a].size);
    EXPECT_EQ(decoded.extra_blobs[a].checksum, manifest.extra_blobs[a].checksum);
  }
  EXPECT_EQ(decoded.metadata, manifest.metadata);

  // Version 1 has neither key: a version-1 manifest holding them is refused, one without them is
  // read with none.
  EXPECT_THAT(error_of<DataLoss>([&] { decode_manifest(text, 1, data_size, kContext); }),
              HasSubstr("manifest: extra_arrays: not a known field (known: dtype, tables, "
                        "features)"));
  support::Json version_1 = sample_json();
  version_1.erase("extra_arrays");
  version_1.erase("metadata");
  const uint64_t tables_size = data_size_of(sample_manifest(ServingDtype::kFloat16));
  const ServingManifest old = decode_manifest(version_1.dump(), 1, tables_size, kContext);
  EXPECT_TRUE(old.extra_arrays.empty());
  EXPECT_TRUE(old.metadata.empty());
  EXPECT_THAT(
      error_of<DataLoss>([&] { decode_manifest(version_1.dump(), 2, tables_size, kContext); }),
      HasSubstr("manifest: extra_arrays: required but missing"));
}

TEST(ServingManifestTest, RejectsBadExtraArraysAndMetadata) {
  const ServingManifest manifest = sample_with_extras();
  const uint64_t data_size = manifest.extra_blobs[1].offset + 64;
  const support::Json good = support::Json::parse(encode_manifest(manifest));
  struct Edit {
    std::function<void(support::Json&)> apply;
    std::vector<std::string> fragments;
  };
  const std::vector<Edit> edits = {
      {[](support::Json& j) { j["extra_arrays"][1]["name"] = "dense/weights"; },
       {"extra_arrays[1].name", "'dense/weights' is empty or repeated"}},
      {[](support::Json& j) { j["extra_arrays"][0]["name"] = ""; },
       {"extra_arrays[0].name", "is empty or repeated"}},
      {[](support::Json& j) { j["extra_arrays"][0]["shape"] = support::Json::parse("[2, -3]"); },
       {"extra_arrays[0].shape[1]: expected an integer >= 0, got -3"}},
      {[](support::Json& j) { j["extra_arrays"][0]["shape"] = support::Json::parse("[3, 3]"); },
       {"extra array 'dense/weights': blob size 24 is not 4 bytes (float32) per value"}},
      {[](support::Json& j) {
         j["extra_arrays"][0]["shape"] = support::Json::parse("[4611686018427387904, 4]");
       },
       {"extra array 'dense/weights': blob size 24 is not"}},
      {[](support::Json& j) { j["extra_arrays"][1]["offset"] = 0; },
       {"extra array 'bias': blob offset 0 should be"}},
      {[](support::Json& j) { j["extra_arrays"][0]["dtype"] = "float16"; },
       {"extra_arrays[0].dtype: not a known field"}},
      {[](support::Json& j) { j["metadata"]["run"] = 3; }, {"metadata.run: expected a string"}},
      {[](support::Json& j) { j["metadata"] = "run"; }, {"metadata: expected an object"}},
  };
  EXPECT_EQ(decode_manifest(good.dump(), 2, data_size, kContext).extra_arrays.size(), 2u);
  for (const Edit& edit : edits) {
    support::Json json = good;
    edit.apply(json);
    const std::string message = decode_error(json, data_size);
    EXPECT_THAT(message, HasSubstr(kContext)) << json.dump();
    for (const std::string& fragment : edit.fragments) {
      EXPECT_THAT(message, HasSubstr(fragment)) << json.dump();
    }
  }
  // The arrays' blobs must end the data section.
  EXPECT_THAT(decode_error(good, data_size - 64),
              AllOf(HasSubstr("extra array 'bias'"), HasSubstr("ends after")));
  EXPECT_THAT(decode_error(good, data_size + 64), HasSubstr("tables and extra arrays use"));
}

// Nesting is bounded at parse: a value 100,000 arrays deep is an error, not a stack overflow.
TEST(ServingManifestTest, RejectsDeepNesting) {
  const uint64_t data_size = data_size_of(sample_manifest(ServingDtype::kFloat16));
  std::string text = sample_json().dump();
  text.insert(text.rfind('}'),
              ", \"deep\": " + std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_EQ(error_of<DataLoss>([&] { decode_manifest(text, 2, data_size, kContext); }),
            kContext + ": manifest: arrays and objects nest deeper than " +
                std::to_string(support::kMaxJsonDepth) + " levels");
}

}  // namespace
}  // namespace recemb::internal
