// export_serving_model (src/serving/exporter.cc): the file it writes, read back by the test's own
// reader of docs/serving.md; the stored values against the float32 tables; values a dtype cannot
// hold; and atomicity: a failing export (bad value, missing directory, a write that fails midway)
// leaves no file and no temporary behind, and an existing model untouched.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <sys/resource.h>
#include <system_error>
#include <utility>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/serving.h"

#include "format/checksum.h"
#include "serving/model_file.h"
#include "testing/error_of.h"
#include "testing/fault_file_system.h"
#include "testing/files.h"
#include "testing/temporary_directory.h"

namespace recemb {
namespace {

using test::error_of;
using test::ModelFile;
using test::TemporaryDirectory;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Three tables whose blobs need padding (odd sizes for every dtype), one with an optimizer, one
// with simulated quantization; rows of random scale so int8 rows differ in range.
Embedding make_layer(int64_t rows_scale = 1) {
  Embedding layer(
      std::vector<TableConfig>{
          {.name = "video",
           .vocabulary_size = 37 * rows_scale,
           .dim = 7,
           .optimizer = Adam{},
           .combiner = Combiner::kSum},
          {.name = "user", .vocabulary_size = 11 * rows_scale, .dim = 66},
          {.name = "query",
           .vocabulary_size = 5 * rows_scale,
           .dim = 3,
           .combiner = Combiner::kSqrtn,
           .quantization_config = QuantizationConfig{.num_buckets = 4, .lower = -1, .upper = 1}}},
      std::vector<FeatureConfig>{{.name = "watched", .table = "video"},
                                 {.name = "history", .table = "video", .max_sequence_length = 5},
                                 {.name = "who", .table = "user", .output_shape = {2, 2}},
                                 {.name = "typed", .table = "query"}},
      EmbeddingOptions{.optimizer = Sgd{}, .num_threads = 1, .seed = 11});
  std::mt19937_64 rng(3);
  for (const TableConfig& table : layer.tables()) {
    std::span<float> values = layer.variable_data(table.name, "parameters");
    for (int64_t r = 0; r < table.vocabulary_size; ++r) {
      const float scale = std::exp2(static_cast<float>(rng() % 12) - 6.0f);
      for (int64_t d = 0; d < table.dim; ++d) values[r * table.dim + d] *= scale;
    }
  }
  return layer;
}

std::vector<float> parameters(const Embedding& layer, const std::string& table) {
  std::vector<float> values(static_cast<size_t>(layer.variable_shape(table, "parameters")[0] *
                                                layer.variable_shape(table, "parameters")[1]));
  layer.read_variable(table, "parameters", values);
  return values;
}

class ExporterLayoutTest : public ::testing::TestWithParam<ServingDtype> {};

TEST_P(ExporterLayoutTest, WritesTheSpecifiedLayout) {
  const ServingDtype dtype = GetParam();
  const Embedding layer = make_layer();
  const TemporaryDirectory directory;
  export_serving_model(layer, directory / "model.recemb", {.dtype = dtype});
  EXPECT_THAT(directory.entries(), ElementsAre("model.recemb")) << "no temporary is left";
  const ModelFile file = ModelFile::read(directory / "model.recemb");
  const std::vector<std::byte>& bytes = file.bytes;

  // Header.
  EXPECT_EQ(file.format_version, 3u);
  EXPECT_EQ(file.file_size, bytes.size());
  EXPECT_EQ(bytes.size() % 64, 0u);
  EXPECT_EQ(test::load_le<uint32_t>(bytes, 12), 0u);
  EXPECT_EQ(test::load_le<uint64_t>(bytes, 40), 0u);
  EXPECT_EQ(test::load_le<uint64_t>(bytes, 48), 0u);
  EXPECT_EQ(file.header_checksum, format::checksum(std::span(bytes).first(56)));

  // Manifest: checksummed JSON padded with spaces to a multiple of 64.
  EXPECT_EQ(file.manifest_size % 64, 0u);
  const auto manifest_bytes = std::span(bytes).subspan(64, file.manifest_size);
  EXPECT_EQ(file.manifest_checksum, format::checksum(manifest_bytes));
  const std::string text(reinterpret_cast<const char*>(manifest_bytes.data()),
                         manifest_bytes.size());
  const size_t end = text.find_last_of('}');
  EXPECT_EQ(text.find_first_not_of(" \n", end + 1), std::string::npos);
  EXPECT_EQ(file.dtype, serving_dtype_name(dtype));
  ASSERT_EQ(file.manifest["tables"].size(), 3u);
  for (size_t t = 0; t < 3; ++t) {
    const support::Json& config = file.manifest["tables"][t]["config"];
    EXPECT_EQ(config["name"], layer.tables()[t].name);
    EXPECT_FALSE(config.contains("optimizer")) << "a serving model has no optimizer";
  }
  EXPECT_EQ(file.manifest["tables"][0]["config"]["combiner"], "sum");
  EXPECT_EQ(file.manifest["tables"][2]["config"]["quantization_config"]["num_buckets"], 4);
  ASSERT_EQ(file.manifest["features"].size(), 4u);
  EXPECT_EQ(file.manifest["features"][1]["max_sequence_length"], 5);
  EXPECT_EQ(file.manifest["features"][2]["output_shape"], support::Json::parse("[2, 2]"));

  // Blobs: contiguous, 64-aligned, vocabulary_size * row_bytes each, zero padding, checksummed
  // with their padding, the last one ending the file.
  const int64_t bytes_per_value = dtype == ServingDtype::kFloat32 ? 4 : 2;
  uint64_t offset = file.data_offset();
  for (const ModelFile::Blob& blob : file.blobs) {
    SCOPED_TRACE(blob.table);
    EXPECT_EQ(blob.offset, offset);
    EXPECT_EQ(blob.offset % 64, 0u);
    const int64_t row_bytes =
        dtype == ServingDtype::kInt8 ? blob.dim + 8 : blob.dim * bytes_per_value;
    EXPECT_EQ(blob.size, static_cast<uint64_t>(blob.vocabulary_size * row_bytes));
    const uint64_t padded = ModelFile::padded(blob.size);
    EXPECT_NE(padded, blob.size) << "the test wants blobs that need padding";
    for (uint64_t i = blob.offset + blob.size; i < blob.offset + padded; ++i) {
      EXPECT_EQ(bytes[i], std::byte{0}) << "padding byte " << i;
    }
    EXPECT_EQ(blob.checksum, format::checksum(std::span(bytes).subspan(blob.offset, padded)));
    offset += padded;
  }
  EXPECT_EQ(offset, bytes.size());
}

// The stored values against the float32 tables: float32 bit for bit; float16 within 2^-11
// relative (kernels/quantized_rows_test.cc checks the rounding itself); int8 rows with bias = min,
// scale = (max - min) / 255, the minimum coded 0, the maximum 255, every value within scale / 2 (+
// float rounding, docs/serving.md).
TEST_P(ExporterLayoutTest, StoresTheTablesValues) {
  const ServingDtype dtype = GetParam();
  const Embedding layer = make_layer();
  const TemporaryDirectory directory;
  export_serving_model(layer, directory / "model.recemb", {.dtype = dtype});
  const ModelFile file = ModelFile::read(directory / "model.recemb");
  for (size_t t = 0; t < file.blobs.size(); ++t) {
    const ModelFile::Blob& blob = file.blobs[t];
    SCOPED_TRACE(blob.table);
    const std::vector<float> table = parameters(layer, blob.table);
    const std::vector<float> stored = file.decode(t);
    ASSERT_EQ(stored.size(), table.size());
    if (dtype == ServingDtype::kFloat32) {
      EXPECT_EQ(std::memcmp(stored.data(), table.data(), table.size() * 4), 0);
      continue;
    }
    for (int64_t r = 0; r < blob.vocabulary_size; ++r) {
      const auto first = table.begin() + r * blob.dim;
      const double low = *std::min_element(first, first + blob.dim);
      const double high = *std::max_element(first, first + blob.dim);
      const std::byte* row = file.bytes.data() + blob.offset + r * (blob.dim + 8);
      for (int64_t d = 0; d < blob.dim; ++d) {
        const double x = table[r * blob.dim + d];
        const double error = std::abs(stored[r * blob.dim + d] - x);
        if (dtype == ServingDtype::kFloat16) {
          EXPECT_LE(error, std::max(std::ldexp(std::abs(x), -11), 0x1p-25)) << r << ", " << d;
        } else {
          EXPECT_LE(error, (high - low) / 255 / 2 +
                               std::ldexp(std::max(std::abs(low), std::abs(high)), -20))
              << r << ", " << d;
          if (x == low) {
            EXPECT_EQ(row[d], std::byte{0}) << r << ", " << d;
          } else if (x == high) {
            EXPECT_EQ(row[d], std::byte{255}) << r << ", " << d;
          }
        }
      }
      if (dtype == ServingDtype::kInt8) {
        float scale, bias;
        std::memcpy(&scale, row + blob.dim, 4);
        std::memcpy(&bias, row + blob.dim + 4, 4);
        EXPECT_EQ(bias, static_cast<float>(low));
        EXPECT_EQ(scale, (static_cast<float>(high) - static_cast<float>(low)) / 255.0f);
      }
    }
  }
}

// Random arrays of the given shapes (values of varied magnitude and sign, never zero).
std::vector<std::vector<float>> random_arrays(const std::vector<std::vector<int64_t>>& shapes,
                                              uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(0.5f, 2.0f);
  std::vector<std::vector<float>> arrays;
  for (const std::vector<int64_t>& shape : shapes) {
    int64_t count = 1;
    for (const int64_t extent : shape) count *= extent;
    std::vector<float> values(static_cast<size_t>(count));
    for (float& value : values) {
      value = uniform(rng) * std::exp2(static_cast<float>(rng() % 40) - 20.0f) *
              (rng() % 2 == 0 ? 1.0f : -1.0f);
    }
    arrays.push_back(std::move(values));
  }
  return arrays;
}

// Extra arrays follow the tables' blobs in the data section, each 64-aligned, of 4 bytes per value
// (float32 whatever the dtype), zero-padded and checksummed as a table blob; the manifest lists
// their names and shapes and the metadata. ServingModel reads them back bitwise, and the tables'
// lookups are those of the same model exported without them.
TEST_P(ExporterLayoutTest, WritesExtraArraysAndMetadataAfterTheTables) {
  const ServingDtype dtype = GetParam();
  const Embedding layer = make_layer();
  const TemporaryDirectory directory;
  const std::vector<std::vector<int64_t>> shapes = {{3, 5}, {}, {0, 4}, {7}};
  const std::vector<std::vector<float>> values = random_arrays(shapes, 17);
  const std::vector<std::string> names = {"dense/weights", "scale", "empty", "dense/bias"};
  ExportOptions options{.dtype = dtype,
                        .metadata = {{"settings", "[model]\nbottom_mlp = [64, 16]\n"},
                                     {"empty", ""},
                                     {"caf\u00e9", "\u00fcber"}}};
  for (size_t a = 0; a < names.size(); ++a) {
    options.extra_arrays.push_back({.name = names[a], .shape = shapes[a], .values = values[a]});
  }
  export_serving_model(layer, directory / "model.recemb", options);
  const ModelFile file = ModelFile::read(directory / "model.recemb");
  const std::vector<std::byte>& bytes = file.bytes;
  EXPECT_EQ(file.manifest["metadata"], support::Json(options.metadata));
  const support::Json& entries = file.manifest["extra_arrays"];
  ASSERT_EQ(entries.size(), names.size());
  uint64_t offset = file.blobs.back().offset + ModelFile::padded(file.blobs.back().size);
  for (size_t a = 0; a < names.size(); ++a) {
    SCOPED_TRACE(names[a]);
    EXPECT_EQ(entries[a]["name"], names[a]);
    EXPECT_EQ(entries[a]["shape"], support::Json(shapes[a]));
    const uint64_t start = file.data_offset() + entries[a]["offset"].get<uint64_t>();
    const auto size = entries[a]["size"].get<uint64_t>();
    EXPECT_EQ(start, offset);
    EXPECT_EQ(size, values[a].size() * 4);
    if (size > 0) {  // an empty array's data() may be null: no memcmp of it
      EXPECT_EQ(std::memcmp(bytes.data() + start, values[a].data(), size), 0);
    }
    const uint64_t padded = ModelFile::padded(size);
    for (uint64_t i = start + size; i < start + padded; ++i) {
      EXPECT_EQ(bytes[i], std::byte{0}) << "padding byte " << i;
    }
    uint64_t checksum = 0;
    format::parse_checksum(entries[a]["checksum"].get<std::string>(), checksum);
    EXPECT_EQ(checksum, format::checksum(std::span(bytes).subspan(start, padded)));
    offset += padded;
  }
  EXPECT_EQ(offset, bytes.size());

  ServingModel copy = ServingModel::open(directory / "model.recemb");
  const ServingModel model = std::move(copy);  // the values live in the model's memory
  EXPECT_EQ(model.metadata(), options.metadata);
  ASSERT_EQ(model.extra_arrays().size(), names.size());
  for (size_t a = 0; a < names.size(); ++a) {
    const ServingArray& array = model.extra_array(names[a]);
    EXPECT_EQ(&array, &model.extra_arrays()[a]);
    EXPECT_EQ(array.name, names[a]);
    EXPECT_EQ(array.shape, shapes[a]);
    ASSERT_EQ(array.values.size(), values[a].size());
    EXPECT_TRUE(std::equal(array.values.begin(), array.values.end(), values[a].begin()));
  }
  EXPECT_THAT(error_of<InvalidArgument>([&] { model.extra_array("dense/Weights"); }),
              AllOf(HasSubstr("no extra array 'dense/Weights'"),
                    HasSubstr("'dense/weights', 'scale', 'empty', 'dense/bias'")));

  export_serving_model(layer, directory / "plain.recemb", {.dtype = dtype});
  const ServingModel plain = ServingModel::open(directory / "plain.recemb");
  EXPECT_TRUE(plain.extra_arrays().empty());
  EXPECT_TRUE(plain.metadata().empty());
  EXPECT_THAT(error_of<InvalidArgument>([&] { plain.extra_array("scale"); }),
              HasSubstr("it has none"));
  const std::vector<std::byte> table_blobs(
      bytes.begin() + static_cast<std::ptrdiff_t>(file.data_offset()),
      bytes.begin() + static_cast<std::ptrdiff_t>(file.blobs.back().offset +
                                                  ModelFile::padded(file.blobs.back().size)));
  EXPECT_EQ(ModelFile::read(directory / "plain.recemb").data_section(), table_blobs)
      << "the same table blobs";
}

// A 16-bit table exports as the float32 table of its values (docs/semantics.md, "16-bit
// tables"): read in place, a chunk at a time, when one process holds it whole; gathered as float32
// when it is split into shards. Same blob bytes in both cases as the float32 twin's.
TEST_P(ExporterLayoutTest, A16BitTableExportsAsTheFloat32TableOfItsValues) {
  const ServingDtype dtype = GetParam();
  for (const DType table_dtype : {DType::kBFloat16, DType::kFloat16}) {
    for (const int shards : {1, 2}) {
      SCOPED_TRACE(std::string(dtype_name(table_dtype)) + ", shards " + std::to_string(shards));
      const auto layer_of = [&](DType of) {
        return Embedding({{.name = "t",
                           .vocabulary_size = 300'001,  // several chunks of kChunkBytes
                           .dim = 5,
                           .initializer = TruncatedNormal{.stddev = 3.0f},
                           .dtype = of}},
                         {{.name = "f", .table = "t"}},
                         {.num_threads = 2,
                          .seed = 4,
                          .placement = PlacementOptions{.num_shards = shards,
                                                        .strategy = ShardingStrategy::kRowWise}});
      };
      const Embedding half = layer_of(table_dtype);
      Embedding twin = layer_of(DType::kFloat32);
      twin.write_variable("t", "parameters", parameters(half, "t"));
      const TemporaryDirectory directory;
      export_serving_model(half, directory / "half.recemb", {.dtype = dtype});
      export_serving_model(twin, directory / "twin.recemb", {.dtype = dtype});
      const ModelFile half_file = ModelFile::read(directory / "half.recemb");
      const ModelFile twin_file = ModelFile::read(directory / "twin.recemb");
      const ModelFile::Blob& blob = half_file.blobs.at(0);
      ASSERT_EQ(blob.size, twin_file.blobs.at(0).size);
      EXPECT_EQ(std::memcmp(half_file.bytes.data() + blob.offset,
                            twin_file.bytes.data() + twin_file.blobs[0].offset, blob.size),
                0);
      EXPECT_EQ(half_file.decode(0), twin_file.decode(0));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, ExporterLayoutTest,
                         ::testing::Values(ServingDtype::kFloat32, ServingDtype::kFloat16,
                                           ServingDtype::kInt8),
                         [](const auto& test_info) {
                           return std::string(serving_dtype_name(test_info.param));
                         });

// ------------------------------------------------------------------------------------------------
// Failures.

class ExporterErrorTest : public ::testing::Test {
 protected:
  // An earlier model at the path, to be left untouched by failing exports.
  void SetUp() override {
    export_serving_model(previous_layer_, path_);
    previous_ = test::read_bytes(path_);
  }

  // The directory holds the previous model only, unchanged.
  void expect_previous_model_only() {
    EXPECT_THAT(directory_.entries(), ElementsAre("model.recemb"));
    EXPECT_EQ(test::read_bytes(path_), previous_);
  }

  // Exporting `layer` as `dtype` throws InvalidArgument naming the file and containing every
  // fragment, and changes nothing on disk.
  void expect_rejected(const Embedding& layer, ServingDtype dtype,
                       const std::vector<std::string>& fragments) {
    const std::string message =
        error_of<InvalidArgument>([&] { export_serving_model(layer, path_, {.dtype = dtype}); });
    EXPECT_THAT(message, HasSubstr("serving model '" + path_.string() + "'"));
    for (const std::string& fragment : fragments) EXPECT_THAT(message, HasSubstr(fragment));
    expect_previous_model_only();
  }

  Embedding previous_layer_{{{.name = "old", .vocabulary_size = 3, .dim = 2}},
                            {{.name = "f", .table = "old"}}};
  TemporaryDirectory directory_;
  std::filesystem::path path_ = directory_ / "model.recemb";
  std::vector<std::byte> previous_;
};

TEST_F(ExporterErrorTest, ValuesTheDtypeCannotHoldAreRejectedBeforeAnyWrite) {
  Embedding layer = make_layer();
  std::span<float> user = layer.variable_data("user", "parameters");
  user[3 * 66 + 5] = kNaN;
  for (const ServingDtype dtype :
       {ServingDtype::kFloat32, ServingDtype::kFloat16, ServingDtype::kInt8}) {
    expect_rejected(layer, dtype,
                    {"table 'user' row 3 column 5: value nan cannot be stored as " +
                     std::string(serving_dtype_name(dtype))});
  }
  user[3 * 66 + 5] = 0.5f;
  user[9 * 66 + 63] = -kInf;
  expect_rejected(layer, ServingDtype::kFloat32, {"row 9 column 63: value -inf"});
  user[9 * 66 + 63] = 0.5f;

  std::span<float> video = layer.variable_data("video", "parameters");
  video[36 * 7 + 6] = 65520.0f;  // rounds to infinity in float16; fine as float32 and int8
  expect_rejected(layer, ServingDtype::kFloat16,
                  {"table 'video' row 36 column 6: value 65520", "magnitude < 65520"});
  video[36 * 7 + 6] = -65519.0f;  // rounds to -65504
  video[2 * 7 + 1] = -3e38f;      // max - min of row 2 overflows float: reported at column 0
  video[2 * 7 + 4] = 3e38f;
  expect_rejected(layer, ServingDtype::kInt8, {"table 'video' row 2 column 0", "max - min"});
  video[2 * 7 + 1] = 0.25f;
  video[2 * 7 + 4] = 0.5f;
  for (const ServingDtype dtype :
       {ServingDtype::kFloat32, ServingDtype::kFloat16, ServingDtype::kInt8}) {
    export_serving_model(layer, path_, {.dtype = dtype});
    EXPECT_EQ(ServingModel::open(path_).dtype(), dtype);
  }
}

TEST_F(ExporterErrorTest, InvalidDtypeAndNamesThatAreNotUtf8) {
  EXPECT_THAT(error_of<InvalidArgument>([&] {
                export_serving_model(make_layer(), path_, {.dtype = static_cast<ServingDtype>(3)});
              }),
              HasSubstr("ExportOptions.dtype: ServingDtype value 3"));
  expect_previous_model_only();
  const Embedding latin1({{.name = "caf\xe9", .vocabulary_size = 2, .dim = 2}},
                         {{.name = "f", .table = "caf\xe9"}});
  expect_rejected(latin1, ServingDtype::kFloat32, {"cannot be written as JSON"});
}

TEST_F(ExporterErrorTest, BadExtraArraysAndMetadataAreRejectedBeforeAnyWrite) {
  const Embedding layer = make_layer();
  const std::vector<float> six = {1, 2, 3, 4, 5, 6};
  const std::vector<float> not_finite = {1, kNaN, 3};
  const auto rejected = [&](const std::vector<ServingArray>& arrays,
                            const std::map<std::string, std::string>& metadata) {
    const std::string message = error_of<InvalidArgument>([&] {
      export_serving_model(layer, path_, {.extra_arrays = arrays, .metadata = metadata});
    });
    expect_previous_model_only();
    return message;
  };
  EXPECT_EQ(rejected({{.name = "w", .shape = {2, 3}, .values = six},
                      {.name = "w", .shape = {6}, .values = six}},
                     {}),
            "ExportOptions.extra_arrays[1] 'w': the name is empty or repeated (names must be "
            "unique)");
  EXPECT_THAT(rejected({{.shape = {6}, .values = six}}, {}),
              HasSubstr("extra_arrays[0] '': the name is empty"));
  EXPECT_THAT(rejected({{.name = "w", .shape = {-2, -3}, .values = six}}, {}),
              HasSubstr("'w': the shape has a negative extent"));
  EXPECT_THAT(
      rejected({{.name = "w", .shape = {int64_t{1} << 40, int64_t{1} << 40}, .values = six}}, {}),
      HasSubstr("'w': the shape has a negative extent or overflows"));
  EXPECT_EQ(rejected({{.name = "w", .shape = {4}, .values = six}}, {}),
            "ExportOptions.extra_arrays[0] 'w': the shape holds 4 values but 6 were given");
  EXPECT_THAT(rejected({{.name = "w", .values = six}}, {}),
              HasSubstr("the shape holds 1 values but 6"));
  EXPECT_EQ(rejected({{.name = "w", .shape = {3}, .values = not_finite}}, {}),
            "ExportOptions.extra_arrays[0] 'w': value 1 is nan (values must be finite)");
  EXPECT_THAT(rejected({{.name = "caf\xe9", .shape = {6}, .values = six}}, {}),
              AllOf(HasSubstr("serving model '" + path_.string() + "'"),
                    HasSubstr("cannot be written as JSON")));
  EXPECT_THAT(rejected({}, {{"run", "caf\xe9"}}), HasSubstr("cannot be written as JSON"));
  // A long name is quoted cut.
  EXPECT_THAT(rejected({{.name = std::string(10000, 'n'), .shape = {4}, .values = six}}, {}),
              AllOf(HasSubstr("'nnnnnnnn"), Not(HasSubstr(std::string(100, 'n')))));
}

TEST_F(ExporterErrorTest, MissingDirectoryIsASystemError) {
  const std::filesystem::path missing = directory_ / "missing" / "model.recemb";
  try {
    export_serving_model(make_layer(), missing);
    ADD_FAILURE() << "no exception";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code(), std::errc::no_such_file_or_directory);
    EXPECT_THAT(error.what(), HasSubstr("create '" + missing.string() + "': "));
  }
  expect_previous_model_only();
}

// A write that fails midway (here: the file size limit, EFBIG, as a full disk would give ENOSPC)
// throws std::system_error; the temporary is removed and the previous model is untouched.
TEST_F(ExporterErrorTest, FailedWriteLeavesThePreviousModel) {
  const Embedding layer = make_layer(40);  // ~190 KB as float32
  rlimit original;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &original), 0);
  const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);  // get EFBIG, not the signal
  rlimit limited = original;
  limited.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string message;
  try {
    export_serving_model(layer, path_);
  } catch (const std::system_error& error) {
    message = error.what();
    EXPECT_EQ(error.code(), std::errc::file_too_large);
  }
  setrlimit(RLIMIT_FSIZE, &original);
  std::signal(SIGXFSZ, previous_handler);
  EXPECT_THAT(message, AllOf(HasSubstr("write"), HasSubstr(directory_.path().string())));
  expect_previous_model_only();
  export_serving_model(layer, path_);  // and without the limit it is written
  EXPECT_EQ(ServingModel::open(path_).tables()[0].vocabulary_size, 37 * 40);
  EXPECT_THAT(directory_.entries(), ElementsAre("model.recemb"));
}

