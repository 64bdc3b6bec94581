#include "train/interaction.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "recemb/error.h"

namespace recemb::train {
namespace {

// Examples per block: a vector register of floats (the kernels' sums of one example stay in
// one lane, so results do not depend on it).
#ifdef __AVX512F__
constexpr int64_t kLanes = 16;
#else
constexpr int64_t kLanes = 8;
#endif
constexpr int64_t kBlocksPerTask = 8;  // blocks per task of the WorkerPool
constexpr int64_t kTaskExamples = kLanes * kBlocksPerTask;

[[noreturn]] void throw_size_error(const std::string& argument, size_t size, int64_t expected) {
  throw InvalidArgument("interaction: " + argument + " has size " + std::to_string(size) +
                        "; expected " + std::to_string(expected));
}

// d(loss)/d(T_i)[k] = sum_j S_ij T_j[k] for k = k0 .. k0 + kCount - 1 and the examples of a
// block (`pair_row` = S_i.), into `gradient_i`. The kCount independent sums hide the latency of
// the multiply-adds (one sum at a time took 1.6x as long). Written element by element, not by
// memcpy, so that the sums stay in registers.
template <int kCount>
void vector_gradient(const float* pair_row, const float* vectors, int64_t num_vectors,
                     int64_t stride, int64_t k0, float* gradient_i) {
  float sums[kCount][kLanes] = {};
  for (int64_t j = 0; j < num_vectors; ++j) {
    for (int q = 0; q < kCount; ++q) {
      for (int64_t lane = 0; lane < kLanes; ++lane) {
        sums[q][lane] +=
            pair_row[j * kLanes + lane] * vectors[j * stride + (k0 + q) * kLanes + lane];
      }
    }
  }
  for (int q = 0; q < kCount; ++q) {
    for (int64_t lane = 0; lane < kLanes; ++lane) {
      gradient_i[(k0 + q) * kLanes + lane] = sums[q][lane];
    }
  }
}

}  // namespace

// The kernels work on blocks of kLanes examples laid side by side ("lanes"), so that every
// innermost loop runs over the examples of a block: contiguous, vectorised by the compiler, with
// no horizontal sums. (Per example, a dot product of dim = 16 floats ends in a horizontal sum and
// the 351 small products cost more in call and reduction overhead than in arithmetic: Eigen's
// per-example matrix-vector products took 2x as long forward and 1.3x backward, for DLRM's shapes
// with AVX2.) Block buffers, one set per worker thread (Scratch):
//   vectors[(f * dim + k) * kLanes + lane]           T_f[k] of example first + lane
//   vector_gradients[(f * dim + k) * kLanes + lane]  d(loss)/d(T_f[k])
//   pair_gradients[(i * F + j) * kLanes + lane]      S_ij = P_ij (i > j), P_ji (i < j), 0 (i == j)
// The backward pass is dT = S T per example, one sum per output element in registers. In the last
// block of a batch, lanes beyond the batch hold stale values whose results are never stored.

DotInteraction::DotInteraction(int64_t num_embeddings, int64_t dim)
    : num_embeddings_(num_embeddings), dim_(dim) {
  if (num_embeddings < 0) {
    throw InvalidArgument("interaction: num_embeddings = " + std::to_string(num_embeddings) +
                          " must be >= 0");
  }
  if (dim < 1) {
    throw InvalidArgument("interaction: dim = " + std::to_string(dim) + " must be >= 1");
  }
  make_scratch(nullptr);
}

void DotInteraction::make_scratch(const WorkerPool* pool) {
  const size_t num_workers = pool == nullptr ? 1 : static_cast<size_t>(pool->num_threads());
  if (scratch_.size() >= num_workers) return;
  const int64_t num_vectors = num_embeddings_ + 1;
  scratch_.resize(num_workers);
  for (Scratch& scratch : scratch_) {
    scratch.vectors.resize(static_cast<size_t>(num_vectors * dim_ * kLanes));
    scratch.vector_gradients.resize(scratch.vectors.size());
    // The diagonal is never written: it stays 0.
    scratch.pair_gradients.resize(static_cast<size_t>(num_vectors * num_vectors * kLanes));
  }
}

int64_t DotInteraction::output_width(int64_t num_embeddings, int64_t dim) {
  const int64_t num_vectors = num_embeddings + 1;
  return dim + num_vectors * (num_vectors - 1) / 2;
}

template <class Block>
void DotInteraction::for_each_block(std::span<const float> bottom,
                                    std::span<const std::span<const float>> embeddings,
                                    int64_t batch_size, WorkerPool* pool, Block block) {
  make_scratch(pool);
  run_tasks(pool, (batch_size + kTaskExamples - 1) / kTaskExamples, [&](int64_t task, int worker) {
    Scratch& scratch = scratch_[static_cast<size_t>(worker)];
    const int64_t end = std::min(batch_size, (task + 1) * kTaskExamples);
    for (int64_t first = task * kTaskExamples; first < end; first += kLanes) {
      const int64_t lanes = std::min(kLanes, batch_size - first);
      gather(bottom, embeddings, first, lanes, scratch);
      block(first, lanes, scratch);
    }
  });
}

void DotInteraction::forward(std::span<const float> bottom,
                             std::span<const std::span<const float>> embeddings,
                             std::span<float> output, WorkerPool* pool) {
  const int64_t batch_size = check_sizes(bottom, embeddings);
  const int64_t width = output_width();
  if (output.size() != static_cast<size_t>(batch_size * width)) {
    throw_size_error("output", output.size(), batch_size * width);
  }

  const int64_t num_vectors = num_embeddings_ + 1;
  const int64_t dim = dim_;
  const int64_t stride = dim * kLanes;  // floats between two vectors in Scratch::vectors
  const auto interact = [&](int64_t first, int64_t lanes, Scratch& scratch) {
    for (int64_t lane = 0; lane < lanes; ++lane) {
      std::memcpy(&output[(first + lane) * width], &bottom[(first + lane) * dim_],
                  sizeof(float) * dim_);
    }
    const float* vectors = scratch.vectors.data();
    float* block_output = &output[first * width];
    int64_t column = dim;
    for (int64_t i = 1; i < num_vectors; ++i) {
      const float* vector_i = vectors + i * stride;
      for (int64_t j = 0; j < i; ++j, ++column) {
        const float* vector_j = vectors + j * stride;
        float dots[kLanes] = {};
        for (int64_t k = 0; k < dim; ++k) {
          for (int64_t lane = 0; lane < kLanes; ++lane) {
            dots[lane] += vector_i[k * kLanes + lane] * vector_j[k * kLanes + lane];
          }
        }
        for (int64_t lane = 0; lane < lanes; ++lane) {
          block_output[lane * width + column] = dots[lane];
        }
      }
    }
  };
  for_each_block(bottom, embeddings, batch_size, pool, interact);
}

void DotInteraction::backward(std::span<const float> bottom,
                              std::span<const std::span<const float>> embeddings,
                              std::span<const float> output_gradient,
                              std::span<float> bottom_gradient,
                              std::span<const std::span<float>> embedding_gradients,
                              WorkerPool* pool) {
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

  const int64_t num_vectors = num_embeddings_ + 1;
  const int64_t dim = dim_;
  const int64_t stride = dim * kLanes;
  const auto back_propagate = [&](int64_t first, int64_t lanes, Scratch& scratch) {
    // S from the block's rows of output_gradient: pair by pair, so that S is written in whole
    // lane vectors.
    const float* block_gradient = &output_gradient[first * width];
    float* pairs = scratch.pair_gradients.data();
    int64_t column = dim;
    for (int64_t i = 1; i < num_vectors; ++i) {
      for (int64_t j = 0; j < i; ++j, ++column) {
        float* lower = pairs + (i * num_vectors + j) * kLanes;
        for (int64_t lane = 0; lane < lanes; ++lane)
          lower[lane] = block_gradient[lane * width + column];
        std::memcpy(pairs + (j * num_vectors + i) * kLanes, lower, sizeof(float) * kLanes);
      }
    }
    const float* vectors = scratch.vectors.data();
    for (int64_t i = 0; i < num_vectors; ++i) {
      const float* pair_row = pairs + i * num_vectors * kLanes;
      float* gradient_i = scratch.vector_gradients.data() + i * stride;
      int64_t k = 0;
      for (; k + 4 <= dim; k += 4) {
        vector_gradient<4>(pair_row, vectors, num_vectors, stride, k, gradient_i);
      }
      for (; k < dim; ++k)
        vector_gradient<1>(pair_row, vectors, num_vectors, stride, k, gradient_i);
    }
    for (int64_t lane = 0; lane < lanes; ++lane) {
      const int64_t example = first + lane;
      for (int64_t k = 0; k < dim_; ++k) {
        bottom_gradient[example * dim_ + k] =
            output_gradient[example * width + k] + scratch.vector_gradients[k * kLanes + lane];
      }
      for (int64_t f = 0; f < num_embeddings_; ++f) {
        for (int64_t k = 0; k < dim_; ++k) {
          embedding_gradients[f][example * dim_ + k] =
              scratch.vector_gradients[(f + 1) * stride + k * kLanes + lane];
        }
      }
    }
  };
  for_each_block(bottom, embeddings, batch_size, pool, back_propagate);
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

void DotInteraction::gather(std::span<const float> bottom,
                            std::span<const std::span<const float>> embeddings, int64_t first,
                            int64_t lanes, Scratch& scratch) const {
  const int64_t stride = dim_ * kLanes;
  for (int64_t f = 0; f <= num_embeddings_; ++f) {
    const std::span<const float> source = f == 0 ? bottom : embeddings[f - 1];
    for (int64_t lane = 0; lane < lanes; ++lane) {
      const float* row = &source[(first + lane) * dim_];
      for (int64_t k = 0; k < dim_; ++k) scratch.vectors[f * stride + k * kLanes + lane] = row[k];
    }
  }
}

}  // namespace recemb::train
