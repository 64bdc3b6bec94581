#include "recemb/embedding.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "recemb/error.h"

#include "batch/csr_feature.h"
#include "batch/lookup.h"
#include "config/validate.h"
#include "embedding/table_state.h"
#include "kernels/pool.h"
#include "kernels/sparse_update.h"
#include "optimizers/row_update.h"
#include "storage/initializer.h"
#include "util/thread_pool.h"

namespace recemb {
namespace {

using internal::CsrFeature;
using internal::TableState;

// Work split: big enough that a task amortises its scheduling, small enough to balance two cores.
constexpr int64_t kIdsPerLookupTask = 2048;
// Waking a worker costs tens of microseconds on a VM (docs/performance.md): batches smaller than
// this run on the calling thread.
constexpr int64_t kMinIdsForThreads = 16384;
constexpr int64_t kMinRowsForThreads = 1024;
constexpr int64_t kRowsPerUpdateTask = 256;
constexpr int64_t kRowsPerDenseUpdateTask = 4096;
constexpr int64_t kRowsPerInitializeTask = 4096;

// One parallel lookup task: bags [first_bag, last_bag) of one feature.
struct LookupTask {
  size_t feature;
  int64_t first_bag;
  int64_t last_bag;
};

}  // namespace

// Identifies an Embedding for the lifetime of the process (never reused, unlike an address).
uint64_t next_embedding_id() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

struct LookupBatch::Impl {
  uint64_t owner = 0;  // id of the Embedding that filled it; 0: none
  std::vector<CsrFeature> features;
  bool applicable = false;
};

LookupBatch::LookupBatch() : impl_(std::make_unique<Impl>()) {}
LookupBatch::~LookupBatch() = default;
LookupBatch::LookupBatch(LookupBatch&&) noexcept = default;
LookupBatch& LookupBatch::operator=(LookupBatch&&) noexcept = default;
bool LookupBatch::applicable() const { return impl_ != nullptr && impl_->applicable; }

struct Embedding::Impl {
  const uint64_t id = next_embedding_id();
  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;
  EmbeddingOptions options;
  std::vector<size_t> feature_table;                // feature -> index into states
  std::vector<std::vector<size_t>> table_features;  // table -> its features, in feature order
  std::vector<TableState> states;
  internal::ThreadPool pool;
  int64_t step = 0;
  int64_t skipped_rows = 0;

  // The normalised inputs of a pure lookup (one that keeps no LookupBatch).
  std::vector<CsrFeature> scratch_batch;

  // Reused per-call buffers.
  std::vector<LookupTask> lookup_tasks;
  std::vector<uint64_t> lookup_table_ids;    // ids per table in the batch being validated
  std::vector<float> learning_rates;         // per table, for the step being applied
  std::vector<float> zeros;                  // max dim
  std::vector<float> thread_scratch;         // 2 * max dim per thread
  std::vector<int64_t> thread_skipped_rows;  // per thread

  Impl(std::vector<TableConfig> table_configs, std::vector<FeatureConfig> feature_configs,
       EmbeddingOptions embedding_options)
      : tables(std::move(table_configs)),
        features(std::move(feature_configs)),
        options(std::move(embedding_options)),
        pool(options.num_threads) {
    internal::validate_configs(tables, features, options);
    table_features.resize(tables.size());
    for (size_t f = 0; f < features.size(); ++f) {
      const size_t t = table_index(features[f].table);
      feature_table.push_back(t);
      table_features[t].push_back(f);
    }
    int64_t max_dim = 1;
    states.reserve(tables.size());
    for (const TableConfig& table : tables) {
      states.emplace_back(table, table.optimizer ? table.optimizer : options.optimizer);
      max_dim = std::max(max_dim, table.dim);
    }
    zeros.assign(static_cast<size_t>(max_dim), 0.0f);
    thread_scratch.assign(static_cast<size_t>(2 * max_dim * pool.num_threads()), 0.0f);
    thread_skipped_rows.assign(static_cast<size_t>(pool.num_threads()), 0);
    scratch_batch.resize(features.size());
    initialize_tables();
  }

  size_t table_index(std::string_view name) const {
    for (size_t t = 0; t < tables.size(); ++t) {
      if (tables[t].name == name) return t;
    }
    throw InvalidArgument("no table named '" + std::string(name) + "'");
  }

