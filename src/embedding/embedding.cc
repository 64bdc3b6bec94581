#include "recemb/embedding.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "recemb/error.h"

#include "batch/input_layout.h"
#include "config/validate.h"
#include "embedding/embedding_impl.h"
#include "format/checksum.h"
#include "format/config_json.h"
#include "kernels/half_precision.h"
#include "kernels/table_update.h"
#include "optimizers/slot_spec.h"
#include "placement/planner.h"
#include "storage/initializer.h"
#include "support/collectives.h"
#include "util/work_split.h"

namespace recemb {
namespace {

using internal::TablePart;
using internal::TableState;

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
  support::agree(communicator, [&] {
    internal::validate_configs(tables, features, options);
    pipeline_staleness_name(options.pipeline_staleness);  // throws for a non-enumerator
    PlacementOptions placement_options =
        options.placement.value_or(PlacementOptions{.num_shards = communicator.size()});
    placement =
        internal::plan_valid_placement(tables, features, options.optimizer, placement_options);
  });
  return placement;
}

// Checks that every rank passed the same configs, seed and placement.
void check_same_configs_on_every_rank(Communicator& communicator, const internal::Model& model) {
  if (communicator.size() == 1) return;
  support::Json json;
  for (const TableConfig& table : model.tables) {
    json["tables"].push_back(format::table_to_json(table));
  }
  for (const FeatureConfig& feature : model.features) {
    json["features"].push_back(format::feature_to_json(feature));
  }
  const EmbeddingOptions& options = model.options;
  if (options.optimizer) json["optimizer"] = format::optimizer_to_json(*options.optimizer);
  json["seed"] = options.seed;
  json["non_finite_gradients"] = static_cast<int>(options.non_finite_gradients);
  json["placement"] = format_placement(model.placement);
  const std::string text = json.dump();
  support::agree_on_value(communicator, format::checksum(std::as_bytes(std::span(text))),
                          "tables, features, optimizer, seed or placement",
                          "every rank must build the Embedding from the same configs");
}

// Floats per row that part `held` keeps of a variable `width` floats wide (its columns of a
// full-width variable; the whole of a row-wise slot).
int64_t part_width(const TablePart& held, int64_t width, int64_t dim) {
  return width == dim ? held.num_columns : width;
}

}  // namespace

LookupBatch::LookupBatch() : impl_(std::make_unique<Impl>()) {}
LookupBatch::~LookupBatch() = default;
LookupBatch::LookupBatch(LookupBatch&&) noexcept = default;
LookupBatch& LookupBatch::operator=(LookupBatch&&) noexcept = default;
bool LookupBatch::applicable() const { return impl_ != nullptr && impl_->applicable; }

