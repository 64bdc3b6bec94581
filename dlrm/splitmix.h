// SplitMix64 (G. Steele, D. Lea, C. Flood, "Fast splittable pseudorandom number generators",
// OOPSLA 2014; the generator of Java's SplittableRandom): the one 64-bit mixing function of the
// trainer's data side. The Criteo reader hashes categorical values with it and the synthetic
// generator derives its counter-based random numbers from it.
//
// Integer arithmetic only (unsigned wrap-around is defined): the same values on every platform,
// compiler and build, which is what makes hashed ids and synthetic examples reproducible.
#ifndef RECEMB_DLRM_SPLITMIX_H_
#define RECEMB_DLRM_SPLITMIX_H_

#include <cstdint>

namespace recemb::dlrm {

// 2^64 / golden ratio, SplitMix64's increment ("gamma").
inline constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ULL;

// SplitMix64's finaliser (a bijection of the 64-bit integers with full avalanche):
//   z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31
constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The SplitMix64 stream started at `state`: the k-th call (k = 1, 2, ...) of next() returns
// splitmix64_mix(state + k * kGoldenGamma). A small value type; copying it forks the stream.
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(uint64_t state) : state_(state) {}

  constexpr uint64_t next() {
    state_ += kGoldenGamma;
    return splitmix64_mix(state_);
  }

  // Uniform in [0, 1): the top 53 bits of next() times 2^-53.
  constexpr double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

}  // namespace recemb::dlrm

#endif  // RECEMB_DLRM_SPLITMIX_H_
