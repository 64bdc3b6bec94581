// Float64 plain-loop references for the trainer's dense layers (mlp.h, interaction.h,
// dlrm_dense_model.h), written from the equations in those headers and sharing no code with them,
// plus central finite differences over them, and a helper that places arrays at chosen alignments.
//
// Every forward records the sign of each ReLU input it saw (`relu_signs`), so that a gradient test
// can tell when a finite-difference step crossed a ReLU kink (where the difference quotient is
// not the derivative) and skip that entry.
#ifndef RECEMB_TESTS_DLRM_DENSE_REFERENCE_H_
#define RECEMB_TESTS_DLRM_DENSE_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace recemb::dlrm::reference {

// Y = mlp(X), X [B, input_width]: layer l reads W_l [in, out] row-major then b_l [out] from
// `parameters` starting at `offset` (advanced past the MLP). ReLU after every layer except the
// last unless relu_output.
inline std::vector<double> mlp_forward(std::span<const double> parameters, int64_t& offset,
                                       const std::vector<double>& input, int64_t input_width,
                                       const std::vector<int64_t>& widths, bool relu_output,
                                       std::vector<bool>& relu_signs) {
  std::vector<double> x = input;
  int64_t in = input_width;
  const int64_t batch = static_cast<int64_t>(input.size()) / input_width;
  for (size_t l = 0; l < widths.size(); ++l) {
    const int64_t out = widths[l];
    const bool relu = l + 1 < widths.size() || relu_output;
    std::vector<double> y(static_cast<size_t>(batch * out));
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t o = 0; o < out; ++o) {
        double a = parameters[offset + in * out + o];
        for (int64_t i = 0; i < in; ++i) a += x[b * in + i] * parameters[offset + i * out + o];
        if (relu) {
          relu_signs.push_back(a > 0.0);
          a = a > 0.0 ? a : 0.0;
        }
        y[b * out + o] = a;
      }
    }
    offset += (in + 1) * out;
    x = std::move(y);
    in = out;
  }
  return x;
}

// [z_b, <T_i, T_j> for i = 1..n, j = 0..i-1] per example, T = [z, e_1..e_n].
inline std::vector<double> interaction_forward(const std::vector<double>& z,
                                               const std::vector<std::vector<double>>& embeddings,
                                               int64_t dim) {
  const int64_t batch = static_cast<int64_t>(z.size()) / dim;
  const int64_t num_vectors = static_cast<int64_t>(embeddings.size()) + 1;
  const auto vector_at = [&](int64_t b, int64_t i) {
    return i == 0 ? &z[b * dim] : &embeddings[i - 1][b * dim];
  };
  std::vector<double> out;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t k = 0; k < dim; ++k) out.push_back(z[b * dim + k]);
    for (int64_t i = 1; i < num_vectors; ++i) {
      for (int64_t j = 0; j < i; ++j) {
        double dot = 0.0;
        for (int64_t k = 0; k < dim; ++k) dot += vector_at(b, i)[k] * vector_at(b, j)[k];
        out.push_back(dot);
      }
    }
  }
  return out;
}

struct DlrmShape {
  int64_t num_dense_features;
  int64_t embedding_dim;
  std::vector<int64_t> bottom_mlp;
  std::vector<int64_t> top_mlp;  // hidden widths; the logit layer is added
};

// The logits [B] of the DLRM model.
inline std::vector<double> dlrm_logits(const DlrmShape& shape, std::span<const double> parameters,
                                       const std::vector<double>& dense,
                                       const std::vector<std::vector<double>>& embeddings,
                                       std::vector<bool>& relu_signs) {
  int64_t offset = 0;
  const std::vector<double> z = mlp_forward(parameters, offset, dense, shape.num_dense_features,
                                            shape.bottom_mlp, true, relu_signs);
  const std::vector<double> x = interaction_forward(z, embeddings, shape.embedding_dim);
  std::vector<int64_t> top = shape.top_mlp;
  top.push_back(1);
  const int64_t num_vectors = static_cast<int64_t>(embeddings.size()) + 1;
  return mlp_forward(parameters, offset, x,
                     shape.embedding_dim + num_vectors * (num_vectors - 1) / 2, top, false,
                     relu_signs);
}

// Mean over the batch of -(y log p + (1 - y) log(1 - p)), p = 1 / (1 + exp(-s)): the textbook
// form (not the model's log-sum-exp form), good for moderate logits.
inline double dlrm_loss(const DlrmShape& shape, std::span<const double> parameters,
                        const std::vector<double>& dense, const std::vector<double>& labels,
                        const std::vector<std::vector<double>>& embeddings,
                        std::vector<bool>& relu_signs) {
  const std::vector<double> logits = dlrm_logits(shape, parameters, dense, embeddings, relu_signs);
  double sum = 0.0;
  for (size_t b = 0; b < logits.size(); ++b) {
    const double p = 1.0 / (1.0 + std::exp(-logits[b]));
    sum -= labels[b] * std::log(p) + (1.0 - labels[b]) * std::log(1.0 - p);
  }
  return sum / static_cast<double>(logits.size());
}

// Central difference (f(x + h) - f(x - h)) / 2h of f at `x` (restored afterwards). f fills the
// ReLU signs it saw; `kink` is set when they differ between x - h and x + h.
template <class Function>
double central_difference(Function&& f, double& x, double h, bool& kink) {
  const double saved = x;
  std::vector<bool> plus_signs;
  std::vector<bool> minus_signs;
  x = saved + h;
  const double plus = f(plus_signs);
  x = saved - h;
  const double minus = f(minus_signs);
  x = saved;
  kink = plus_signs != minus_signs;
  return (plus - minus) / (2.0 * h);
}

inline std::vector<float> random_floats(std::mt19937_64& random, size_t n, float low, float high) {
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(n);
  for (float& v : values) v = distribution(random);
  return values;
}

inline std::vector<double> to_double(std::span<const float> values) {
  return std::vector<double>(values.begin(), values.end());
}

// Shifts 0..15: every 4-byte position within a 64-byte line (AVX-512 registers).
constexpr int kNumShifts = 16;

// A copy of `values` inside `storage` (resized as needed), starting `shift` floats past a 64-byte
// boundary: the same data at another alignment.
inline std::span<float> place(std::vector<float>& storage, std::span<const float> values,
                              int shift) {
  storage.assign(values.size() + 2 * kNumShifts, 0.0f);
  const auto address = reinterpret_cast<std::uintptr_t>(storage.data());
  const size_t first = (64 - address % 64) % 64 / sizeof(float) + static_cast<size_t>(shift);
  const std::span<float> placed(storage.data() + first, values.size());
  std::copy(values.begin(), values.end(), placed.begin());
  return placed;
}

}  // namespace recemb::dlrm::reference

#endif  // RECEMB_TESTS_DLRM_DENSE_REFERENCE_H_
