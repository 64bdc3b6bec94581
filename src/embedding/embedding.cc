#include "recemb/embedding.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "recemb/error.h"

#include "batch/csr_feature.h"
#include "batch/lookup.h"
#include "config/validate.h"
#include "embedding/agreement.h"
#include "embedding/embedding_impl.h"
#include "format/checksum.h"
#include "format/config_json.h"
#include "kernels/pool.h"
#include "kernels/table_update.h"
#include "optimizers/slot_spec.h"
#include "storage/initializer.h"

namespace recemb {
namespace {

using internal::CsrFeature;
using internal::TablePart;
using internal::TableState;

// Work split: big enough that a task amortises its scheduling, small enough to balance two cores.
constexpr int64_t kIdsPerLookupTask = 2048;
// Waking a worker costs tens of microseconds on a VM (docs/performance.md): batches smaller than
// this run on the calling thread.
constexpr int64_t kMinIdsForThreads = 16384;
constexpr int64_t kRowsPerInitializeTask = 4096;

// Identifies an Embedding for the lifetime of the process (never reused, unlike an address).
uint64_t next_embedding_id() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

std::shared_ptr<Communicator> communicator_of(const EmbeddingOptions& options) {
  return options.communicator ? options.communicator : local_communicator();
}

// Validates the configs and plans the placement, agreeing with the other ranks on the outcome.
Placement agreed_placement(Communicator& communicator, const std::vector<TableConfig>& tables,
                           const std::vector<FeatureConfig>& features,
                           const EmbeddingOptions& options) {
  Placement placement;
  internal::agree(communicator, [&] {
    internal::validate_configs(tables, features, options);
    pipeline_staleness_name(options.pipeline_staleness);  // throws for a non-enumerator
    PlacementOptions placement_options =
        options.placement.value_or(PlacementOptions{.num_shards = communicator.size()});
    placement = plan_placement(tables, features, options.optimizer, placement_options);
  });
  return placement;
}

}  // namespace

LookupBatch::LookupBatch() : impl_(std::make_unique<Impl>()) {}
LookupBatch::~LookupBatch() = default;
LookupBatch::LookupBatch(LookupBatch&&) noexcept = default;
LookupBatch& LookupBatch::operator=(LookupBatch&&) noexcept = default;
bool LookupBatch::applicable() const { return impl_ != nullptr && impl_->applicable; }

size_t RoutedMessage::offset(int rank) const {
  int64_t sum = 0;
  for (int q = 0; q < rank; ++q) sum += counts[static_cast<size_t>(q)];
  return static_cast<size_t>(sum);
}

Embedding::Impl::Impl(std::vector<TableConfig> table_configs,
                      std::vector<FeatureConfig> feature_configs,
                      EmbeddingOptions embedding_options)
    : id(next_embedding_id()),
      tables(std::move(table_configs)),
      features(std::move(feature_configs)),
      options(std::move(embedding_options)),
      communicator(communicator_of(options)),
      rank(communicator->rank()),
      world_size(communicator->size()),
      placement(agreed_placement(*communicator, tables, features, options)),
      partition(placement, tables, features, world_size),
      pool(options.num_threads) {
  check_same_configs_on_every_rank();
  table_features.resize(tables.size());
  for (size_t f = 0; f < features.size(); ++f) {
    const size_t t = table_index(features[f].table);
    feature_table.push_back(t);
    table_features[t].push_back(f);
  }
  int64_t max_dim = 1;
  int64_t scratch_floats = 0;  // per thread
  for (const TableConfig& table : tables) {
    max_dim = std::max(max_dim, table.dim);
    scratch_floats = std::max(scratch_floats, internal::update_scratch_floats(table.dim));
  }
  states.reserve(partition.rank_parts(rank).size());
  for (const TablePart& held : partition.rank_parts(rank)) {
    TableConfig config = tables[held.table];
    config.vocabulary_size = held.rows;
    config.dim = held.num_columns;
    states.emplace_back(std::move(config), tables[held.table].optimizer
                                               ? tables[held.table].optimizer
                                               : options.optimizer);
  }
  zeros.assign(static_cast<size_t>(max_dim), 0.0f);
  thread_scratch.assign(static_cast<size_t>(scratch_floats * pool.num_threads()), 0.0f);
  thread_skipped_rows.assign(static_cast<size_t>(pool.num_threads()), 0);
  scratch_batch.features.resize(features.size());
  initialize_tables();
}

void Embedding::Impl::check_same_configs_on_every_rank() {
  if (world_size == 1) return;
  format::Json json;
  for (const TableConfig& table : tables) json["tables"].push_back(format::table_to_json(table));
  for (const FeatureConfig& feature : features) {
    json["features"].push_back(format::feature_to_json(feature));
  }
  if (options.optimizer) json["optimizer"] = format::optimizer_to_json(*options.optimizer);
  json["seed"] = options.seed;
  json["non_finite_gradients"] = static_cast<int>(options.non_finite_gradients);
  json["placement"] = format_placement(placement);
  const std::string text = json.dump();
  internal::agree_on_value(*communicator, format::checksum(std::as_bytes(std::span(text))),
                           "tables, features, optimizer, seed or placement",
                           "every rank must build the Embedding from the same configs");
}

size_t Embedding::Impl::table_index(std::string_view name) const {
  for (size_t t = 0; t < tables.size(); ++t) {
    if (tables[t].name == name) return t;
  }
  throw InvalidArgument("no table named '" + std::string(name) + "'");
}

const TableState* Embedding::Impl::whole_state(size_t table) const {
  for (size_t s = 0; s < states.size(); ++s) {
    if (part(s).table == table && part(s).whole()) return &states[s];
  }
  return nullptr;
}

void Embedding::Impl::initialize_tables() {
  for (size_t s = 0; s < states.size(); ++s) {
    TableState& state = states[s];
    const TablePart& held = part(s);
    const TableConfig& table = tables[held.table];
    const uint64_t seed = internal::table_seed(options.seed, table.name);
    auto initialize = [&](int64_t first, int64_t last, int) {
      if (held.whole()) {
        state.initialize_block(seed, first, last - first);
        return;
      }
      // A row at a time: the part's rows (row-wise) or columns (column-wise) of the table's rows.
      std::vector<float> row(static_cast<size_t>(table.dim));
      for (int64_t local = first; local < last; ++local) {
        internal::initialize_rows(table.initializer, seed, held.global_row(local), 1, table.dim,
                                  row);
        std::copy_n(row.begin() + held.first_column, held.num_columns, state.storage().row(local));
      }
      state.storage().initialize_slots(first, last - first);
    };
    // A user callback runs on the constructing thread only (it may not be thread-safe, and a
    // Python callable needs the interpreter lock).
    if (std::holds_alternative<InitializerCallback>(table.initializer)) {
      for (int64_t first = 0; first < held.rows; first += kRowsPerInitializeTask) {
        initialize(first, std::min(held.rows, first + kRowsPerInitializeTask), 0);
      }
    } else {
      pool.parallel_for_ranges(held.rows, kRowsPerInitializeTask, initialize);
    }
  }
}

void Embedding::Impl::normalize_inputs(std::span<const FeatureInput> inputs,
                                       std::span<const std::span<float>> activations,
                                       LookupBatch::Impl& batch) {
  internal::check_feature_count(features.size(), inputs.size(), "lookup inputs");
  internal::check_feature_count(features.size(), activations.size(), "lookup activations");
  std::vector<CsrFeature>& normalized = batch.features;
  std::vector<uint64_t>& table_ids = lookup_table_ids;
  table_ids.assign(tables.size(), 0);
  for (size_t f = 0; f < features.size(); ++f) {
    const TableConfig& table = tables[feature_table[f]];
    internal::normalize_feature(features[f], table, inputs[f], normalized[f]);
    internal::check_activation_buffer(features[f], normalized[f].activation_shape,
                                      activations[f].size());
    table_ids[feature_table[f]] += normalized[f].ids.size();
    if (table_ids[feature_table[f]] >= std::numeric_limits<uint32_t>::max()) {
      throw InvalidArgument("table '" + table.name + "': more than 2^32 - 1 ids in one batch");
    }
  }
}

Embedding::Impl::~Impl() { join_prefetch(); }

void Embedding::Impl::join_prefetch() {
  if (prefetch_thread.joinable()) prefetch_thread.join();
}

void Embedding::Impl::lookup_ahead(std::span<const FeatureInput> inputs,
                                   std::span<const std::span<float>> activations,
                                   LookupBatch::Impl& batch, bool pool_now) {
  internal::agree(*communicator, [&] { normalize_inputs(inputs, activations, batch); });
  // Validated.
  if (!partition.trivial()) {
    route_requests(batch);
    exchange_requests(batch);
  }
  if (pool_now) pool_activations(activations, batch);
}

void Embedding::Impl::pool_activations(std::span<const std::span<float>> activations,
                                       LookupBatch::Impl& batch) {
  if (partition.trivial()) {
    pool_direct(activations, batch);
  } else {
    pool_routed(activations, batch);
  }
  batch.pooled = true;
}

void Embedding::Impl::pool_direct(std::span<const std::span<float>> activations,
                                  LookupBatch::Impl& batch) {
  const std::vector<CsrFeature>& normalized = batch.features;
  std::vector<internal::PoolTask>& tasks = pool_tasks;
  tasks.clear();
  int64_t total_ids = 0;
  for (size_t f = 0; f < features.size(); ++f) {
    const int64_t num_bags = normalized[f].num_bags();
    const auto num_ids = static_cast<int64_t>(normalized[f].ids.size());
    total_ids += num_ids;
    const int64_t bags_per_task = internal::bags_per_task(num_bags, num_ids, kIdsPerLookupTask);
    const TableState& state = states[feature_table[f]];
    const internal::PoolInput input =
        internal::pool_input(normalized[f], state.config(), state.storage().parameters());
    for (int64_t first = 0; first < num_bags; first += bags_per_task) {
      tasks.push_back(
          {input, first, std::min(num_bags, first + bags_per_task), activations[f].data()});
    }
  }
  auto pool_task = [&](int64_t k, int) {
    const internal::PoolTask& task = tasks[static_cast<size_t>(k)];
    internal::pool_bags(task.input, task.first_bag, task.last_bag, task.out);
  };
  const auto num_tasks = static_cast<int64_t>(tasks.size());
  if (total_ids < kMinIdsForThreads) {
    for (int64_t k = 0; k < num_tasks; ++k) pool_task(k, 0);
  } else {
    pool.parallel_for(num_tasks, pool_task);
  }
}

std::vector<std::string> Embedding::Impl::variable_names(std::string_view table) const {
  const TableConfig& config = tables[table_index(table)];
  std::vector<std::string> names{"parameters"};
  const std::optional<Optimizer>& optimizer =
      config.optimizer ? config.optimizer : options.optimizer;
  if (optimizer) {
    for (const internal::SlotSpec& spec : internal::slot_specs(*optimizer, config.dim)) {
      names.push_back(spec.name);
    }
  }
  return names;
}

int64_t Embedding::Impl::variable_width(std::string_view table, std::string_view name) const {
  const TableConfig& config = tables[table_index(table)];
  if (name == "parameters") return config.dim;
  const std::optional<Optimizer>& optimizer =
      config.optimizer ? config.optimizer : options.optimizer;
  if (optimizer) {
    for (const internal::SlotSpec& spec : internal::slot_specs(*optimizer, config.dim)) {
      if (spec.name == name) return spec.width;
    }
  }
  std::string valid;
  for (const std::string& known : variable_names(table)) valid += " '" + known + "'";
  throw InvalidArgument("table '" + std::string(table) + "' has no variable '" + std::string(name) +
                        "'; it has:" + valid);
}

void Embedding::Impl::check_variable_size(std::string_view table, std::string_view name,
                                          size_t size) const {
  const auto expected =
      static_cast<size_t>(tables[table_index(table)].vocabulary_size * variable_width(table, name));
  if (size != expected) {
    throw InvalidArgument("table '" + std::string(table) + "' variable '" + std::string(name) +
                          "': expected " + std::to_string(expected) + " floats, got " +
                          std::to_string(size));
  }
}

Embedding::Embedding(std::vector<TableConfig> tables, std::vector<FeatureConfig> features,
                     EmbeddingOptions options)
    : impl_(std::make_unique<Impl>(std::move(tables), std::move(features), std::move(options))) {}
Embedding::~Embedding() = default;
Embedding::Embedding(Embedding&&) noexcept = default;
Embedding& Embedding::operator=(Embedding&&) noexcept = default;

const std::vector<TableConfig>& Embedding::tables() const { return impl_->tables; }
const std::vector<FeatureConfig>& Embedding::features() const { return impl_->features; }
const EmbeddingOptions& Embedding::options() const { return impl_->options; }
const Placement& Embedding::placement() const { return impl_->placement; }
int Embedding::rank() const { return impl_->rank; }
int Embedding::world_size() const { return impl_->world_size; }
int64_t Embedding::step() const { return impl_->step; }
void Embedding::set_step(int64_t step) {
  impl_->join_prefetch();
  if (step < 0) throw InvalidArgument("step must be >= 0, got " + std::to_string(step));
  impl_->step = step;
}

int64_t Embedding::skipped_rows() const { return impl_->skipped_rows; }

std::vector<int64_t> Embedding::activation_shape(size_t feature, const FeatureInput& input) const {
  if (feature >= impl_->features.size()) {
    throw InvalidArgument("feature index " + std::to_string(feature) + " is out of range [0, " +
                          std::to_string(impl_->features.size()) + ")");
  }
  return internal::activation_shape(impl_->features[feature],
                                    impl_->tables[impl_->feature_table[feature]], input);
}

LookupBatch::Impl& Embedding::Impl::reset_batch(std::unique_ptr<LookupBatch::Impl>& batch) const {
  if (batch == nullptr) batch = std::make_unique<LookupBatch::Impl>();
  batch->applicable = false;
  batch->prefetched = false;
  batch->pooled = false;
  batch->prefetch_error = nullptr;
  batch->owner = id;
  batch->features.resize(features.size());
  return *batch;
}

void Embedding::lookup(std::span<const FeatureInput> inputs,
                       std::span<const std::span<float>> activations) {
  impl_->join_prefetch();
  impl_->lookup_ahead(inputs, activations, impl_->scratch_batch, /*pool_now=*/true);
}

void Embedding::lookup(std::span<const FeatureInput> inputs,
                       std::span<const std::span<float>> activations, LookupBatch& batch) {
  impl_->join_prefetch();
  LookupBatch::Impl& kept = impl_->reset_batch(batch.impl_);
  impl_->lookup_ahead(inputs, activations, kept, /*pool_now=*/true);
  kept.applicable = true;
}

void Embedding::prefetch(std::span<const FeatureInput> inputs,
                         std::span<const std::span<float>> activations, LookupBatch& batch) {
  impl_->join_prefetch();
  LookupBatch::Impl& kept = impl_->reset_batch(batch.impl_);
  kept.prefetched = true;
  kept.prefetch_inputs.assign(inputs.begin(), inputs.end());
  kept.prefetch_activations.assign(activations.begin(), activations.end());
  const bool pool_now = impl_->options.pipeline_staleness == PipelineStaleness::kOneStep;
  Impl* impl = impl_.get();  // stays put when the Embedding is moved
  impl->prefetch_thread = std::thread([impl, &kept, pool_now] {
    try {
      impl->lookup_ahead(kept.prefetch_inputs, kept.prefetch_activations, kept, pool_now);
    } catch (...) {
      kept.prefetch_error = std::current_exception();
    }
  });
}

void Embedding::finish_lookup(LookupBatch& batch) {
  impl_->join_prefetch();
  LookupBatch::Impl* kept = batch.impl_.get();
  if (kept == nullptr || kept->owner != impl_->id || !kept->prefetched) {
    throw FailedPrecondition(
        "finish_lookup needs a LookupBatch given to this Embedding's prefetch");
  }
  kept->prefetched = false;
  if (kept->prefetch_error) std::rethrow_exception(std::exchange(kept->prefetch_error, nullptr));
  if (!kept->pooled) impl_->pool_activations(kept->prefetch_activations, *kept);
  kept->applicable = true;
}

void Embedding::agree_on_error(std::exception_ptr error) {
  impl_->join_prefetch();
  recemb::agree_on_error(*impl_->communicator, std::move(error));
}

std::vector<std::string> Embedding::variable_names(std::string_view table) const {
  return impl_->variable_names(table);
}

std::vector<int64_t> Embedding::variable_shape(std::string_view table,
                                               std::string_view variable) const {
  const int64_t width = impl_->variable_width(table, variable);
  const int64_t rows = impl_->tables[impl_->table_index(table)].vocabulary_size;
  if (width == 1 && variable != "parameters") return {rows};
  return {rows, width};
}

void Embedding::read_variable(std::string_view table, std::string_view variable,
                              std::span<float> out) const {
  impl_->join_prefetch();
  internal::agree(*impl_->communicator,
                  [&] { impl_->check_variable_size(table, variable, out.size()); });
  impl_->read_variable(impl_->table_index(table), variable, out);
}

void Embedding::write_variable(std::string_view table, std::string_view variable,
                               std::span<const float> values) {
  impl_->join_prefetch();
  internal::agree(*impl_->communicator, [&] {
    impl_->check_variable_size(table, variable, values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      if (!std::isfinite(values[i])) {
        throw InvalidArgument("table '" + std::string(table) + "' variable '" +
                              std::string(variable) + "': value " + std::to_string(values[i]) +
                              " at index " + std::to_string(i) + " is not finite");
      }
    }
  });
  if (impl_->world_size > 1) {
    internal::agree_on_value(
        *impl_->communicator, format::checksum(std::as_bytes(values)),
        "values for table '" + std::string(table) + "' variable '" + std::string(variable) + "'",
        "write_variable takes the same whole variable on every rank");
  }
  impl_->write_variable(impl_->table_index(table), variable, values);
}

bool Embedding::has_whole_table(std::string_view table) const {
  return impl_->whole_state(impl_->table_index(table)) != nullptr;
}

std::span<float> Embedding::variable_data(std::string_view table, std::string_view variable) {
  impl_->join_prefetch();
  const auto values = std::as_const(*this).variable_data(table, variable);
  return {const_cast<float*>(values.data()), values.size()};
}

std::span<const float> Embedding::variable_data(std::string_view table,
                                                std::string_view variable) const {
  impl_->variable_width(table, variable);  // throws for unknown names
  const TableState* state = impl_->whole_state(impl_->table_index(table));
  if (state == nullptr) {
    throw FailedPrecondition("table '" + std::string(table) +
                             "' is not held whole by this rank (placement: " +
                             std::string(sharding_strategy_name(
                                 impl_->placement.tables[impl_->table_index(table)].strategy)) +
                             "); read it with read_variable");
  }
  return state->storage().variable(variable)->span();
}

}  // namespace recemb