// Every write, fsync, rename and directory fsync of an export fails in turn (ENOSPC, EIO, a short
// write): std::system_error with that errno, the layer unchanged, and the path holds the previous
// model, or the new one when only the directory fsync after the rename failed; nothing else is
// left in the directory.
TEST_F(ExporterErrorTest, EveryFailingCallLeavesTheOldOrTheNewModel) {
  Embedding layer = make_layer();
  const std::vector<float> before(layer.variable_data("user", "parameters").begin(),
                                  layer.variable_data("user", "parameters").end());
  const std::filesystem::path fresh = directory_ / "fresh.recemb";
  export_serving_model(layer, fresh);
  const std::vector<std::byte> exported = test::read_bytes(fresh);
  std::filesystem::remove(fresh);
  int injected = 0;
  for (const test::FaultPoint point : test::kFaultPoints) {
    for (const auto& [error_number, short_write] :
         std::vector<std::pair<int, bool>>{{ENOSPC, false}, {EIO, false}, {ENOSPC, true}}) {
      if (short_write && point != test::FaultPoint::kWrite) continue;
      for (int nth = 1;; ++nth) {
        SCOPED_TRACE(test::fault_point_name(point) + " number " + std::to_string(nth) +
                     " fails with errno " + std::to_string(error_number));
        test::FaultFileSystem file_system;
        file_system.fail(point, nth, error_number, short_write);
        try {
          export_serving_model(layer, path_);
          break;  // nth is past the last call of that kind
        } catch (const std::system_error& error) {
          EXPECT_EQ(error.code().value(), error_number) << error.what();
        }
        ++injected;
        EXPECT_THAT(directory_.entries(), ElementsAre("model.recemb"));
        const std::vector<std::byte> now = test::read_bytes(path_);
        EXPECT_TRUE(now == previous_ || now == exported);
        EXPECT_TRUE(std::equal(before.begin(), before.end(),
                               layer.variable_data("user", "parameters").begin()));
        test::write_bytes(path_, previous_);
      }
    }
  }
  EXPECT_GE(injected, 5);
}

}  // namespace
}  // namespace recemb
