#include "embedding/lookup_stage.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "recemb/error.h"

#include "batch/csr_feature.h"
#include "batch/input_layout.h"
#include "batch/lookup.h"
#include "embedding/embedding_impl.h"
#include "kernels/pool.h"
#include "support/collectives.h"
#include "util/work_split.h"

namespace recemb::internal {
namespace {

bool is_replicated(const TablePart& part) { return part.strategy == ShardingStrategy::kReplicated; }

}  // namespace

LookupStage::LookupStage(Model& model, Router& router, Exchange& exchange,
                         support::ThreadPool& pool, std::shared_ptr<PendingLookups> pending_lookups)
    : model_(model),
      router_(router),
      exchange_(exchange),
      pool_(pool),
      pending_lookups_(std::move(pending_lookups)) {}

void LookupStage::normalize_inputs(std::span<const FeatureInput> inputs,
                                   std::span<const std::span<float>> activations,
                                   BatchState& batch) {
  const std::vector<FeatureConfig>& features = model_.features;
  check_feature_count(features.size(), inputs.size(), "lookup inputs");
  check_feature_count(features.size(), activations.size(), "lookup activations");
  std::vector<CsrFeature>& normalized = batch.features;
  table_ids_.assign(model_.tables.size(), 0);
  for (size_t f = 0; f < features.size(); ++f) {
    const size_t t = model_.feature_table[f];
    const TableConfig& table = model_.tables[t];
    // The buffer is checked against the shape the input gives before normalising it sizes
    // anything: ids of shape [2^40, 0] would otherwise allocate 2^40 bags first.
    check_activation_buffer(features[f], activation_shape(features[f], table, inputs[f]),
                            activations[f].size());
    normalize_feature(features[f], table, inputs[f], normalized[f], &pool_);
    table_ids_[t] += normalized[f].ids.size();
    if (table_ids_[t] >= std::numeric_limits<uint32_t>::max()) {
      throw InvalidArgument("table '" + table.name + "': more than 2^32 - 1 ids in one batch");
    }
  }
}

void LookupStage::ahead(std::span<const FeatureInput> inputs,
                        std::span<const std::span<float>> activations, BatchState& batch,
                        bool pool_now) {
  support::agree(exchange_.communicator(), [&] { normalize_inputs(inputs, activations, batch); });
  // Validated.
  router_.route(batch.features, batch.sent);
  exchange_.all_to_all(batch.sent.message, batch.received.message);
  router_.read(batch.sent, batch.received);
  if (pool_now) pool(activations, batch);
}

void LookupStage::resolve_keys(BatchState& batch) {
  if (!model_.has_dynamic_tables) return;
  const int ranks = exchange_.world_size();
  const std::span<const Section> mine = model_.partition.sections(exchange_.rank());
  key_resolver_.begin(model_.states.size());
  batch.key_slots.resize(static_cast<size_t>(ranks));
  // Runs in (rank, section) order: every copy of a part sees the same keys in the same order.
  for (int q = 0; q < ranks; ++q) {
    batch.key_slots[static_cast<size_t>(q)].resize(mine.size());
    for (size_t k = 0; k < mine.size(); ++k) {
      const TableState& state = model_.states[mine[k].part];
      // A pure lookup resolves only what this rank pools; a training lookup every key it is
      // sent, so that all copies of a part admit the same keys.
      if (state.dynamic() == nullptr ||
          (!batch.training && pooled(q, state.part()) == Pooled::kNot)) {
        continue;
      }
      RequestSection& section = batch.received.sections[static_cast<size_t>(q)][k];
      std::vector<int64_t>& slots = batch.key_slots[static_cast<size_t>(q)][k];
      slots.resize(static_cast<size_t>(section.num_ids));
      key_resolver_.add_run(mine[k].part,
                            {.keys = section.ids, .size = section.num_ids, .slots = slots.data()});
      section.ids = slots.data();  // pooled and updated by slot from here on
    }
  }
  key_resolver_.find(model_.states, !batch.training, pool_);
  if (!batch.training) return;
  const int64_t step = model_.step + 1;
  key_resolver_.admit(model_.states, step, pending_lookups_->oldest(), exchange_.communicator(),
                      pool_);
  batch.pending.hold(pending_lookups_, step);
}

void LookupStage::pool(std::span<const std::span<float>> activations, BatchState& batch) {
  resolve_keys(batch);
  pool_requests(activations, batch);
  exchange_.all_to_all(exchange_.responses_sent, exchange_.responses_received);
  combine(activations, batch);
  batch.pooled = true;
}

LookupStage::Pooled LookupStage::pooled(int from, const TablePart& part) const {
  if (from == exchange_.rank() && router_.is_local_view(part)) return Pooled::kIntoActivations;
  return is_replicated(part) && from != exchange_.rank() ? Pooled::kNot : Pooled::kIntoResponses;
}

void LookupStage::pool_requests(std::span<const std::span<float>> activations,
                                const BatchState& batch) {
  const int ranks = exchange_.world_size();
  const std::span<const Section> mine = model_.partition.sections(exchange_.rank());
  response_bytes_.assign(static_cast<size_t>(ranks), 0);
  for (int q = 0; q < ranks; ++q) {
    for (size_t k = 0; k < mine.size(); ++k) {
      const TableState& state = model_.states[mine[k].part];
      if (pooled(q, state.part()) != Pooled::kIntoResponses) continue;
      response_bytes_[static_cast<size_t>(q)] +=
          batch.received.sections[static_cast<size_t>(q)][k].num_bags * state.columns() *
          static_cast<int64_t>(sizeof(float));
    }
  }
  exchange_.responses_sent.resize(response_bytes_);
  // Every section in parallel tasks of about kIdsPerPoolTask ids.
  pool_tasks_.clear();
  auto* response = reinterpret_cast<float*>(exchange_.responses_sent.bytes.data());
  int64_t total_ids = 0;
  for (int q = 0; q < ranks; ++q) {
    for (size_t k = 0; k < mine.size(); ++k) {
      const TableState& state = model_.states[mine[k].part];
      const Pooled where = pooled(q, state.part());
      if (where == Pooled::kNot) continue;
      const RequestSection& section = batch.received.sections[static_cast<size_t>(q)][k];
      const std::optional<QuantizationConfig>& quantization = state.table().quantization_config;
      const PoolInput input = pool_input(section, state.storage().rows(), state.columns(),
                                         quantization ? &*quantization : nullptr);
      float* out =
          where == Pooled::kIntoActivations ? activations[mine[k].feature].data() : response;
      const int64_t bags_each = bags_per_task(section.num_bags, section.num_ids, kIdsPerPoolTask);
      for (int64_t first = 0; first < section.num_bags; first += bags_each) {
        pool_tasks_.push_back({input, first, std::min(section.num_bags, first + bags_each), out});
      }
      total_ids += section.num_ids;
      if (where == Pooled::kIntoResponses) response += section.num_bags * state.columns();
    }
  }
  pool_.parallel_for(static_cast<int64_t>(pool_tasks_.size()),
                     [&](int64_t t, int) {
                       const PoolTask& task = pool_tasks_[static_cast<size_t>(t)];
                       pool_bags(task.input, task.first_bag, task.last_bag, task.out);
                     },
                     {.work = total_ids, .min_work_for_threads = kMinIdsForThreads});
}

void LookupStage::combine(std::span<const std::span<float>> activations, const BatchState& batch) {
  const int ranks = exchange_.world_size();
  // Where each section's pooled rows start in the responses this rank received.
  response_rows_.resize(static_cast<size_t>(ranks));
  for (int q = 0; q < ranks; ++q) {
    const auto* at = reinterpret_cast<const float*>(exchange_.responses_received.bytes.data() +
                                                    exchange_.responses_received.offset(q));
    const std::span<const Section> sections = model_.partition.sections(q);
    response_rows_[static_cast<size_t>(q)].resize(sections.size());
    for (size_t k = 0; k < sections.size(); ++k) {
      const TablePart& held = model_.partition.rank_parts(q)[sections[k].part];
      response_rows_[static_cast<size_t>(q)][k] = at;
      // What rank q pooled of this rank's requests into its responses (pooled()).
      if ((!is_replicated(held) || q == exchange_.rank()) && !router_.is_local_view(held)) {
        at += batch.sent.sections[static_cast<size_t>(q)][k].num_bags * held.num_columns;
      }
    }
  }
  // Feature by feature: parts in shard order, so sums run in a fixed order. The features of a
  // table this rank holds whole have their activations already.
  combined_features_.clear();
  for (size_t f = 0; f < model_.features.size(); ++f) {
    if (router_.local_whole_part(model_.feature_table[f]) == nullptr)
      combined_features_.push_back(f);
  }
  pool_.parallel_for(static_cast<int64_t>(combined_features_.size()), [&](int64_t c, int) {
    const size_t f = combined_features_[static_cast<size_t>(c)];
    std::fill(activations[f].begin(), activations[f].end(), 0.0f);
    const int64_t dim = model_.tables[model_.feature_table[f]].dim;
    for (const TablePart& held : model_.partition.table_parts(model_.feature_table[f])) {
      if (is_replicated(held) && held.rank != exchange_.rank()) continue;
      const size_t k = model_.partition.section_index(held, f);
      const RequestSection& section = batch.sent.sections[static_cast<size_t>(held.rank)][k];
      const float* pooled_rows = response_rows_[static_cast<size_t>(held.rank)][k];
      for (int64_t i = 0; i < section.num_bags; ++i) {
        float* destination = activations[f].data() + section.bag(i) * dim + held.first_column;
        const float* source = pooled_rows + i * held.num_columns;
        if (held.strategy == ShardingStrategy::kRowWise) {
          for (int64_t d = 0; d < dim; ++d) destination[d] += source[d];
        } else {
          std::copy_n(source, held.num_columns, destination);
        }
      }
    }
  });
}

}  // namespace recemb::internal
