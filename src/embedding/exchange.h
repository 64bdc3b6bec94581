// The wire form of the ids one rank sends another for one section (placement/partition.h): the
// bags of one feature that have ids in one part of its table, with those ids as the part's local
// rows. Every array starts at a multiple of 8 bytes from the section's start, and a section's size
// is a multiple of 8, so sections packed one after another from an 8-aligned buffer stay aligned:
//
//   int64 num_bags, num_ids, has_weights (0 or 1)
//   int64 bags[num_bags]         the sender's bag index (CsrFeature bag order), increasing
//   int64 offsets[num_bags + 1]  ids of bag i: ids[offsets[i] .. offsets[i + 1]), offsets[0] = 0
//   int64 ids[num_ids]           local rows of the part
//   float weights[num_ids]       only when has_weights; padded to 8 bytes
//   float scales[num_bags]       the bag's combiner scale (CsrFeature::bag_scales); padded
#ifndef RECEMB_EMBEDDING_EXCHANGE_H_
#define RECEMB_EMBEDDING_EXCHANGE_H_

#include <cstddef>
#include <cstdint>

#include "kernels/pool.h"

namespace recemb::internal {

struct RequestSection {
  int64_t num_bags = 0;
  int64_t num_ids = 0;
  int64_t* bags = nullptr;
  int64_t* offsets = nullptr;
  int64_t* ids = nullptr;
  float* weights = nullptr;  // nullptr: every weight is 1
  float* scales = nullptr;

  // The gradient gain of id j of bag i (as CsrFeature's: weight times the bag's scale).
  float gain(int64_t i, int64_t j) const {
    return weights == nullptr ? scales[i] : weights[j] * scales[i];
  }
};

// The bytes of a section with these counts.
size_t request_section_bytes(int64_t num_bags, int64_t num_ids, bool has_weights);

// Writes the header of a section at `at` (request_section_bytes(...) bytes, 8-aligned) and returns
// its arrays for the caller to fill (offsets[0] is set to 0).
RequestSection start_request_section(std::byte* at, int64_t num_bags, int64_t num_ids,
                                     bool has_weights);

// Reads the section at `at`, of which `available` bytes remain in the message, and sets `bytes` to
// its size. The message comes from a rank of the same program: a malformed one is a bug (abort).
RequestSection read_request_section(std::byte* at, size_t available, size_t& bytes);

// The kernel input that pools a received section over a part's rows (rows_per_bag = its columns).
PoolInput pool_input(const RequestSection& section, const float* rows, int64_t num_columns,
                     const QuantizationConfig* quantization);

}  // namespace recemb::internal

#endif  // RECEMB_EMBEDDING_EXCHANGE_H_
