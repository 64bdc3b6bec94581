#include "dlrm/mlp.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "recemb/error.h"

namespace recemb::dlrm {
namespace {

// A float uniform in [-limit, limit) from the top 24 bits of one 64-bit draw: every standard
// library gives the same values, which std::uniform_real_distribution does not promise.
float uniform(std::mt19937_64& random, double limit) {
  const double unit = static_cast<double>(random() >> 40) * 0x1p-24;  // [0, 1), exact
  return static_cast<float>((2.0 * unit - 1.0) * limit);
}

}  // namespace

// Forward and backward run over blocks of kRowBlock rows of the batch, one task of the ThreadPool
// per block. A block's activations stay in the L2 cache from one layer to the next, the backward
// pass needs buffers of one block per thread only, and Eigen's packing buffers (which grow with
// the rows of a product) stay small enough to come from the stack for any batch size (eigen.h).
// The products that run on generated code have it made when the Mlp is built
// (DenseKernels::prepare_products), so that neither allocates during training.
// The arithmetic is the kernels' of the model's instruction set (dense_kernels.h).
// The blocks do not depend on the thread count, nor does any sum: a block's rows are summed in
// order into the block's own parameter gradients, and the blocks' gradients are then added in
// block order (in chunks of kReduceChunk parameters, one task each).

Mlp::Mlp(MlpConfig config, DenseIsa isa)
    : config_(std::move(config)), kernels_(&dense_kernels(isa)) {
  if (config_.input_width < 1) {
    throw InvalidArgument(config_.name + ": input_width = " + std::to_string(config_.input_width) +
                          " must be >= 1");
  }
  if (config_.layer_widths.empty()) {
    throw InvalidArgument(config_.name +
                          ": layer_widths is empty; an MLP needs at least one layer");
  }
  int64_t input_width = config_.input_width;
  for (size_t l = 0; l < config_.layer_widths.size(); ++l) {
    const int64_t output_width = config_.layer_widths[l];
    if (output_width < 1) {
      throw InvalidArgument(config_.name + ": layer_widths[" + std::to_string(l) +
                            "] = " + std::to_string(output_width) + " must be >= 1");
    }
    layers_.push_back({.input_width = input_width,
                       .output_width = output_width,
                       .weights_offset = num_parameters_});
    num_parameters_ += layer_parameter_count(input_width, output_width);
    input_width = output_width;
  }
  for (const Layer& layer : layers_) {
    kernels_->prepare_products(layer.input_width, layer.output_width);
  }
  activations_.resize(layers_.size());
  transposed_weights_.resize(static_cast<size_t>(num_parameters_));
  max_width_ = std::max_element(layers_.begin(), layers_.end(), [](const Layer& a, const Layer& b) {
                 return a.output_width < b.output_width;
               })->output_width;
}

int64_t Mlp::parameter_count(int64_t input_width, std::span<const int64_t> layer_widths) {
  int64_t count = 0;
  for (const int64_t output_width : layer_widths) {
    count += layer_parameter_count(input_width, output_width);
    input_width = output_width;
  }
  return count;
}

std::vector<ParameterBlock> Mlp::parameter_blocks(int64_t first_offset) const {
  std::vector<ParameterBlock> blocks;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    const std::string prefix = config_.name + "/layer_" + std::to_string(l);
    const int64_t weights_offset = first_offset + layer.weights_offset;
    blocks.push_back({.name = prefix + "/weights",
                      .offset = weights_offset,
                      .shape = {layer.input_width, layer.output_width}});
    blocks.push_back({.name = prefix + "/bias",
                      .offset = weights_offset + layer.input_width * layer.output_width,
                      .shape = {layer.output_width}});
  }
  return blocks;
}

