#include "testing/random_batches.h"

#include <algorithm>
#include <span>
#include <stdexcept>
#include <utility>

namespace recemb::test {

void OwnedInput::set_ids(const std::vector<int64_t>& ids, IdWidth width) {
  width_ = width;
  if (width == IdWidth::kInt64) {
    ids64_ = ids;
  } else {
    ids32_.clear();
    for (int64_t id : ids) ids32_.push_back(static_cast<int32_t>(id));
  }
}

IdSpan OwnedInput::id_span() const {
  if (width_ == IdWidth::kInt64) return std::span<const int64_t>(ids64_);
  return std::span<const int32_t>(ids32_);
}

OwnedInput OwnedInput::dense(const std::vector<int64_t>& ids, std::vector<int64_t> shape,
                             std::vector<float> weights, IdWidth width) {
  OwnedInput input;
  input.layout_ = Layout::kDense;
  input.set_ids(ids, width);
  input.shape_ = std::move(shape);
  input.weights_ = std::move(weights);
  return input;
}

OwnedInput OwnedInput::ragged(const std::vector<Bag>& bags, bool weighted, IdWidth width,
                              IdWidth splits_width) {
  OwnedInput input;
  input.layout_ = Layout::kRagged;
  input.splits_width_ = splits_width;
  std::vector<int64_t> ids;
  std::vector<int64_t> splits = {0};
  for (const Bag& bag : bags) {
    for (size_t j = 0; j < bag.ids.size(); ++j) {
      ids.push_back(bag.ids[j]);
      if (weighted) input.weights_.push_back(bag.weights.empty() ? 1.0f : bag.weights[j]);
    }
    splits.push_back(static_cast<int64_t>(ids.size()));
  }
  input.set_ids(ids, width);
  input.splits64_ = splits;
  for (int64_t split : splits) input.splits32_.push_back(static_cast<int32_t>(split));
  return input;
}

OwnedInput OwnedInput::sparse(std::vector<int64_t> indices, const std::vector<int64_t>& values,
                              std::vector<int64_t> dense_shape, std::vector<float> weights,
                              IdWidth width) {
  OwnedInput input;
  input.layout_ = Layout::kSparse;
  input.set_ids(values, width);
  input.indices_ = std::move(indices);
  input.shape_ = std::move(dense_shape);
  input.weights_ = std::move(weights);
  return input;
}

OwnedInput OwnedInput::dense_from_bags(const std::vector<Bag>& bags, std::vector<int64_t> bag_shape,
                                       bool weighted, IdWidth width) {
  std::vector<int64_t> ids;
  std::vector<float> weights;
  const size_t bag_size = bags.empty() ? 1 : bags.front().ids.size();
  for (const Bag& bag : bags) {
    if (bag.ids.size() != bag_size) throw std::logic_error("dense_from_bags: ragged bags");
    for (size_t j = 0; j < bag.ids.size(); ++j) {
      ids.push_back(bag.ids[j]);
      if (weighted) weights.push_back(bag.weights.empty() ? 1.0f : bag.weights[j]);
    }
  }
  bag_shape.push_back(static_cast<int64_t>(bag_size));
  return dense(ids, std::move(bag_shape), std::move(weights), width);
}

OwnedInput OwnedInput::sparse_from_bags(const std::vector<Bag>& bags,
                                        std::vector<int64_t> bag_shape,
                                        const std::vector<std::vector<int64_t>>& positions,
                                        int64_t last_dim, bool weighted, IdWidth width) {
  // Row-major multi-index of bag k in bag_shape.
  auto bag_index = [&bag_shape](int64_t k) {
    std::vector<int64_t> index(bag_shape.size());
    for (size_t axis = bag_shape.size(); axis-- > 0;) {
      index[axis] = k % bag_shape[axis];
      k /= bag_shape[axis];
    }
    return index;
  };
  std::vector<int64_t> indices;
  std::vector<int64_t> values;
  std::vector<float> weights;
  for (size_t k = 0; k < bags.size(); ++k) {
    const std::vector<int64_t> index = bag_index(static_cast<int64_t>(k));
    for (size_t j = 0; j < bags[k].ids.size(); ++j) {
      indices.insert(indices.end(), index.begin(), index.end());
      indices.push_back(positions[k][j]);
      values.push_back(bags[k].ids[j]);
      if (weighted) weights.push_back(bags[k].weights.empty() ? 1.0f : bags[k].weights[j]);
    }
  }
  bag_shape.push_back(last_dim);
  return sparse(std::move(indices), values, std::move(bag_shape), std::move(weights), width);
}

FeatureInput OwnedInput::view() const {
  const std::span<const float> weights(weights_);
  switch (layout_) {
    case Layout::kDense:
      return DenseIds{id_span(), shape_, weights};
    case Layout::kRagged: {
      RaggedIds ragged{id_span(), std::span<const int64_t>(splits64_), weights};
      if (splits_width_ == IdWidth::kInt32) ragged.row_splits = std::span<const int32_t>(splits32_);
      return ragged;
    }
    case Layout::kSparse:
      return SparseIds{indices_, id_span(), shape_, weights};
  }
  throw std::logic_error("unknown layout");
}

std::vector<FeatureInput> views_of(const std::vector<OwnedInput>& inputs) {
  std::vector<FeatureInput> views;
  for (const OwnedInput& input : inputs) views.push_back(input.view());
  return views;
}

int64_t random_int(std::mt19937_64& rng, int64_t low, int64_t high) {
  return std::uniform_int_distribution<int64_t>(low, high)(rng);
}

bool random_bool(std::mt19937_64& rng) { return random_int(rng, 0, 1) == 1; }

IdWidth random_width(std::mt19937_64& rng) {
  return random_bool(rng) ? IdWidth::kInt32 : IdWidth::kInt64;
}

namespace {

float random_float(std::mt19937_64& rng, float low, float high) {
  return std::uniform_real_distribution<float>(low, high)(rng);
}

}  // namespace

std::vector<Bag> random_bags(std::mt19937_64& rng, int64_t num_bags, const BagOptions& options) {
  std::vector<Bag> bags;
  for (int64_t k = 0; k < num_bags; ++k) {
    Bag bag;
    const int64_t length = random_int(rng, options.min_length, options.max_length);
    for (int64_t j = 0; j < length; ++j) {
      if (j > 0 && random_int(rng, 0, 3) == 0) {
        bag.ids.push_back(bag.ids[static_cast<size_t>(random_int(rng, 0, j - 1))]);
      } else {
        bag.ids.push_back(random_int(rng, 0, options.vocabulary_size - 1));
      }
      bag.weights.push_back(random_float(rng, 0.25f, 2.0f));
    }
    if (options.weighted && length > 0) {
      const int64_t pattern = random_int(rng, 0, 9);
      if (pattern == 0) {
        // All zero: every combiner's denominator is 0 for mean/sqrtn.
        for (float& weight : bag.weights) weight = 0.0f;
      } else if (pattern == 1) {
        // {w, -w} pairs (and a trailing 0): the sum is exactly 0 in any order.
        for (size_t j = 0; j + 1 < bag.weights.size(); j += 2) bag.weights[j + 1] = -bag.weights[j];
        if (bag.weights.size() % 2 == 1) bag.weights.back() = 0.0f;
      } else if (pattern == 2 && length >= 2) {
        bag.weights[0] = -0.1f;  // the sum stays >= 0.15
      }
    }
    if (!options.weighted) bag.weights.clear();
    bags.push_back(std::move(bag));
  }
  return bags;
}

std::vector<std::vector<int64_t>> random_positions(std::mt19937_64& rng,
                                                   const std::vector<Bag>& bags, int64_t last_dim) {
  std::vector<std::vector<int64_t>> positions;
  for (const Bag& bag : bags) {
    const auto count = static_cast<int64_t>(bag.ids.size());
    std::vector<int64_t> bag_positions;
    int64_t next = 0;
    for (int64_t j = 0; j < count; ++j) {
      // Leave room for the remaining ids.
      const int64_t latest = last_dim - (count - j);
      const int64_t position = std::min(latest, next + (random_int(rng, 0, 2) == 0 ? 1 : 0));
      bag_positions.push_back(position);
      next = position + 1;
    }
    positions.push_back(std::move(bag_positions));
  }
  return positions;
}

OwnedInput random_two_dim_input(std::mt19937_64& rng, int64_t batch_size, int64_t vocabulary_size,
                                int64_t max_length) {
  const auto layout = static_cast<Layout>(random_int(rng, 0, 2));
  const IdWidth width = random_width(rng);
  const bool weighted = random_bool(rng);
  BagOptions options{vocabulary_size, 0, max_length, weighted};
  if (layout == Layout::kDense) {
    options.min_length = options.max_length = random_int(rng, 1, max_length);
    return OwnedInput::dense_from_bags(random_bags(rng, batch_size, options), {batch_size},
                                       weighted, width);
  }
  const std::vector<Bag> bags = random_bags(rng, batch_size, options);
  if (layout == Layout::kRagged) {
    return OwnedInput::ragged(bags, weighted, width, random_width(rng));
  }
  const int64_t last_dim = max_length + 2;
  return OwnedInput::sparse_from_bags(bags, {batch_size}, random_positions(rng, bags, last_dim),
                                      last_dim, weighted, width);
}

OwnedInput random_one_dim_input(std::mt19937_64& rng, int64_t batch_size, int64_t vocabulary_size) {
  const bool weighted = random_bool(rng);
  const std::vector<Bag> bags = random_bags(rng, batch_size, {vocabulary_size, 1, 1, weighted});
  std::vector<int64_t> ids;
  std::vector<float> weights;
  for (const Bag& bag : bags) {
    ids.push_back(bag.ids[0]);
    if (weighted) weights.push_back(bag.weights[0]);
  }
  return OwnedInput::dense(ids, {batch_size}, weights, random_width(rng));
}

OwnedInput random_three_dim_sparse_input(std::mt19937_64& rng, int64_t batch_size,
                                         int64_t vocabulary_size) {
  const bool weighted = random_bool(rng);
  const std::vector<Bag> bags = random_bags(rng, 2 * batch_size, {vocabulary_size, 0, 3, weighted});
  const std::vector<std::vector<int64_t>> positions = random_positions(rng, bags, 4);
  return OwnedInput::sparse_from_bags(bags, {batch_size, 2}, positions, 4, weighted,
                                      random_width(rng));
}

OwnedInput random_three_dim_dense_input(std::mt19937_64& rng, int64_t batch_size,
                                        int64_t vocabulary_size) {
  const bool weighted = random_bool(rng);
  const int64_t bag_size = random_int(rng, 1, 3);
  const std::vector<Bag> bags =
      random_bags(rng, 2 * batch_size, {vocabulary_size, bag_size, bag_size, weighted});
  return OwnedInput::dense_from_bags(bags, {batch_size, 2}, weighted, random_width(rng));
}

std::vector<float> random_gradient(std::mt19937_64& rng, size_t size) {
  std::vector<float> gradient(size);
  for (float& value : gradient) {
    value = random_float(rng, 0.1f, 1.0f);
    if (random_bool(rng)) value = -value;
  }
  return gradient;
}

}  // namespace recemb::test
