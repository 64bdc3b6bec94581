#include "dlrm/model_file.h"

#include <algorithm>
#include <charconv>
#include <span>
#include <utility>

#include "recemb/error.h"

#include "dlrm/criteo_profile.h"
#include "dlrm/example_batch.h"

namespace recemb::dlrm {
namespace {

constexpr char kEmbeddingDimKey[] = "dense/embedding_dim";
constexpr char kBottomMlpKey[] = "dense/bottom_mlp";
constexpr char kTopMlpKey[] = "dense/top_mlp";
// The prefix of the dense model's arrays in a model file.
constexpr char kDenseArrayPrefix[] = "dense/";

// The input settings this code implements (criteo_reader.h): the Criteo TSV line, I1..I13
// through log(1 + max(x, 0)), C1..C26 through the salted splitmix64 hash.
const std::map<std::string, std::string>& input_metadata() {
  static const std::map<std::string, std::string> settings = {
      {"input/format", "criteo_tsv"},
      {"input/dense_transform", "log1p_max0"},
      {"input/categorical_hash", "splitmix64_salted"}};
  return settings;
}

// The widest layer and the largest embedding_dim a description may give: far beyond DLRM's (up
// to a few thousand), and small enough that DlrmDenseModel::parameter_count cannot overflow.
constexpr int64_t kMaxWidth = int64_t{1} << 16;

std::string widths_text(const std::vector<int64_t>& widths) {
  std::string text;
  for (const int64_t width : widths) text += (text.empty() ? "" : ",") + std::to_string(width);
  return text;
}

// The metadata a dense model is described by, missing or not.
bool describes_dense_model(const std::map<std::string, std::string>& metadata) {
  return metadata.contains(kEmbeddingDimKey) || metadata.contains(kBottomMlpKey) ||
         metadata.contains(kTopMlpKey);
}

// Reads a dense model's description (dense_config_metadata) and checks it without building the
// model, so that a damaged or hostile description cannot make the reader allocate: widths in [1,
// kMaxWidth], the config one a DlrmDenseModel accepts. Throws DataLoss "<context>: metadata
// '<key>' ...".
DlrmDenseConfig config_from_metadata(const std::map<std::string, std::string>& metadata,
                                     const std::string& context) {
  const auto widths = [&](const char* key) {
    const auto found = metadata.find(key);
    const std::string prefix = context + ": metadata '" + key + "'";
    if (found == metadata.end()) throw DataLoss(prefix + " is missing");
    std::vector<int64_t> read;
    const std::string& text = found->second;
    if (text.empty()) return read;
    // Each width ends at the next comma or at the end: "16," has an empty second width.
    for (size_t begin = 0; begin <= text.size();) {
      const size_t end = std::min(text.find(',', begin), text.size());
      int64_t width = 0;
      const auto [stop, error] = std::from_chars(text.data() + begin, text.data() + end, width);
      if (error != std::errc() || stop != text.data() + end || width < 1 || width > kMaxWidth) {
        throw DataLoss(prefix + " is not a list of widths from 1 to " + std::to_string(kMaxWidth) +
                       " separated by commas");
      }
      read.push_back(width);
      begin = end + 1;
    }
    return read;
  };
  const std::vector<int64_t> dim = widths(kEmbeddingDimKey);
  if (dim.size() != 1) {
    throw DataLoss(context + ": metadata '" + kEmbeddingDimKey + "' is not one width");
  }
  DlrmDenseConfig config{.num_dense_features = kNumDenseFeatures,
                         .num_sparse_features = kNumCategoricalFeatures,
                         .embedding_dim = dim[0],
                         .bottom_mlp = widths(kBottomMlpKey),
                         .top_mlp = widths(kTopMlpKey)};
  // The one check of DlrmDenseModel's that parameter_count leaves to the MLPs' (widths are >= 1
  // here): a model built from the config cannot throw.
  if (config.bottom_mlp.empty()) {
    throw DataLoss(context + ": metadata '" + kBottomMlpKey +
                   "' is empty: the bottom MLP has at least one layer");
  }
  try {
    DlrmDenseModel::parameter_count(config);
  } catch (const InvalidArgument& error) {
    throw DataLoss(context +
                   ": metadata 'dense/...' describes no valid dense model: " + error.what());
  }
  return config;
}

}  // namespace

std::map<std::string, std::string> dense_config_metadata(const DlrmDenseConfig& config) {
  return {{kEmbeddingDimKey, std::to_string(config.embedding_dim)},
          {kBottomMlpKey, widths_text(config.bottom_mlp)},
          {kTopMlpKey, widths_text(config.top_mlp)}};
}

std::filesystem::path model_file_path(const std::filesystem::path& model) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(model)) return model;
  fs::path file = model / kModelFileName;
  if (!fs::exists(file) &&
      (fs::exists(model / "checkpoints") || fs::exists(model / "config.toml"))) {
    throw InvalidArgument("'" + model.string() + "' holds no " + kModelFileName +
                          ": it is the output directory of a training run, not a model; export "
                          "its model first: recemb export " +
                          (model / "checkpoints").string() + " MODEL_DIR, then give MODEL_DIR");
  }
  return file;
}