namespace internal {

Model::Model(std::vector<TableConfig> table_configs, std::vector<FeatureConfig> feature_configs,
             EmbeddingOptions embedding_options, Communicator& communicator)
    : tables(std::move(table_configs)),
      features(std::move(feature_configs)),
      options(std::move(embedding_options)),
      placement(agreed_placement(communicator, tables, features, options)),
      partition(placement, tables, features, communicator.size()),
      table_features(tables.size()) {
  check_same_configs_on_every_rank(communicator, *this);
  for (const TableConfig& table : tables) {
    optimizers.push_back(effective_optimizer(table, options.optimizer));
  }
  for (size_t f = 0; f < features.size(); ++f) {
    const size_t t = table_index(features[f].table);
    feature_table.push_back(t);
    table_features[t].push_back(f);
  }
  const std::span<const TablePart> held = partition.rank_parts(communicator.rank());
  states.reserve(held.size());
  for (const TablePart& part : held) {
    states.emplace_back(tables[part.table], part, optimizers[part.table],
                        table_seed(options.seed, tables[part.table].name));
  }
  // The same on every rank, whether it holds a dynamic part or not: the training lookup's
  // agreement on admissions is collective.
  has_dynamic_tables = std::any_of(tables.begin(), tables.end(), [](const TableConfig& table) {
    return table.dynamic_vocabulary.has_value();
  });
}

size_t Model::table_index(std::string_view name) const {
  for (size_t t = 0; t < tables.size(); ++t) {
    if (tables[t].name == name) return t;
  }
  throw InvalidArgument("no table named '" + std::string(name) + "'");
}

namespace {

// The state of `model` (const or not) holding table t whole, or nullptr.
template <class ModelType>
auto whole_state_of(ModelType& model, size_t table) -> decltype(&model.states[0]) {
  for (auto& state : model.states) {
    if (state.part().table == table && state.part().whole) return &state;
  }
  return nullptr;
}

}  // namespace

const TableState* Model::whole_state(size_t table) const { return whole_state_of(*this, table); }

TableState* Model::whole_state(size_t table) { return whole_state_of(*this, table); }

std::vector<std::string> Model::variable_names(std::string_view table) const {
  const size_t t = table_index(table);
  std::vector<std::string> names{"parameters"};
  if (optimizers[t]) {
    for (const SlotSpec& spec : slot_specs(*optimizers[t], tables[t].dim)) {
      names.push_back(spec.name);
    }
  }
  return names;
}

size_t Model::static_table_index(std::string_view table, std::string_view call) const {
  const size_t t = table_index(table);
  if (tables[t].dynamic_vocabulary) {
    throw FailedPrecondition("table '" + std::string(table) +
                             "' is dynamic (rows keyed by any int64): " + std::string(call) +
                             " takes a static table; use read_dynamic_table / write_dynamic_table");
  }
  return t;
}

int64_t Model::variable_width(std::string_view table, std::string_view name) const {
  const size_t t = table_index(table);
  if (name == "parameters") return tables[t].dim;
  if (optimizers[t]) {
    for (const SlotSpec& spec : slot_specs(*optimizers[t], tables[t].dim)) {
      if (spec.name == name) return spec.width;
    }
  }
  std::string valid;
  for (const std::string& known : variable_names(table)) valid += " '" + known + "'";
  throw InvalidArgument("table '" + std::string(table) + "' has no variable '" + std::string(name) +
                        "'; it has:" + valid);
}

void Model::check_variable_size(std::string_view table, std::string_view name, size_t size) const {
  const auto expected =
      static_cast<size_t>(tables[static_table_index(table, "a whole variable")].vocabulary_size *
                          variable_width(table, name));
  if (size != expected) {
    throw InvalidArgument("table '" + std::string(table) + "' variable '" + std::string(name) +
                          "': expected " + std::to_string(expected) + " floats, got " +
                          std::to_string(size));
  }
}

void Model::check_variable_values(std::string_view table, std::string_view name,
                                  std::span<const float> values, std::string_view what,
                                  const std::function<std::string(int64_t)>& row_name) const {
  const int64_t width = variable_width(table, name);
  SlotRange range = SlotRange::kFinite;
  const size_t t = table_index(table);
  if (name != "parameters") {
    for (const SlotSpec& spec : slot_specs(*optimizers[t], tables[t].dim)) {
      if (spec.name == name) range = spec.range;
    }
  }
  // A float16 table's parameters must fit float16 (rounded, they would be infinite).
  const bool float16 = name == "parameters" && tables[t].dtype == DType::kFloat16;
  for (size_t i = 0; i < values.size(); ++i) {
    if (float16 && std::isfinite(values[i]) && !internal::fits_float16(values[i])) {
      throw InvalidArgument(std::string(what) + ": value " + std::to_string(values[i]) +
                            " at index " + std::to_string(i) + " (" +
                            row_name(static_cast<int64_t>(i) / width) +
                            ") is beyond float16's range (|x| < 65520), the table's dtype");
    }
    if (in_range(range, values[i])) continue;
    std::string message = std::string(what) + ": value " + std::to_string(values[i]) +
                          " at index " + std::to_string(i) + " (" +
                          row_name(static_cast<int64_t>(i) / width) + ")";
    if (!std::isfinite(values[i])) throw InvalidArgument(message + " is not finite");
    throw InvalidArgument(message + " is out of range: '" + std::string(name) + "' must be " +
                          std::string(range_text(range)) + " (a sum of squares whose root the " +
                          "optimizer's update takes)");
  }
}

}  // namespace internal

