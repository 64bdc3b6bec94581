#include "dlrm/interaction.h"

#include <algorithm>
#include <string>

#include "recemb/error.h"

namespace recemb::dlrm {
namespace {

// Examples per task of the ThreadPool: 8 blocks of the AVX-512 kernels, 16 of the others.
constexpr int64_t kExamplesPerTask = 128;

[[noreturn]] void throw_size_error(const std::string& argument, size_t size, int64_t expected) {
  throw InvalidArgument("interaction: " + argument + " has size " + std::to_string(size) +
                        "; expected " + std::to_string(expected));
}

}  // namespace

// The kernels work on blocks of examples laid side by side, as many as a vector register holds
// (dense_kernels.cc): each example's sums stay in one lane, so results do not depend on it.

DotInteraction::DotInteraction(int64_t num_embeddings, int64_t dim, DenseIsa isa)
    : num_embeddings_(num_embeddings), dim_(dim), kernels_(&dense_kernels(isa)) {
  if (num_embeddings < 0) {
    throw InvalidArgument("interaction: num_embeddings = " + std::to_string(num_embeddings) +
                          " must be >= 0");
  }
  if (dim < 1) {
    throw InvalidArgument("interaction: dim = " + std::to_string(dim) + " must be >= 1");
  }
  reserve_workers(1);
}

void DotInteraction::reserve_workers(int num_workers) {
  if (scratch_.size() >= static_cast<size_t>(num_workers)) return;
  const int64_t num_vectors = num_embeddings_ + 1;
  const int64_t lanes = kernels_->interaction_lanes;
  scratch_.resize(static_cast<size_t>(num_workers));
  for (Scratch& scratch : scratch_) {
    scratch.vectors.resize(static_cast<size_t>(num_vectors * dim_ * lanes));
    scratch.vector_gradients.resize(scratch.vectors.size());
    // The diagonal is never written: it stays 0.
    scratch.pair_gradients.resize(static_cast<size_t>(num_vectors * num_vectors * lanes));
    scratch.pairs.resize(static_cast<size_t>(num_vectors * (num_vectors - 1) / 2 * lanes));
  }
}

int64_t DotInteraction::output_width(int64_t num_embeddings, int64_t dim) {
  const int64_t num_vectors = num_embeddings + 1;
  return dim + num_vectors * (num_vectors - 1) / 2;
}

template <class Kernel>
void DotInteraction::for_each_block(std::span<const float> bottom,
                                    std::span<const std::span<const float>> embeddings,
                                    int64_t first, int64_t count, int worker, Kernel kernel) {
  Scratch& scratch = scratch_[static_cast<size_t>(worker)];
  const int64_t lanes = kernels_->interaction_lanes;
  const int64_t end = first + count;
  for (int64_t block = first; block < end; block += lanes) {
    kernel(InteractionBlock{.bottom = bottom,
                            .embeddings = embeddings,
                            .dim = dim_,
                            .first = block,
                            .count = std::min(lanes, end - block),
                            .vectors = scratch.vectors.data(),
                            .vector_gradients = scratch.vector_gradients.data(),
                            .pair_gradients = scratch.pair_gradients.data(),
                            .pairs = scratch.pairs.data()});
  }
}

void DotInteraction::forward(std::span<const float> bottom,
                             std::span<const std::span<const float>> embeddings,
                             std::span<float> output, support::ThreadPool* pool) {
  const int64_t batch_size = check_sizes(bottom, embeddings);
  const int64_t width = output_width();
  if (output.size() != static_cast<size_t>(batch_size * width)) {
    throw_size_error("output", output.size(), batch_size * width);
  }
  reserve_workers(pool == nullptr ? 1 : pool->num_threads());
  support::parallel_for(
      pool, (batch_size + kExamplesPerTask - 1) / kExamplesPerTask, [&](int64_t task, int worker) {
        const int64_t first = task * kExamplesPerTask;
        forward_rows(bottom, embeddings, first, std::min(kExamplesPerTask, batch_size - first),
                     output, worker);
      });
}

void DotInteraction::forward_rows(std::span<const float> bottom,
                                  std::span<const std::span<const float>> embeddings, int64_t first,
                                  int64_t count, std::span<float> output, int worker) {
  for_each_block(bottom, embeddings, first, count, worker, [&](const InteractionBlock& block) {
    kernels_->interaction_forward(block, output.data());
  });
}

void DotInteraction::backward(std::span<const float> bottom,
                              std::span<const std::span<const float>> embeddings,
                              std::span<const float> output_gradient,
                              std::span<float> bottom_gradient,
                              std::span<const std::span<float>> embedding_gradients,
                              support::ThreadPool* pool) {
  const int64_t batch_size = check_sizes(bottom, embeddings);
  const int64_t width = output_width();
  if (embedding_gradients.size() != static_cast<size_t>(num_embeddings_)) {
    throw_size_error("embedding_gradients (spans)", embedding_gradients.size(), num_embeddings_);
  }
  for (size_t f = 0; f < embedding_gradients.size(); ++f) {
    if (embedding_gradients[f].size() != bottom.size()) {
      throw_size_error("embedding_gradients[" + std::to_string(f) + "]",
                       embedding_gradients[f].size(), batch_size * dim_);
    }
  }
  if (output_gradient.size() != static_cast<size_t>(batch_size * width)) {
    throw_size_error("output_gradient", output_gradient.size(), batch_size * width);
  }
  if (bottom_gradient.size() != bottom.size()) {
    throw_size_error("bottom_gradient", bottom_gradient.size(), batch_size * dim_);
  }
  reserve_workers(pool == nullptr ? 1 : pool->num_threads());
  support::parallel_for(
      pool, (batch_size + kExamplesPerTask - 1) / kExamplesPerTask, [&](int64_t task, int worker) {
        const int64_t first = task * kExamplesPerTask;
        backward_rows(bottom, embeddings, output_gradient, bottom_gradient, embedding_gradients,
                      first, std::min(kExamplesPerTask, batch_size - first), worker);
      });
}

void DotInteraction::backward_rows(std::span<const float> bottom,
                                   std::span<const std::span<const float>> embeddings,
                                   std::span<const float> output_gradient,
                                   std::span<float> bottom_gradient,
                                   std::span<const std::span<float>> embedding_gradients,
                                   int64_t first, int64_t count, int worker) {
  for_each_block(bottom, embeddings, first, count, worker, [&](const InteractionBlock& block) {
    kernels_->interaction_backward(block, output_gradient.data(), bottom_gradient.data(),
                                   embedding_gradients);
  });
}

int64_t DotInteraction::check_sizes(std::span<const float> bottom,
                                    std::span<const std::span<const float>> embeddings) const {
  if (bottom.empty() || bottom.size() % dim_ != 0) {
    throw InvalidArgument("interaction: bottom has " + std::to_string(bottom.size()) +
                          " floats; expected a positive multiple of dim " + std::to_string(dim_));
  }
  if (embeddings.size() != static_cast<size_t>(num_embeddings_)) {
    throw_size_error("embeddings (spans)", embeddings.size(), num_embeddings_);
  }
  for (size_t f = 0; f < embeddings.size(); ++f) {
    if (embeddings[f].size() != bottom.size()) {
      throw_size_error("embeddings[" + std::to_string(f) + "]", embeddings[f].size(),
                       static_cast<int64_t>(bottom.size()));
    }
  }
  return static_cast<int64_t>(bottom.size()) / dim_;
}

}  // namespace recemb::dlrm
