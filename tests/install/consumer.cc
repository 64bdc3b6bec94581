// Uses an installed recemb: one table, one feature, one lookup; checks the size of the output.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#include "recemb/recemb.h"

int main() {
  recemb::Embedding embedding({{.name = "table", .vocabulary_size = 16, .dim = 4}},
                              {{.name = "feature", .table = "table"}});
  const std::vector<int64_t> ids = {3, 1, 15};
  const std::vector<recemb::FeatureInput> inputs = {
      recemb::DenseIds{.ids = std::span<const int64_t>(ids), .shape = {3}}};
  const std::vector<int64_t> shape = embedding.activation_shape(0, inputs[0]);
  if (shape != std::vector<int64_t>{3, 4}) {
    std::fprintf(stderr, "consumer: unexpected activation shape\n");
    return 1;
  }
  std::vector<float> output(12);
  const std::vector<std::span<float>> activations = {output};
  embedding.lookup(inputs, activations);
  bool any_nonzero = false;
  for (float value : output) {
    if (!std::isfinite(value)) {
      std::fprintf(stderr, "consumer: non-finite activation\n");
      return 1;
    }
    any_nonzero = any_nonzero || value != 0.0f;
  }
  if (!any_nonzero) {
    std::fprintf(stderr, "consumer: all activations are zero\n");
    return 1;
  }
  std::printf("consumer: looked up %zu ids, %zu activation values\n", ids.size(), output.size());
  return 0;
}
