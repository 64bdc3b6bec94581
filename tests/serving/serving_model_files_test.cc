// ServingModel::open (src/serving/serving_model.cc) on files that are damaged, truncated,
// foreign, of another version, or whose manifest was edited; the checked-in version-1 models;
// missing directories and bad options. Lookups are tested in serving_model_test.cc.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <sys/stat.h>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/serving.h"

#include "batch/csr_feature.h"
#include "reference/reference_embedding.h"
#include "serving/model_file.h"
#include "serving/serving_scenario.h"
#include "testing/embedding_calls.h"
#include "testing/error_of.h"
#include "testing/fault_file_system.h"
#include "testing/files.h"
#include "testing/random_batches.h"
#include "testing/temporary_directory.h"

namespace recemb {
namespace {

using test::error_of;
using test::kDtypes;
using test::lookup_activations;
using test::make_layer;
using test::make_scenario;
using test::ModelFile;
using test::OwnedInput;
using test::random_inputs;
using test::Scenario;
using test::TemporaryDirectory;
using ::testing::AllOf;
using ::testing::HasSubstr;

// ------------------------------------------------------------------------------------------------
// Damaged, truncated and foreign files.

class ServingFileErrorTest : public ::testing::TestWithParam<ServingDtype> {
 protected:
  void SetUp() override {
    export_serving_model(layer_, good_, {.dtype = GetParam()});
    file_ = ModelFile::read(good_);
  }

  // Opening `bytes` (written to damaged_) throws DataLoss naming the file and containing
  // `fragment`.
  void expect_rejected(const std::vector<std::byte>& bytes, bool verify,
                       const std::string& fragment, const std::string& trace) {
    test::write_bytes(damaged_, bytes);
    const std::string message =
        error_of<DataLoss>([&] { ServingModel::open(damaged_, {.verify = verify}); });
    EXPECT_THAT(message,
                AllOf(HasSubstr("serving model '" + damaged_.string() + "'"), HasSubstr(fragment)))
        << trace;
  }

  // Opening `bytes` succeeds and a lookup runs (it may give wrong values, never crash).
  void expect_opens_and_looks_up(const std::vector<std::byte>& bytes, const std::string& trace) {
    test::write_bytes(damaged_, bytes);
    try {
      const ServingModel model = ServingModel::open(damaged_, {.verify = false});
      std::mt19937_64 rng(1);
      lookup_activations(model, test::views_of(random_inputs(rng, scenario_)));
    } catch (const std::exception& error) {
      ADD_FAILURE() << trace << ": " << error.what();
    }
  }

