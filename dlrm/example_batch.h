// Examples of the Criteo click model (a label, 13 integer features I1..I13, 26 categorical
// features C1..C26) in batches, and the interface of their sources: the Criteo file reader
// (criteo_reader.h) and the synthetic generator (synthetic_criteo.h).
#ifndef RECEMB_DLRM_EXAMPLE_BATCH_H_
#define RECEMB_DLRM_EXAMPLE_BATCH_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace recemb::dlrm {

inline constexpr int kNumDenseFeatures = 13;        // I1..I13
inline constexpr int kNumCategoricalFeatures = 26;  // C1..C26

// What the ids of a categorical feature are (embedding.vocabulary; docs/training.md,
// "Vocabularies"): the mode changes how a value becomes an id, nothing else.
enum class CategoricalIds {
  kHashedRows,  // rows of a fixed table: the value hashed into [0, vocabulary_size of the feature)
  kRawKeys,     // keys of a dynamic table: any int64, the value itself (no hashing, no collision)
};

// One batch of examples, struct-of-arrays. A source overwrites it on every call, reusing its
// memory: once the arrays have grown to the largest batch asked for, filling allocates nothing.
//   labels       [size]                  0 or 1
//   dense        [size, 13] row-major     dense_value() of the integer features
//   categorical  [26, size] feature-major ids of feature f in categorical[f * size, (f+1) * size),
//                                        each in [0, vocabulary_size of feature f) (kHashedRows)
//                                        or any int64 (kRawKeys)
// The arrays hold exactly size, 13 * size and 26 * size values.
struct ExampleBatch {
  int64_t size = 0;  // examples in the batch (the last batch of a source may be short)
  std::vector<float> labels = {};
  std::vector<float> dense = {};
  std::vector<int64_t> categorical = {};

  // The ids of categorical feature `feature` (0-based: C1 is 0), `size` of them.
  std::span<const int64_t> categorical_ids(int feature) const {
    return std::span<const int64_t>(categorical)
        .subspan(static_cast<size_t>(feature * size), static_cast<size_t>(size));
  }
};

// The transform of an integer feature x, as DLRM's: log(1 + max(x, 0)) (Criteo's -1 and -2 become
// 0), computed in double and rounded to float.
float dense_value(int64_t x);

// Where a source's examples come from, one batch at a time. Not thread-safe: one caller at a time.
class ExampleSource {
 public:
  virtual ~ExampleSource() = default;

  // Fills `batch` with the next examples, at most max_examples (>= 1, else InvalidArgument), and
  // returns how many (batch.size); 0 means the source is exhausted (and stays so).
  virtual int64_t next(ExampleBatch& batch, int64_t max_examples) = 0;

  // Where the source stands: the next call of next() starts there. A short line of text, saved in
  // checkpoints; opaque to the trainer.
  virtual std::string position() const = 0;

  // Moves to a position() of a source built with the same options: the examples that follow are
  // exactly those that followed when the position was taken. A malformed position, or one this
  // source cannot hold, throws InvalidArgument and leaves the source where it was.
  virtual void seek(std::string_view position) = 0;
};

// For ExampleSource implementations. begin_batch sizes the arrays for `capacity` examples and lays
// categorical out with stride `capacity` (the ids of example i, feature f go to
// categorical[f * capacity + i]) so that examples can be written as they come. finish_batch then
// moves the first `size` (<= capacity) examples to the final layout (stride `size`), shrinks the
// arrays to `size` and sets batch.size. Neither allocates once the arrays have held `capacity`.
// begin_batch validates capacity as next() must (InvalidArgument if < 1, the batch untouched).
void begin_batch(ExampleBatch& batch, int64_t capacity);
void finish_batch(ExampleBatch& batch, int64_t capacity, int64_t size);

}  // namespace recemb::dlrm

#endif  // RECEMB_DLRM_EXAMPLE_BATCH_H_
