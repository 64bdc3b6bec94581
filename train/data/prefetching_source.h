// An ExampleSource that reads ahead: a background thread (support/background_thread.h) fills the
// next batch of another source while the caller trains on the current one, so parsing or
// generating examples overlaps the training step. The examples, their order and the positions are
// exactly the wrapped source's. Used from one thread, as any ExampleSource.
#ifndef RECEMB_TRAIN_DATA_PREFETCHING_SOURCE_H_
#define RECEMB_TRAIN_DATA_PREFETCHING_SOURCE_H_

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "dlrm/example_batch.h"
#include "support/background_thread.h"

namespace recemb::train {

class PrefetchingSource final : public dlrm::ExampleSource {
 public:
  // Reads batches of `batch_size` (>= 1, else InvalidArgument) from `source`, one ahead. `source`
  // must outlive this object and must not be used directly while it lives.
  PrefetchingSource(dlrm::ExampleSource& source, int64_t batch_size);
  // Waits for the batch being read.
  ~PrefetchingSource() override = default;
  PrefetchingSource(const PrefetchingSource&) = delete;
  PrefetchingSource& operator=(const PrefetchingSource&) = delete;

  // max_examples must be the batch_size given at construction (InvalidArgument otherwise). An
  // error of the wrapped source's next() (for example too many malformed lines) is thrown here,
  // by the call that would have returned that batch.
  int64_t next(dlrm::ExampleBatch& batch, int64_t max_examples) override;
  // The wrapped source's position after the last batch next() returned.
  std::string position() const override;
  // Seeks the wrapped source (its errors as its own) and drops the batch read ahead.
  void seek(std::string_view position) override;
  // Stops reading ahead, so that the wrapped source may be inspected (its counters, say); next()
  // and seek() start it again.
  void pause();

 private:
  // Starts reading the next batch into ahead_ on the thread.
  void read_next();

  dlrm::ExampleSource& source_;
  const int64_t batch_size_;
  // While reading_, the thread's (until reader_.wait()): the batch read ahead, the source's
  // position after it, or the error of reading it.
  dlrm::ExampleBatch ahead_;
  std::string ahead_position_;
  std::exception_ptr ahead_error_;
  bool reading_ = false;  // a read of the next batch was started and not taken by next()
  std::string position_;  // after the last batch returned
  support::BackgroundThread reader_;  // last: waited for before the members it writes go
};

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_DATA_PREFETCHING_SOURCE_H_