  void initialize_tables() {
    for (TableState& state : states) {
      const uint64_t seed = internal::table_seed(options.seed, state.config().name);
      const int64_t rows = state.config().vocabulary_size;
      auto initialize = [&](int64_t first, int64_t last, int) {
        state.initialize_block(seed, first, last - first);
      };
      // A user callback runs on the constructing thread only (it may not be thread-safe, and a
      // Python callable needs the interpreter lock).
      if (std::holds_alternative<InitializerCallback>(state.config().initializer)) {
        for (int64_t first = 0; first < rows; first += kRowsPerInitializeTask) {
          initialize(first, std::min(rows, first + kRowsPerInitializeTask), 0);
        }
      } else {
        pool.parallel_for_ranges(rows, kRowsPerInitializeTask, initialize);
      }
    }
  }

  // Validates and normalises `inputs` into `batch`, checks the activation buffers, then pools.
  void lookup(std::span<const FeatureInput> inputs, std::span<const std::span<float>> activations,
              std::vector<CsrFeature>& batch) {
    internal::check_feature_count(features.size(), inputs.size(), "lookup inputs");
    internal::check_feature_count(features.size(), activations.size(), "lookup activations");
    std::vector<uint64_t>& table_ids = lookup_table_ids;
    table_ids.assign(tables.size(), 0);
    for (size_t f = 0; f < features.size(); ++f) {
      const TableConfig& table = tables[feature_table[f]];
      internal::normalize_feature(features[f], table, inputs[f], batch[f]);
      internal::check_activation_buffer(features[f], batch[f].activation_shape,
                                        activations[f].size());
      table_ids[feature_table[f]] += batch[f].ids.size();
      if (table_ids[feature_table[f]] >= std::numeric_limits<uint32_t>::max()) {
        throw InvalidArgument("table '" + table.name + "': more than 2^32 - 1 ids in one batch");
      }
    }
    // Validated.
    lookup_tasks.clear();
    for (size_t f = 0; f < features.size(); ++f) {
      const int64_t num_bags = batch[f].num_bags();
      const auto num_ids = static_cast<int64_t>(batch[f].ids.size());
      const int64_t bags_per_task =
          num_ids == 0 ? std::max<int64_t>(num_bags, 1)
                       : std::max<int64_t>(1, kIdsPerLookupTask * num_bags / num_ids);
      for (int64_t first = 0; first < num_bags; first += bags_per_task) {
        lookup_tasks.push_back({f, first, std::min(num_bags, first + bags_per_task)});
      }
    }
    const auto total_ids =
        static_cast<int64_t>(std::accumulate(table_ids.begin(), table_ids.end(), uint64_t{0}));
    auto pool_task = [&](int64_t k, int) {
      const LookupTask& task = lookup_tasks[static_cast<size_t>(k)];
      const TableState& state = states[feature_table[task.feature]];
      internal::pool_bags(
          internal::pool_input(batch[task.feature], state.config(), state.storage().parameters()),
          task.first_bag, task.last_bag, activations[task.feature].data());
    };
    const auto num_tasks = static_cast<int64_t>(lookup_tasks.size());
    if (total_ids < kMinIdsForThreads) {
      for (int64_t k = 0; k < num_tasks; ++k) pool_task(k, 0);
    } else {
      pool.parallel_for(num_tasks, pool_task);
    }
  }

  // The learning rate of every table for this step; each distinct schedule (the global
  // optimizer's, each table's own) is evaluated once.
  void evaluate_learning_rates() {
    learning_rates.assign(tables.size(), 0.0f);
    std::optional<float> global_rate;
    for (size_t t = 0; t < tables.size(); ++t) {
      if (tables[t].optimizer) {
        learning_rates[t] =
            learning_rate_of(*tables[t].optimizer, "table '" + tables[t].name + "'");
      } else if (options.optimizer) {
        if (!global_rate)
          global_rate = learning_rate_of(*options.optimizer, "the global optimizer");
        learning_rates[t] = *global_rate;
      }
    }
  }

  float learning_rate_of(const Optimizer& optimizer, const std::string& owner) const {
    const LearningRate& rate =
        std::visit([](const auto& o) -> const LearningRate& { return o.learning_rate; }, optimizer);
    try {
      return learning_rate_at(rate, step);
    } catch (const InvalidArgument& error) {
      throw InvalidArgument(owner + ": step " + std::to_string(step) + ": " + error.what());
    }
  }

