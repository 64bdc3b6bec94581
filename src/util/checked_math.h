// Integer arithmetic on sizes that may come from untrusted input (shapes, counts): the result, or
// nullopt when it does not fit in int64_t (signed overflow is undefined behaviour); and counts
// that saturate instead.
#ifndef RECEMB_UTIL_CHECKED_MATH_H_
#define RECEMB_UTIL_CHECKED_MATH_H_

#include <cstdint>
#include <limits>
#include <optional>

namespace recemb::internal {

inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

inline std::optional<int64_t> checked_multiply(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// a + b, or INT64_MAX when it does not fit (a, b >= 0).
inline int64_t saturating_add(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

}  // namespace recemb::internal

#endif  // RECEMB_UTIL_CHECKED_MATH_H_
