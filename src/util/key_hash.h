// The hash of an int64 key into a hash table's positions, shared by the dynamic tables' indexes
// (storage/key_index.h, serving/key_rows.h).
#ifndef RECEMB_UTIL_KEY_HASH_H_
#define RECEMB_UTIL_KEY_HASH_H_

#include <cstddef>
#include <cstdint>

namespace recemb::internal {

// Murmur3's 64-bit finalizer: a bijection in which every key bit flips about half the output
// bits, so that adversarial keys (0, negatives, INT64_MIN/MAX, sequential runs) spread evenly.
inline uint64_t mix_key(int64_t key) {
  uint64_t z = static_cast<uint64_t>(key);
  z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdULL;
  z = (z ^ (z >> 33)) * 0xc4ceb9fe1a85ec53ULL;
  return z ^ (z >> 33);
}

// [0, n) from a hash's high bits (multiply-shift): no division, and any n, so that a hash table
// can be sized at exactly its keys / load rather than the next power of two (up to 2x the memory).
inline size_t scale_hash(uint64_t hash, size_t n) {
  __extension__ using Wide = unsigned __int128;
  return static_cast<size_t>((static_cast<Wide>(hash) * n) >> 64);
}

}  // namespace recemb::internal

#endif  // RECEMB_UTIL_KEY_HASH_H_
