// The lookup half of the step pipeline (embedding_impl.h), for every placement and rank count:
//
//   validate -> route (router.h: each id to the part holding its row) -> one all-to-all of the
//   requests -> each part's owner pools the bags it received (pool_bags over its rows or columns)
//   -> one all-to-all of the pooled rows back -> the requester sums them (row-wise parts, in shard
//   order) or places them (column-wise).
//
// A part this rank holds whole pools its own requests, local views of the features, straight into
// the activations: nothing is copied, exchanged or combined for it. A replicated table's requests
// go to every rank's copy: only the requester's own copy pools them (and all copies apply every
// rank's gradients, so the copies stay identical).
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "recemb/error.h"

#include "batch/csr_feature.h"
#include "batch/input_layout.h"
#include "batch/lookup.h"
#include "embedding/embedding_impl.h"
#include "kernels/pool.h"
#include "support/collectives.h"
#include "util/work_split.h"

namespace recemb {
namespace {

using internal::CsrFeature;
using internal::RequestSection;
using internal::TablePart;
using internal::TableState;

bool is_replicated(const TablePart& part) { return part.strategy == ShardingStrategy::kReplicated; }

}  // namespace

void Embedding::Impl::normalize_inputs(std::span<const FeatureInput> inputs,
                                       std::span<const std::span<float>> activations,
                                       LookupBatch::Impl& batch) {
  const std::vector<FeatureConfig>& features = model.features;
  internal::check_feature_count(features.size(), inputs.size(), "lookup inputs");
  internal::check_feature_count(features.size(), activations.size(), "lookup activations");
  std::vector<CsrFeature>& normalized = batch.features;
  std::vector<uint64_t>& table_ids = scratch.table_ids;
  table_ids.assign(model.tables.size(), 0);
  for (size_t f = 0; f < features.size(); ++f) {
    const size_t t = model.feature_table[f];
    const TableConfig& table = model.tables[t];
    // The buffer is checked against the shape the input gives before normalising it sizes
    // anything: ids of shape [2^40, 0] would otherwise allocate 2^40 bags first.
    internal::check_activation_buffer(features[f],
                                      internal::activation_shape(features[f], table, inputs[f]),
                                      activations[f].size());
    internal::normalize_feature(features[f], table, inputs[f], normalized[f], &execution.pool);
    table_ids[t] += normalized[f].ids.size();
    if (table_ids[t] >= std::numeric_limits<uint32_t>::max()) {
      throw InvalidArgument("table '" + table.name + "': more than 2^32 - 1 ids in one batch");
    }
  }
}

void Embedding::Impl::lookup_ahead(std::span<const FeatureInput> inputs,
                                   std::span<const std::span<float>> activations,
                                   LookupBatch::Impl& batch, bool pool_now) {
  support::agree(exchange.communicator(), [&] { normalize_inputs(inputs, activations, batch); });
  // Validated.
  router.route(batch.features, batch.sent);
  exchange.all_to_all(batch.sent.message, batch.received.message);
  router.read(batch.sent, batch.received);
  if (pool_now) pool_activations(activations, batch);
}

void Embedding::Impl::resolve_keys(LookupBatch::Impl& batch) {
  if (!model.has_dynamic_tables) return;
  const int ranks = world_size();
  const std::span<const internal::Section> mine = model.partition.sections(rank());
  key_resolver.begin(model.states.size());
  batch.key_slots.resize(static_cast<size_t>(ranks));
  // Runs in (rank, section) order: every copy of a part sees the same keys in the same order.
  for (int q = 0; q < ranks; ++q) {
    batch.key_slots[static_cast<size_t>(q)].resize(mine.size());
    for (size_t k = 0; k < mine.size(); ++k) {
      const TableState& state = model.states[mine[k].part];
      // A pure lookup resolves only what this rank pools; a training lookup every key it is
      // sent, so that all copies of a part admit the same keys.
      if (state.dynamic() == nullptr ||
          (!batch.training && pooled(q, state.part()) == Pooled::kNot)) {
        continue;
      }
      RequestSection& section = batch.received.sections[static_cast<size_t>(q)][k];
      std::vector<int64_t>& slots = batch.key_slots[static_cast<size_t>(q)][k];
      slots.resize(static_cast<size_t>(section.num_ids));
      key_resolver.add_run(mine[k].part,
                           {.keys = section.ids, .size = section.num_ids, .slots = slots.data()});
      section.ids = slots.data();  // pooled and updated by slot from here on
    }
  }
  key_resolver.find(model.states, !batch.training, execution.pool);
  if (!batch.training) return;
  const int64_t step = model.step + 1;
  key_resolver.admit(model.states, step, pending_lookups->oldest(), exchange.communicator(),
                     execution.pool);
  batch.pending.hold(pending_lookups, step);
}

void Embedding::Impl::pool_activations(std::span<const std::span<float>> activations,
                                       LookupBatch::Impl& batch) {
  resolve_keys(batch);
  pool_requests(activations, batch);
  exchange.all_to_all(exchange.responses_sent, exchange.responses_received);
  combine(activations, batch);
  batch.pooled = true;
}

Embedding::Impl::Pooled Embedding::Impl::pooled(int from, const TablePart& part) const {
  if (from == rank() && router.is_local_view(part)) return Pooled::kIntoActivations;
  return is_replicated(part) && from != rank() ? Pooled::kNot : Pooled::kIntoResponses;
}

void Embedding::Impl::pool_requests(std::span<const std::span<float>> activations,
                                    const LookupBatch::Impl& batch) {
  const int ranks = world_size();
  const std::span<const internal::Section> mine = model.partition.sections(rank());
  std::vector<int64_t>& response_bytes = scratch.rank_bytes;
  response_bytes.assign(static_cast<size_t>(ranks), 0);
  for (int q = 0; q < ranks; ++q) {
    for (size_t k = 0; k < mine.size(); ++k) {
      const TableState& state = model.states[mine[k].part];
      if (pooled(q, state.part()) != Pooled::kIntoResponses) continue;
      response_bytes[static_cast<size_t>(q)] +=
          batch.received.sections[static_cast<size_t>(q)][k].num_bags * state.columns() *
          static_cast<int64_t>(sizeof(float));
    }
  }
  exchange.responses_sent.resize(response_bytes);
  // Every section in parallel tasks of about kIdsPerPoolTask ids.
  std::vector<internal::PoolTask>& tasks = scratch.pool_tasks;
  tasks.clear();
  auto* response = reinterpret_cast<float*>(exchange.responses_sent.bytes.data());
  int64_t total_ids = 0;
  for (int q = 0; q < ranks; ++q) {
    for (size_t k = 0; k < mine.size(); ++k) {
      const TableState& state = model.states[mine[k].part];
      const Pooled where = pooled(q, state.part());
      if (where == Pooled::kNot) continue;
      const RequestSection& section = batch.received.sections[static_cast<size_t>(q)][k];
      const std::optional<QuantizationConfig>& quantization = state.table().quantization_config;
      const internal::PoolInput input =
          internal::pool_input(section, state.storage().parameters(), state.columns(),
                               quantization ? &*quantization : nullptr);
      float* out =
          where == Pooled::kIntoActivations ? activations[mine[k].feature].data() : response;
      const int64_t bags_per_task =
          internal::bags_per_task(section.num_bags, section.num_ids, internal::kIdsPerPoolTask);
      for (int64_t first = 0; first < section.num_bags; first += bags_per_task) {
        tasks.push_back({input, first, std::min(section.num_bags, first + bags_per_task), out});
      }
      total_ids += section.num_ids;
      if (where == Pooled::kIntoResponses) response += section.num_bags * state.columns();
    }
  }
  execution.pool.parallel_for(
      static_cast<int64_t>(tasks.size()),
      [&](int64_t t, int) {
        const internal::PoolTask& task = tasks[static_cast<size_t>(t)];
        internal::pool_bags(task.input, task.first_bag, task.last_bag, task.out);
      },
      {.work = total_ids, .min_work_for_threads = internal::kMinIdsForThreads});
}

void Embedding::Impl::combine(std::span<const std::span<float>> activations,
                              const LookupBatch::Impl& batch) {
  const int ranks = world_size();
  // Where each section's pooled rows start in the responses this rank received.
  std::vector<std::vector<const float*>>& rows = scratch.section_rows;
  rows.resize(static_cast<size_t>(ranks));
  for (int q = 0; q < ranks; ++q) {
    const auto* at = reinterpret_cast<const float*>(exchange.responses_received.bytes.data() +
                                                    exchange.responses_received.offset(q));
    const std::span<const internal::Section> sections = model.partition.sections(q);
    rows[static_cast<size_t>(q)].resize(sections.size());
    for (size_t k = 0; k < sections.size(); ++k) {
      const TablePart& held = model.partition.rank_parts(q)[sections[k].part];
      rows[static_cast<size_t>(q)][k] = at;
      // What rank q pooled of this rank's requests into its responses (pooled()).
      if ((!is_replicated(held) || q == rank()) && !router.is_local_view(held)) {
        at += batch.sent.sections[static_cast<size_t>(q)][k].num_bags * held.num_columns;
      }
    }
  }
  // Feature by feature: parts in shard order, so sums run in a fixed order. The features of a
  // table this rank holds whole have their activations already.
  std::vector<size_t>& combined = scratch.combined_features;
  combined.clear();
  for (size_t f = 0; f < model.features.size(); ++f) {
    if (router.local_whole_part(model.feature_table[f]) == nullptr) combined.push_back(f);
  }
  execution.pool.parallel_for(static_cast<int64_t>(combined.size()), [&](int64_t c, int) {
    const size_t f = combined[static_cast<size_t>(c)];
    std::fill(activations[f].begin(), activations[f].end(), 0.0f);
    const int64_t dim = model.tables[model.feature_table[f]].dim;
    for (const TablePart& held : model.partition.table_parts(model.feature_table[f])) {
      if (is_replicated(held) && held.rank != rank()) continue;
      const size_t k = model.partition.section_index(held, f);
      const RequestSection& section = batch.sent.sections[static_cast<size_t>(held.rank)][k];
      const float* pooled_rows = rows[static_cast<size_t>(held.rank)][k];
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

}  // namespace recemb
