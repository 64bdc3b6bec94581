#include "dlrm/batch_buffers.h"

#include <gtest/gtest.h>
#include <random>
#include <variant>

namespace recemb::dlrm {
namespace {

ExampleBatch random_batch(int64_t size, uint64_t seed) {
  std::mt19937_64 random(seed);
  ExampleBatch batch;
  batch.size = size;
  batch.categorical.resize(static_cast<size_t>(size * kNumCategoricalFeatures));
  for (int64_t& id : batch.categorical) id = static_cast<int64_t>(random() % 1000);
  return batch;
}

// Each feature's input is a dense [count] view of examples [begin, begin + count) of that
// feature's ids, and activations and gradients hold count rows of dim floats; rebinding to a
// smaller slice of another batch follows it.
TEST(BatchBuffers, BindsAnySliceOfABatch) {
  constexpr int64_t kDim = 5;
  BatchBuffers buffers(kDim);
  const ExampleBatch first = random_batch(40, 1);
  const ExampleBatch second = random_batch(17, 2);
  for (const auto& [batch, begin, count] :
       {std::tuple{&first, int64_t{0}, int64_t{40}}, std::tuple{&first, int64_t{10}, int64_t{25}},
        std::tuple{&second, int64_t{16}, int64_t{1}},
        std::tuple{&second, int64_t{17}, int64_t{0}}}) {
    SCOPED_TRACE(::testing::Message() << "begin " << begin << " count " << count);
    buffers.bind(*batch, begin, count);
    ASSERT_EQ(buffers.inputs().size(), static_cast<size_t>(kNumCategoricalFeatures));
    for (int f = 0; f < kNumCategoricalFeatures; ++f) {
      const auto& input = std::get<DenseIds>(buffers.inputs()[static_cast<size_t>(f)]);
      EXPECT_EQ(input.shape, (std::vector<int64_t>{count}));
      const auto ids = std::get<std::span<const int64_t>>(input.ids);
      ASSERT_EQ(static_cast<int64_t>(ids.size()), count);
      for (int64_t i = 0; i < count; ++i) {
        EXPECT_EQ(ids[static_cast<size_t>(i)],
                  batch->categorical[static_cast<size_t>(f * batch->size + begin + i)]);
      }
      EXPECT_EQ(static_cast<int64_t>(buffers.activations()[static_cast<size_t>(f)].size()),
                count * kDim);
      EXPECT_EQ(buffers.activations()[static_cast<size_t>(f)].data(),
                buffers.activation_views()[static_cast<size_t>(f)].data());
      EXPECT_EQ(static_cast<int64_t>(buffers.gradients()[static_cast<size_t>(f)].size()),
                count * kDim);
      EXPECT_EQ(buffers.gradients()[static_cast<size_t>(f)].data(),
                buffers.gradient_views()[static_cast<size_t>(f)].data());
    }
  }
}

}  // namespace
}  // namespace recemb::dlrm
