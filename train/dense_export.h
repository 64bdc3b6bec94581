// The dense part of an exported click model: the DlrmDenseModel's shape and parameters, and the
// settings that turn a raw Criteo line into the model's inputs exactly as the trainer reads it
// (criteo_reader.h), in a file of its own beside the serving model of the tables. `recemb export`
// writes a model directory
//
//   MODEL_DIR/embeddings.recemb   the tables: a serving model (docs/serving.md)
//   MODEL_DIR/dense.recemb        this file, when the checkpoint is one of `recemb train`
//
// and `recemb predict` (predictor.h) reads both. docs/serving.md, "Dense model file", specifies
// the format:
//
//   offset               bytes          content
//   0                    64             header
//   64                   manifest_size  manifest: JSON, padded with spaces to a multiple of 64
//   64 + manifest_size   4 N            the N parameters, float32 little-endian (the flat vector
//                                       of dlrm_dense_model.h)
//
//   header:  0  char[8]   magic "RECEMBDN"
//            8  uint32    format_version (kDenseFormatVersion)
//           12  uint32    reserved, 0
//           16  uint64    manifest_size
//           24  uint64    manifest_checksum   XXH3-64 of the manifest_size manifest bytes
//           32  uint64    file_size
//           40  uint64[2] reserved, 0
//           56  uint64    header_checksum     XXH3-64 of header bytes [0, 56)
//   manifest: {"dtype": "float32",
//              "model": {"num_dense_features", "num_sparse_features", "embedding_dim",
//                        "bottom_mlp": [...], "top_mlp": [...]},
//              "parameters": {"count": N, "checksum": <XXH3-64 of the 4 N parameter bytes>,
//                             "blocks": [{"name", "offset", "shape"}, ...]},
//              "input": {"format": "criteo_tsv", "dense_transform": "log1p_max0",
//                        "categorical_hash": "splitmix64_salted",
//                        "features": [{"name": "C1", "vocabulary_size": V}, ...]}}
#ifndef RECEMB_TRAIN_DENSE_EXPORT_H_
#define RECEMB_TRAIN_DENSE_EXPORT_H_

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/config.h"

#include "train/dlrm_dense_model.h"

namespace recemb::train {

// The names the trainer saves its dense model under in a checkpoint: the flat parameter vector
// (an extra array) and its DlrmDenseConfig (metadata, as dense_config_to_json writes it).
inline constexpr char kDenseParametersArray[] = "dense/parameters";
inline constexpr char kDenseModelMetadata[] = "dense_model";

// The files of a model directory.
inline constexpr char kEmbeddingsFileName[] = "embeddings.recemb";
inline constexpr char kDenseFileName[] = "dense.recemb";

inline constexpr uint32_t kDenseFormatVersion = 1;

// How the model reads a raw Criteo line (criteo_reader.h): the label (ignored), I1..I13 through
// dense_value (log(1 + max(x, 0))), C1..C26 through categorical_id into tables of the given
// sizes. The transform and the hash are code; the file names them, and a reader refuses names it
// does not implement.
struct CriteoInput {
  std::vector<std::string> features = {};      // the model's categorical features, in order
  std::vector<int64_t> vocabulary_sizes = {};  // the rows each feature's ids are hashed into
};

struct DenseModelFile {
  DlrmDenseConfig config = {};         // seed unused
  std::vector<float> parameters = {};  // config's flat parameter vector
  CriteoInput input = {};
};

// The metadata text the trainer saves its model's shape as (JSON; the seed is not saved).
std::string dense_config_to_json(const DlrmDenseConfig& config);

// The CriteoInput of a model whose categorical features are `features` (in the model's order)
// looking up `tables`. Throws InvalidArgument when they are not what the Criteo reader feeds the
// dense model: one feature per categorical column, each a table of `dim` columns.
CriteoInput criteo_input(const std::vector<TableConfig>& tables,
                         const std::vector<FeatureConfig>& features, int64_t dim);

// The dense part saved in the `recemb train` checkpoint `checkpoint` (a ckpt-* directory), for an
// embedding whose tables and features are `tables` and `features` (the checkpoint's own); nullopt
// when the checkpoint has none (saved by another program). Reads the manifest and the dense
// parameters only, verifying their checksums. Throws DataLoss naming the checkpoint and the part
// for a damaged or inconsistent dense part, std::system_error for a failing system call.
std::optional<DenseModelFile> read_checkpoint_dense_part(
    const std::filesystem::path& checkpoint, const std::vector<TableConfig>& tables,
    const std::vector<FeatureConfig>& features);

// Writes `model` as the dense model file `path`, atomically (format/file_io.h): the file is
// complete or absent (or its previous version), also after a crash. Validates first
// (InvalidArgument: parameters of another size than the config's, non-finite values, an input
// that does not fit the config); std::system_error for a failing system call.
void write_dense_model_file(const std::filesystem::path& path, const DenseModelFile& model);

// Reads and checks the dense model file `path`: header, manifest, parameter checksum, and that the
// model, its parameter blocks and the input settings agree. Throws DataLoss naming the file and
// the part ("dense model 'm/dense.recemb': manifest: model.top_mlp: ...") for a damaged,
// truncated or foreign file or another format version; InvalidArgument for a path that is not a
// regular file; std::system_error for a failing system call (ENOENT: missing).
DenseModelFile read_dense_model_file(const std::filesystem::path& path);

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_DENSE_EXPORT_H_
