// The evaluation of the model being trained on its held-out set (trainer.h): the log loss and
// AUC of its predictions, which every rank of a data-parallel run computes alike from the whole
// set although each predicts only its slice.
#ifndef RECEMB_TRAIN_RUN_HELD_OUT_EVALUATION_H_
#define RECEMB_TRAIN_RUN_HELD_OUT_EVALUATION_H_

#include <cstdint>
#include <vector>

#include "recemb/embedding.h"

#include "dlrm/batch_buffers.h"
#include "dlrm/dlrm_dense_model.h"
#include "dlrm/example_batch.h"
#include "train/report/metrics_log.h"
#include "train/run/data_parallel.h"
#include "train/run/rank_errors.h"

namespace recemb::train {

class HeldOutEvaluator {
 public:
  // Predicts with `embedding` and `model` on this rank of `group`, in batches of up to
  // `batch_size` examples; `errors` keeps the errors of the rank-local work. All must outlive
  // this.
  HeldOutEvaluator(Embedding& embedding, dlrm::DlrmDenseModel& model, RankGroup& group,
                   RankErrors& errors, int64_t batch_size);

  // Collective: the AUC and log loss of the model's predictions of `eval_set` at the embedding's
  // step, the same on every rank. Each rank predicts its slice of the set (rank_slice) through
  // `buffers` (which no lookup in flight may use); the predictions are then gathered, so every
  // rank computes the metrics of the whole set. The lookups are collective: every rank makes as
  // many as the largest slice needs (a rank whose slice is shorter looks up empty batches).
  EvalRecord evaluate(const dlrm::ExampleBatch& eval_set, dlrm::BatchBuffers& buffers);

 private:
  Embedding& embedding_;
  dlrm::DlrmDenseModel& model_;
  RankGroup& group_;
  RankErrors& errors_;
  int64_t batch_size_;
  std::vector<float> probabilities_;        // of the whole held-out set
  std::vector<float> local_probabilities_;  // of this rank's slice (several ranks)
};

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_RUN_HELD_OUT_EVALUATION_H_
