// The index of a serving model's dynamic table (docs/serving.md, "Dynamic tables"): the row of
// each key among the table's keys, in O(1), built when the model is opened.
//
// The file holds a dynamic table's keys in increasing order and their rows in that order, then
// one zero row; the index maps a key to its position among the keys, and every other int64 to
// the zero row, so that the pooling kernel reads absent keys as zero rows with no other path
// (as training's tables do, docs/semantics.md section 7).
//
// Layout: cache-line buckets of 5 {key, row + 1} entries (row + 1 = 0: a free entry), at most 80%
// full (16 bytes a key), a key's home bucket being its mixed hash scaled to the bucket count
// (util/key_hash.h), with linear probing over buckets; each bucket counts the keys that passed
// it full, so that a search ends at the first bucket holding the key or passed by none. Read-only
// once built: no erase, hence no tombstones and no slot metadata (storage/key_index.h is the
// training tables' index, which admits and evicts). On a 2 MiB-page buffer
// (storage/aligned_buffer.h).
#ifndef RECEMB_SERVING_KEY_ROWS_H_
#define RECEMB_SERVING_KEY_ROWS_H_

#include <cstdint>
#include <span>

#include "storage/aligned_buffer.h"

namespace recemb::internal {

class KeyRows {
 public:
  // The most keys an index holds (rows are 32-bit, one value marking a free entry).
  static constexpr int64_t kMaxKeys = (int64_t{1} << 32) - 1;

  KeyRows() = default;
  // The index of `keys`, which must be strictly increasing (hence distinct), at most kMaxKeys of
  // them. Throws InvalidArgument naming the first position out of order, or the count above
  // kMaxKeys; std::bad_alloc when memory is short.
  explicit KeyRows(std::span<const int64_t> keys);

  int64_t size() const { return size_; }  // keys held
  // The row every key not held maps to: size().
  int64_t absent_row() const { return size_; }

  // The row of `key`: its position among the keys, or absent_row().
  int64_t find(int64_t key) const;
  // rows[j] = find(keys[j]) for every j, prefetching the buckets of keys ahead. `rows` may be
  // `keys` itself (a key is read before its row is written). Reads only: any number of threads.
  void find(std::span<const int64_t> keys, int64_t* rows) const;

  // Bytes of the hash table.
  int64_t memory_bytes() const;

 private:
  static constexpr int kBucketWidth = 5;
  struct Bucket {
    int64_t keys[kBucketWidth];
    uint32_t rows[kBucketWidth];  // row + 1; 0: a free entry
    // Keys held after this bucket whose search passed it full.
    uint32_t passed;
  };
  static_assert(sizeof(Bucket) == 64);

  size_t home_bucket(int64_t key) const;
  // find(key) of a key whose home bucket is `home` (size() > 0).
  int64_t find_from(size_t home, int64_t key) const;
  const Bucket* buckets() const { return reinterpret_cast<const Bucket*>(storage_.data()); }

  FloatBuffer storage_;  // num_buckets_ Buckets, all zero (free) before the build
  size_t num_buckets_ = 0;
  int64_t size_ = 0;
};

}  // namespace recemb::internal

#endif  // RECEMB_SERVING_KEY_ROWS_H_