Embedding::Impl::Impl(std::vector<TableConfig> table_configs,
                      std::vector<FeatureConfig> feature_configs,
                      EmbeddingOptions embedding_options)
    : id(next_embedding_id()),
      exchange(communicator_of(embedding_options)),
      model(std::move(table_configs), std::move(feature_configs), std::move(embedding_options),
            exchange.communicator()),
      router(model.partition, model.feature_table, exchange.rank()),
      execution(model.options),
      lookup_stage(model, router, exchange, execution.pool, pending_lookups),
      apply_stage(id, model, router, exchange, execution.pool, *pending_lookups) {
  scratch_batch.features.resize(model.features.size());
  initialize_tables();
}

Embedding::Impl::~Impl() { execution.prefetcher.wait(); }

void Embedding::Impl::initialize_tables() {
  for (TableState& state : model.states) {
    if (state.dynamic() != nullptr) continue;  // rows are initialised as keys arrive
    const TableConfig& table = state.table();
    const uint64_t seed = internal::table_seed(model.options.seed, table.name);
    auto initialize = [&](int64_t first, int64_t last, int) {
      state.initialize(seed, first, last - first);
    };
    // A user callback runs on the constructing thread only (it may not be thread-safe, and a
    // Python callable needs the interpreter lock).
    if (std::holds_alternative<InitializerCallback>(table.initializer)) {
      for (int64_t first = 0; first < state.rows(); first += internal::kRowsPerInitializeTask) {
        initialize(first, std::min(state.rows(), first + internal::kRowsPerInitializeTask), 0);
      }
    } else {
      execution.pool.parallel_for_ranges(state.rows(), internal::kRowsPerInitializeTask,
                                         initialize);
    }
  }
}

LookupBatch::Impl& Embedding::Impl::reset_batch(std::unique_ptr<LookupBatch::Impl>& batch) const {
  if (batch == nullptr) batch = std::make_unique<LookupBatch::Impl>();
  batch->applicable = false;
  batch->training = true;
  batch->pending.release();
  batch->prefetched = false;
  batch->pooled = false;
  batch->prefetch_error = nullptr;
  batch->owner = id;
  batch->features.resize(model.features.size());
  return *batch;
}

