#include "train/run/step_pipeline.h"

#include <utility>

#include "train/report/run_summary.h"

namespace recemb::train {

StepPipeline::StepPipeline(int64_t dim, bool overlap, int64_t batch_size, PrefetchingSource& source,
                           Embedding& embedding, RankErrors& errors, TrainSummary& times)
    : overlap_(overlap),
      batch_size_(batch_size),
      source_(source),
      embedding_(embedding),
      errors_(errors),
      times_(times),
      steps_{StepBatch(dim), StepBatch(dim)} {}

StepBatch& StepPipeline::next() {
  StepBatch& batch = steps_[current_];
  if (ahead_ == Ahead::kNone) {
    const Clock::time_point t = Clock::now();
    errors_.locally([&] { read(batch); });
    times_.data_seconds += seconds_since(t);  // not the wait for the other ranks after
  } else if (ahead_error_) {
    // The next batch's read failed during the step before: thrown where a serial loop reads.
    std::rethrow_exception(std::exchange(ahead_error_, nullptr));
  }
  return batch;
}

void StepPipeline::look_up(StepBatch& batch, const Slice& mine, bool more) {
  const Clock::time_point t = Clock::now();
  if (ahead_ == Ahead::kPrefetched) {
    // Prefetched during the step before, whose embedding update it waited for: the rows are read
    // now, so the activations are bitwise those of a lookup made here (docs/training.md, "One
    // training step").
    embedding_.finish_lookup(batch.lookup);
  } else {
    batch.buffers.bind(batch.examples, mine.begin, mine.count);
    embedding_.lookup(batch.buffers.inputs(), batch.buffers.activations(), batch.lookup);
  }
  ahead_ = Ahead::kNone;
  times_.lookup_seconds += seconds_since(t);
  if (overlap_ && more) read_ahead();
}

void StepPipeline::wait_for_prefetch() {
  if (ahead_ == Ahead::kPrefetched) embedding_.agree_on_error(nullptr);
}

void StepPipeline::advance() {
  if (ahead_ != Ahead::kNone) current_ = 1 - current_;
}

dlrm::BatchBuffers& StepPipeline::idle_buffers() {
  return steps_[ahead_ == Ahead::kNone ? current_ : 1 - current_].buffers;
}

void StepPipeline::read(StepBatch& batch) {
  batch.count = 0;  // if next() throws
  batch.count = source_.next(batch.examples, batch_size_);
  batch.position = source_.position();
}

void StepPipeline::read_ahead() {
  StepBatch& next = steps_[1 - current_];
  Clock::time_point t = Clock::now();
  try {
    read(next);
  } catch (...) {
    ahead_error_ = std::current_exception();
    next.count = 0;
  }
  times_.data_seconds += seconds_since(t);
  ahead_ = Ahead::kRead;
  if (next.count == 0) return;  // the data end (or the error) is met at the next iteration
  t = Clock::now();
  next.buffers.bind(next.examples, 0, next.count);
  embedding_.prefetch(next.buffers.inputs(), next.buffers.activations(), next.lookup);
  times_.lookup_seconds += seconds_since(t);
  ahead_ = Ahead::kPrefetched;
}

}  // namespace recemb::train
