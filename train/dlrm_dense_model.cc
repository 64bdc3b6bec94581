#include "train/dlrm_dense_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>

#include "recemb/error.h"

#include "train/float_text.h"

namespace recemb::train {
namespace {

// Checks the fields the MLPs and the interaction do not check themselves (they name their own
// fields: "bottom_mlp: layer_widths[1] = 0 must be >= 1").
DlrmDenseConfig validated(DlrmDenseConfig config) {
  const auto require_positive = [](int64_t value, const char* field) {
    if (value < 1) {
      throw InvalidArgument(std::string("DlrmDenseConfig: ") + field + " = " +
                            std::to_string(value) + " must be >= 1");
    }
  };
  require_positive(config.num_dense_features, "num_dense_features");
  require_positive(config.num_sparse_features, "num_sparse_features");
  require_positive(config.embedding_dim, "embedding_dim");
  if (config.num_threads < 0) {
    throw InvalidArgument("DlrmDenseConfig: num_threads = " + std::to_string(config.num_threads) +
                          " must be >= 0 (0: one per core)");
  }
  if (!config.bottom_mlp.empty() && config.bottom_mlp.back() != config.embedding_dim) {
    throw InvalidArgument("DlrmDenseConfig: the last width of bottom_mlp (" +
                          std::to_string(config.bottom_mlp.back()) +
                          ") must equal embedding_dim (" + std::to_string(config.embedding_dim) +
                          "): the bottom MLP's output is dotted with the embeddings");
  }
  return config;
}

std::vector<int64_t> with_logit_layer(std::vector<int64_t> widths) {
  widths.push_back(1);
  return widths;
}

// The index of the first non-finite value; only called once the kernels' all_finite has found
// one.
size_t first_non_finite(std::span<const float> values) {
  size_t i = 0;
  while (std::isfinite(values[i])) ++i;
  return i;
}

}  // namespace

DlrmDenseModel::DlrmDenseModel(DlrmDenseConfig config)
    : config_(validated(std::move(config))),
      dense_isa_(config_.dense_isa ? *config_.dense_isa : default_dense_isa()),
      kernels_(&dense_kernels(dense_isa_)),
      bottom_mlp_({.name = "bottom_mlp",
                   .input_width = config_.num_dense_features,
                   .layer_widths = config_.bottom_mlp,
                   .output_activation = OutputActivation::kRelu},
                  dense_isa_),
      interaction_(config_.num_sparse_features, config_.embedding_dim, dense_isa_),
      top_mlp_({.name = "top_mlp",
                .input_width = interaction_.output_width(),
                .layer_widths = with_logit_layer(config_.top_mlp),
                .output_activation = OutputActivation::kIdentity},
               dense_isa_),
      pool_(std::make_unique<WorkerPool>(config_.num_threads)),
      parameters_(static_cast<size_t>(bottom_mlp_.num_parameters() + top_mlp_.num_parameters())),
      gradients_(parameters_.size(), 0.0f) {
  std::mt19937_64 random(config_.seed);
  const std::span<float> parameters = parameters_;
  bottom_mlp_.initialize(parameters.first(bottom_mlp_.num_parameters()), random);
  top_mlp_.initialize(parameters.subspan(bottom_mlp_.num_parameters()), random);
}

int64_t DlrmDenseModel::parameter_count(const DlrmDenseConfig& config) {
  const DlrmDenseConfig checked = validated(config);
  return Mlp::parameter_count(checked.num_dense_features, checked.bottom_mlp) +
         Mlp::parameter_count(
             DotInteraction::output_width(checked.num_sparse_features, checked.embedding_dim),
             with_logit_layer(checked.top_mlp));
}

std::vector<ParameterBlock> DlrmDenseModel::parameter_blocks() const {
  std::vector<ParameterBlock> blocks = bottom_mlp_.parameter_blocks(0);
  for (ParameterBlock& block : top_mlp_.parameter_blocks(bottom_mlp_.num_parameters())) {
    blocks.push_back(std::move(block));
  }
  return blocks;
}

float DlrmDenseModel::train_step(std::span<const float> dense, std::span<const float> labels,
                                 std::span<const std::span<const float>> embeddings,
                                 std::span<const std::span<float>> embedding_gradients) {
  const int64_t batch_size = static_cast<int64_t>(labels.size());
  validate_inputs("train_step", dense, embeddings, batch_size);
  for (size_t b = 0; b < labels.size(); ++b) {
    if (!(labels[b] >= 0.0f && labels[b] <= 1.0f)) {
      throw InvalidArgument("train_step: labels[" + std::to_string(b) +
                            "] = " + float_text(labels[b]) + " is not in [0, 1]");
    }
  }
  if (embedding_gradients.size() != static_cast<size_t>(config_.num_sparse_features)) {
    throw InvalidArgument(
        "train_step: embedding_gradients has " + std::to_string(embedding_gradients.size()) +
        " spans; expected num_sparse_features = " + std::to_string(config_.num_sparse_features));
  }
  const size_t embedding_size = static_cast<size_t>(batch_size * config_.embedding_dim);
  for (size_t f = 0; f < embedding_gradients.size(); ++f) {
    if (embedding_gradients[f].size() != embedding_size) {
      throw InvalidArgument("train_step: embedding_gradients[" + std::to_string(f) + "] has " +
                            std::to_string(embedding_gradients[f].size()) +
                            " floats; expected batch " + std::to_string(batch_size) +
                            " x embedding_dim " + std::to_string(config_.embedding_dim));
    }
  }

  const std::span<const float> logits = forward(dense, embeddings, batch_size);
  // Per example: loss = max(s, 0) - s y + log1p(exp(-|s|)), d(loss)/ds = sigmoid(s) - y.
  logit_gradients_.resize(labels.size());
  const float inverse_batch_size = 1.0f / static_cast<float>(batch_size);
  double loss_sum = 0.0;
  for (size_t b = 0; b < labels.size(); ++b) {
    const float s = logits[b];
    const float y = labels[b];
    loss_sum += static_cast<double>(std::max(s, 0.0f) - s * y + std::log1p(std::exp(-std::abs(s))));
    const float p = 1.0f / (1.0f + std::exp(-s));
    logit_gradients_[b] = (p - y) * inverse_batch_size;
  }

  const std::span<const float> parameters = parameters_;
  const std::span<float> gradients = gradients_;
  const int64_t num_bottom = bottom_mlp_.num_parameters();
  feature_gradients_.resize(features_.size());
  top_mlp_.backward(parameters.subspan(num_bottom), features_, logit_gradients_,
                    gradients.subspan(num_bottom), feature_gradients_, pool_.get());
  bottom_gradients_.resize(static_cast<size_t>(batch_size * config_.embedding_dim));
  interaction_.backward(bottom_mlp_.output(), embeddings, feature_gradients_, bottom_gradients_,
                        embedding_gradients, pool_.get());
  bottom_mlp_.backward(parameters.first(num_bottom), dense, bottom_gradients_,
                       gradients.first(num_bottom), {}, pool_.get());
  return static_cast<float>(loss_sum / static_cast<double>(batch_size));
}

void DlrmDenseModel::predict(std::span<const float> dense,
                             std::span<const std::span<const float>> embeddings,
                             std::span<float> probabilities) {
  const int64_t batch_size = static_cast<int64_t>(probabilities.size());
  validate_inputs("predict", dense, embeddings, batch_size);
  const std::span<const float> logits = forward(dense, embeddings, batch_size);
  for (size_t b = 0; b < probabilities.size(); ++b) {
    probabilities[b] = 1.0f / (1.0f + std::exp(-logits[b]));
  }
}

void DlrmDenseModel::validate_inputs(const char* caller, std::span<const float> dense,
                                     std::span<const std::span<const float>> embeddings,
                                     int64_t batch_size) const {
  if (batch_size < 1) {
    throw InvalidArgument(std::string(caller) +
                          ": empty batch (a batch needs at least one example)");
  }
  if (dense.size() != static_cast<size_t>(batch_size * config_.num_dense_features)) {
    throw InvalidArgument(std::string(caller) + ": dense has " + std::to_string(dense.size()) +
                          " floats; expected batch " + std::to_string(batch_size) +
                          " x num_dense_features " + std::to_string(config_.num_dense_features));
  }
  if (!kernels_->all_finite(dense.data(), static_cast<int64_t>(dense.size()))) {
    const size_t i = first_non_finite(dense);
    throw InvalidArgument(std::string(caller) + ": dense feature " +
                          std::to_string(i % config_.num_dense_features) + " of example " +
                          std::to_string(i / config_.num_dense_features) + " is " +
                          float_text(dense[i]));
  }
  if (embeddings.size() != static_cast<size_t>(config_.num_sparse_features)) {
    throw InvalidArgument(
        std::string(caller) + ": embeddings has " + std::to_string(embeddings.size()) +
        " spans; expected num_sparse_features = " + std::to_string(config_.num_sparse_features));
  }
  const size_t embedding_size = static_cast<size_t>(batch_size * config_.embedding_dim);
  for (size_t f = 0; f < embeddings.size(); ++f) {
    if (embeddings[f].size() != embedding_size) {
      throw InvalidArgument(std::string(caller) + ": embeddings[" + std::to_string(f) + "] has " +
                            std::to_string(embeddings[f].size()) + " floats; expected batch " +
                            std::to_string(batch_size) + " x embedding_dim " +
                            std::to_string(config_.embedding_dim));
    }
    if (!kernels_->all_finite(embeddings[f].data(), static_cast<int64_t>(embeddings[f].size()))) {
      const size_t i = first_non_finite(embeddings[f]);
      throw InvalidArgument(std::string(caller) + ": embeddings[" + std::to_string(f) +
                            "] of example " + std::to_string(i / config_.embedding_dim) +
                            " has the value " + float_text(embeddings[f][i]));
    }
  }
}

std::span<const float> DlrmDenseModel::forward(std::span<const float> dense,
                                               std::span<const std::span<const float>> embeddings,
                                               int64_t batch_size) {
  const std::span<const float> parameters = parameters_;
  const int64_t num_bottom = bottom_mlp_.num_parameters();
  const std::span<const float> z =
      bottom_mlp_.forward(parameters.first(num_bottom), dense, pool_.get());
  features_.resize(static_cast<size_t>(batch_size * interaction_.output_width()));
  interaction_.forward(z, embeddings, features_, pool_.get());
  return top_mlp_.forward(parameters.subspan(num_bottom), features_, pool_.get());
}

}  // namespace recemb::train
