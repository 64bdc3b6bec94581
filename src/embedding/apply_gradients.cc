// The backward step of the direct path (every table whole on this process): validate the
// gradients and the learning rates, then group each table's contributions by row and update the
// touched rows of every table in one parallel loop. The routed path (sharded_step.cc) shares the
// validation and the update.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/error.h"

#include "batch/csr_feature.h"
#include "batch/lookup.h"
#include "embedding/agreement.h"
#include "embedding/embedding_impl.h"
#include "kernels/table_update.h"
#include "util/finite.h"

namespace recemb {
namespace {

using internal::CsrFeature;
using internal::TableState;

// Waking a worker costs tens of microseconds on a VM (docs/performance.md): steps with fewer
// touched rows, or fewer gradient values, run on the calling thread.
constexpr int64_t kMinRowsForThreads = 1024;
constexpr int64_t kMinGradientValuesForThreads = int64_t{1} << 18;  // 1 MiB
// Work split: big enough that a task amortises its scheduling, small enough to balance two cores.
constexpr int64_t kRowsPerUpdateTask = 256;
constexpr int64_t kRowsPerDenseUpdateTask = 4096;
constexpr int64_t kGradientValuesPerCheckTask = int64_t{1} << 16;  // 256 KiB

}  // namespace

void Embedding::Impl::evaluate_learning_rates() {
  learning_rates.assign(tables.size(), 0.0f);
  std::optional<float> global_rate;
  for (size_t t = 0; t < tables.size(); ++t) {
    if (tables[t].optimizer) {
      learning_rates[t] = learning_rate_of(*tables[t].optimizer, "table '" + tables[t].name + "'");
    } else if (options.optimizer) {
      if (!global_rate) global_rate = learning_rate_of(*options.optimizer, "the global optimizer");
      learning_rates[t] = *global_rate;
    }
  }
}

float Embedding::Impl::learning_rate_of(const Optimizer& optimizer,
                                        const std::string& owner) const {
  const LearningRate& rate =
      std::visit([](const auto& o) -> const LearningRate& { return o.learning_rate; }, optimizer);
  try {
    return learning_rate_at(rate, step);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(owner + ": step " + std::to_string(step) + ": " + error.what());
  }
}

void Embedding::Impl::check_gradients(const std::vector<CsrFeature>& batch,
                                      std::span<const std::span<const float>> gradients) {
  internal::check_feature_count(features.size(), gradients.size(), "apply_gradients gradients");
  const bool reject_non_finite = options.non_finite_gradients == NonFiniteGradients::kReject;
  gradient_check_tasks.clear();
  int64_t total_values = 0;
  for (size_t f = 0; f < features.size(); ++f) {
    const std::vector<int64_t>& shape = batch[f].activation_shape;
    const int64_t expected = internal::num_values(shape);
    const auto size = static_cast<int64_t>(gradients[f].size());
    if (size != 0 && size != expected) {
      throw InvalidArgument("feature '" + features[f].name + "': gradient has " +
                            std::to_string(size) + " values, expected " +
                            internal::shape_string(shape) + " = " + std::to_string(expected));
    }
    if (!reject_non_finite) continue;
    for (int64_t first = 0; first < size; first += kGradientValuesPerCheckTask) {
      gradient_check_tasks.push_back(
          {f, first, std::min(size, first + kGradientValuesPerCheckTask), -1});
    }
    total_values += size;
  }
  auto check_task = [&](int64_t k, int) {
    internal::GradientCheckTask& task = gradient_check_tasks[static_cast<size_t>(k)];
    const std::span<const float> values = gradients[task.feature].subspan(
        static_cast<size_t>(task.first), static_cast<size_t>(task.last - task.first));
    const int64_t i = internal::first_non_finite(values);
    task.first_non_finite = i < 0 ? -1 : task.first + i;
  };
  const auto num_tasks = static_cast<int64_t>(gradient_check_tasks.size());
  if (total_values < kMinGradientValuesForThreads) {
    for (int64_t k = 0; k < num_tasks; ++k) check_task(k, 0);
  } else {
    pool.parallel_for(num_tasks, check_task);
  }
  // Tasks are in (feature, position) order: the first that found one names the first culprit.
  for (const internal::GradientCheckTask& task : gradient_check_tasks) {
    if (task.first_non_finite < 0) continue;
    const std::vector<int64_t>& shape = batch[task.feature].activation_shape;
    const int64_t values = internal::num_values(shape);
    const int64_t per_example = shape.empty() || shape[0] == 0 ? 1 : values / shape[0];
    throw InvalidArgument(
        "feature '" + features[task.feature].name + "': example " +
        std::to_string(task.first_non_finite / per_example) + ": gradient value " +
        std::to_string(gradients[task.feature][static_cast<size_t>(task.first_non_finite)]) +
        " is not finite");
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    if (tables[t].optimizer || options.optimizer) continue;
    for (const size_t f : table_features[t]) {
      if (!batch[f].ids.empty()) {
        throw FailedPrecondition("table '" + tables[t].name +
                                 "' has no optimizer (neither its own nor a global one), so "
                                 "apply_gradients cannot update it");
      }
    }
  }
}

void Embedding::Impl::apply_gradients(LookupBatch::Impl& batch,
                                      std::span<const std::span<const float>> gradients) {
  internal::agree(*communicator, [&] {
    if (batch.owner != id || !batch.applicable || batch.features.size() != features.size()) {
      throw FailedPrecondition(
          "apply_gradients needs a LookupBatch filled by this Embedding's lookup and not applied "
          "yet (each lookup is applied at most once)");
    }
    check_gradients(batch.features, gradients);
    evaluate_learning_rates();
  });
  // Validated: commit.
  batch.applicable = false;
  std::fill(thread_skipped_rows.begin(), thread_skipped_rows.end(), 0);
  if (partition.trivial()) {
    // Tables are grouped side by side; fewer tables than threads are grouped one by one, each on
    // all the threads.
    auto gather = [&](size_t table, internal::ThreadPool* table_pool) {
      if (states[table].optimizer()) {
        states[table].gather_contributions(table_features[table], batch.features, gradients,
                                           zeros.data(), table_pool);
      }
    };
    if (states.size() < static_cast<size_t>(pool.num_threads())) {
      for (size_t t = 0; t < states.size(); ++t) gather(t, &pool);
    } else {
      pool.parallel_for(static_cast<int64_t>(states.size()),
                        [&](int64_t t, int) { gather(static_cast<size_t>(t), nullptr); });
    }
    update_tables(learning_rates);  // states[t] holds tables[t]
  } else {
    apply_routed(batch, gradients);
  }
  for (const int64_t skipped : thread_skipped_rows) skipped_rows += skipped;
  ++step;
}

void Embedding::Impl::update_tables(std::span<const float> state_rates) {
  table_updates.clear();
  update_tasks.clear();
  int64_t total_rows = 0;
  for (size_t s = 0; s < states.size(); ++s) {
    TableState& state = states[s];
    if (!state.optimizer()) continue;
    const CommonHyperparameters& common = std::visit(
        [](const auto& o) -> const CommonHyperparameters& { return o.common; }, *state.optimizer());
    table_updates.push_back({.optimizer = &*state.optimizer(),
                             .learning_rate = state_rates[s],
                             .step = step,
                             .variables = state.variables(),
                             .grouping = &state.grouping(),
                             .contributions = state.contributions(),
                             .mode = {.accumulate = common.use_gradient_accumulation,
                                      .skip_non_finite = options.non_finite_gradients ==
                                                         NonFiniteGradients::kSkipRows}});
    const auto add_tasks = [&](internal::UpdateRows kind, int64_t rows, int64_t chunk) {
      for (int64_t first = 0; first < rows; first += chunk) {
        update_tasks.push_back(
            {table_updates.size() - 1, {kind, first, std::min(rows, first + chunk)}});
      }
      total_rows += rows;
    };
    const internal::RowGrouping& grouping = state.grouping();
    if (state.updates_all_rows()) {
      add_tasks(internal::UpdateRows::kAll, state.config().vocabulary_size,
                kRowsPerDenseUpdateTask);
    } else {
      add_tasks(internal::UpdateRows::kShared, static_cast<int64_t>(grouping.shared_rows().size()),
                kRowsPerUpdateTask);
      add_tasks(internal::UpdateRows::kSingle,
                static_cast<int64_t>(grouping.single_contributions().size()), kRowsPerUpdateTask);
    }
  }
  const size_t stride = thread_scratch.size() / static_cast<size_t>(pool.num_threads());
  auto run_task = [&](int64_t k, int thread) {
    const internal::UpdateTask& task = update_tasks[static_cast<size_t>(k)];
    const internal::TableUpdate& update = table_updates[task.update];
    float* scratch = thread_scratch.data() + stride * static_cast<size_t>(thread);
    const int64_t dim = update.variables.dim;
    const internal::UpdateScratch view{scratch,
                                       scratch + internal::update_scratch_floats(dim) - dim};
    thread_skipped_rows[static_cast<size_t>(thread)] +=
        internal::update_rows(update, task.rows, view);
  };
  const auto num_tasks = static_cast<int64_t>(update_tasks.size());
  if (total_rows < kMinRowsForThreads) {  // waking the pool would cost more than the work
    for (int64_t k = 0; k < num_tasks; ++k) run_task(k, 0);
  } else {
    pool.parallel_for(num_tasks, run_task);
  }
}

void Embedding::apply_gradients(LookupBatch& batch,
                                std::span<const std::span<const float>> gradients) {
  impl_->join_prefetch();
  if (batch.impl_ == nullptr) batch.impl_ = std::make_unique<LookupBatch::Impl>();
  impl_->apply_gradients(*batch.impl_, gradients);
}

}  // namespace recemb
