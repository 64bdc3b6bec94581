#include "train/dense_export.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <span>
#include <utility>

#include "recemb/error.h"

#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "format/checksum.h"
#include "format/file_io.h"
#include "format/json.h"
#include "format/json_reader.h"
#include "train/criteo_profile.h"
#include "train/example_batch.h"

namespace recemb::train {

static_assert(std::endian::native == std::endian::little,
              "dense model files hold float32 little-endian parameters");

namespace {

using format::Json;
using format::JsonReader;

constexpr char kMagic[8] = {'R', 'E', 'C', 'E', 'M', 'B', 'D', 'N'};
constexpr uint64_t kHeaderSize = 64;
constexpr uint64_t kAlignment = 64;
// A DLRM dense part has well under a million parameters; the bound keeps a damaged header from
// making the reader allocate without limit.
constexpr uint64_t kMaxFileBytes = uint64_t{1} << 30;
// The input settings this code implements (criteo_reader.h).
constexpr char kInputFormat[] = "criteo_tsv";
constexpr char kDenseTransform[] = "log1p_max0";          // dense_value
constexpr char kCategoricalHash[] = "splitmix64_salted";  // categorical_id

// The file is damaged, truncated, foreign or of another version.
[[noreturn]] void fail(const std::string& context, const std::string& problem) {
  throw DataLoss(context + ": " + problem);
}

template <typename T>
T load(std::span<const std::byte> bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

template <typename T>
void store(std::span<std::byte> bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

Json widths_to_json(const std::vector<int64_t>& widths) {
  Json json = Json::array();
  for (const int64_t width : widths) json.push_back(width);
  return json;
}

Json config_json(const DlrmDenseConfig& config) {
  return {{"num_dense_features", config.num_dense_features},
          {"num_sparse_features", config.num_sparse_features},
          {"embedding_dim", config.embedding_dim},
          {"bottom_mlp", widths_to_json(config.bottom_mlp)},
          {"top_mlp", widths_to_json(config.top_mlp)}};
}

// The widest layer and the largest embedding_dim a file may describe: far beyond DLRM's (up to a
// few thousand), and small enough that DlrmDenseModel::parameter_count cannot overflow.
constexpr int64_t kMaxWidth = int64_t{1} << 16;

// Throws InvalidArgument unless a model of `config` reads Criteo lines: 13 dense and 26
// categorical features.
void check_criteo_shape(const DlrmDenseConfig& config) {
  if (config.num_dense_features != kNumDenseFeatures ||
      config.num_sparse_features != kNumCategoricalFeatures) {
    throw InvalidArgument(
        "the model takes " + std::to_string(config.num_dense_features) + " dense and " +
        std::to_string(config.num_sparse_features) + " categorical features; a Criteo line has " +
        std::to_string(kNumDenseFeatures) + " and " + std::to_string(kNumCategoricalFeatures));
  }
}

// A DlrmDenseConfig of the document (a file's, or a checkpoint's metadata) for a model of
// `parameter_count` parameters (as the data beside it holds), checked without building the
// model, so that a damaged or hostile description cannot make it allocate more than the data's
// size: widths and dims in [1, kMaxWidth], the Criteo shape, the config valid and its parameter
// count the data's. Anything else is the document's exception naming the path.
DlrmDenseConfig config_from_json(const JsonReader& json, int64_t parameter_count) {
  json.expect_only(
      {"num_dense_features", "num_sparse_features", "embedding_dim", "bottom_mlp", "top_mlp"});
  const auto width = [](const JsonReader& value) {
    const int64_t read = value.integer(1);
    if (read > kMaxWidth) {
      value.fail(std::to_string(read) + " is more than " + std::to_string(kMaxWidth));
    }
    return read;
  };
  const auto widths = [&](const JsonReader& value) {
    std::vector<int64_t> read;
    for (size_t i = 0; i < value.size(); ++i) read.push_back(width(value.element(i)));
    return read;
  };
  const DlrmDenseConfig config{.num_dense_features = width(json.member("num_dense_features")),
                               .num_sparse_features = width(json.member("num_sparse_features")),
                               .embedding_dim = width(json.member("embedding_dim")),
                               .bottom_mlp = widths(json.member("bottom_mlp")),
                               .top_mlp = widths(json.member("top_mlp"))};
  int64_t count = 0;
  try {
    check_criteo_shape(config);
    count = DlrmDenseModel::parameter_count(config);
  } catch (const InvalidArgument& error) {
    json.fail(error.what());
  }
  if (count != parameter_count) {
    json.fail("the model has " + std::to_string(count) + " parameters; the data holds " +
              std::to_string(parameter_count));
  }
  try {
    DlrmDenseModel{config};  // the MLPs' own checks
  } catch (const InvalidArgument& error) {
    json.fail(error.what());
  }
  return config;
}

Json blocks_json(const DlrmDenseModel& model) {
  Json blocks = Json::array();
  for (const ParameterBlock& block : model.parameter_blocks()) {
    blocks.push_back({{"name", block.name}, {"offset", block.offset}, {"shape", block.shape}});
  }
  return blocks;
}

// Throws InvalidArgument unless `input` is what the Criteo reader feeds a model of `config`.
void check_input(const CriteoInput& input, const DlrmDenseConfig& config) {
  if (config.num_dense_features != kNumDenseFeatures ||
      config.num_sparse_features != kNumCategoricalFeatures) {
    throw InvalidArgument(
        "the model takes " + std::to_string(config.num_dense_features) + " dense and " +
        std::to_string(config.num_sparse_features) + " categorical features; a Criteo line has " +
        std::to_string(kNumDenseFeatures) + " and " + std::to_string(kNumCategoricalFeatures));
  }
  if (input.features.size() != static_cast<size_t>(kNumCategoricalFeatures) ||
      input.vocabulary_sizes.size() != input.features.size()) {
    throw InvalidArgument(
        "the input has " + std::to_string(input.features.size()) + " categorical features and " +
        std::to_string(input.vocabulary_sizes.size()) + " vocabulary sizes; a Criteo line has " +
        std::to_string(kNumCategoricalFeatures) + " (C1..C26)");
  }
  for (int f = 0; f < kNumCategoricalFeatures; ++f) {
    // The hash salts each column's values by its position: feature f must be column C<f+1>.
    if (input.features[static_cast<size_t>(f)] != categorical_feature_name(f)) {
      throw InvalidArgument("categorical feature " + std::to_string(f) + " is '" +
                            format::truncated(input.features[static_cast<size_t>(f)]) +
                            "'; the Criteo columns are C1..C26, in order");
    }
  }
  validate_vocabulary_sizes(input.vocabulary_sizes, "the input");
}

std::span<const std::byte> parameter_bytes(const std::vector<float>& parameters) {
  return std::as_bytes(std::span(parameters));
}

}  // namespace

std::string dense_config_to_json(const DlrmDenseConfig& config) {
  return config_json(config).dump();
}

CriteoInput criteo_input(const std::vector<TableConfig>& tables,
                         const std::vector<FeatureConfig>& features, int64_t dim) {
  CriteoInput input;
  for (const FeatureConfig& feature : features) {
    const TableConfig* table = nullptr;
    for (const TableConfig& candidate : tables) {
      if (candidate.name == feature.table) table = &candidate;
    }
    if (table == nullptr || table->dim != dim || feature.max_sequence_length != 0 ||
        !feature.output_shape.empty()) {
      throw InvalidArgument("feature '" + feature.name +
                            "' is not a bag of one id looked up in a table of dim " +
                            std::to_string(dim) + ", as the dense model takes its embeddings");
    }
    input.features.push_back(feature.name);
    input.vocabulary_sizes.push_back(table->vocabulary_size);
  }
  return input;
}

std::optional<DenseModelFile> read_checkpoint_dense_part(
    const std::filesystem::path& checkpoint, const std::vector<TableConfig>& tables,
    const std::vector<FeatureConfig>& features) {
  const std::filesystem::path directory = internal::resolve_checkpoint(checkpoint);
  const internal::Manifest manifest = internal::read_manifest(directory).manifest;
  const std::string context = "checkpoint '" + directory.string() + "': ";
  const internal::ArrayEntry* saved = nullptr;
  for (const internal::ArrayEntry& extra : manifest.extra_arrays) {
    if (extra.name == kDenseParametersArray) saved = &extra;
  }
  const auto description = manifest.metadata.find(kDenseModelMetadata);
  if (saved == nullptr && description == manifest.metadata.end()) return std::nullopt;
  if (saved == nullptr || description == manifest.metadata.end()) {
    throw DataLoss(context + "holds " +
                   (saved == nullptr ? std::string("metadata '") + kDenseModelMetadata +
                                           "' but no array '" + kDenseParametersArray + "'"
                                     : std::string("the array '") + kDenseParametersArray +
                                           "' but no metadata '" + kDenseModelMetadata +
                                           "' (the model's shape): was it written by a recemb "
                                           "older than `recemb export` of the dense part?"));
  }
  const format::JsonDocument document{
      .name = context + "metadata '" + std::string(kDenseModelMetadata) + "'",
      .source = format::JsonSource::kFile};
  const Json json = format::parse_json(description->second, document);
  // The manifest's checks made its bytes those of its float32 shape.
  const auto parameter_count = static_cast<int64_t>(saved->data.bytes / sizeof(float));
  DenseModelFile model{.config = config_from_json(JsonReader(json, document), parameter_count)};
  model.parameters.resize(static_cast<size_t>(parameter_count));
  std::vector<std::byte> scratch;
  internal::read_data_file(format::InputFile::open(directory / saved->data.file), saved->data,
                           manifest.checksum_block_bytes,
                           "extra array '" + std::string(kDenseParametersArray) + "'",
                           std::as_writable_bytes(std::span(model.parameters)), scratch);
  model.input = criteo_input(tables, features, model.config.embedding_dim);
  return model;
}

void write_dense_model_file(const std::filesystem::path& path, const DenseModelFile& model) {
  const std::string context = "dense model '" + path.string() + "'";
  const DlrmDenseModel shape(model.config);
  if (model.parameters.size() != static_cast<size_t>(shape.num_parameters())) {
    throw InvalidArgument(context + ": " + std::to_string(model.parameters.size()) +
                          " parameters; the model has " + std::to_string(shape.num_parameters()));
  }
  for (size_t i = 0; i < model.parameters.size(); ++i) {
    if (!std::isfinite(model.parameters[i])) {
      throw InvalidArgument(context + ": parameter " + std::to_string(i) + " is not finite");
    }
  }
  try {
    check_input(model.input, model.config);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(context + ": " + error.what());
  }

  Json features = Json::array();
  for (size_t f = 0; f < model.input.features.size(); ++f) {
    features.push_back(
        {{"name", model.input.features[f]}, {"vocabulary_size", model.input.vocabulary_sizes[f]}});
  }
  const std::span<const std::byte> parameters = parameter_bytes(model.parameters);
  const Json manifest = {{"dtype", "float32"},
                         {"model", config_json(model.config)},
                         {"parameters",
                          {{"count", model.parameters.size()},
                           {"checksum", format::checksum_to_hex(format::checksum(parameters))},
                           {"blocks", blocks_json(shape)}}},
                         {"input",
                          {{"format", kInputFormat},
                           {"dense_transform", kDenseTransform},
                           {"categorical_hash", kCategoricalHash},
                           {"features", std::move(features)}}}};
  std::string text = manifest.dump(1) + "\n";
  text.resize((text.size() + kAlignment - 1) / kAlignment * kAlignment, ' ');

  std::array<std::byte, kHeaderSize> header{};
  std::memcpy(header.data(), kMagic, sizeof kMagic);
  store<uint32_t>(header, 8, kDenseFormatVersion);
  store<uint64_t>(header, 16, text.size());
  store<uint64_t>(header, 24, format::checksum(std::as_bytes(std::span(text))));
  store<uint64_t>(header, 32, kHeaderSize + text.size() + parameters.size());
  store<uint64_t>(header, 56, format::checksum(std::span(header).first(56)));
  format::write_file_atomically(path, [&](format::OutputFile& file) {
    file.write(header);
    file.write(std::as_bytes(std::span(text)));
    file.write(parameters);
  });
}

DenseModelFile read_dense_model_file(const std::filesystem::path& path) {
  const std::string context = "dense model '" + path.string() + "'";
  const std::string contents = format::read_file(path, kMaxFileBytes);
  const std::span<const std::byte> file = std::as_bytes(std::span(contents));
  if (file.size() < kHeaderSize) {
    fail(context, "the file has " + std::to_string(file.size()) +
                      " bytes, fewer than the 64-byte header (truncated?)");
  }
  if (std::memcmp(file.data(), kMagic, sizeof kMagic) != 0) {
    fail(context, "not a recemb dense model (it does not start with \"RECEMBDN\")");
  }
  const uint32_t version = load<uint32_t>(file, 8);
  const std::string supported =
      " is not supported (this recemb reads version " + std::to_string(kDenseFormatVersion) + ")";
  if (format::checksum(file.first(56)) != load<uint64_t>(file, 56)) {
    if (version != kDenseFormatVersion) {
      fail(context,
           "header: format version " + std::to_string(version) + supported + ", or damaged");
    }
    fail(context, "header: the checksum does not match: the header is damaged");
  }
  if (version != kDenseFormatVersion) {
    fail(context, "header: format version " + std::to_string(version) + supported);
  }
  if (load<uint32_t>(file, 12) != 0 || load<uint64_t>(file, 40) != 0 ||
      load<uint64_t>(file, 48) != 0) {
    fail(context, "header: the reserved bytes are not zero");
  }
  const auto manifest_size = load<uint64_t>(file, 16);
  const auto file_size = load<uint64_t>(file, 32);
  if (file_size != file.size()) {
    fail(context, "the file has " + std::to_string(file.size()) + " bytes but its header says " +
                      std::to_string(file_size) +
                      (file.size() < file_size ? " (truncated)" : " (bytes were appended)"));
  }
  if (manifest_size % kAlignment != 0 || manifest_size > file_size - kHeaderSize) {
    fail(context, "header: the manifest size " + std::to_string(manifest_size) +
                      " is not a multiple of 64 inside the file");
  }
  const std::span<const std::byte> manifest_bytes = file.subspan(kHeaderSize, manifest_size);
  if (format::checksum(manifest_bytes) != load<uint64_t>(file, 24)) {
    fail(context, "manifest: the checksum does not match: the manifest is damaged");
  }

  const format::JsonDocument document{.name = context + ": manifest",
                                      .source = format::JsonSource::kFile};
  const Json json =
      format::parse_json(std::string_view(contents).substr(kHeaderSize, manifest_size), document);
  const JsonReader root(json, document);
  root.expect_only({"dtype", "model", "parameters", "input"});
  root.member("dtype").expect_string("float32");
  const std::span<const std::byte> data = file.subspan(kHeaderSize + manifest_size);
  if (data.size() % sizeof(float) != 0) {
    fail(context, "parameters: the data section has " + std::to_string(data.size()) +
                      " bytes, not whole float32 values");
  }
  const auto parameter_count = static_cast<int64_t>(data.size() / sizeof(float));
  DenseModelFile model{.config = config_from_json(root.member("model"), parameter_count)};
  const DlrmDenseModel shape(model.config);

  const JsonReader parameters = root.member("parameters");
  parameters.expect_only({"count", "checksum", "blocks"});
  const JsonReader count = parameters.member("count");
  if (count.integer(0) != parameter_count) {
    count.fail(std::to_string(count.integer(0)) + " is not the model's " +
               std::to_string(parameter_count) + " parameters");
  }
  const JsonReader blocks = parameters.member("blocks");
  if (blocks.json() != blocks_json(shape)) {
    blocks.fail("the parameter blocks are not those of the model");
  }
  if (format::checksum(data) != format::checksum_from_json(parameters.member("checksum"))) {
    fail(context, "parameters: the checksum does not match: the parameters are damaged");
  }
  model.parameters.resize(static_cast<size_t>(parameter_count));
  std::memcpy(model.parameters.data(), data.data(), data.size());

  const JsonReader input = root.member("input");
  input.expect_only({"format", "dense_transform", "categorical_hash", "features"});
  input.member("format").expect_string(kInputFormat);
  input.member("dense_transform").expect_string(kDenseTransform);
  input.member("categorical_hash").expect_string(kCategoricalHash);
  const JsonReader features = input.member("features");
  for (size_t f = 0; f < features.size(); ++f) {
    const JsonReader feature = features.element(f);
    feature.expect_only({"name", "vocabulary_size"});
    model.input.features.push_back(feature.member("name").string());
    model.input.vocabulary_sizes.push_back(feature.member("vocabulary_size").integer(1));
  }
  try {
    check_input(model.input, model.config);
  } catch (const InvalidArgument& error) {
    input.fail(error.what());
  }
  return model;
}

}  // namespace recemb::train