void Embedding::Impl::read_variable(size_t table, std::string_view variable, std::span<float> out) {
  const TableConfig& config = model.tables[table];
  const int64_t width = model.variable_width(config.name, variable);
  const std::span<const TablePart> parts = model.partition.table_parts(table);
  // The parts copied out: every part of the table, or this rank's copy of a replicated one. Their
  // values come from this rank's states when it holds them all (one rank, or a replicated table),
  // else from an all-gather of each rank's parts of the table, in rank order: the same choice on
  // every rank, as the all-gather is collective.
  const bool replicated = parts[0].strategy == ShardingStrategy::kReplicated;
  std::vector<const float*> sources(parts.size(), nullptr);
  std::vector<std::byte> gathered;
  // A 16-bit table's parameters, decoded to float32 part by part (the others are read in place).
  std::vector<std::vector<float>> decoded(parts.size());
  const auto values_of = [&](const TablePart& held) -> std::span<const float> {
    const internal::TableStorage& storage = model.states[held.index_on_rank].storage();
    if (const internal::FloatBuffer* buffer = storage.variable(variable)) return buffer->span();
    return decoded[held.index_in_table] = storage.rows_as_float32();
  };
  if (world_size() == 1 || replicated) {
    for (const TablePart& held : parts) {
      if (held.rank != rank()) continue;
      sources[held.index_in_table] = values_of(held).data();
    }
  } else {
    std::vector<std::byte> mine;
    for (const TablePart& held : parts) {
      if (held.rank != rank()) continue;
      const std::span<const float> values = values_of(held);
      const auto* bytes = reinterpret_cast<const std::byte*>(values.data());
      mine.insert(mine.end(), bytes, bytes + values.size_bytes());
      decoded[held.index_in_table] = {};
    }
    std::vector<int64_t> counts(static_cast<size_t>(world_size()));
    exchange.communicator().all_gather(mine, gathered, counts);
    std::vector<size_t> offsets(static_cast<size_t>(world_size()), 0);
    for (int q = 1; q < world_size(); ++q) {
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
    if (source == nullptr) continue;  // another rank's copy of a replicated table
    const int64_t columns = part_width(held, width, config.dim);
    if (held.row_stride == 1 && columns == width) {  // whole rows, in order: one copy
      std::copy_n(source, held.rows * width, out.data());
      continue;
    }
    const int64_t first = width == config.dim ? held.first_column : 0;
    for (int64_t local = 0; local < held.rows; ++local) {
      std::copy_n(source + local * columns, columns,
                  out.data() + held.global_row(local) * width + first);
    }
  }
}

void Embedding::Impl::write_variable(size_t table, std::string_view variable,
                                     std::span<const float> values) {
  const TableConfig& config = model.tables[table];
  const int64_t width = model.variable_width(config.name, variable);
  for (TableState& state : model.states) {
    const TablePart& held = state.part();
    if (held.table != table) continue;
    internal::TableStorage& storage = state.untracked_storage();
    internal::FloatBuffer* buffer = storage.variable(variable);
    const int64_t columns = part_width(held, width, config.dim);
    const int64_t first = width == config.dim ? held.first_column : 0;
    for (int64_t local = 0; local < held.rows; ++local) {
      const float* row = values.data() + held.global_row(local) * width + first;
      if (buffer != nullptr) {
        std::copy_n(row, columns, buffer->data() + local * columns);
      } else {  // a 16-bit table's parameters, rounded to nearest
        storage.write_rows(local, 1, row);
      }
    }
  }
}

Embedding::Embedding(std::vector<TableConfig> tables, std::vector<FeatureConfig> features,
                     EmbeddingOptions options)
    : impl_(std::make_unique<Impl>(std::move(tables), std::move(features), std::move(options))) {}
Embedding::~Embedding() = default;
Embedding::Embedding(Embedding&&) noexcept = default;
Embedding& Embedding::operator=(Embedding&&) noexcept = default;

const std::vector<TableConfig>& Embedding::tables() const { return impl_->model.tables; }
const std::vector<FeatureConfig>& Embedding::features() const { return impl_->model.features; }
const EmbeddingOptions& Embedding::options() const { return impl_->model.options; }
const Placement& Embedding::placement() const { return impl_->model.placement; }
int Embedding::rank() const { return impl_->rank(); }
int Embedding::world_size() const { return impl_->world_size(); }
int64_t Embedding::step() const { return impl_->model.step; }
void Embedding::set_step(int64_t step) {
  impl_->execution.prefetcher.wait();
  if (step < 0) throw InvalidArgument("step must be >= 0, got " + std::to_string(step));
  impl_->model.step = step;
}

int64_t Embedding::skipped_rows() const { return impl_->model.skipped_rows; }

std::vector<int64_t> Embedding::activation_shape(size_t feature, const FeatureInput& input) const {
  if (feature >= impl_->model.features.size()) {
    throw InvalidArgument("feature index " + std::to_string(feature) + " is out of range [0, " +
                          std::to_string(impl_->model.features.size()) + ")");
  }
  return internal::activation_shape(impl_->model.features[feature],
                                    impl_->model.tables[impl_->model.feature_table[feature]],
                                    input);
}

void Embedding::lookup(std::span<const FeatureInput> inputs,
                       std::span<const std::span<float>> activations) {
  impl_->execution.prefetcher.wait();
  impl_->lookup_stage.ahead(inputs, activations, impl_->scratch_batch, /*pool_now=*/true);
}

void Embedding::lookup(std::span<const FeatureInput> inputs,
                       std::span<const std::span<float>> activations, LookupBatch& batch) {
  impl_->execution.prefetcher.wait();
  // Validate, then commit: the lookup fills the staged batch, swapped into `batch` only once it
  // succeeded, so a failed lookup leaves `batch` as it was (docs/semantics.md §6).
  LookupBatch::Impl& kept = impl_->reset_batch(impl_->staged_batch);
  impl_->lookup_stage.ahead(inputs, activations, kept, /*pool_now=*/true);
  kept.applicable = true;
  std::swap(batch.impl_, impl_->staged_batch);
}

void Embedding::prefetch(std::span<const FeatureInput> inputs,
                         std::span<const std::span<float>> activations, LookupBatch& batch) {
  impl_->execution.prefetcher.wait();
  LookupBatch::Impl& kept = impl_->reset_batch(batch.impl_);
  kept.prefetched = true;
  kept.prefetch_inputs.assign(inputs.begin(), inputs.end());
  kept.prefetch_activations.assign(activations.begin(), activations.end());
  const bool pool_now = impl_->model.options.pipeline_staleness == PipelineStaleness::kOneStep;
  Impl* impl = impl_.get();  // stays put when the Embedding is moved
  try {
    impl->execution.prefetcher.start([impl, &kept, pool_now] {
      try {
        impl->lookup_stage.ahead(kept.prefetch_inputs, kept.prefetch_activations, kept, pool_now);
      } catch (...) {
        kept.prefetch_error = std::current_exception();
      }
    });
  } catch (...) {
    kept.prefetched = false;  // the thread did not start: finish_lookup refuses this batch
    throw;
  }
}

void Embedding::finish_lookup(LookupBatch& batch) {
  impl_->execution.prefetcher.wait();
  LookupBatch::Impl* kept = batch.impl_.get();
  if (kept == nullptr || kept->owner != impl_->id || !kept->prefetched) {
    throw FailedPrecondition(
        "finish_lookup needs a LookupBatch given to this Embedding's prefetch");
  }
  kept->prefetched = false;
  if (kept->prefetch_error) std::rethrow_exception(std::exchange(kept->prefetch_error, nullptr));
  if (!kept->pooled) impl_->lookup_stage.pool(kept->prefetch_activations, *kept);
  kept->applicable = true;
}

void Embedding::apply_gradients(LookupBatch& batch,
                                std::span<const std::span<const float>> gradients) {
  impl_->execution.prefetcher.wait();
  if (batch.impl_ == nullptr) batch.impl_ = std::make_unique<LookupBatch::Impl>();
  impl_->apply_stage.apply(*batch.impl_, gradients);
}

void Embedding::agree_on_error(const std::exception_ptr& error) {
  impl_->execution.prefetcher.wait();
  recemb::agree_on_error(impl_->exchange.communicator(), error);
}

std::vector<std::string> Embedding::variable_names(std::string_view table) const {
  return impl_->model.variable_names(table);
}

std::vector<int64_t> Embedding::variable_shape(std::string_view table,
                                               std::string_view variable) const {
  const int64_t width = impl_->model.variable_width(table, variable);
  const int64_t rows =
      impl_->model.tables[impl_->model.static_table_index(table, "variable_shape")].vocabulary_size;
  if (width == 1 && variable != "parameters") return {rows};
  return {rows, width};
}

void Embedding::read_variable(std::string_view table, std::string_view variable,
                              std::span<float> out) const {
  impl_->execution.prefetcher.wait();
  support::agree(impl_->exchange.communicator(),
                 [&] { impl_->model.check_variable_size(table, variable, out.size()); });
  impl_->read_variable(impl_->model.table_index(table), variable, out);
}

void Embedding::write_variable(std::string_view table, std::string_view variable,
                               std::span<const float> values) {
  impl_->execution.prefetcher.wait();
  support::agree(impl_->exchange.communicator(), [&] {
    impl_->model.check_variable_size(table, variable, values.size());
    impl_->model.check_variable_values(
        table, variable, values,
        "table '" + std::string(table) + "' variable '" + std::string(variable) + "'",
        [](int64_t row) { return "row " + std::to_string(row); });
  });
  if (impl_->world_size() > 1) {
    support::agree_on_value(
        impl_->exchange.communicator(), format::checksum(std::as_bytes(values)),
        "values for table '" + std::string(table) + "' variable '" + std::string(variable) + "'",
        "write_variable takes the same whole variable on every rank");
  }
  impl_->write_variable(impl_->model.table_index(table), variable, values);
}

bool Embedding::has_whole_table(std::string_view table) const {
  return impl_->model.whole_state(impl_->model.table_index(table)) != nullptr;
}

std::span<float> Embedding::variable_data(std::string_view table, std::string_view variable) {
  impl_->execution.prefetcher.wait();
  std::as_const(*this).variable_data(table, variable);  // throws as the const one does
  internal::Model& model = impl_->model;
  // The caller may write the rows: the untracked door.
  return model.whole_state(model.table_index(table))
      ->untracked_storage()
      .variable(variable)
      ->span();
}

namespace {

// The state of the static `table` (for `caller`'s errors) that this rank holds whole;
// FailedPrecondition naming its placement otherwise.
const TableState* held_whole(const internal::Model& model, std::string_view table,
                             std::string_view caller) {
  const TableState* state = model.whole_state(model.static_table_index(table, caller));
  if (state == nullptr) {
    throw FailedPrecondition("table '" + std::string(table) +
                             "' is not held whole by this rank (placement: " +
                             std::string(sharding_strategy_name(
                                 model.placement.tables[model.table_index(table)].strategy)) +
                             "); read it with read_variable");
  }
  return state;
}

}  // namespace

std::span<uint16_t> Embedding::half_parameter_data(std::string_view table) {
  impl_->execution.prefetcher.wait();
  std::as_const(*this).half_parameter_data(table);  // throws as the const one does
  internal::Model& model = impl_->model;
  // The caller may write the rows: the untracked door.
  const std::span<std::byte> bytes =
      model.whole_state(model.table_index(table))->untracked_storage().parameter_bytes();
  return {reinterpret_cast<uint16_t*>(bytes.data()), bytes.size() / sizeof(uint16_t)};
}

std::span<const uint16_t> Embedding::half_parameter_data(std::string_view table) const {
  const TableState* state = held_whole(impl_->model, table, "half_parameter_data");
  if (state->table().dtype == DType::kFloat32) {
    throw FailedPrecondition("table '" + std::string(table) +
                             "' stores its rows as float32: use variable_data");
  }
  const std::span<const std::byte> bytes = state->storage().parameter_bytes();
  return {reinterpret_cast<const uint16_t*>(bytes.data()), bytes.size() / sizeof(uint16_t)};
}

std::span<const float> Embedding::variable_data(std::string_view table,
                                                std::string_view variable) const {
  impl_->model.variable_width(table, variable);  // throws for unknown names
  const TableState* state = held_whole(impl_->model, table, "variable_data");
  const internal::FloatBuffer* buffer = state->storage().variable(variable);
  if (buffer == nullptr) {
    throw FailedPrecondition("table '" + std::string(table) + "' stores its rows as " +
                             std::string(dtype_name(state->table().dtype)) +
                             ", not float32: read them with read_variable, which converts, "
                             "or as they are with half_parameter_data");
  }
  return buffer->span();
}

}  // namespace recemb
