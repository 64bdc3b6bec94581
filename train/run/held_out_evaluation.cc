#include "train/run/held_out_evaluation.h"

#include <algorithm>
#include <span>

#include "train/report/metrics.h"

namespace recemb::train {

HeldOutEvaluator::HeldOutEvaluator(Embedding& embedding, dlrm::DlrmDenseModel& model,
                                   RankGroup& group, RankErrors& errors, int64_t batch_size)
    : embedding_(embedding),
      model_(model),
      group_(group),
      errors_(errors),
      batch_size_(batch_size) {}

EvalRecord HeldOutEvaluator::evaluate(const dlrm::ExampleBatch& eval_set,
                                      dlrm::BatchBuffers& buffers) {
  const Slice mine = group_.slice(eval_set.size);
  const int64_t largest = (eval_set.size + group_.size() - 1) / group_.size();
  const int64_t batches = (largest + batch_size_ - 1) / batch_size_;
  std::vector<float>& mine_predicted = group_.size() == 1 ? probabilities_ : local_probabilities_;
  mine_predicted.resize(static_cast<size_t>(mine.count));
  for (int64_t b = 0; b < batches; ++b) {
    const int64_t begin = std::min(b * batch_size_, mine.count);
    const int64_t count = std::min(batch_size_, mine.count - begin);
    buffers.bind(eval_set, mine.begin + begin, count);
    embedding_.lookup(buffers.inputs(), buffers.activations());
    if (count == 0) continue;
    errors_.locally([&] {
      model_.predict(
          std::span(eval_set.dense)
              .subspan(static_cast<size_t>((mine.begin + begin) * dlrm::kNumDenseFeatures),
                       static_cast<size_t>(count * dlrm::kNumDenseFeatures)),
          buffers.activation_views(),
          std::span(mine_predicted)
              .subspan(static_cast<size_t>(begin), static_cast<size_t>(count)));
    });
  }
  if (group_.size() > 1) {
    errors_.sync();
    group_.all_gather(local_probabilities_, probabilities_);
  }
  return {.step = embedding_.step(),
          .auc = roc_auc(probabilities_, eval_set.labels),
          .log_loss = log_loss(probabilities_, eval_set.labels)};
}

}  // namespace recemb::train