void Mlp::initialize(std::span<float> parameters, std::mt19937_64& random) const {
  check_parameter_size(parameters.size(), "parameters");
  for (const Layer& layer : layers_) {
    const double weight_limit =
        std::sqrt(6.0 / static_cast<double>(layer.input_width + layer.output_width));
    const double bias_limit = std::sqrt(3.0 / static_cast<double>(layer.output_width));
    const int64_t num_weights = layer.input_width * layer.output_width;
    float* weights = parameters.data() + layer.weights_offset;
    for (int64_t i = 0; i < num_weights; ++i) weights[i] = uniform(random, weight_limit);
    for (int64_t i = 0; i < layer.output_width; ++i) {
      weights[num_weights + i] = uniform(random, bias_limit);
    }
  }
}

std::span<const float> Mlp::forward(std::span<const float> parameters, std::span<const float> input,
                                    support::ThreadPool* pool) {
  check_parameter_size(parameters.size(), "parameters");
  start_forward(batch_size_of(input, "input"));
  support::parallel_for(pool, num_blocks(batch_size_),
                        [&](int64_t block, int) { forward_block(parameters, input, block); });
  return activations_.back();
}

void Mlp::start_forward(int64_t batch_size) {
  batch_size_ = batch_size;
  for (size_t l = 0; l < layers_.size(); ++l) {
    activations_[l].resize(static_cast<size_t>(batch_size * layers_[l].output_width));
  }
}

void Mlp::forward_block(std::span<const float> parameters, std::span<const float> input,
                        int64_t block) {
  const int64_t first = block * kRowBlock;
  const int64_t count = std::min(kRowBlock, batch_size_ - first);
  const float* x = input.data() + first * config_.input_width;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    float* y = activations_[l].data() + first * layer.output_width;
    const float* weights = parameters.data() + layer.weights_offset;
    kernels_->affine_forward(
        x, weights, weights + layer.input_width * layer.output_width, count, layer.input_width,
        layer.output_width,
        l + 1 < layers_.size() || config_.output_activation == OutputActivation::kRelu, y);
    x = y;
  }
}

void Mlp::backward(std::span<const float> parameters, std::span<const float> input,
                   std::span<const float> output_gradient, std::span<float> parameter_gradients,
                   std::span<float> input_gradient, support::ThreadPool* pool) {
  check_parameter_size(parameters.size(), "parameters");
  check_parameter_size(parameter_gradients.size(), "parameter_gradients");
  const int64_t batch_size = batch_size_of(input, "input");
  if (output_gradient.size() != static_cast<size_t>(batch_size * output_width())) {
    throw InvalidArgument(
        config_.name + ": output_gradient has " + std::to_string(output_gradient.size()) +
        " floats; expected " + std::to_string(batch_size * output_width()) + " (batch " +
        std::to_string(batch_size) + " x width " + std::to_string(output_width()) + ")");
  }
  if (!input_gradient.empty() && input_gradient.size() != input.size()) {
    throw InvalidArgument(config_.name + ": input_gradient has " +
                          std::to_string(input_gradient.size()) + " floats; expected 0 or " +
                          std::to_string(input.size()) + " (the size of input)");
  }
  if (batch_size != batch_size_) {
    throw FailedPrecondition(config_.name + ": backward on a batch of " +
                             std::to_string(batch_size) + " examples, but the last forward had " +
                             std::to_string(batch_size_));
  }
  start_backward(parameters, !input_gradient.empty(), pool == nullptr ? 1 : pool->num_threads());
  support::parallel_for(pool, num_blocks(batch_size), [&](int64_t block, int worker) {
    backward_block(input, output_gradient, input_gradient, block, worker);
  });
  finish_backward(parameter_gradients, pool);
}

void Mlp::start_backward(std::span<const float> parameters, bool input_gradient, int num_workers) {
  // The input gradients multiply by W^T: each layer's, once per batch, in the layout of the
  // parameters (its bias's floats unused).
  for (size_t l = input_gradient ? 0 : 1; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    kernels_->transpose(parameters.data() + layer.weights_offset, layer.input_width,
                        layer.output_width, transposed_weights_.data() + layer.weights_offset);
  }
  gradient_buffers_.resize(static_cast<size_t>(int64_t{num_workers} * 2 * kRowBlock * max_width_));
  block_gradients_.resize(static_cast<size_t>(num_blocks(batch_size_) * num_parameters_));
}

