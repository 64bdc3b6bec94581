#include "train/predictor.h"

#include <algorithm>
#include <system_error>
#include <utility>

#include "recemb/error.h"

#include "train/criteo_reader.h"

namespace recemb::train {

Predictor Predictor::open(const std::filesystem::path& model_dir, const OpenOptions& options) {
  const std::filesystem::path embeddings_path = model_dir / kEmbeddingsFileName;
  const std::filesystem::path dense_path = model_dir / kDenseFileName;
  ServingModel embeddings = ServingModel::open(embeddings_path, options);
  if (!std::filesystem::exists(dense_path)) {
    throw std::system_error(std::make_error_code(std::errc::no_such_file_or_directory),
                            "'" + model_dir.string() + "' has no dense model (" + kDenseFileName +
                                "): it was exported from a checkpoint that is not one of recemb "
                                "train, and serves lookups only");
  }
  DenseModelFile dense = read_dense_model_file(dense_path);
  CriteoInput served;
  try {
    served = criteo_input(embeddings.tables(), embeddings.features(), dense.config.embedding_dim);
  } catch (const InvalidArgument& error) {
    throw DataLoss("'" + embeddings_path.string() + "' does not fit the dense model '" +
                   dense_path.string() + "': " + error.what());
  }
  if (served.features != dense.input.features ||
      served.vocabulary_sizes != dense.input.vocabulary_sizes) {
    throw DataLoss("'" + embeddings_path.string() + "' does not fit the dense model '" +
                   dense_path.string() +
                   "': its features or vocabulary sizes differ from those the dense model was "
                   "trained with (export both from one checkpoint)");
  }
  return Predictor(std::move(embeddings), std::move(dense));
}

Predictor::Predictor(ServingModel embeddings, DenseModelFile dense)
    : embeddings_(std::move(embeddings)),
      input_(std::move(dense.input)),
      model_(dense.config),
      buffers_(dense.config.embedding_dim) {
  std::copy(dense.parameters.begin(), dense.parameters.end(), model_.parameters().begin());
}

void Predictor::predict(std::span<const std::string_view> lines, std::span<Prediction> results) {
  if (results.size() != lines.size()) {
    throw InvalidArgument("Predictor::predict: " + std::to_string(results.size()) +
                          " results for " + std::to_string(lines.size()) + " lines");
  }
  if (lines.empty()) return;
  const auto capacity = static_cast<int64_t>(lines.size());
  begin_batch(batch_, capacity);
  line_of_example_.clear();
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    if (line.ends_with('\r')) line.remove_suffix(1);
    // 39 fields (38 tabs): a line without the label field.
    const CriteoLabel label = std::count(line.begin(), line.end(), '\t') ==
                                      kNumDenseFeatures + kNumCategoricalFeatures - 1
                                  ? CriteoLabel::kAbsent
                                  : CriteoLabel::kPresent;
    const size_t slot = line_of_example_.size();
    std::optional<std::string> error = parse_criteo_line(
        line, label, input_.vocabulary_sizes, batch_.labels[slot],
        std::span(batch_.dense).subspan(slot * kNumDenseFeatures, kNumDenseFeatures),
        batch_.categorical.data() + slot, lines.size());
    results[i] = Prediction{.error = error.value_or("")};
    if (!error) line_of_example_.push_back(i);
  }
  const auto count = static_cast<int64_t>(line_of_example_.size());
  finish_batch(batch_, capacity, count);
  if (count == 0) return;
  buffers_.bind(batch_, 0, count);
  embeddings_.lookup(buffers_.inputs(), buffers_.activations());
  probabilities_.resize(line_of_example_.size());
  model_.predict(batch_.dense, buffers_.activation_views(), probabilities_);
  for (size_t e = 0; e < line_of_example_.size(); ++e) {
    results[line_of_example_[e]].probability = probabilities_[e];
  }
}

}  // namespace recemb::train
