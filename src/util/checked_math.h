// Integer arithmetic on sizes that may come from untrusted input (shapes, counts): the result, or
// nullopt when it does not fit in int64_t (signed overflow is undefined behaviour).
#ifndef RECEMB_UTIL_CHECKED_MATH_H_
#define RECEMB_UTIL_CHECKED_MATH_H_

#include <cstdint>
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

}  // namespace recemb::internal

#endif  // RECEMB_UTIL_CHECKED_MATH_H_
