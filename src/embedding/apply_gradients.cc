// The apply half of the step pipeline (embedding_impl.h), for every placement and rank count:
//
//   validate the gradients and the learning rates -> the requester sends each part's owner the
//   gradient rows of the bags it sent there (one all-to-all) -> the owner lists each part's
//   contributions in (feature, rank, bag, position) order, which is (feature, example, position)
//   of the global batch -> groups them by row -> updates the touched rows of every part in one
//   parallel loop.
//
// The gradient rows of a local view (a part this rank holds whole) are the caller's gradients
// themselves: nothing is packed or exchanged for them.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/error.h"

#include "batch/csr_feature.h"
#include "batch/input_layout.h"
#include "batch/lookup.h"
#include "embedding/embedding_impl.h"
#include "kernels/table_update.h"
#include "support/collectives.h"
#include "util/finite.h"
#include "util/work_split.h"

namespace recemb {
namespace {

using internal::CsrFeature;
using internal::RequestSection;
using internal::TablePart;
using internal::TableState;

}  // namespace

void Embedding::Impl::evaluate_learning_rates() {
  const std::vector<TableConfig>& tables = model.tables;
  std::vector<float>& learning_rates = scratch.learning_rates;
  learning_rates.assign(tables.size(), 0.0f);
  // The global optimizer's rate is evaluated once, for every table that has it.
  std::optional<float> global_rate;
  for (size_t t = 0; t < tables.size(); ++t) {
    if (tables[t].optimizer) {
      learning_rates[t] = learning_rate_of(*tables[t].optimizer, "table '" + tables[t].name + "'");
    } else if (model.optimizers[t]) {
      if (!global_rate) {
        global_rate = learning_rate_of(*model.optimizers[t], "the global optimizer");
      }
      learning_rates[t] = *global_rate;
    }
  }
}

float Embedding::Impl::learning_rate_of(const Optimizer& optimizer,
                                        const std::string& owner) const {
  const LearningRate& rate =
      std::visit([](const auto& o) -> const LearningRate& { return o.learning_rate; }, optimizer);
  try {
    return learning_rate_at(rate, model.step);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(owner + ": step " + std::to_string(model.step) + ": " + error.what());
  }
}

void Embedding::Impl::check_gradients(const std::vector<CsrFeature>& batch,
                                      std::span<const std::span<const float>> gradients) {
  const std::vector<FeatureConfig>& features = model.features;
  internal::check_feature_count(features.size(), gradients.size(), "apply_gradients gradients");
  const bool reject_non_finite = model.options.non_finite_gradients == NonFiniteGradients::kReject;
  std::vector<internal::GradientCheckTask>& gradient_check_tasks = scratch.gradient_check_tasks;
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
    for (int64_t first = 0; first < size; first += internal::kGradientValuesPerCheckTask) {
      gradient_check_tasks.push_back(
          {f, first, std::min(size, first + internal::kGradientValuesPerCheckTask), -1});
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
  execution.pool.parallel_for(
      static_cast<int64_t>(gradient_check_tasks.size()), check_task,
      {.work = total_values, .min_work_for_threads = internal::kMinGradientValuesForThreads});
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
  for (size_t t = 0; t < model.tables.size(); ++t) {
    if (model.optimizers[t]) continue;
    for (const size_t f : model.table_features[t]) {
      if (!batch[f].ids.empty()) {
        throw FailedPrecondition("table '" + model.tables[t].name +
                                 "' has no optimizer (neither its own nor a global one), so "
                                 "apply_gradients cannot update it");
      }
    }
  }
}

void Embedding::Impl::apply_gradients(LookupBatch::Impl& batch,
                                      std::span<const std::span<const float>> gradients) {
  support::agree(exchange.communicator(), [&] {
    if (batch.owner != id || !batch.applicable || batch.features.size() != model.features.size()) {
      throw FailedPrecondition(
          "apply_gradients needs a LookupBatch filled by this Embedding's lookup and not applied "
          "yet (each lookup is applied at most once)");
    }
    check_gradients(batch.features, gradients);
    evaluate_learning_rates();
  });
  // Validated: commit.
  batch.applicable = false;
  exchange_gradients(batch, gradients);
  list_contributions(batch, gradients);
  group_contributions();
  std::fill(scratch.thread_skipped_rows.begin(), scratch.thread_skipped_rows.end(), 0);
  update_tables();
  for (const int64_t skipped : scratch.thread_skipped_rows) model.skipped_rows += skipped;
  ++model.step;
  batch.pending.release();
  finish_dynamic_step();
}

void Embedding::Impl::finish_dynamic_step() {
  if (!model.has_dynamic_tables) return;
  const int64_t pinned_from = pending_lookups->oldest();
  for (TableState& state : model.states) {
    if (internal::DynamicPart* dynamic = state.dynamic()) {
      dynamic->reset_zero_row(state.training_storage());
      dynamic->expire(model.step, pinned_from, state.changes());
    }
  }
}

void Embedding::Impl::exchange_gradients(const LookupBatch::Impl& batch,
                                         std::span<const std::span<const float>> gradients) {
  const int ranks = world_size();
  const internal::Partition& partition = model.partition;
  // The gradient rows (or columns) of every bag sent to each part; none for a local view.
  std::vector<int64_t>& bytes = scratch.rank_bytes;
  bytes.assign(static_cast<size_t>(ranks), 0);
  for (int q = 0; q < ranks; ++q) {
    const std::span<const internal::Section> sections = partition.sections(q);
    for (size_t k = 0; k < sections.size(); ++k) {
      const TablePart& held = partition.rank_parts(q)[sections[k].part];
      if (router.is_local_view(held)) continue;
      bytes[static_cast<size_t>(q)] += batch.sent.sections[static_cast<size_t>(q)][k].num_bags *
                                       held.num_columns * static_cast<int64_t>(sizeof(float));
    }
  }
  exchange.gradients_sent.resize(bytes);
  auto* out = reinterpret_cast<float*>(exchange.gradients_sent.bytes.data());
  for (int q = 0; q < ranks; ++q) {
    const std::span<const internal::Section> sections = partition.sections(q);
    for (size_t k = 0; k < sections.size(); ++k) {
      const TablePart& held = partition.rank_parts(q)[sections[k].part];
      if (router.is_local_view(held)) continue;
      const size_t f = sections[k].feature;
      const int64_t dim = model.tables[held.table].dim;
      const RequestSection& section = batch.sent.sections[static_cast<size_t>(q)][k];
      for (int64_t i = 0; i < section.num_bags; ++i) {
        const float* source = gradients[f].empty()
                                  ? scratch.zeros.data()
                                  : gradients[f].data() + section.bags[i] * dim + held.first_column;
        out = std::copy_n(source, held.num_columns, out);
      }
    }
  }
  exchange.all_to_all(exchange.gradients_sent, exchange.gradients_received);

  // Where each received section's gradient rows start.
  const std::span<const internal::Section> mine = partition.sections(rank());
  std::vector<std::vector<const float*>>& received = scratch.section_rows;
  received.resize(static_cast<size_t>(ranks));
  for (int q = 0; q < ranks; ++q) {
    const auto* at = reinterpret_cast<const float*>(exchange.gradients_received.bytes.data() +
                                                    exchange.gradients_received.offset(q));
    received[static_cast<size_t>(q)].resize(mine.size());
    for (size_t k = 0; k < mine.size(); ++k) {
      received[static_cast<size_t>(q)][k] = at;
      if (q == rank() && router.is_local_view(model.states[mine[k].part].part())) continue;
      at += batch.received.sections[static_cast<size_t>(q)][k].num_bags *
            model.states[mine[k].part].columns();
    }
  }
}

void Embedding::Impl::list_contributions(const LookupBatch::Impl& batch,
                                         std::span<const std::span<const float>> gradients) {
  const internal::Partition& partition = model.partition;
  // Each state's segments in (feature, rank) order: the received sections with the gradient rows
  // exchange_gradients located, this rank's local views with the caller's gradients.
  const std::vector<std::vector<const float*>>& received = scratch.section_rows;
  scratch.segments.resize(model.states.size());
  for (size_t s = 0; s < model.states.size(); ++s) {
    const TableState& state = model.states[s];
    std::vector<internal::ContributionSegment>& segments = scratch.segments[s];
    segments.clear();
    if (!state.optimizer()) continue;
    for (const size_t f : model.table_features[state.part().table]) {
      const size_t k = partition.section_index(state.part(), f);
      for (int q = 0; q < world_size(); ++q) {
        const RequestSection& section = batch.received.sections[static_cast<size_t>(q)][k];
        if (q == rank() && router.is_local_view(state.part())) {
          const bool zeros = gradients[f].empty();
          segments.push_back({.section = &section,
                              .gradient = zeros ? scratch.zeros.data() : gradients[f].data(),
                              .gradient_stride = zeros ? 0 : state.columns()});
        } else {
          segments.push_back({.section = &section,
                              .gradient = received[static_cast<size_t>(q)][k],
                              .gradient_stride = state.columns()});
        }
      }
    }
  }
}

void Embedding::Impl::group_contributions() {
  std::vector<TableState>& states = model.states;
  support::ThreadPool& pool = execution.pool;
  auto gather = [&](size_t s, support::ThreadPool* state_pool) {
    if (states[s].optimizer()) states[s].gather_contributions(scratch.segments[s], state_pool);
  };
  // Parts are grouped side by side; fewer parts than threads are grouped one by one, each on all
  // the threads.
  if (states.size() < static_cast<size_t>(pool.num_threads())) {
    for (size_t s = 0; s < states.size(); ++s) gather(s, &pool);
  } else {
    pool.parallel_for(static_cast<int64_t>(states.size()),
                      [&](int64_t s, int) { gather(static_cast<size_t>(s), nullptr); });
  }
}

void Embedding::Impl::update_tables() {
  std::vector<internal::TableUpdate>& table_updates = scratch.table_updates;
  std::vector<internal::UpdateTask>& update_tasks = scratch.update_tasks;
  table_updates.clear();
  update_tasks.clear();
  int64_t total_rows = 0;
  for (TableState& state : model.states) {
    if (!state.optimizer()) continue;
    const CommonHyperparameters& common = std::visit(
        [](const auto& o) -> const CommonHyperparameters& { return o.common; }, *state.optimizer());
    table_updates.push_back({.optimizer = &*state.optimizer(),
                             .learning_rate = scratch.learning_rates[state.part().table],
                             .step = model.step,
                             .variables = state.variables(),
                             .grouping = &state.grouping(),
                             .contributions = state.contributions(),
                             .mode = {.accumulate = common.use_gradient_accumulation,
                                      .skip_non_finite = model.options.non_finite_gradients ==
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
      add_tasks(internal::UpdateRows::kAll, state.rows(), internal::kRowsPerDenseUpdateTask);
    } else {
      add_tasks(internal::UpdateRows::kShared, static_cast<int64_t>(grouping.shared_rows().size()),
                internal::kRowsPerUpdateTask);
      add_tasks(internal::UpdateRows::kSingle,
                static_cast<int64_t>(grouping.single_contributions().size()),
                internal::kRowsPerUpdateTask);
    }
  }
  const size_t stride =
      scratch.thread_scratch.size() / static_cast<size_t>(execution.pool.num_threads());
  execution.pool.parallel_for(
      static_cast<int64_t>(update_tasks.size()),
      [&](int64_t k, int thread) {
        const internal::UpdateTask& task = update_tasks[static_cast<size_t>(k)];
        const internal::TableUpdate& update = table_updates[task.update];
        float* thread_scratch =
            scratch.thread_scratch.data() + stride * static_cast<size_t>(thread);
        const int64_t dim = update.variables.dim;
        const internal::UpdateScratch view{
            thread_scratch, thread_scratch + internal::update_scratch_floats(dim) - dim};
        scratch.thread_skipped_rows[static_cast<size_t>(thread)] +=
            internal::update_rows(update, task.rows, view);
      },
      {.work = total_rows, .min_work_for_threads = internal::kMinRowsForThreads});
  // Online publishing: the rows just written, once a publish started tracking them (a byte a
  // row, written in place: no allocation).
  for (TableState& state : model.states) state.record_update();
}

void Embedding::apply_gradients(LookupBatch& batch,
                                std::span<const std::span<const float>> gradients) {
  impl_->execution.join_prefetch();
  if (batch.impl_ == nullptr) batch.impl_ = std::make_unique<LookupBatch::Impl>();
  impl_->apply_gradients(*batch.impl_, gradients);
}

}  // namespace recemb
