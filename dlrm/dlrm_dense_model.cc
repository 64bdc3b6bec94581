#include "dlrm/dlrm_dense_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>

#include "recemb/error.h"

#include "support/number_text.h"

namespace recemb::dlrm {
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
  if (config.pool && config.num_threads != 0) {
    throw InvalidArgument("DlrmDenseConfig: num_threads = " + std::to_string(config.num_threads) +
                          " must be 0 when a pool is set (the model runs on the pool's threads)");
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
      pool_(config_.pool ? config_.pool
                         : std::make_shared<support::ThreadPool>(config_.num_threads)),
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
                            "] = " + support::float_text(labels[b]) + " is not in [0, 1]");
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

  // One task per block of the MLPs' rows does all of the block's work, forward and backward,
  // while its activations are in the cache: the blocks' parameter gradients are then added up in
  // block order (mlp.h), so the results are those of the layers run one after the other.
  const std::span<const float> parameters = parameters_;
  const int64_t num_bottom = bottom_mlp_.num_parameters();
  const std::span<const float> bottom_parameters = parameters.first(num_bottom);
  const std::span<const float> top_parameters = parameters.subspan(num_bottom);
  start_forward(batch_size);
  const int num_workers = pool_->num_threads();
  bottom_mlp_.start_backward(bottom_parameters, false, num_workers);
  top_mlp_.start_backward(top_parameters, true, num_workers);
  logit_gradients_.resize(labels.size());
  example_losses_.resize(labels.size());
  feature_gradients_.resize(features_.size());
  bottom_gradients_.resize(static_cast<size_t>(batch_size * config_.embedding_dim));
  const float inverse_batch_size = 1.0f / static_cast<float>(batch_size);
  support::parallel_for(pool_.get(), Mlp::num_blocks(batch_size), [&](int64_t block, int worker) {
    forward_block(dense, embeddings, block, worker);
    const int64_t first = block * Mlp::kRowBlock;
    const int64_t count = std::min(Mlp::kRowBlock, batch_size - first);
    // Per example: loss = max(s, 0) - s y + log1p(exp(-|s|)), d(loss)/ds = sigmoid(s) - y.
    const std::span<const float> logits = top_mlp_.output();
    for (int64_t b = first; b < first + count; ++b) {
      const float s = logits[b];
      const float y = labels[b];
      example_losses_[b] = std::max(s, 0.0f) - s * y + std::log1p(std::exp(-std::abs(s)));
      const float p = 1.0f / (1.0f + std::exp(-s));
      logit_gradients_[b] = (p - y) * inverse_batch_size;
    }
    top_mlp_.backward_block(features_, logit_gradients_, feature_gradients_, block, worker);
    interaction_.backward_rows(bottom_mlp_.output(), embeddings, feature_gradients_,
                               bottom_gradients_, embedding_gradients, first, count, worker);
    bottom_mlp_.backward_block(dense, bottom_gradients_, {}, block, worker);
  });
  const std::span<float> gradients = gradients_;
  top_mlp_.finish_backward(gradients.subspan(num_bottom), pool_.get());
  bottom_mlp_.finish_backward(gradients.first(num_bottom), pool_.get());
  double loss_sum = 0.0;
  for (const float loss : example_losses_) loss_sum += static_cast<double>(loss);
  return static_cast<float>(loss_sum / static_cast<double>(batch_size));
}

void DlrmDenseModel::predict(std::span<const float> dense,
                             std::span<const std::span<const float>> embeddings,
                             std::span<float> probabilities) {
  const int64_t batch_size = static_cast<int64_t>(probabilities.size());
  validate_inputs("predict", dense, embeddings, batch_size);
  start_forward(batch_size);
  support::parallel_for(pool_.get(), Mlp::num_blocks(batch_size), [&](int64_t block, int worker) {
    forward_block(dense, embeddings, block, worker);
  });
  const std::span<const float> logits = top_mlp_.output();
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
                          support::float_text(dense[i]));
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
                            " has the value " + support::float_text(embeddings[f][i]));
    }
  }
}

void DlrmDenseModel::start_forward(int64_t batch_size) {
  bottom_mlp_.start_forward(batch_size);
  top_mlp_.start_forward(batch_size);
  interaction_.reserve_workers(pool_->num_threads());
  features_.resize(static_cast<size_t>(batch_size * interaction_.output_width()));
}

void DlrmDenseModel::forward_block(std::span<const float> dense,
                                   std::span<const std::span<const float>> embeddings,
                                   int64_t block, int worker) {
  const std::span<const float> parameters = parameters_;
  const int64_t num_bottom = bottom_mlp_.num_parameters();
  const int64_t first = block * Mlp::kRowBlock;
  const int64_t batch_size = static_cast<int64_t>(dense.size()) / config_.num_dense_features;
  const int64_t count = std::min(Mlp::kRowBlock, batch_size - first);
  bottom_mlp_.forward_block(parameters.first(num_bottom), dense, block);
  interaction_.forward_rows(bottom_mlp_.output(), embeddings, first, count, features_, worker);
  top_mlp_.forward_block(parameters.subspan(num_bottom), features_, block);
}

}  // namespace recemb::dlrm
