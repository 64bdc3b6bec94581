// The batches of the trainer's steps (trainer.h) and their lookups: read one by one, or, with
// train.overlap (one rank), the next batch read and its lookup prefetched
// (PipelineStaleness::kNone) during the dense step of the one before and finished after that
// step's embedding update, so that the results are bitwise the serial loop's (docs/training.md,
// "One training step").
//
// A step with the pipeline:
//   StepBatch& batch = pipeline.next();   // read now, or the batch read ahead
//   pipeline.look_up(batch, slice, more);  // batch.buffers' activations; reads the next ahead
//   ... dense step: batch.buffers' gradients ...
//   pipeline.wait_for_prefetch();          // before Embedding::apply_gradients
//   embedding.apply_gradients(batch.lookup, batch.buffers.gradient_views());
//   pipeline.advance();
#ifndef RECEMB_TRAIN_RUN_STEP_PIPELINE_H_
#define RECEMB_TRAIN_RUN_STEP_PIPELINE_H_

#include <array>
#include <cstdint>
#include <exception>
#include <string>

#include "recemb/embedding.h"

#include "dlrm/batch_buffers.h"
#include "dlrm/example_batch.h"
#include "train/data/prefetching_source.h"
#include "train/report/run_report.h"
#include "train/run/data_parallel.h"
#include "train/run/rank_errors.h"

namespace recemb::train {

// A batch of training data and what flows through the step that trains on it.
struct StepBatch {
  explicit StepBatch(int64_t dim) : buffers(dim) {}
  dlrm::ExampleBatch examples;
  int64_t count = 0;           // examples read (0: the data ended)
  std::string position;        // the data position after it
  dlrm::BatchBuffers buffers;  // its inputs, activations and their gradients (this rank's slice)
  LookupBatch lookup;
};

class StepPipeline {
 public:
  // Batches of `batch_size` examples read from `source`, of rows of `dim` floats looked up in
  // `embedding`; `overlap`: train.overlap (with one rank alone). The time spent reading and
  // looking up is added to `times`' data_seconds and lookup_seconds. `errors` keeps a read's
  // error (several ranks). All must outlive this; `embedding`'s destructor must run before this
  // one's (it waits for a prefetched lookup, which writes into the batches' buffers).
  StepPipeline(int64_t dim, bool overlap, int64_t batch_size, PrefetchingSource& source,
               Embedding& embedding, RankErrors& errors, TrainSummary& times);

  // The batch of the next step: read now (through `errors`), or read ahead during the step
  // before. A read ahead that failed throws its error here, where the serial loop would read
  // (after the step's evaluation and checkpoint).
  StepBatch& next();

  // Looks up `batch` (the one next() returned), this rank's slice `mine` of it, into its buffers'
  // activations, or finishes its prefetched lookup: the rows are read now, after the step before
  // updated them, so the activations are bitwise those of a lookup made here. With overlap and
  // `more` (another step follows), then reads the next batch and prefetches its lookup, which
  // runs during this step's dense step: its read error is kept for next(); a prefetched lookup's
  // validation error is thrown by the next look_up, where the serial loop's lookup throws it.
  void look_up(StepBatch& batch, const Slice& mine, bool more);

  // Waits for the background work of a prefetched lookup (with one rank, overlap's only case, the
  // agreement itself is free): before the embedding update, to time the wait apart, and before a
  // checkpoint, so that the save never runs beside it. A batch prefetched ahead holds no key of a
  // dynamic table yet (finishing its lookup admits them): the state is that after this step.
  void wait_for_prefetch();

  // After the step's embedding update: the batch read ahead (if any) becomes the next one.
  void advance();

  // Buffers that no lookup in flight uses (the batch prefetched ahead's still are), for the
  // lookups of an evaluation between steps.
  dlrm::BatchBuffers& idle_buffers();

 private:
  // Where the batch of the next step stands: not read yet, read ahead (its examples or the error
  // of reading them), or read and its lookup prefetched.
  enum class Ahead { kNone, kRead, kPrefetched };

  // Reads the next batch of the training data into `batch`.
  void read(StepBatch& batch);
  // Reads the batch of the step after this one into the other StepBatch and prefetches its
  // lookup.
  void read_ahead();

  const bool overlap_;
  const int64_t batch_size_;
  PrefetchingSource& source_;
  Embedding& embedding_;
  RankErrors& errors_;
  TrainSummary& times_;
  // Two with overlap: the batch trained on and the next one, prefetched.
  std::array<StepBatch, 2> steps_;
  int current_ = 0;                 // the index in steps_ of the next step's batch
  Ahead ahead_ = Ahead::kNone;      // where the next step's batch stands
  std::exception_ptr ahead_error_;  // the error of reading it ahead
};

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_RUN_STEP_PIPELINE_H_