CriteoIds criteo_ids(const std::vector<TableConfig>& tables,
                     const std::vector<FeatureConfig>& features, int64_t dim) {
  if (features.size() != static_cast<size_t>(kNumCategoricalFeatures)) {
    throw InvalidArgument("the model has " + std::to_string(features.size()) +
                          " features; the dense model takes the 26 of a Criteo line, C1..C26");
  }
  CriteoIds ids;
  for (size_t f = 0; f < features.size(); ++f) {
    const FeatureConfig& feature = features[f];
    // The hash salts each column's values by its position: feature f must be column C<f+1>.
    if (feature.name != categorical_feature_name(static_cast<int>(f))) {
      throw InvalidArgument("feature " + std::to_string(f) + " is '" + feature.name.substr(0, 40) +
                            "'; the dense model takes the Criteo columns C1..C26, in order");
    }
    const auto table = std::find_if(tables.begin(), tables.end(),
                                    [&](const TableConfig& t) { return t.name == feature.table; });
    if (table == tables.end() || table->dim != dim || feature.max_sequence_length != 0 ||
        !feature.output_shape.empty()) {
      throw InvalidArgument("feature '" + feature.name.substr(0, 40) +
                            "' is not a bag of one id looked up in a table of dim " +
                            std::to_string(dim) + ", as the dense model takes its embeddings");
    }
    const CategoricalIds kind =
        table->dynamic_vocabulary ? CategoricalIds::kRawKeys : CategoricalIds::kHashedRows;
    if (f == 0) ids.kind = kind;
    if (kind != ids.kind) {
      throw InvalidArgument("table '" + table->name.substr(0, 40) + "' is " +
                            (table->dynamic_vocabulary ? "dynamic" : "static") + " and table '" +
                            features[0].table.substr(0, 40) + "' is not: the dense model takes " +
                            "26 static tables (embedding.vocabulary = hashed) or 26 dynamic ones");
    }
    if (kind == CategoricalIds::kHashedRows) ids.vocabulary_sizes.push_back(table->vocabulary_size);
  }
  return ids;
}

std::optional<DenseModelPart> dense_part_of(const RestoredState& state,
                                            const std::string& context) {
  const auto saved = state.extra_arrays.find(kDenseParametersArray);
  const bool described = describes_dense_model(state.metadata);
  if (saved == state.extra_arrays.end() && !described) return std::nullopt;
  if (saved == state.extra_arrays.end()) {
    throw DataLoss(context + ": holds metadata '" + kEmbeddingDimKey + "' but no array '" +
                   kDenseParametersArray + "'");
  }
  if (!described) {
    throw DataLoss(context + ": holds the array '" + kDenseParametersArray + "' but no metadata '" +
                   kEmbeddingDimKey +
                   "' (the model's shape): was it written by a recemb train older than the "
                   "model file?");
  }
  DenseModelPart dense{.config = config_from_metadata(state.metadata, context)};
  const int64_t count = DlrmDenseModel::parameter_count(dense.config);
  if (static_cast<int64_t>(saved->second.size()) != count) {
    throw DataLoss(context + ": the dense model its metadata describes has " +
                   std::to_string(count) + " parameters; the array '" + kDenseParametersArray +
                   "' holds " + std::to_string(saved->second.size()));
  }
  dense.parameters = saved->second;
  return dense;
}

ExportOptions model_file_options(const Embedding& embedding,
                                 const std::optional<DenseModelPart>& dense, ServingDtype dtype,
                                 const std::string& context) {
  ExportOptions options{.dtype = dtype};
  std::optional<DlrmDenseModel> shape;  // the dense model's layout, for its parameter blocks
  if (dense) {
    try {
      shape.emplace(dense->config);
      criteo_ids(embedding.tables(), embedding.features(), dense->config.embedding_dim);
    } catch (const InvalidArgument& error) {
      throw InvalidArgument(context + error.what());
    }
    if (static_cast<int64_t>(dense->parameters.size()) != shape->num_parameters()) {
      throw InvalidArgument(context + std::to_string(dense->parameters.size()) +
                            " dense parameters; the model has " +
                            std::to_string(shape->num_parameters()));
    }
    for (const ParameterBlock& block : shape->parameter_blocks()) {
      int64_t count = 1;
      for (const int64_t extent : block.shape) count *= extent;
      options.extra_arrays.push_back(
          {.name = kDenseArrayPrefix + block.name,
           .shape = block.shape,
           .values = std::span(dense->parameters)
                         .subspan(static_cast<size_t>(block.offset), static_cast<size_t>(count))});
    }
    options.metadata = dense_config_metadata(dense->config);
    options.metadata.insert(input_metadata().begin(), input_metadata().end());
  }
  options.metadata[kStepMetadata] = std::to_string(embedding.step());
  return options;
}

