// The trainer's model file: ONE serving model (recemb/serving.h, docs/serving.md) holding the 26
// tables C1..C26 and, beside them, the dense model (DlrmDenseModel) and how a raw Criteo line
// becomes the model's inputs, so that the file alone predicts clicks. `recemb export` writes it
// into a model directory as MODEL_DIR/model.recemb; Predictor (predictor.h) reads it. Written and
// read through the public serving API only (docs/serving.md, "The trainer's model file"):
//
//   extra arrays  "dense/<block>" for every DlrmDenseModel::parameter_blocks() entry, in layout
//                 order, with its shape ("dense/bottom_mlp/layer_0/weights" [13, 64], ...)
//   metadata      "dense/embedding_dim" "16", "dense/bottom_mlp" "64,16", "dense/top_mlp" "64,32"
//                 (dense_config_metadata; also saved in the trainer's checkpoints),
//                 "input/format" "criteo_tsv", "input/dense_transform" "log1p_max0",
//                 "input/categorical_hash" "splitmix64_salted" (criteo_reader.h: the transform
//                 and the hash are code; the file names them, and a reader refuses other names)
#ifndef RECEMB_DLRM_MODEL_FILE_H_
#define RECEMB_DLRM_MODEL_FILE_H_

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/config.h"
#include "recemb/embedding.h"
#include "recemb/publish.h"
#include "recemb/serving.h"

#include "dlrm/dlrm_dense_model.h"
#include "dlrm/example_batch.h"

namespace recemb::dlrm {

// The file a model directory holds (recemb/publish.h).
using ::recemb::kModelFileName;

// The name the trainer saves its flat dense parameter vector under in a checkpoint (an extra
// array; dense_config_metadata describes its shape).
inline constexpr char kDenseParametersArray[] = "dense/parameters";

// The dense part of a click model: its shape (seed unused) and its flat parameter vector.
struct DenseModelPart {
  DlrmDenseConfig config = {};
  std::vector<float> parameters = {};
};

// `config`'s embedding_dim, bottom_mlp and top_mlp as the metadata above (the Criteo shape, 13
// dense and 26 categorical features, is implied).
std::map<std::string, std::string> dense_config_metadata(const DlrmDenseConfig& config);

// The model file of `model`: `model` itself, or MODEL_DIR/model.recemb when it is a directory
// (how `recemb predict` and `recemb lookup` take their MODEL). Throws InvalidArgument, naming
// `recemb export`, for a directory holding no model.recemb but a training run's outputs
// (checkpoints/ or config.toml): a run's output directory, not a model.
std::filesystem::path model_file_path(const std::filesystem::path& model);

// How the Criteo reader turns C1..C26 into ids for a model: hashed into static tables of
// `vocabulary_sizes` rows (embedding.vocabulary = hashed), or kept as the keys of dynamic tables
// (embedding.vocabulary = dynamic: categorical_key, no sizes).
struct CriteoIds {
  CategoricalIds kind = CategoricalIds::kHashedRows;
  std::vector<int64_t> vocabulary_sizes = {};  // C1..C26's tables, for kHashedRows
};

// The CriteoIds of a model whose categorical features are `features` looking up `tables`. Throws
// InvalidArgument unless they are what the Criteo reader feeds the dense model: C1..C26 in order,
// each a bag of one id looked up in a table of `dim` columns, the 26 tables all static or all
// dynamic.
CriteoIds criteo_ids(const std::vector<TableConfig>& tables,
                     const std::vector<FeatureConfig>& features, int64_t dim);

// The dense part of a `recemb train` checkpoint, from its RestoredState (restore_checkpoint);
// nullopt when it has none (saved by another program). Throws DataLoss starting with `context`
// (the checkpoint) when the dense parameters or their description are missing, malformed or of
// another size than the description's model.
std::optional<DenseModelPart> dense_part_of(const RestoredState& state, const std::string& context);

// The metadata key of the step the tables were trained to (Embedding::step), which every model file
// holds (docs/serving.md, "Model directories").
inline constexpr char kStepMetadata[] = "step";

// What a model file holds beside `embedding`'s tables in `dtype`: their step (kStepMetadata) and,
// when given, `dense` (its arrays, borrowed from dense->parameters, and the metadata above): the
// options of export_serving_model, and of publish (docs/training.md, "Publishing to a server").
// Throws InvalidArgument starting with `context` when `dense` does not fit the tables
// (criteo_ids) or its parameters are not its config's.
ExportOptions model_file_options(const Embedding& embedding,
                                 const std::optional<DenseModelPart>& dense, ServingDtype dtype,
                                 const std::string& context);

// Writes `embedding`'s tables in `dtype`, their step (kStepMetadata) and, when given, `dense` (its
// arrays and the metadata above) as the serving model `path`, atomically (export_serving_model).
// Throws InvalidArgument, before creating any file, when `dense` does not fit the tables
// (criteo_ids), its parameters are not its config's, or a value cannot be stored; otherwise as
// export_serving_model.
void write_model_file(const Embedding& embedding, const std::optional<DenseModelPart>& dense,
                      const std::filesystem::path& path, ServingDtype dtype);

// The dense part of the model file `model` and how its lines become ids.
// Throws InvalidArgument when `model` holds no dense part (exported from a checkpoint that is not
// one of recemb train: it serves lookups only); DataLoss naming the file and the array or
// metadata key when the dense part is incomplete, malformed, of another input format, or does not
// fit the tables.
struct ModelFileDensePart {
  DenseModelPart dense = {};
  CriteoIds ids = {};
};
ModelFileDensePart read_dense_part(const ServingModel& model);

// What export_checkpoint wrote.
struct ExportedModel {
  std::filesystem::path path = {};  // the model file
  int64_t tables = 0;
  int64_t rows = 0;              // over every table (the keys held, for dynamic tables)
  int64_t dense_parameters = 0;  // 0: no dense part
  uint64_t bytes = 0;            // of the file
};

// Exports the checkpoint `checkpoint` (a ckpt-* directory, or a root: its newest) as the model
// directory `model_dir` (created if missing): its tables (verified; loaded with `threads`
// threads, 0 = one per core) in `dtype` and, for a checkpoint of `recemb train`, its dense part, in
// the one file model_dir/model.recemb (write_model_file). Throws InvalidArgument when model_dir is
// not a directory; DataLoss (naming the checkpoint and part) for a damaged checkpoint;
// std::system_error for a failing system call.
ExportedModel export_checkpoint(const std::filesystem::path& checkpoint,
                                const std::filesystem::path& model_dir, ServingDtype dtype,
                                int threads);

}  // namespace recemb::dlrm

#endif  // RECEMB_DLRM_MODEL_FILE_H_