  void check_gradients(const std::vector<CsrFeature>& batch,
                       std::span<const std::span<const float>> gradients) const {
    internal::check_feature_count(features.size(), gradients.size(), "apply_gradients gradients");
    for (size_t f = 0; f < features.size(); ++f) {
      const std::vector<int64_t>& shape = batch[f].activation_shape;
      const int64_t expected = internal::num_values(shape);
      const auto size = static_cast<int64_t>(gradients[f].size());
      if (size != 0 && size != expected) {
        throw InvalidArgument("feature '" + features[f].name + "': gradient has " +
                              std::to_string(size) + " values, expected " +
                              internal::shape_string(shape) + " = " + std::to_string(expected));
      }
      if (options.non_finite_gradients != NonFiniteGradients::kReject) continue;
      const int64_t per_example = shape.empty() || shape[0] == 0 ? 1 : expected / shape[0];
      for (int64_t i = 0; i < size; ++i) {
        const float value = gradients[f][static_cast<size_t>(i)];
        if (!std::isfinite(value)) {
          throw InvalidArgument("feature '" + features[f].name + "': example " +
                                std::to_string(i / per_example) + ": gradient value " +
                                std::to_string(value) + " is not finite");
        }
      }
    }
    for (size_t t = 0; t < tables.size(); ++t) {
      if (states[t].optimizer()) continue;
      for (const size_t f : table_features[t]) {
        if (!batch[f].ids.empty()) {
          throw FailedPrecondition("table '" + tables[t].name +
                                   "' has no optimizer (neither its own nor a global one), so "
                                   "apply_gradients cannot update it");
        }
      }
    }
  }

  void apply_gradients(LookupBatch::Impl& batch,
                       std::span<const std::span<const float>> gradients) {
    if (batch.owner != id || !batch.applicable || batch.features.size() != features.size()) {
      throw FailedPrecondition(
          "apply_gradients needs a LookupBatch filled by this Embedding's lookup and not applied "
          "yet (each lookup is applied at most once)");
    }
    check_gradients(batch.features, gradients);
    evaluate_learning_rates();
    // Validated: commit.
    batch.applicable = false;
    pool.parallel_for(static_cast<int64_t>(states.size()), [&](int64_t t, int) {
      const auto table = static_cast<size_t>(t);
      if (states[table].optimizer()) {
        states[table].gather_contributions(table_features[table], batch.features, gradients,
                                           zeros.data());
      }
    });
    std::fill(thread_skipped_rows.begin(), thread_skipped_rows.end(), 0);
    for (size_t t = 0; t < states.size(); ++t) {
      if (states[t].optimizer()) update_table(states[t], learning_rates[t]);
    }
    for (const int64_t skipped : thread_skipped_rows) skipped_rows += skipped;
    ++step;
  }

  void update_table(TableState& state, float learning_rate) {
    const internal::RowVariables variables = state.variables();
    const internal::RowGrouping& grouping = state.grouping();
    const internal::Contributions contributions = state.contributions();
    const CommonHyperparameters& common = std::visit(
        [](const auto& o) -> const CommonHyperparameters& { return o.common; }, *state.optimizer());
    const internal::UpdateMode mode{
        .accumulate = common.use_gradient_accumulation,
        .skip_non_finite = options.non_finite_gradients == NonFiniteGradients::kSkipRows};
    const int64_t dim = state.config().dim;
    auto scratch_of = [&](int thread) {
      float* base = thread_scratch.data() + static_cast<size_t>(2 * dim * thread);
      return internal::UpdateScratch{base, base + dim};
    };
    internal::visit_row_pipeline(
        *state.optimizer(), learning_rate, step, [&](const auto& pipeline) {
          auto& skipped = thread_skipped_rows;
          if (state.updates_all_rows()) {
            pool.parallel_for_ranges(state.config().vocabulary_size, kRowsPerDenseUpdateTask,
                                     [&](int64_t first, int64_t last, int thread) {
                                       skipped[static_cast<size_t>(thread)] +=
                                           internal::update_all_rows(pipeline, variables, grouping,
                                                                     contributions, mode, first,
                                                                     last, scratch_of(thread));
                                     });
          } else {
            const auto touched = static_cast<int64_t>(grouping.unique_rows().size());
            pool.parallel_for_ranges(
                touched,
                touched < kMinRowsForThreads ? std::max<int64_t>(touched, 1) : kRowsPerUpdateTask,
                [&](int64_t first, int64_t last, int thread) {
                  skipped[static_cast<size_t>(thread)] +=
                      internal::update_touched_rows(pipeline, variables, grouping, contributions,
                                                    mode, first, last, scratch_of(thread));
                });
          }
        });
  }

