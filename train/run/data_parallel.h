// Data-parallel training over the ranks of a recemb::Communicator (`recemb train` under mpirun):
// every rank reads the same global batches and trains on its slice of each (rank_slice); the
// dense gradients are averaged over the global batch (RankGroup::average), so every rank applies
// the same dense update and the dense parameters stay identical on every rank; the Embedding,
// sharded over the same ranks, concatenates the slices back into the global batch (embedding.h).
//
//   RankGroup group(recemb::mpi_communicator());
//   const Slice mine = group.slice(batch.size);        // examples [begin, begin + count)
//   ... lookup, then the dense step on `mine`: local_loss, local gradients ...
//   const double loss = group.average(batch.size, local_loss, model.gradients(), gradients);
//   optimizer.apply(model.parameters(), gradients);     // the same update on every rank
//
// Collectives: every method except rank(), size(), embedding_communicator() and slice() is one
// exchange (an all_gather) that every rank of the group makes, in the same order, from one thread
// at a time per rank. A group of one exchanges nothing and changes no value (no rounding).
// Not safe for concurrent calls (the exchanges reuse the object's buffers).
#ifndef RECEMB_TRAIN_RUN_DATA_PARALLEL_H_
#define RECEMB_TRAIN_RUN_DATA_PARALLEL_H_

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "recemb/communicator.h"

namespace recemb::train {

// Items [begin, begin + count) of a sequence.
struct Slice {
  int64_t begin = 0;
  int64_t count = 0;
};

// Rank `rank`'s share of `count` items split over `num_ranks` ranks:
//   [floor(rank * count / num_ranks), floor((rank + 1) * count / num_ranks))
// Contiguous and in rank order, so the slices of ranks 0, 1, ... concatenated are [0, count), as
// recemb's Embedding concatenates the ranks' local batches into the global batch; sizes differ by
// at most one, and a rank's slice is empty when count < num_ranks (the lower ranks' first).
// Requires count >= 0 and 0 <= rank < num_ranks (InvalidArgument otherwise).
Slice rank_slice(int64_t count, int rank, int num_ranks);

class RankGroup {
 public:
  // The ranks of `communicator`; null: this process alone (a group of one).
  explicit RankGroup(std::shared_ptr<Communicator> communicator);

  int rank() const { return communicator_->rank(); }
  int size() const { return communicator_->size(); }
  // For the collectives of support/collectives.h.
  Communicator& communicator() const { return *communicator_; }
  // What an Embedding of this group gets as EmbeddingOptions::communicator: null for a group of
  // one (an Embedding of this process alone, exactly as without a communicator), else the group's.
  std::shared_ptr<Communicator> embedding_communicator() const;
  // This rank's share of `count` items: rank_slice(count, rank(), size()).
  Slice slice(int64_t count) const { return rank_slice(count, rank(), size()); }

  // agree_on_error (recemb/communicator.h) over this group's ranks: every rank passes the error it
  // met since the last agreement (null: none), and every rank throws the lowest failing rank's.
  void agree(std::exception_ptr error);

  // Every rank's `values` (the same number on every rank), concatenated in rank order: rank q's
  // values.size() entries start at q * values.size().
  std::vector<int64_t> all_gather(std::span<const int64_t> values);

  // Rank 0's `text` on every rank (the other ranks' `text` is ignored).
  std::string broadcast(const std::string& text);

  // Every rank's `values` (any length), concatenated in rank order into `all` (resized; its
  // memory is reused).
  void all_gather(std::span<const float> values, std::vector<float>& all);

  // The mean over a global batch of `count` (>= 1) examples, from every rank's mean over its
  // slice of them (count_q = rank_slice(count, q, size()).count examples on rank q):
  //   mean[i] = float(sum over ranks q, in rank order, of (count_q / count) * local_values_q[i])
  //   returns       sum over ranks q, in rank order, of (count_q / count) * local_loss_q
  // in double arithmetic. A rank with an empty slice contributes nothing (its local values and loss
  // are ignored and not sent). Every rank gets bitwise the same results. Every rank's
  // local_values must have mean.size() floats, mean.size() being the same on every rank;
  // otherwise every rank throws FailedPrecondition naming the lowest rank whose size differs
  // (ranks with an empty slice are not checked), and mean is unchanged. A group of one copies
  // local_values into mean (FailedPrecondition on a size mismatch) and returns local_loss.
  double average(int64_t count, double local_loss, std::span<const float> local_values,
                 std::span<float> mean);

 private:
  std::shared_ptr<Communicator> communicator_;
  // Reused by the exchanges.
  std::vector<std::byte> send_, received_;
  std::vector<int64_t> counts_;
  std::vector<double> sums_;
};

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_RUN_DATA_PARALLEL_H_