void write_model_file(const Embedding& embedding, const std::optional<DenseModelPart>& dense,
                      const std::filesystem::path& path, ServingDtype dtype) {
  export_serving_model(
      embedding, path,
      model_file_options(embedding, dense, dtype, "model file '" + path.string() + "': "));
}

ModelFileDensePart read_dense_part(const ServingModel& model) {
  const std::string context = "model file '" + model.path().string() + "'";
  const std::map<std::string, std::string>& metadata = model.metadata();
  std::vector<const ServingArray*> arrays;  // the dense model's
  int64_t stored = 0;                       // their values
  for (const ServingArray& array : model.extra_arrays()) {
    if (array.name.starts_with(kDenseArrayPrefix)) {
      arrays.push_back(&array);
      stored += static_cast<int64_t>(array.values.size());
    }
  }
  if (arrays.empty() && !describes_dense_model(metadata)) {
    throw InvalidArgument(context +
                          " has no dense model: it was exported from a checkpoint that is not one "
                          "of recemb train, and serves lookups only (recemb lookup)");
  }
  for (const auto& [key, value] : input_metadata()) {
    const auto found = metadata.find(key);
    if (found == metadata.end()) throw DataLoss(context + ": metadata '" + key + "' is missing");
    if (found->second != value) {
      throw DataLoss(context + ": metadata '" + key + "' is '" + found->second.substr(0, 40) +
                     "'; this recemb reads '" + value + "' only");
    }
  }
  ModelFileDensePart part{.dense = {.config = config_from_metadata(metadata, context)}};
  DenseModelPart& dense = part.dense;
  // Checked before the model is built, so that its allocation is bounded by the file's size.
  if (DlrmDenseModel::parameter_count(dense.config) != stored) {
    throw DataLoss(context + ": the dense model its metadata describes has " +
                   std::to_string(DlrmDenseModel::parameter_count(dense.config)) +
                   " parameters; its 'dense/' arrays hold " + std::to_string(stored));
  }
  const DlrmDenseModel shape(dense.config);
  const std::vector<ParameterBlock> blocks = shape.parameter_blocks();
  dense.parameters.resize(static_cast<size_t>(stored));
  for (size_t b = 0; b < std::max(blocks.size(), arrays.size()); ++b) {
    if (b >= blocks.size() || b >= arrays.size() ||
        arrays[b]->name != kDenseArrayPrefix + blocks[b].name ||
        arrays[b]->shape != blocks[b].shape) {
      throw DataLoss(context + ": its 'dense/' arrays are not the parameter blocks of the model " +
                     "its metadata describes (from block " + std::to_string(b) + ")");
    }
    std::copy(arrays[b]->values.begin(), arrays[b]->values.end(),
              dense.parameters.begin() + blocks[b].offset);
  }
  try {
    part.ids = criteo_ids(model.tables(), model.features(), dense.config.embedding_dim);
  } catch (const InvalidArgument& error) {
    throw DataLoss(context + ": its tables do not fit its dense model: " + error.what());
  }
  return part;
}

ExportedModel export_checkpoint(const std::filesystem::path& checkpoint,
                                const std::filesystem::path& model_dir, ServingDtype dtype,
                                int threads) {
  if (std::filesystem::exists(model_dir) && !std::filesystem::is_directory(model_dir)) {
    throw InvalidArgument("'" + model_dir.string() +
                          "' is not a directory: recemb export writes a model directory (" +
                          kModelFileName + ")");
  }
  // A root stands for its newest checkpoint: the tables and the dense part are read from that one.
  const std::filesystem::path resolved = latest_checkpoint(checkpoint).value_or(checkpoint);
  Embedding embedding = load_checkpoint(resolved, {.tables_only = true, .num_threads = threads});
  // The dense part is in the checkpoint's extra arrays and metadata, which restore_checkpoint
  // returns (load_checkpoint does not): the tables are read a second time.
  const RestoredState state = restore_checkpoint(embedding, resolved);
  const std::optional<DenseModelPart> dense =
      dense_part_of(state, "checkpoint '" + resolved.string() + "'");
  std::filesystem::create_directories(model_dir);
  ExportedModel exported{
      .path = model_dir / kModelFileName,
      .tables = static_cast<int64_t>(embedding.tables().size()),
      .dense_parameters = dense ? static_cast<int64_t>(dense->parameters.size()) : 0};
  write_model_file(embedding, dense, exported.path, dtype);
  for (const TableConfig& table : embedding.tables()) {
    exported.rows += table.dynamic_vocabulary ? embedding.vocabulary_stats(table.name).size
                                              : table.vocabulary_size;
  }
  exported.bytes = std::filesystem::file_size(exported.path);
  return exported;
}

}  // namespace recemb::dlrm
