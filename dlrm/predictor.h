// Predictor: click probabilities for raw Criteo lines from the model file written by `recemb
// export` (model_file.h: the tables and the dense model in one serving model). The one
// implementation of prediction: `recemb predict` and a server call it.
//
//   Predictor predictor = Predictor::open("model");
//   std::vector<Prediction> results(lines.size());
//   predictor.predict(lines, results);   // results[i].probability, or results[i].error
//
// A line goes the trainer's way: parsed as CriteoReader parses it (parse_criteo_line, hashed into
// the vocabulary sizes the model was trained with, or as the keys of its dynamic tables), looked up
// in the tables (the serving model's lookup: a float32 export gives the trained Embedding's
// activations bitwise) and through DlrmDenseModel::predict. The probabilities therefore equal those
// of the trainer's evaluation of the same lines, up to the float rounding of the dense layers,
// which differs with how the lines are grouped into batches (docs/serving.md, "recemb predict").
//
// Thread safety: predict uses the Predictor's buffers: one Predictor per thread. Copies are
// independent predictors sharing the tables in memory (a server copies one per worker).
#ifndef RECEMB_DLRM_PREDICTOR_H_
#define RECEMB_DLRM_PREDICTOR_H_

#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/serving.h"

#include "dlrm/batch_buffers.h"
#include "dlrm/criteo_reader.h"
#include "dlrm/dlrm_dense_model.h"
#include "dlrm/example_batch.h"
#include "dlrm/model_file.h"

namespace recemb::dlrm {

struct Prediction {
  float probability = 0.0f;  // the click probability, when `error` is empty
  std::string error = {};    // why the line was refused (as CriteoReader says it), or empty
};

class Predictor {
 public:
  // Opens the model file `model` (a model directory: its model.recemb; model_file_path) with
  // ServingModel::open and `options`, and reads its dense part (read_dense_part). Throws what
  // those throw: DataLoss naming the file and the part, InvalidArgument for a model without a
  // dense part (exported from a checkpoint that is not one of recemb train), std::system_error
  // (ENOENT: a missing file or a directory without model.recemb).
  static Predictor open(const std::filesystem::path& model, const OpenOptions& options = {});
  // The same over a model already open: shares its tables (no second read of the file). Throws
  // what read_dense_part throws.
  static Predictor of(ServingModel model);

  // A predictor of the same model that shares its tables (the ServingModel's memory) and has its
  // own dense layers and buffers: copies predict on different threads at once.
  Predictor(const Predictor& other);
  Predictor(Predictor&&) = default;
  Predictor& operator=(Predictor&&) = default;

  // The probability (or the refusal) of each line: results[i] for lines[i], results.size() ==
  // lines.size() (else InvalidArgument, nothing written). A line is a Criteo line without its
  // '\n' (a trailing '\r' is dropped), parsed by parse_criteo_line as `labels` says: with the
  // label field (kPresent; the label must be 0 or 1 and is ignored), without it (kAbsent), or
  // with it when it has 40 fields (kFromFieldCount: a line of 39 fields is refused, its label
  // presence unknown; the default, what a server's :predict reads). A malformed line gets its
  // error and does not affect the others.
  void predict(std::span<const std::string_view> lines, std::span<Prediction> results,
               CriteoLabel labels = CriteoLabel::kFromFieldCount);

  const DlrmDenseConfig& config() const { return model_.config(); }

 private:
  Predictor(ServingModel embeddings, ModelFileDensePart dense);

  ServingModel embeddings_;
  CriteoIds ids_;  // how C1..C26 become ids
  DlrmDenseModel model_;
  // Per call: the valid lines as a batch, the lookups' buffers, their probabilities and where
  // each valid line came from.
  ExampleBatch batch_;
  BatchBuffers buffers_;
  std::vector<float> probabilities_;
  std::vector<size_t> line_of_example_;
};

}  // namespace recemb::dlrm

#endif  // RECEMB_DLRM_PREDICTOR_H_
