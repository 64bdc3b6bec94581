// The smallest use of recemb: one table, a dense and a ragged feature, one lookup, no training.
#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#include "recemb/recemb.h"

int main() {
  // Row r of "words" is [r, r, r, r] (the RowId initializer), so the activations are easy to read.
  recemb::Embedding embedding(
      {{.name = "words",
        .vocabulary_size = 10,
        .dim = 4,
        .initializer = recemb::RowId{},
        .combiner = recemb::Combiner::kMean}},
      {{.name = "title", .table = "words"}, {.name = "tags", .table = "words"}});

  // "title" is dense [2, 3]: each example is a bag of 3 ids.
  // "tags" is ragged: example 0 has ids {7}, example 1 has ids {0, 2, 4}.
  const std::vector<int64_t> title_ids = {1, 2, 3, 4, 5, 9};
  const std::vector<int64_t> tag_ids = {7, 0, 2, 4};
  const std::vector<int64_t> tag_row_splits = {0, 1, 4};
  const std::vector<recemb::FeatureInput> inputs = {
      recemb::DenseIds{.ids = std::span<const int64_t>(title_ids), .shape = {2, 3}},
      recemb::RaggedIds{.values = std::span<const int64_t>(tag_ids),
                        .row_splits = std::span<const int64_t>(tag_row_splits)}};

  // One output array per feature, sized by activation_shape ([2, 4] for both here).
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<float>> outputs;
  for (size_t f = 0; f < inputs.size(); ++f) {
    shapes.push_back(embedding.activation_shape(f, inputs[f]));
    int64_t size = 1;
    for (int64_t extent : shapes.back()) size *= extent;
    outputs.emplace_back(static_cast<size_t>(size));
  }
  const std::vector<std::span<float>> activations(outputs.begin(), outputs.end());
  embedding.lookup(inputs, activations);

  for (size_t f = 0; f < inputs.size(); ++f) {
    const size_t dim = static_cast<size_t>(shapes[f].back());
    std::printf("%s: [%lld, %lld]\n", embedding.features()[f].name.c_str(),
                static_cast<long long>(shapes[f][0]), static_cast<long long>(shapes[f][1]));
    for (size_t i = 0; i < outputs[f].size(); ++i) {
      std::printf("%s%6.2f", i % dim == 0 ? "  " : " ", outputs[f][i]);
      if ((i + 1) % dim == 0) std::printf("\n");
    }
  }
  return 0;
}
