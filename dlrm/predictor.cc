#include "dlrm/predictor.h"

#include <algorithm>
#include <utility>

#include "recemb/error.h"

#include "dlrm/criteo_reader.h"

namespace recemb::dlrm {

Predictor Predictor::open(const std::filesystem::path& model, const OpenOptions& options) {
  return of(ServingModel::open(model_file_path(model), options));
}

Predictor Predictor::of(ServingModel model) {
  ModelFileDensePart dense = read_dense_part(model);
  return Predictor(std::move(model), std::move(dense));
}

Predictor::Predictor(ServingModel embeddings, ModelFileDensePart dense)
    : embeddings_(std::move(embeddings)),
      ids_(std::move(dense.ids)),
      model_(dense.dense.config),
      buffers_(dense.dense.config.embedding_dim) {
  std::copy(dense.dense.parameters.begin(), dense.dense.parameters.end(),
            model_.parameters().begin());
}

Predictor::Predictor(const Predictor& other)
    : embeddings_(other.embeddings_),
      ids_(other.ids_),
      model_(other.model_.config()),
      buffers_(other.model_.config().embedding_dim) {
  std::copy(other.model_.parameters().begin(), other.model_.parameters().end(),
            model_.parameters().begin());
}

void Predictor::predict(std::span<const std::string_view> lines, std::span<Prediction> results,
                        CriteoLabel labels) {
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
    const size_t slot = line_of_example_.size();
    std::optional<std::string> error = parse_criteo_line(
        line, labels, ids_.kind, ids_.vocabulary_sizes, batch_.labels[slot],
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

}  // namespace recemb::dlrm
