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
  thread_ = std::thread([this] { read_ahead(); });
}

PrefetchingSource::~PrefetchingSource() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void PrefetchingSource::read_ahead() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || slot_ == Slot::kWanted; });
    if (stopping_) return;
    slot_ = Slot::kReading;
    lock.unlock();
    // ahead_ belongs to this thread while the slot is kReading.
    std::exception_ptr error;
    std::string position;
    try {
      source_.next(ahead_, batch_size_);
      position = source_.position();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    ahead_error_ = error;
    ahead_position_ = std::move(position);
    slot_ = Slot::kReady;
    changed_.notify_all();
  }
}

int64_t PrefetchingSource::next(dlrm::ExampleBatch& batch, int64_t max_examples) {
  if (max_examples != batch_size_) {
    throw InvalidArgument("PrefetchingSource: next() asks for " + std::to_string(max_examples) +
                          " examples, the batch size is " + std::to_string(batch_size_));
  }
  std::unique_lock lock(mutex_);
  if (slot_ == Slot::kIdle) {
    slot_ = Slot::kWanted;
    changed_.notify_all();
  }
  changed_.wait(lock, [this] { return slot_ == Slot::kReady; });
  if (ahead_error_) {
    // The wrapped source failed and stayed where it was: the next call tries again.
    slot_ = Slot::kIdle;
    std::rethrow_exception(std::exchange(ahead_error_, nullptr));
  }
  std::swap(batch, ahead_);  // the caller's previous arrays are reused for the next batch
  position_ = ahead_position_;
  slot_ = batch.size > 0 ? Slot::kWanted : Slot::kIdle;
  changed_.notify_all();
  return batch.size;
}

std::string PrefetchingSource::position() const {
  std::lock_guard lock(mutex_);
  return position_;
}

void PrefetchingSource::seek(std::string_view position) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return slot_ == Slot::kReady || slot_ == Slot::kIdle; });
  source_.seek(position);  // the thread is waiting: the source is ours
  slot_ = Slot::kIdle;
  ahead_error_ = nullptr;
  position_ = source_.position();
}

void PrefetchingSource::pause() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return slot_ == Slot::kReady || slot_ == Slot::kIdle; });
}

}  // namespace recemb::train