  Scenario scenario_ = make_scenario(Combiner::kSqrtn, true);
  Embedding layer_ = make_layer(scenario_, 4);
  TemporaryDirectory directory_;
  std::filesystem::path good_ = directory_ / "good.recemb";
  std::filesystem::path damaged_ = directory_ / "damaged.recemb";
  ModelFile file_;
};

// Flipping any byte is detected: sampled positions in the header (all of it), the manifest and
// every table blob (first, last, padding and random bytes). With /*verify=*/false, damage to
// the header or manifest is still detected; damage to a blob is not, and the model still opens
// and looks up.
TEST_P(ServingFileErrorTest, FlippedBytesAreDetectedInEverySection) {
  std::mt19937_64 rng(900 + static_cast<uint64_t>(GetParam()));
  const auto flip = [&](size_t position) {
    std::vector<std::byte> bytes = file_.bytes;
    bytes[position] ^= static_cast<std::byte>(1 + rng() % 255);
    return bytes;
  };
  for (size_t position = 0; position < 64; ++position) {
    const std::string fragment = position < 8 ? "not a recemb serving model" : "header";
    const std::string trace = "header byte " + std::to_string(position);
    expect_rejected(flip(position), /*verify=*/true, fragment, trace);
    expect_rejected(flip(position), /*verify=*/false, fragment, trace);
  }
  std::vector<size_t> manifest_positions{64, 64 + file_.manifest_size - 1};
  for (int i = 0; i < 40; ++i) manifest_positions.push_back(64 + rng() % file_.manifest_size);
  for (const size_t position : manifest_positions) {
    const std::string trace = "manifest byte " + std::to_string(position);
    expect_rejected(flip(position), /*verify=*/true, "the manifest checksum", trace);
    expect_rejected(flip(position), /*verify=*/false, "the manifest checksum", trace);
  }
  for (const ModelFile::Blob& blob : file_.blobs) {
    const uint64_t padded = ModelFile::padded(blob.size);
    std::vector<uint64_t> offsets{0, blob.size - 1, padded - 1, blob.size / 2};
    for (int i = 0; i < 20; ++i) offsets.push_back(rng() % padded);
    for (const uint64_t offset : offsets) {
      const std::string trace = "table " + blob.table + " byte " + std::to_string(offset);
      expect_rejected(flip(blob.offset + offset), /*verify=*/true,
                      "table '" + blob.table + "': the checksum does not match", trace);
      expect_opens_and_looks_up(flip(blob.offset + offset), trace);
    }
  }
}

TEST_P(ServingFileErrorTest, TruncatedAndExtendedFilesAreRejected) {
  const uint64_t size = file_.bytes.size();
  const uint64_t data = file_.data_offset();
  const uint64_t in_blob = file_.blobs[1].offset + file_.blobs[1].size / 2;
  for (const uint64_t length : {uint64_t{0}, uint64_t{1}, uint64_t{63}, uint64_t{64}, uint64_t{65},
                                data / 2, data, data + 1, in_blob, size - 64, size - 1}) {
    const std::vector<std::byte> bytes(file_.bytes.begin(),
                                       file_.bytes.begin() + static_cast<std::ptrdiff_t>(length));
    for (const bool verify : {true, false}) {
      expect_rejected(bytes, verify, "truncated", "length " + std::to_string(length));
    }
  }
  std::vector<std::byte> extended = file_.bytes;
  extended.resize(size + 64);
  expect_rejected(extended, /*verify=*/false, "bytes were appended", "extended");
}

// A manifest edited consistently (its checksums recomputed, so only validation can catch it).
TEST_P(ServingFileErrorTest, EditedManifestsAreValidated) {
  const std::vector<std::byte> data = file_.data_section();
  const auto rebuilt = [&](const std::function<void(support::Json&)>& edit) {
    support::Json manifest = file_.manifest;
    edit(manifest);
    return test::build_model_file(manifest.dump(), data);
  };
  // The rebuilt file itself is good.
  test::write_bytes(damaged_, rebuilt([](support::Json&) {}));
  EXPECT_EQ(ServingModel::open(damaged_).tables().size(), 3u);

  expect_rejected(test::build_model_file(file_.manifest.dump(), data, 4), /*verify=*/false,
                  "format version 4 is not supported", "version");
  // Version 1 has no extra arrays or metadata: its manifest may not name them.
  expect_rejected(test::build_model_file(file_.manifest.dump(), data, 1), /*verify=*/false,
                  "manifest: extra_arrays: not a known field", "version 1 with extras");
  expect_rejected(rebuilt([](auto& m) { m["tables"][1]["config"]["dim"] = 16; }),
                  /*verify=*/false, "table 'other': blob size", "dim");
  expect_rejected(rebuilt([](auto& m) { m["features"][3]["table"] = "missing"; }),
                  /*verify=*/false, "feature 'bags_c': table 'missing'", "feature");
  expect_rejected(rebuilt([](auto& m) { m["tables"][0]["config"]["combiner"] = "max"; }),
                  /*verify=*/false, "combiner", "combiner");
  expect_rejected(rebuilt([](auto& m) { m["dtype"] = "bfloat16"; }), /*verify=*/false, "'bfloat16'",
                  "dtype");
  // A repeated key (here "dtype", first "int8" then the real one) is refused, not last-wins.
  std::string repeated = file_.manifest.dump();
  repeated.insert(1, "\"dtype\": \"int8\", ");
  expect_rejected(test::build_model_file(repeated, data), /*verify=*/false,
                  "manifest: dtype: the key appears twice", "repeated key");
  const auto wrong_checksum =
      rebuilt([](auto& m) { m["tables"][2]["checksum"] = "0123456789abcdef"; });
  expect_rejected(wrong_checksum, /*verify=*/true, "table 'quantized': the checksum does not match",
                  "checksum");
  test::write_bytes(damaged_, wrong_checksum);
  EXPECT_NO_THROW(ServingModel::open(damaged_, {.verify = false}));
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, ServingFileErrorTest, ::testing::ValuesIn(kDtypes),
                         [](const auto& test_info) {
                           return std::string(serving_dtype_name(test_info.param));
                         });

// An extra array's blob is checksummed as a table's: a damaged value is found with verify (naming
// the array) and read as it is without.
TEST_P(ServingFileErrorTest, DamagedExtraArraysAreDetected) {
  const std::vector<float> values = {0.5f, -1.25f, 3.0f};
  export_serving_model(
      layer_, good_,
      {.dtype = GetParam(),
       .extra_arrays = {{.name = "w", .shape = {3}, .values = values},
                        {.name = "b", .shape = {1}, .values = std::span(values).first(1)}}});
  const ModelFile file = ModelFile::read(good_);
  std::vector<std::byte> bytes = file.bytes;
  const uint64_t start =
      file.data_offset() + file.manifest["extra_arrays"][0]["offset"].get<uint64_t>();
  bytes[start + 5] ^= std::byte{0x40};
  expect_rejected(bytes, /*verify=*/true, "extra array 'w': the checksum does not match",
                  "damaged array");
  test::write_bytes(damaged_, bytes);
  const ServingModel unverified = ServingModel::open(damaged_, {.verify = false});
  EXPECT_NE(unverified.extra_array("w").values[1], values[1]);
  EXPECT_EQ(unverified.extra_array("b").values[0], values[0]);
}

// tests/data/serving-v<version> holds a model of each dtype written by format version 1 (the first
// release) and version 2 (extra arrays and metadata), which must keep loading. Tables: "items"
// [4, 3], mean, row r column c = (3 r + c) / 4 - 1 (exact in float16); "users" [3, 2], sqrtn,
// simulated quantization with 5 buckets over [-1, 1], rows {-0.9, 0.6}, {0.1, 1.3}, {-0.4, 0.35}
// (none near a bucket midpoint). Features: "clicks" (items), "history" (items,
// max_sequence_length 2), "friends" (users). The exported layer had optimizers. Version 2 also
// holds the extra arrays "dense/weights" [2, 3] {0.5, -1.25, 3, 0.125, -2, 0.001} and "scale" []
// {7.5}, and the metadata {"model": "golden", "note": "café"} (written with the Python bindings'
// ExportOptions).
class ServingGoldenTest : public ::testing::TestWithParam<std::tuple<ServingDtype, uint32_t>> {};

TEST_P(ServingGoldenTest, ReadsTheCheckedInModels) {
  const auto [dtype, version] = GetParam();
  const std::filesystem::path path =
      test::checked_in_data_dir() / ("serving-v" + std::to_string(version)) /
      ("model-" + std::string(serving_dtype_name(dtype)) + ".recemb");
  EXPECT_EQ(ModelFile::read(path).format_version, version);
  const ServingModel model = ServingModel::open(path);
  if (version == 1) {
    EXPECT_TRUE(model.extra_arrays().empty());
    EXPECT_TRUE(model.metadata().empty());
  } else {
    ASSERT_EQ(model.extra_arrays().size(), 2u);
    EXPECT_EQ(model.extra_arrays()[0].name, "dense/weights");
    EXPECT_EQ(model.extra_arrays()[0].shape, (std::vector<int64_t>{2, 3}));
    EXPECT_THAT(model.extra_arrays()[0].values,
                ::testing::ElementsAre(0.5f, -1.25f, 3.0f, 0.125f, -2.0f, 0.001f));
    EXPECT_EQ(model.extra_array("scale").shape, std::vector<int64_t>{});
    EXPECT_THAT(model.extra_array("scale").values, ::testing::ElementsAre(7.5f));
    EXPECT_EQ(model.metadata(),
              (std::map<std::string, std::string>{{"model", "golden"}, {"note", "caf\u00e9"}}));
  }
  EXPECT_EQ(model.dtype(), dtype);
  ASSERT_EQ(model.tables().size(), 2u);
  const auto expect_table = [](const TableConfig& table, const std::string& name, int64_t rows,
                               int64_t dim, Combiner combiner) {
    EXPECT_EQ(table.name, name);
    EXPECT_EQ(table.vocabulary_size, rows) << name;
    EXPECT_EQ(table.dim, dim) << name;
    EXPECT_EQ(table.combiner, combiner) << name;
    EXPECT_FALSE(table.optimizer) << name;
  };
  expect_table(model.tables()[0], "items", 4, 3, Combiner::kMean);
  expect_table(model.tables()[1], "users", 3, 2, Combiner::kSqrtn);
  EXPECT_FALSE(model.tables()[0].quantization_config);
  const std::optional<QuantizationConfig>& quantization = model.tables()[1].quantization_config;
  ASSERT_TRUE(quantization);
  EXPECT_EQ(quantization->num_buckets, 5);
  EXPECT_EQ(quantization->lower, -1.0f);
  EXPECT_EQ(quantization->upper, 1.0f);
  ASSERT_EQ(model.features().size(), 3u);
  EXPECT_EQ(model.features()[0].name, "clicks");
  EXPECT_EQ(model.features()[1].name, "history");
  EXPECT_EQ(model.features()[1].table, "items");
  EXPECT_EQ(model.features()[1].max_sequence_length, 2);
  EXPECT_EQ(model.features()[2].table, "users");

  // clicks {0, 3} {2}; history {1, 2, 3} (truncated to 2 positions) {}; friends {0: 3, 2: 4} {1:
  // 1}.
  const std::vector<OwnedInput> inputs = {
      OwnedInput::ragged({{{0, 3}, {}}, {{2}, {}}}, false),
      OwnedInput::ragged({{{1, 2, 3}, {}}, {{}, {}}}, false),
      OwnedInput::ragged({{{0, 2}, {3.0f, 4.0f}}, {{1}, {1.0f}}}, true)};
  const std::vector<FeatureInput> views = test::views_of(inputs);
  EXPECT_EQ(model.activation_shape(1, views[1]), (std::vector<int64_t>{2, 2, 3}));
  const auto actual = lookup_activations(model, views);

  const auto item = [](int c, int r) { return (3.0 * r + c) / 4 - 1; };
  const double user_rows[3][2] = {{-0.9, 0.6}, {0.1, 1.3}, {-0.4, 0.35}};
  // Snapped to the bucket grid: clamped to [-1, 1], then the nearest multiple of 0.5.
  const auto user = [&](int c, int r) {
    return std::round(std::clamp(user_rows[r][c], -1.0, 1.0) * 2) / 2;
  };
  std::vector<std::vector<double>> expected(3);
  for (int c = 0; c < 3; ++c) expected[0].push_back((item(c, 0) + item(c, 3)) / 2);
  for (int c = 0; c < 3; ++c) expected[0].push_back(item(c, 2));
  for (int c = 0; c < 3; ++c) expected[1].push_back(item(c, 1));
  for (int c = 0; c < 3; ++c) expected[1].push_back(item(c, 2));
  expected[1].resize(12, 0.0);
  for (int c = 0; c < 2; ++c) expected[2].push_back((3 * user(c, 0) + 4 * user(c, 2)) / 5);
  for (int c = 0; c < 2; ++c) expected[2].push_back(user(c, 1));
  // float32 and float16 hold the items values exactly; int8 within half a code step of its row's
  // range (0.5 / 255 / 2, docs/serving.md). The users values all snap to the expected grid points.
  const double tolerance = dtype == ServingDtype::kInt8 ? 0.5 / 255 / 2 + 1e-5 : 1e-6;
  for (size_t f = 0; f < expected.size(); ++f) {
    ASSERT_EQ(actual[f].size(), expected[f].size()) << model.features()[f].name;
    for (size_t i = 0; i < expected[f].size(); ++i) {
      EXPECT_NEAR(actual[f][i], expected[f][i], tolerance)
          << model.features()[f].name << " value " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypesAndVersions, ServingGoldenTest,
                         ::testing::Combine(::testing::ValuesIn(kDtypes),
                                            ::testing::Values(1u, 2u)),
                         [](const auto& test_info) {
                           return std::string(serving_dtype_name(std::get<0>(test_info.param))) +
                                  "_v" + std::to_string(std::get<1>(test_info.param));
                         });

TEST(ServingOpenTest, MissingDirectoriesForeignFilesAndBadOptions) {
  const TemporaryDirectory directory;
  const std::filesystem::path missing = directory / "missing.recemb";
  try {
    ServingModel::open(missing);
    ADD_FAILURE() << "opened a missing file";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code().value(), ENOENT);
    EXPECT_THAT(error.what(), HasSubstr("open '" + missing.string() + "'"));
  }
  // A FIFO is refused at once, without waiting for a writer.
  const std::filesystem::path fifo = directory / "fifo.recemb";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(error_of<InvalidArgument>([&] { ServingModel::open(fifo); }),
              HasSubstr("not a regular file"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { ServingModel::open(directory.path()); }),
              HasSubstr("not a regular file"));
  const std::filesystem::path text = directory / "notes.txt";
  test::write_bytes(text, std::vector<std::byte>(100, std::byte{'x'}));
  EXPECT_THAT(error_of<DataLoss>([&] { ServingModel::open(text); }),
              AllOf(HasSubstr("notes.txt"), HasSubstr("not a recemb serving model")));
}

// A file's 64-byte header is checked before the rest is read: a 1 GiB sparse file of junk, or a
// model with 1 GiB appended, is refused after reading its header alone (the first read returns
// those 64 bytes only: a reader of the whole file would read again); a read asked to stop throws
// ECANCELED, having read the header only.
TEST(ServingOpenTest, TheHeaderAndSizeAreCheckedBeforeTheRestIsRead) {
  const TemporaryDirectory directory;
  const std::filesystem::path junk = directory / "junk.recemb";
  test::write_bytes(junk, std::vector<std::byte>(64, std::byte{'j'}));
  std::filesystem::resize_file(junk, uint64_t{1} << 30);  // sparse
  const std::filesystem::path model = directory / "model.recemb";
  export_serving_model(make_layer(make_scenario(Combiner::kSum, false), 2), model);
  const std::filesystem::path appended = directory / "appended.recemb";
  std::filesystem::copy_file(model, appended);
  std::filesystem::resize_file(appended, std::filesystem::file_size(model) + (uint64_t{1} << 30));

  test::FaultFileSystem file_system;
  file_system.shorten_read(1, 64);
  EXPECT_THAT(error_of<DataLoss>([&] { ServingModel::open(junk); }),
              AllOf(HasSubstr("junk.recemb"), HasSubstr("not a recemb serving model")));
  EXPECT_EQ(file_system.reads(), 1);
  file_system.shorten_read(2, 64);
  EXPECT_THAT(error_of<DataLoss>([&] { ServingModel::open(appended); }),
              AllOf(HasSubstr("appended.recemb"), HasSubstr("bytes were appended")));
  EXPECT_EQ(file_system.reads(), 2);
  std::stop_source stop;
  stop.request_stop();
  try {
    ServingModel::open(model, {.stop = stop.get_token()});
    ADD_FAILURE() << "opened despite a stop request";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code().value(), ECANCELED);
    EXPECT_THAT(error.what(), AllOf(HasSubstr("model.recemb"), HasSubstr("stopped at byte 0")));
  }
  EXPECT_EQ(file_system.reads(), 3);
  EXPECT_EQ(ServingModel::open(model).delta_sequence(), 0);  // without a stop request: opens
}

// ------------------------------------------------------------------------------------------------
// An open model owns its bytes: what happens to the file afterwards cannot reach it.

// Overwriting the file in place (as `cp new.recemb served.recemb` does) or truncating it while a
// model has it open changes nothing the model serves (it used to serve the new bytes unverified,
// or die of SIGBUS); a new open reads the new file.
TEST(ServingOpenTest, AnOpenModelIsUnaffectedByChangesToItsFile) {
  const Scenario scenario = make_scenario(Combiner::kMean, true);
  const TemporaryDirectory directory;
  const std::filesystem::path served = directory / "served.recemb";
  const std::filesystem::path other = directory / "other.recemb";
  export_serving_model(make_layer(scenario, 1), served);
  export_serving_model(make_layer(scenario, 2), other);
  std::mt19937_64 rng(3);
  const std::vector<OwnedInput> inputs = random_inputs(rng, scenario);
  const std::vector<FeatureInput> views = test::views_of(inputs);
  const auto activations_of = [&views](const std::filesystem::path& path) {
    const ServingModel model = ServingModel::open(path);
    return lookup_activations(model, views);
  };

  for (const bool verify : {true, false}) {
    export_serving_model(make_layer(scenario, 1), served);
    const ServingModel model = ServingModel::open(served, {.verify = verify});
    const auto before = lookup_activations(model, views);
    const auto of_other = activations_of(other);
    ASSERT_NE(before, of_other);

    test::write_bytes(served, test::read_bytes(other));  // in place: same inode
    EXPECT_EQ(lookup_activations(model, views), before) << "verify " << verify;
    EXPECT_EQ(activations_of(served), of_other);

    std::filesystem::resize_file(served, 64);  // the header only
    EXPECT_EQ(lookup_activations(model, views), before) << "verify " << verify;
    std::filesystem::remove(served);
    EXPECT_EQ(lookup_activations(model, views), before) << "verify " << verify;
  }
}

// open reads through the file system in use (support/file_system.h): a failing read is the
// system_error naming the file, a short read is retried, and a file that ends early while it is
// read (truncated under the reader) is DataLoss; no model is opened from partial bytes.
TEST(ServingOpenTest, ReadFaultsAreReportedAndShortReadsRetried) {
  const Scenario scenario = make_scenario(Combiner::kSum, false);
  const TemporaryDirectory directory;
  const std::filesystem::path path = directory / "model.recemb";
  export_serving_model(make_layer(scenario, 7), path);
  std::mt19937_64 rng(8);
  const std::vector<OwnedInput> inputs = random_inputs(rng, scenario);
  const std::vector<FeatureInput> views = test::views_of(inputs);
  const ServingModel reference = ServingModel::open(path);
  const auto expected = lookup_activations(reference, views);

  for (const bool verify : {true, false}) {
    const std::string trace = "verify " + std::to_string(verify);
    {
      test::FaultFileSystem file_system;
      file_system.fail_read(1, EIO);
      try {
        ServingModel::open(path, {.verify = verify});
        ADD_FAILURE() << trace << ": opened despite a failing read";
      } catch (const std::system_error& error) {
        EXPECT_EQ(error.code().value(), EIO) << trace;
        EXPECT_THAT(error.what(), HasSubstr("read '" + path.string() + "'")) << trace;
      }
    }
    for (const size_t max_bytes : {size_t{1}, size_t{100}, size_t{4096}}) {
      test::FaultFileSystem file_system;
      file_system.shorten_read(1, max_bytes);
      const ServingModel model = ServingModel::open(path, {.verify = verify});
      EXPECT_GE(file_system.reads(), 2) << trace;
      EXPECT_EQ(lookup_activations(model, views), expected) << trace << ", " << max_bytes;
    }
    {
      test::FaultFileSystem file_system;
      file_system.shorten_read(1, 0);
      EXPECT_THAT(error_of<DataLoss>([&] { ServingModel::open(path, {.verify = verify}); }),
                  AllOf(HasSubstr("serving model '" + path.string() + "'"),
                        HasSubstr("truncated while being read"), HasSubstr("ends at byte 0")))
          << trace;
    }
  }
}

}  // namespace
}  // namespace recemb