  const internal::FloatBuffer& variable(std::string_view table, std::string_view name) const {
    const internal::FloatBuffer* buffer = states[table_index(table)].storage().variable(name);
    if (buffer == nullptr) {
      std::string valid;
      for (const std::string& known : variable_names(table)) valid += " '" + known + "'";
      throw InvalidArgument("table '" + std::string(table) + "' has no variable '" +
                            std::string(name) + "'; it has:" + valid);
    }
    return *buffer;
  }

  std::vector<std::string> variable_names(std::string_view table) const {
    std::vector<std::string> names{"parameters"};
    for (const auto& spec : states[table_index(table)].storage().slot_specs()) {
      names.push_back(spec.name);
    }
    return names;
  }

  void check_variable_size(std::string_view table, std::string_view name, size_t size) const {
    const size_t expected = variable(table, name).size();
    if (size != expected) {
      throw InvalidArgument("table '" + std::string(table) + "' variable '" + std::string(name) +
                            "': expected " + std::to_string(expected) + " floats, got " +
                            std::to_string(size));
    }
  }
};

Embedding::Embedding(std::vector<TableConfig> tables, std::vector<FeatureConfig> features,
                     EmbeddingOptions options)
    : impl_(std::make_unique<Impl>(std::move(tables), std::move(features), std::move(options))) {}
Embedding::~Embedding() = default;
Embedding::Embedding(Embedding&&) noexcept = default;
Embedding& Embedding::operator=(Embedding&&) noexcept = default;

const std::vector<TableConfig>& Embedding::tables() const { return impl_->tables; }
const std::vector<FeatureConfig>& Embedding::features() const { return impl_->features; }
const EmbeddingOptions& Embedding::options() const { return impl_->options; }
int64_t Embedding::step() const { return impl_->step; }
void Embedding::set_step(int64_t step) {
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

void Embedding::lookup(std::span<const FeatureInput> inputs,
                       std::span<const std::span<float>> activations) {
  impl_->lookup(inputs, activations, impl_->scratch_batch);
}

void Embedding::lookup(std::span<const FeatureInput> inputs,
                       std::span<const std::span<float>> activations, LookupBatch& batch) {
  if (batch.impl_ == nullptr) batch.impl_ = std::make_unique<LookupBatch::Impl>();
  LookupBatch::Impl& kept = *batch.impl_;
  kept.applicable = false;
  kept.owner = impl_->id;
  kept.features.resize(impl_->features.size());
  impl_->lookup(inputs, activations, kept.features);
  kept.applicable = true;
}

void Embedding::apply_gradients(LookupBatch& batch,
                                std::span<const std::span<const float>> gradients) {
  if (batch.impl_ == nullptr) batch.impl_ = std::make_unique<LookupBatch::Impl>();
  impl_->apply_gradients(*batch.impl_, gradients);
}

std::vector<std::string> Embedding::variable_names(std::string_view table) const {
  return impl_->variable_names(table);
}

std::vector<int64_t> Embedding::variable_shape(std::string_view table,
                                               std::string_view variable) const {
  impl_->variable(table, variable);  // throws for unknown names
  const internal::TableStorage& storage = impl_->states[impl_->table_index(table)].storage();
  const int64_t width = storage.variable_width(variable);
  if (width == 1 && variable != "parameters") return {storage.num_rows()};
  return {storage.num_rows(), width};
}

void Embedding::read_variable(std::string_view table, std::string_view variable,
                              std::span<float> out) const {
  impl_->check_variable_size(table, variable, out.size());
  const auto values = impl_->variable(table, variable).span();
  std::copy(values.begin(), values.end(), out.begin());
}

std::span<float> Embedding::variable_data(std::string_view table, std::string_view variable) {
  impl_->variable(table, variable);  // throws for unknown names
  return impl_->states[impl_->table_index(table)].storage().variable(variable)->span();
}

std::span<const float> Embedding::variable_data(std::string_view table,
                                                std::string_view variable) const {
  return impl_->variable(table, variable).span();
}

void Embedding::write_variable(std::string_view table, std::string_view variable,
                               std::span<const float> values) {
  impl_->check_variable_size(table, variable, values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      throw InvalidArgument("table '" + std::string(table) + "' variable '" +
                            std::string(variable) + "': value " + std::to_string(values[i]) +
                            " at index " + std::to_string(i) + " is not finite");
    }
  }
  internal::FloatBuffer& buffer =
      *impl_->states[impl_->table_index(table)].storage().variable(variable);
  std::copy(values.begin(), values.end(), buffer.data());
}

}  // namespace recemb
