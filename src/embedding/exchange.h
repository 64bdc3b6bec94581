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
//
// A section this rank sends itself for a part that holds its table whole is not written at all:
// it is a view of the feature's CsrFeature (local_view), the exchange that moves nothing.
//
// The messages: every all-to-all of a step (ids, pooled rows, gradient rows) goes through
// Exchange, which owns the Communicator and the buffers of the pooled and gradient rows.
#ifndef RECEMB_EMBEDDING_EXCHANGE_H_
#define RECEMB_EMBEDDING_EXCHANGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "recemb/communicator.h"

#include "batch/csr_feature.h"
#include "kernels/pool.h"

namespace recemb::internal {

struct RequestSection {
  int64_t num_bags = 0;
  int64_t num_ids = 0;
  int64_t* bags = nullptr;  // nullptr (a local view): bag i is the sender's bag i
  int64_t* offsets = nullptr;
  int64_t* ids = nullptr;
  float* weights = nullptr;  // nullptr: every weight is 1
  float* scales = nullptr;

  // The gradient gain of id j of bag i (as CsrFeature's: weight times the bag's scale).
  float gain(int64_t i, int64_t j) const {
    return weights == nullptr ? scales[i] : weights[j] * scales[i];
  }
  // The sender's bag index of bag i.
  int64_t bag(int64_t i) const { return bags == nullptr ? i : bags[i]; }
};

// The section of every bag of `csr` (empty ones included) with its ids unchanged, borrowing csr's
// arrays: what a part holding its table whole on this rank receives from this rank. Nothing
// writes through it.
RequestSection local_view(CsrFeature& csr);

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
PoolInput pool_input(const RequestSection& section, TableRows rows, int64_t num_columns,
                     const QuantizationConfig* quantization);

// A message of an all-to-all: the bytes for (or from) each rank, consecutively, and their counts.
struct Message {
  std::vector<std::byte> bytes;
  std::vector<int64_t> counts;  // per rank
  // Sizes the message for these byte counts (one per rank), reusing its memory.
  void resize(const std::vector<int64_t>& rank_bytes);
  // Byte offset of rank q's part: sum of counts[0 .. q).
  size_t offset(int rank) const;
};

// The ranks' all-to-alls of a step, and the buffers of the pooled rows and gradient rows (kept so
// that a step allocates nothing once they have grown; the requests live in each LookupBatch).
class Exchange {
 public:
  explicit Exchange(std::shared_ptr<Communicator> communicator);

  Communicator& communicator() const { return *communicator_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // Collective: sends part q of `send` to rank q and fills `received` with the parts every rank
  // sent this one. One rank that sends itself nothing (every section a local view) makes no call.
  void all_to_all(const Message& send, Message& received);

  Message responses_sent;
  Message responses_received;
  Message gradients_sent;
  Message gradients_received;

 private:
  std::shared_ptr<Communicator> communicator_;
  int rank_;
  int world_size_;
};

}  // namespace recemb::internal

#endif  // RECEMB_EMBEDDING_EXCHANGE_H_
