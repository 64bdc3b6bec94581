// The routed path of an Embedding whose tables are split into parts (placement/partition.h):
//
//   lookup:  every rank routes each id to the part holding its row (route_requests) -> one
//            all-to-all of the requests -> each part's owner pools the bags it received (pool_bags
//            over its rows or columns) -> one all-to-all of the pooled rows back -> the requester
//            sums them (row-wise parts, in shard order), places them (column-wise) or copies them.
//   apply:   the requester sends each part's owner the gradient rows of the bags it sent there ->
//            one all-to-all -> the owner lists the contributions in (feature, rank, bag, position)
//            order, which is (feature, example, position) of the global batch, and runs the same
//            grouping and fused update as the direct path.
//
// A replicated table's requests go to every rank's copy: only the requester's own copy pools them,
// all copies apply every rank's gradients, so the copies stay identical.
#include <algorithm>
#include <cstring>
#include <vector>

#include "embedding/embedding_impl.h"
#include "kernels/pool.h"
#include "util/check.h"

namespace recemb {
namespace {

using internal::CsrFeature;
using internal::RequestSection;
using internal::SectionCounts;
using internal::TablePart;
using internal::TableState;

constexpr int64_t kIdsPerPoolTask = 2048;

bool is_replicated(const TablePart& part) { return part.strategy == ShardingStrategy::kReplicated; }

// Counts, for each part of a feature's table, the bags with ids there and those ids.
void count_routes(const CsrFeature& csr, std::span<const TablePart> parts,
                  std::vector<SectionCounts>& counts, std::vector<int64_t>& last_bag) {
  counts.assign(parts.size(), {});
  if (parts[0].strategy != ShardingStrategy::kRowWise) {
    SectionCounts all{.bags = 0, .ids = static_cast<int64_t>(csr.ids.size())};
    for (int64_t b = 0; b < csr.num_bags(); ++b) {
      if (csr.offsets[static_cast<size_t>(b) + 1] > csr.offsets[static_cast<size_t>(b)]) ++all.bags;
    }
    std::fill(counts.begin(), counts.end(), all);
    return;
  }
  const int64_t stride = parts[0].row_stride;
  last_bag.assign(parts.size(), -1);
  for (int64_t b = 0; b < csr.num_bags(); ++b) {
    for (int64_t j = csr.offsets[static_cast<size_t>(b)];
         j < csr.offsets[static_cast<size_t>(b) + 1]; ++j) {
      const auto s = static_cast<size_t>(csr.ids[static_cast<size_t>(j)] % stride);
      ++counts[s].ids;
      if (last_bag[s] != b) {
        last_bag[s] = b;
        ++counts[s].bags;
      }
    }
  }
}

// Writes a feature's routed bags into the sections of its table's parts (targets[i] for part i),
// sized by count_routes.
void write_routes(const CsrFeature& csr, std::span<const TablePart> parts,
                  std::span<RequestSection* const> targets, internal::RoutedScratch& scratch) {
  const bool weighted = !csr.weights.empty();
  if (parts[0].strategy != ShardingStrategy::kRowWise) {
    for (RequestSection* section : targets) {
      int64_t bag = 0;
      for (int64_t b = 0; b < csr.num_bags(); ++b) {
        const int64_t first = csr.offsets[static_cast<size_t>(b)];
        const int64_t last = csr.offsets[static_cast<size_t>(b) + 1];
        if (first == last) continue;
        section->bags[bag] = b;
        section->scales[bag] = csr.bag_scales[static_cast<size_t>(b)];
        section->offsets[bag + 1] = last;
        ++bag;
      }
      std::copy(csr.ids.begin(), csr.ids.end(), section->ids);
      if (weighted) std::copy(csr.weights.begin(), csr.weights.end(), section->weights);
      // Only empty bags are skipped and every id is copied, so the offsets are csr's.
    }
    return;
  }
  const int64_t stride = parts[0].row_stride;
  std::vector<int64_t>& last_bag = scratch.last_bag;
  std::vector<int64_t>& bags_written = scratch.bags_written;
  std::vector<int64_t>& ids_written = scratch.ids_written;
  last_bag.assign(parts.size(), -1);
  bags_written.assign(parts.size(), 0);
  ids_written.assign(parts.size(), 0);
  for (int64_t b = 0; b < csr.num_bags(); ++b) {
    for (int64_t j = csr.offsets[static_cast<size_t>(b)];
         j < csr.offsets[static_cast<size_t>(b) + 1]; ++j) {
      const int64_t id = csr.ids[static_cast<size_t>(j)];
      const auto s = static_cast<size_t>(id % stride);
      RequestSection& section = *targets[s];
      if (last_bag[s] != b) {
        last_bag[s] = b;
        section.bags[bags_written[s]] = b;
        section.scales[bags_written[s]] = csr.bag_scales[static_cast<size_t>(b)];
        ++bags_written[s];
      }
      section.ids[ids_written[s]] = id / stride;
      if (weighted) section.weights[ids_written[s]] = csr.weights[static_cast<size_t>(j)];
      ++ids_written[s];
      section.offsets[bags_written[s]] = ids_written[s];
    }
  }
}

// Sizes `message` for one part per rank of the given byte counts, reusing its memory.
void size_message(RoutedMessage& message, const std::vector<int64_t>& counts) {
  message.counts = counts;
  int64_t total = 0;
  for (const int64_t count : counts) total += count;
  message.bytes.resize(static_cast<size_t>(total));
}

void exchange(Communicator& communicator, const RoutedMessage& send, RoutedMessage& recv) {
  recv.counts.resize(send.counts.size());
  communicator.all_to_all(send.bytes, send.counts, recv.bytes, recv.counts);
}

}  // namespace

void Embedding::Impl::route_requests(LookupBatch::Impl& batch) {
  const auto ranks = static_cast<size_t>(world_size);
  // Per feature, per part of its table: what it sends there.
  std::vector<std::vector<SectionCounts>>& counts = routed.counts;
  counts.resize(features.size());
  for (size_t f = 0; f < features.size(); ++f) {
    count_routes(batch.features[f], partition.table_parts(feature_table[f]), counts[f],
                 routed.last_bag);
  }
  // Lay the sections out, rank by rank, and write their headers.
  std::vector<int64_t>& bytes = routed.bytes;
  bytes.assign(ranks, 0);
  for (int q = 0; q < world_size; ++q) {
    for (const internal::Section& section : partition.sections(q)) {
      const TablePart& held = partition.rank_parts(q)[section.part];
      const SectionCounts& c = counts[section.feature][held.index_in_table];
      bytes[static_cast<size_t>(q)] += static_cast<int64_t>(internal::request_section_bytes(
          c.bags, c.ids, !batch.features[section.feature].weights.empty()));
    }
  }
  size_message(batch.requests_sent, bytes);
  batch.sent.resize(ranks);
  // targets[f][i]: the section feature f fills for part i of its table.
  std::vector<std::vector<RequestSection*>>& targets = routed.targets;
  targets.resize(features.size());
  for (size_t f = 0; f < features.size(); ++f) {
    targets[f].resize(partition.table_parts(feature_table[f]).size());
  }
  std::byte* at = batch.requests_sent.bytes.data();
  for (int q = 0; q < world_size; ++q) {
    std::vector<RequestSection>& sent = batch.sent[static_cast<size_t>(q)];
    const std::span<const internal::Section> sections = partition.sections(q);
    sent.resize(sections.size());
    for (size_t k = 0; k < sections.size(); ++k) {
      const TablePart& held = partition.rank_parts(q)[sections[k].part];
      const size_t f = sections[k].feature;
      const SectionCounts& c = counts[f][held.index_in_table];
      const bool weighted = !batch.features[f].weights.empty();
      sent[k] = internal::start_request_section(at, c.bags, c.ids, weighted);
      at += internal::request_section_bytes(c.bags, c.ids, weighted);
      targets[f][held.index_in_table] = &sent[k];
    }
  }
  for (size_t f = 0; f < features.size(); ++f) {
    write_routes(batch.features[f], partition.table_parts(feature_table[f]), targets[f], routed);
  }
}

void Embedding::Impl::exchange_requests(LookupBatch::Impl& batch) {
  const auto ranks = static_cast<size_t>(world_size);
  exchange(*communicator, batch.requests_sent, batch.requests_received);
  const std::span<const internal::Section> my_sections = partition.sections(rank);
  batch.received.resize(ranks);
  for (int q = 0; q < world_size; ++q) {
    std::byte* at = batch.requests_received.bytes.data() + batch.requests_received.offset(q);
    size_t available = static_cast<size_t>(batch.requests_received.counts[static_cast<size_t>(q)]);
    std::vector<RequestSection>& received = batch.received[static_cast<size_t>(q)];
    received.resize(my_sections.size());
    for (size_t k = 0; k < my_sections.size(); ++k) {
      size_t bytes = 0;
      received[k] = internal::read_request_section(at, available, bytes);
      at += bytes;
      available -= bytes;
    }
    RECEMB_CHECK(available == 0);
  }
}

void Embedding::Impl::pool_routed(std::span<const std::span<float>> activations,
                                  LookupBatch::Impl& batch) {
  const auto ranks = static_cast<size_t>(world_size);
  const std::span<const internal::Section> my_sections = partition.sections(rank);
  // Pool what every rank asked of this rank's parts, into the responses.
  std::vector<int64_t>& response_bytes = routed.bytes;
  response_bytes.assign(ranks, 0);
  auto pooled_floats = [&](int q, size_t k, const RequestSection& section) -> int64_t {
    const TablePart& held = part(my_sections[k].part);
    if (is_replicated(held) && q != rank) return 0;
    return section.num_bags * held.num_columns;
  };
  for (int q = 0; q < world_size; ++q) {
    for (size_t k = 0; k < my_sections.size(); ++k) {
      response_bytes[static_cast<size_t>(q)] +=
          pooled_floats(q, k, batch.received[static_cast<size_t>(q)][k]) *
          static_cast<int64_t>(sizeof(float));
    }
  }
  size_message(responses_sent, response_bytes);
  std::vector<internal::PoolTask>& tasks = pool_tasks;
  tasks.clear();
  auto* out = reinterpret_cast<float*>(responses_sent.bytes.data());
  int64_t total_ids = 0;
  for (int q = 0; q < world_size; ++q) {
    for (size_t k = 0; k < my_sections.size(); ++k) {
      const RequestSection& section = batch.received[static_cast<size_t>(q)][k];
      const int64_t floats = pooled_floats(q, k, section);
      if (floats == 0) continue;
      const TableState& state = states[my_sections[k].part];
      const TableConfig& config = state.config();
      const internal::PoolInput input =
          internal::pool_input(section, state.storage().parameters(), config.dim,
                               config.quantization_config ? &*config.quantization_config : nullptr);
      const int64_t bags_per_task =
          internal::bags_per_task(section.num_bags, section.num_ids, kIdsPerPoolTask);
      for (int64_t first = 0; first < section.num_bags; first += bags_per_task) {
        tasks.push_back({input, first, std::min(section.num_bags, first + bags_per_task), out});
      }
      total_ids += section.num_ids;
      out += floats;
    }
  }
  auto run_task = [&](int64_t t, int) {
    const internal::PoolTask& task = tasks[static_cast<size_t>(t)];
    internal::pool_bags(task.input, task.first_bag, task.last_bag, task.out);
  };
  const auto num_tasks = static_cast<int64_t>(tasks.size());
  if (total_ids < 16384) {
    for (int64_t t = 0; t < num_tasks; ++t) run_task(t, 0);
  } else {
    pool.parallel_for(num_tasks, run_task);
  }
  exchange(*communicator, responses_sent, responses_received);

  // Where each section's pooled rows start in the responses this rank received.
  std::vector<std::vector<const float*>>& pooled = routed.section_rows;
  pooled.resize(ranks);
  for (int q = 0; q < world_size; ++q) {
    const auto* at = reinterpret_cast<const float*>(responses_received.bytes.data() +
                                                    responses_received.offset(q));
    const std::span<const internal::Section> sections = partition.sections(q);
    pooled[static_cast<size_t>(q)].resize(sections.size());
    for (size_t k = 0; k < sections.size(); ++k) {
      const TablePart& held = partition.rank_parts(q)[sections[k].part];
      pooled[static_cast<size_t>(q)][k] = at;
      if (!is_replicated(held) || q == rank) {
        at += batch.sent[static_cast<size_t>(q)][k].num_bags * held.num_columns;
      }
    }
  }
  // Combine, feature by feature: parts in shard order, so sums run in a fixed order.
  pool.parallel_for(static_cast<int64_t>(features.size()), [&](int64_t feature, int) {
    const auto f = static_cast<size_t>(feature);
    std::fill(activations[f].begin(), activations[f].end(), 0.0f);
    const int64_t dim = tables[feature_table[f]].dim;
    for (const TablePart& held : partition.table_parts(feature_table[f])) {
      if (is_replicated(held) && held.rank != rank) continue;
      const size_t k = partition.section_index(held, f);
      const RequestSection& section = batch.sent[static_cast<size_t>(held.rank)][k];
      const float* rows = pooled[static_cast<size_t>(held.rank)][k];
      for (int64_t i = 0; i < section.num_bags; ++i) {
        float* destination = activations[f].data() + section.bags[i] * dim + held.first_column;
        const float* source = rows + i * held.num_columns;
        if (held.strategy == ShardingStrategy::kRowWise) {
          for (int64_t d = 0; d < dim; ++d) destination[d] += source[d];
        } else {
          std::copy_n(source, held.num_columns, destination);
        }
      }
    }
  });
}

void Embedding::Impl::apply_routed(LookupBatch::Impl& batch,
                                   std::span<const std::span<const float>> gradients) {
  const auto ranks = static_cast<size_t>(world_size);
  // The gradient rows (or columns) of every bag sent to each part.
  std::vector<int64_t>& bytes = routed.bytes;
  bytes.assign(ranks, 0);
  for (int q = 0; q < world_size; ++q) {
    const std::span<const internal::Section> sections = partition.sections(q);
    for (size_t k = 0; k < sections.size(); ++k) {
      const TablePart& held = partition.rank_parts(q)[sections[k].part];
      bytes[static_cast<size_t>(q)] += batch.sent[static_cast<size_t>(q)][k].num_bags *
                                       held.num_columns * static_cast<int64_t>(sizeof(float));
    }
  }
  size_message(gradients_sent, bytes);
  auto* out = reinterpret_cast<float*>(gradients_sent.bytes.data());
  for (int q = 0; q < world_size; ++q) {
    const std::span<const internal::Section> sections = partition.sections(q);
    for (size_t k = 0; k < sections.size(); ++k) {
      const TablePart& held = partition.rank_parts(q)[sections[k].part];
      const size_t f = sections[k].feature;
      const int64_t dim = tables[held.table].dim;
      const RequestSection& section = batch.sent[static_cast<size_t>(q)][k];
      for (int64_t i = 0; i < section.num_bags; ++i) {
        const float* source = gradients[f].empty()
                                  ? zeros.data()
                                  : gradients[f].data() + section.bags[i] * dim + held.first_column;
        out = std::copy_n(source, held.num_columns, out);
      }
    }
  }
  exchange(*communicator, gradients_sent, gradients_received);

  // Where each received section's gradient rows start.
  const std::span<const internal::Section> my_sections = partition.sections(rank);
  std::vector<std::vector<const float*>>& received_gradients = routed.section_rows;
  received_gradients.resize(ranks);
  for (int q = 0; q < world_size; ++q) {
    const auto* at = reinterpret_cast<const float*>(gradients_received.bytes.data() +
                                                    gradients_received.offset(q));
    received_gradients[static_cast<size_t>(q)].resize(my_sections.size());
    for (size_t k = 0; k < my_sections.size(); ++k) {
      received_gradients[static_cast<size_t>(q)][k] = at;
      at += batch.received[static_cast<size_t>(q)][k].num_bags *
            part(my_sections[k].part).num_columns;
    }
  }
  // Each part's contributions in (feature, rank, bag, position) order, then its update.
  pool.parallel_for(static_cast<int64_t>(states.size()), [&](int64_t s, int) {
    TableState& state = states[static_cast<size_t>(s)];
    if (!state.optimizer()) return;
    const TablePart& held = part(static_cast<size_t>(s));
    size_t total = 0;
    for (const size_t f : table_features[held.table]) {
      const size_t k = partition.section_index(held, f);
      for (size_t q = 0; q < ranks; ++q) total += static_cast<size_t>(batch.received[q][k].num_ids);
    }
    const TableState::ContributionArrays arrays = state.resize_contributions(total);
    size_t next = 0;
    for (const size_t f : table_features[held.table]) {
      const size_t k = partition.section_index(held, f);
      for (size_t q = 0; q < ranks; ++q) {
        const RequestSection& section = batch.received[q][k];
        const float* gradient = received_gradients[q][k];
        for (int64_t i = 0; i < section.num_bags; ++i) {
          for (int64_t j = section.offsets[i]; j < section.offsets[i + 1]; ++j) {
            arrays.rows[next] = section.ids[j];
            arrays.gains[next] = section.gain(i, j);
            arrays.sources[next] = gradient + i * held.num_columns;
            ++next;
          }
        }
      }
    }
    state.group_contributions();
  });
  state_learning_rates.resize(states.size());
  for (size_t s = 0; s < states.size(); ++s)
    state_learning_rates[s] = learning_rates[part(s).table];
  update_tables(state_learning_rates);
}

namespace {

// Floats per row that part `held` keeps of a variable `width` floats wide (its columns of a
// full-width variable; the whole of a row-wise slot).
int64_t part_width(const TablePart& held, int64_t width, int64_t dim) {
  return width == dim ? held.num_columns : width;
}

}  // namespace

void Embedding::Impl::read_variable(size_t table, std::string_view variable, std::span<float> out) {
  const TableConfig& config = tables[table];
  const int64_t width = variable_width(config.name, variable);
  const TableState* whole = whole_state(table);
  const std::span<const TablePart> parts = partition.table_parts(table);
  const bool everywhere = world_size == 1 || is_replicated(parts[0]);
  if (whole != nullptr && everywhere) {
    const std::span<const float> values = whole->storage().variable(variable)->span();
    std::copy(values.begin(), values.end(), out.begin());
    return;
  }
  // Every part's values: this rank's from its states, the others' from an all-gather of each rank's
  // parts of the table, in order.
  std::vector<const float*> sources(parts.size(), nullptr);
  std::vector<std::byte> gathered;
  if (world_size == 1) {
    for (const TablePart& held : parts) {
      sources[held.index_in_table] =
          states[held.index_on_rank].storage().variable(variable)->data();
    }
  } else {
    std::vector<std::byte> mine;
    for (const TablePart& held : parts) {
      if (held.rank != rank) continue;
      const std::span<const float> values =
          states[held.index_on_rank].storage().variable(variable)->span();
      const auto* bytes = reinterpret_cast<const std::byte*>(values.data());
      mine.insert(mine.end(), bytes, bytes + values.size_bytes());
    }
    std::vector<int64_t> counts(static_cast<size_t>(world_size));
    communicator->all_gather(mine, gathered, counts);
    std::vector<size_t> offsets(static_cast<size_t>(world_size), 0);
    for (int q = 1; q < world_size; ++q) {
      offsets[static_cast<size_t>(q)] = offsets[static_cast<size_t>(q) - 1] +
                                        static_cast<size_t>(counts[static_cast<size_t>(q) - 1]);
    }
    for (const TablePart& held : parts) {
      size_t& offset = offsets[static_cast<size_t>(held.rank)];
      sources[held.index_in_table] = reinterpret_cast<const float*>(gathered.data() + offset);
      offset +=
          static_cast<size_t>(held.rows * part_width(held, width, config.dim)) * sizeof(float);
    }
  }
  for (const TablePart& held : parts) {
    const float* source = sources[held.index_in_table];
    const int64_t columns = part_width(held, width, config.dim);
    const int64_t first = width == config.dim ? held.first_column : 0;
    for (int64_t local = 0; local < held.rows; ++local) {
      std::copy_n(source + local * columns, columns,
                  out.data() + held.global_row(local) * width + first);
    }
  }
}

void Embedding::Impl::write_variable(size_t table, std::string_view variable,
                                     std::span<const float> values) {
  const TableConfig& config = tables[table];
  const int64_t width = variable_width(config.name, variable);
  for (size_t s = 0; s < states.size(); ++s) {
    const TablePart& held = part(s);
    if (held.table != table) continue;
    float* target = states[s].storage().variable(variable)->data();
    const int64_t columns = part_width(held, width, config.dim);
    const int64_t first = width == config.dim ? held.first_column : 0;
    for (int64_t local = 0; local < held.rows; ++local) {
      std::copy_n(values.data() + held.global_row(local) * width + first, columns,
                  target + local * columns);
    }
  }
}

}  // namespace recemb
