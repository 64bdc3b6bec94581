#include "embedding/apply_stage.h"

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

namespace recemb::internal {
ApplyStage::ApplyStage(uint64_t embedding_id, Model& model, Router& router, Exchange& exchange,
                       support::ThreadPool& pool, const PendingLookups& pending_lookups)
    : embedding_id_(embedding_id),
      model_(model),
      router_(router),
      exchange_(exchange),
      pool_(pool),
      pending_lookups_(pending_lookups) {
  int64_t max_dim = 1;
  int64_t scratch_floats = 0;  // per thread
  for (const TableConfig& table : model_.tables) {
    max_dim = std::max(max_dim, table.dim);
    scratch_floats = std::max(scratch_floats, update_scratch_floats(table.dim));
  }
  const auto threads = static_cast<size_t>(pool_.num_threads());
  zeros_.assign(static_cast<size_t>(max_dim), 0.0f);
  thread_scratch_.assign(static_cast<size_t>(scratch_floats) * threads, 0.0f);
  thread_skipped_rows_.assign(threads, 0);
}

void ApplyStage::evaluate_learning_rates() {
  const std::vector<TableConfig>& tables = model_.tables;
  learning_rates_.assign(tables.size(), 0.0f);
  // The global optimizer's rate is evaluated once, for every table that has it.
  std::optional<float> global_rate;
  for (size_t t = 0; t < tables.size(); ++t) {
    if (tables[t].optimizer) {
      learning_rates_[t] = learning_rate_of(*tables[t].optimizer, "table '" + tables[t].name + "'");
    } else if (model_.optimizers[t]) {
      if (!global_rate) {
        global_rate = learning_rate_of(*model_.optimizers[t], "the global optimizer");
      }
      learning_rates_[t] = *global_rate;
    }
  }
}

float ApplyStage::learning_rate_of(const Optimizer& optimizer, const std::string& owner) const {
  const LearningRate& rate =
      std::visit([](const auto& o) -> const LearningRate& { return o.learning_rate; }, optimizer);
  try {
    return learning_rate_at(rate, model_.step);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(owner + ": step " + std::to_string(model_.step) + ": " + error.what());
  }
}

void ApplyStage::check_gradients(const std::vector<CsrFeature>& batch,
                                 std::span<const std::span<const float>> gradients) {
  const std::vector<FeatureConfig>& features = model_.features;
  check_feature_count(features.size(), gradients.size(), "apply_gradients gradients");
  const bool reject_non_finite = model_.options.non_finite_gradients == NonFiniteGradients::kReject;
  gradient_check_tasks_.clear();
  int64_t total_values = 0;
  for (size_t f = 0; f < features.size(); ++f) {
    const std::vector<int64_t>& shape = batch[f].activation_shape;
    const int64_t expected = num_values(shape);
    const auto size = static_cast<int64_t>(gradients[f].size());
    if (size != 0 && size != expected) {
      throw InvalidArgument("feature '" + features[f].name + "': gradient has " +
                            std::to_string(size) + " values, expected " + shape_string(shape) +
                            " = " + std::to_string(expected));
    }
    if (!reject_non_finite) continue;
    for (int64_t first = 0; first < size; first += kGradientValuesPerCheckTask) {
      gradient_check_tasks_.push_back(
          {f, first, std::min(size, first + kGradientValuesPerCheckTask), -1});
    }
    total_values += size;
  }
  auto check_task = [&](int64_t k, int) {
    GradientCheckTask& task = gradient_check_tasks_[static_cast<size_t>(k)];
    const std::span<const float> values = gradients[task.feature].subspan(
        static_cast<size_t>(task.first), static_cast<size_t>(task.last - task.first));
    const int64_t i = first_non_finite(values);
    task.first_non_finite = i < 0 ? -1 : task.first + i;
  };
  pool_.parallel_for(static_cast<int64_t>(gradient_check_tasks_.size()), check_task,
                     {.work = total_values, .min_work_for_threads = kMinGradientValuesForThreads});
  // Tasks are in (feature, position) order: the first that found one names the first culprit.
  for (const GradientCheckTask& task : gradient_check_tasks_) {
    if (task.first_non_finite < 0) continue;
    const std::vector<int64_t>& shape = batch[task.feature].activation_shape;
    const int64_t values = num_values(shape);
    const int64_t per_example = shape.empty() || shape[0] == 0 ? 1 : values / shape[0];
    throw InvalidArgument(
        "feature '" + features[task.feature].name + "': example " +
        std::to_string(task.first_non_finite / per_example) + ": gradient value " +
        std::to_string(gradients[task.feature][static_cast<size_t>(task.first_non_finite)]) +
        " is not finite");
  }
  for (size_t t = 0; t < model_.tables.size(); ++t) {
    if (model_.optimizers[t]) continue;
    for (const size_t f : model_.table_features[t]) {
      if (!batch[f].ids.empty()) {
        throw FailedPrecondition("table '" + model_.tables[t].name +
                                 "' has no optimizer (neither its own nor a global one), so "
                                 "apply_gradients cannot update it");
      }
    }
  }
}

void ApplyStage::apply(BatchState& batch, std::span<const std::span<const float>> gradients) {
  support::agree(exchange_.communicator(), [&] {
    if (batch.owner != embedding_id_ || !batch.applicable ||
        batch.features.size() != model_.features.size()) {
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
  std::fill(thread_skipped_rows_.begin(), thread_skipped_rows_.end(), 0);
  update_tables();
  for (const int64_t skipped : thread_skipped_rows_) model_.skipped_rows += skipped;
  ++model_.step;
  batch.pending.release();
  finish_dynamic_step();
}

void ApplyStage::finish_dynamic_step() {
  if (!model_.has_dynamic_tables) return;
  const int64_t pinned_from = pending_lookups_.oldest();
  for (TableState& state : model_.states) {
    if (DynamicPart* dynamic = state.dynamic()) {
      dynamic->reset_zero_row(state.training_storage());
      dynamic->expire(model_.step, pinned_from, state.changes());
    }
  }
}

void ApplyStage::exchange_gradients(const BatchState& batch,
                                    std::span<const std::span<const float>> gradients) {
  const int ranks = exchange_.world_size();
  const Partition& partition = model_.partition;
  // The gradient rows (or columns) of every bag sent to each part; none for a local view.
  gradient_bytes_.assign(static_cast<size_t>(ranks), 0);
  for (int q = 0; q < ranks; ++q) {
    const std::span<const Section> sections = partition.sections(q);
    for (size_t k = 0; k < sections.size(); ++k) {
      const TablePart& held = partition.rank_parts(q)[sections[k].part];
      if (router_.is_local_view(held)) continue;
      gradient_bytes_[static_cast<size_t>(q)] +=
          batch.sent.sections[static_cast<size_t>(q)][k].num_bags * held.num_columns *
          static_cast<int64_t>(sizeof(float));
    }
  }
  exchange_.gradients_sent.resize(gradient_bytes_);
  auto* out = reinterpret_cast<float*>(exchange_.gradients_sent.bytes.data());
  for (int q = 0; q < ranks; ++q) {
    const std::span<const Section> sections = partition.sections(q);
    for (size_t k = 0; k < sections.size(); ++k) {
      const TablePart& held = partition.rank_parts(q)[sections[k].part];
      if (router_.is_local_view(held)) continue;
      const size_t f = sections[k].feature;
      const int64_t dim = model_.tables[held.table].dim;
      const RequestSection& section = batch.sent.sections[static_cast<size_t>(q)][k];
      for (int64_t i = 0; i < section.num_bags; ++i) {
        const float* source = gradients[f].empty()
                                  ? zeros_.data()
                                  : gradients[f].data() + section.bags[i] * dim + held.first_column;
        out = std::copy_n(source, held.num_columns, out);
      }
    }
  }
  exchange_.all_to_all(exchange_.gradients_sent, exchange_.gradients_received);

  // Where each received section's gradient rows start.
  const std::span<const Section> mine = partition.sections(exchange_.rank());
  gradient_rows_.resize(static_cast<size_t>(ranks));
  for (int q = 0; q < ranks; ++q) {
    const auto* at = reinterpret_cast<const float*>(exchange_.gradients_received.bytes.data() +
                                                    exchange_.gradients_received.offset(q));
    gradient_rows_[static_cast<size_t>(q)].resize(mine.size());
    for (size_t k = 0; k < mine.size(); ++k) {
      gradient_rows_[static_cast<size_t>(q)][k] = at;
      if (q == exchange_.rank() && router_.is_local_view(model_.states[mine[k].part].part()))
        continue;
      at += batch.received.sections[static_cast<size_t>(q)][k].num_bags *
            model_.states[mine[k].part].columns();
    }
  }
}

void ApplyStage::list_contributions(const BatchState& batch,
                                    std::span<const std::span<const float>> gradients) {
  const Partition& partition = model_.partition;
  // Each state's segments in (feature, rank) order: the received sections with the gradient rows
  // exchange_gradients located, this rank's local views with the caller's gradients.
  segments_.resize(model_.states.size());
  for (size_t s = 0; s < model_.states.size(); ++s) {
    const TableState& state = model_.states[s];
    std::vector<ContributionSegment>& segments = segments_[s];
    segments.clear();
    if (!state.optimizer()) continue;
    for (const size_t f : model_.table_features[state.part().table]) {
      const size_t k = partition.section_index(state.part(), f);
      for (int q = 0; q < exchange_.world_size(); ++q) {
        const RequestSection& section = batch.received.sections[static_cast<size_t>(q)][k];
        if (q == exchange_.rank() && router_.is_local_view(state.part())) {
          const bool zeros = gradients[f].empty();
          segments.push_back({.section = &section,
                              .gradient = zeros ? zeros_.data() : gradients[f].data(),
                              .gradient_stride = zeros ? 0 : state.columns()});
        } else {
          segments.push_back({.section = &section,
                              .gradient = gradient_rows_[static_cast<size_t>(q)][k],
                              .gradient_stride = state.columns()});
        }
      }
    }
  }
}

void ApplyStage::group_contributions() {
  std::vector<TableState>& states = model_.states;
  auto gather = [&](size_t s, support::ThreadPool* state_pool) {
    if (states[s].optimizer()) states[s].gather_contributions(segments_[s], state_pool);
  };
  // Parts are grouped side by side; fewer parts than threads are grouped one by one, each on all
  // the threads.
  if (states.size() < static_cast<size_t>(pool_.num_threads())) {
    for (size_t s = 0; s < states.size(); ++s) gather(s, &pool_);
  } else {
    pool_.parallel_for(static_cast<int64_t>(states.size()),
                       [&](int64_t s, int) { gather(static_cast<size_t>(s), nullptr); });
  }
}

void ApplyStage::update_tables() {
  table_updates_.clear();
  update_tasks_.clear();
  int64_t total_rows = 0;
  for (TableState& state : model_.states) {
    if (!state.optimizer()) continue;
    const CommonHyperparameters& common = std::visit(
        [](const auto& o) -> const CommonHyperparameters& { return o.common; }, *state.optimizer());
    table_updates_.push_back({.optimizer = &*state.optimizer(),
                              .learning_rate = learning_rates_[state.part().table],
                              .step = model_.step,
                              .variables = state.variables(model_.step),
                              .grouping = &state.grouping(),
                              .contributions = state.contributions(),
                              .mode = {.accumulate = common.use_gradient_accumulation,
                                       .skip_non_finite = model_.options.non_finite_gradients ==
                                                          NonFiniteGradients::kSkipRows}});
    const auto add_tasks = [&](UpdateRows kind, int64_t rows, int64_t chunk) {
      for (int64_t first = 0; first < rows; first += chunk) {
        update_tasks_.push_back(
            {table_updates_.size() - 1, {kind, first, std::min(rows, first + chunk)}});
      }
      total_rows += rows;
    };
    const RowGrouping& grouping = state.grouping();
    if (state.updates_all_rows()) {
      add_tasks(UpdateRows::kAll, state.rows(), kRowsPerDenseUpdateTask);
    } else {
      add_tasks(UpdateRows::kShared, static_cast<int64_t>(grouping.shared_rows().size()),
                kRowsPerUpdateTask);
      add_tasks(UpdateRows::kSingle, static_cast<int64_t>(grouping.single_contributions().size()),
                kRowsPerUpdateTask);
    }
  }
  const size_t stride = thread_scratch_.size() / static_cast<size_t>(pool_.num_threads());
  pool_.parallel_for(static_cast<int64_t>(update_tasks_.size()),
                     [&](int64_t k, int thread) {
                       const UpdateTask& task = update_tasks_[static_cast<size_t>(k)];
                       const TableUpdate& update = table_updates_[task.update];
                       float* thread_scratch =
                           thread_scratch_.data() + stride * static_cast<size_t>(thread);
                       const int64_t dim = update.variables.dim;
                       thread_skipped_rows_[static_cast<size_t>(thread)] +=
                           update_rows(update, task.rows, update_scratch(thread_scratch, dim));
                     },
                     {.work = total_rows, .min_work_for_threads = kMinRowsForThreads});
  // Online publishing: the rows just written, once a publish started tracking them (a byte a
  // row, written in place: no allocation).
  for (TableState& state : model_.states) state.record_update();
}

}  // namespace recemb::internal