void Mlp::finish_backward(std::span<float> parameter_gradients, support::ThreadPool* pool) {
  const int64_t blocks = num_blocks(batch_size_);
  support::parallel_for(
      pool, (num_parameters_ + kReduceChunk - 1) / kReduceChunk, [&](int64_t chunk, int) {
        const int64_t begin = chunk * kReduceChunk;
        const int64_t size = std::min(kReduceChunk, num_parameters_ - begin);
        float* sum = parameter_gradients.data() + begin;
        std::copy_n(block_gradients_.data() + begin, size, sum);
        for (int64_t block = 1; block < blocks; ++block) {
          kernels_->add(block_gradients_.data() + block * num_parameters_ + begin, size, sum);
        }
      });
}

void Mlp::backward_block(std::span<const float> input, std::span<const float> output_gradient,
                         std::span<float> input_gradient, int64_t block, int worker) {
  const int64_t first = block * kRowBlock;
  const int64_t count = std::min(kRowBlock, batch_size_ - first);
  float* const gradients = block_gradients_.data() + block * num_parameters_;
  std::fill_n(gradients, num_parameters_, 0.0f);
  float* const buffers[2] = {
      gradient_buffers_.data() + (2 * int64_t{worker}) * kRowBlock * max_width_,
      gradient_buffers_.data() + (2 * int64_t{worker} + 1) * kRowBlock * max_width_};
  // `delta` is d(loss)/d(a_l) for the block's rows and the current layer l: the caller's
  // output_gradient itself for a last layer without ReLU, otherwise d(loss)/d(h_{l+1}) masked
  // by relu' (h_{l+1} > 0 exactly where a_l > 0) in one of the worker's two buffers.
  int buffer = 0;
  const float* delta = output_gradient.data() + first * output_width();
  if (config_.output_activation == OutputActivation::kRelu) {
    kernels_->relu_gradient(activations_.back().data() + first * output_width(), delta,
                            count * output_width(), buffers[buffer]);
    delta = buffers[buffer];
  }
  for (size_t l = layers_.size(); l-- > 0;) {
    const Layer& layer = layers_[l];
    const float* x =
        (l == 0 ? input.data() : activations_[l - 1].data()) + first * layer.input_width;
    float* const weight_gradient = gradients + layer.weights_offset;
    kernels_->affine_parameter_gradients(x, delta, count, layer.input_width, layer.output_width,
                                         weight_gradient,
                                         weight_gradient + layer.input_width * layer.output_width);
    const float* weights_transposed = transposed_weights_.data() + layer.weights_offset;
    if (l == 0) {
      if (!input_gradient.empty()) {
        kernels_->affine_input_gradient(delta, weights_transposed, count, layer.input_width,
                                        layer.output_width,
                                        input_gradient.data() + first * layer.input_width);
      }
      break;
    }
    buffer = 1 - buffer;
    float* d_h = buffers[buffer];
    kernels_->affine_input_gradient(delta, weights_transposed, count, layer.input_width,
                                    layer.output_width, d_h);
    kernels_->relu_gradient(x, d_h, count * layer.input_width, d_h);
    delta = d_h;
  }
}

int64_t Mlp::batch_size_of(std::span<const float> input, const char* argument) const {
  const int64_t size = static_cast<int64_t>(input.size());
  if (size == 0 || size % config_.input_width != 0) {
    throw InvalidArgument(config_.name + ": " + argument + " has " + std::to_string(size) +
                          " floats; expected a positive multiple of input_width " +
                          std::to_string(config_.input_width));
  }
  return size / config_.input_width;
}

void Mlp::check_parameter_size(size_t size, const char* argument) const {
  if (size != static_cast<size_t>(num_parameters_)) {
    throw InvalidArgument(
        config_.name + ": " + argument + " has " + std::to_string(size) +
        " floats; expected num_parameters() = " + std::to_string(num_parameters_));
  }
}

}  // namespace recemb::dlrm
