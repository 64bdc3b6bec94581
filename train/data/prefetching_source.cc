#include "train/data/prefetching_source.h"

#include <utility>

#include "recemb/error.h"

namespace recemb::train {

PrefetchingSource::PrefetchingSource(dlrm::ExampleSource& source, int64_t batch_size)
    : source_(source), batch_size_(batch_size) {
  if (batch_size < 1) {
    throw InvalidArgument("PrefetchingSource: batch_size is " + std::to_string(batch_size) +
                          ", must be >= 1");
  }
  position_ = source_.position();
}

void PrefetchingSource::read_next() {
  reader_.start([this] {
    try {
      source_.next(ahead_, batch_size_);
      ahead_position_ = source_.position();
    } catch (...) {
      ahead_error_ = std::current_exception();
    }
  });
  reading_ = true;
}

int64_t PrefetchingSource::next(dlrm::ExampleBatch& batch, int64_t max_examples) {
  if (max_examples != batch_size_) {
    throw InvalidArgument("PrefetchingSource: next() asks for " + std::to_string(max_examples) +
                          " examples, the batch size is " + std::to_string(batch_size_));
  }
  if (!reading_) read_next();
  reader_.wait();
  reading_ = false;
  if (ahead_error_) {
    // The wrapped source failed and stayed where it was: the next call tries again.
    std::rethrow_exception(std::exchange(ahead_error_, nullptr));
  }
  std::swap(batch, ahead_);  // the caller's previous arrays are reused for the next batch
  position_ = ahead_position_;
  if (batch.size > 0) read_next();
  return batch.size;
}

std::string PrefetchingSource::position() const { return position_; }

void PrefetchingSource::seek(std::string_view position) {
  reader_.wait();
  source_.seek(position);  // the thread is idle: the source is ours
  reading_ = false;
  ahead_error_ = nullptr;
  position_ = source_.position();
}

void PrefetchingSource::pause() { reader_.wait(); }

}  // namespace recemb::train
