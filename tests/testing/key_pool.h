// KeyPool: int64 keys that stress hashing, for the tests of the hash tables of dynamic tables'
// keys (storage/key_index.h, storage/pending_counts.h).
#ifndef RECEMB_TESTS_TESTING_KEY_POOL_H_
#define RECEMB_TESTS_TESTING_KEY_POOL_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace recemb::test {

// The extremes, 0 and its neighbours, runs of sequential keys (positive and negative), multiples
// of large powers of two, and random 64-bit values; sorted, each once.
class KeyPool {
 public:
  KeyPool(uint64_t seed, int64_t random_keys) {
    constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    keys_ = {0, 1, -1, 2, -2, kMin, kMax, kMin + 1, kMax - 1};
    for (int64_t i = 0; i < random_keys; ++i) keys_.push_back(1000 + i);
    for (int64_t i = 0; i < random_keys; ++i) keys_.push_back(-5000 - i);
    for (int64_t i = 1; i < 64; ++i) keys_.push_back(int64_t{1} << (i % 63));
    std::mt19937_64 random(seed);
    for (int64_t i = 0; i < random_keys; ++i) keys_.push_back(static_cast<int64_t>(random()));
    std::sort(keys_.begin(), keys_.end());
    keys_.erase(std::unique(keys_.begin(), keys_.end()), keys_.end());
  }
  int64_t pick(std::mt19937_64& random) const {
    return keys_[std::uniform_int_distribution<size_t>(0, keys_.size() - 1)(random)];
  }
  const std::vector<int64_t>& keys() const { return keys_; }

 private:
  std::vector<int64_t> keys_;
};

}  // namespace recemb::test

#endif  // RECEMB_TESTS_TESTING_KEY_POOL_H_
