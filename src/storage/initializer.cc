#include "storage/initializer.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <type_traits>

namespace recemb::internal {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014): a tiny counter-based generator whose output is the same on
// every platform, unlike std::normal_distribution, whose algorithm the standard leaves open.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1): 53 random bits, never exactly 0 (safe for log).
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// A standard normal value redrawn until it lies within [-2, 2] (Box-Muller, one value per pair).
double truncated_standard_normal(SplitMix64& random) {
  while (true) {
    const double radius = std::sqrt(-2.0 * std::log(random.uniform()));
    const double z = radius * std::cos(2.0 * std::numbers::pi * random.uniform());
    if (std::abs(z) <= 2.0) return z;
  }
}

}  // namespace

uint64_t table_seed(uint64_t seed, std::string_view table_name) {
  uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a
  for (const char c : table_name) {
    hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  }
  return SplitMix64(seed ^ hash).next();
}

void initialize_rows(const Initializer& initializer, uint64_t table_seed, int64_t first_row,
                     int64_t num_rows, int64_t dim, std::span<float> values) {
  std::visit(
      [&](const auto& init) {
        using Init = std::decay_t<decltype(init)>;
        if constexpr (std::is_same_v<Init, TruncatedNormal>) {
          const double stddev =
              init.stddev > 0.0f ? init.stddev : 1.0 / std::sqrt(static_cast<double>(dim));
          for (int64_t r = 0; r < num_rows; ++r) {
            SplitMix64 random(table_seed ^ SplitMix64(static_cast<uint64_t>(first_row + r)).next());
            float* row = values.data() + r * dim;
            for (int64_t d = 0; d < dim; ++d) {
              row[d] = static_cast<float>(init.mean + stddev * truncated_standard_normal(random));
            }
          }
        } else if constexpr (std::is_same_v<Init, Constant>) {
          std::fill(values.begin(), values.end(), init.value);
        } else if constexpr (std::is_same_v<Init, RowId>) {
          for (int64_t r = 0; r < num_rows; ++r) {
            std::fill_n(values.data() + r * dim, dim,
                        init.offset + static_cast<float>(first_row + r));
          }
        } else {
          init(first_row, num_rows, dim, values);
        }
      },
      initializer);
}

}  // namespace recemb::internal
