// The float64 reference layer. Every formula below is restated from the spec section named next to
// it; nothing here is shared with (or copied from) src/.
#include "reference/reference_embedding.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <variant>

namespace recemb::reference {
namespace {

// One id of a bag, with its weight and its position inside the bag (the column of a dense row,
// the index inside a ragged row, indices[:, -1] of a sparse entry).
struct Entry {
  int64_t row = 0;
  double weight = 1.0;
  int64_t position = 0;
};

// The bags of an input, in row-major order over `shape` (the input shape without its last axis).
struct Bags {
  std::vector<int64_t> shape;
  std::vector<std::vector<Entry>> bags;
};

int64_t product(const std::vector<int64_t>& values) {
  int64_t result = 1;
  for (int64_t value : values) result *= value;
  return result;
}

size_t count_of(const IdSpan& ids) {
  return std::visit([](auto values) { return values.size(); }, ids);
}

int64_t id_at(const IdSpan& ids, size_t i) {
  return std::visit([i](auto values) { return static_cast<int64_t>(values[i]); }, ids);
}

double weight_at(std::span<const float> weights, size_t i) {
  return weights.empty() ? 1.0 : static_cast<double>(weights[i]);
}

Bags bags_of(const DenseIds& input) {
  Bags result;
  if (input.shape.size() == 1) {
    // [B]: every id is its own bag.
    result.shape = input.shape;
    for (size_t i = 0; i < count_of(input.ids); ++i) {
      result.bags.push_back({Entry{id_at(input.ids, i), weight_at(input.weights, i), 0}});
    }
    return result;
  }
  // [..., N]: the last axis is a bag of N ids.
  result.shape.assign(input.shape.begin(), input.shape.end() - 1);
  const int64_t bag_size = input.shape.back();
  const int64_t num_bags = product(result.shape);
  for (int64_t bag = 0; bag < num_bags; ++bag) {
    std::vector<Entry> entries;
    for (int64_t j = 0; j < bag_size; ++j) {
      const auto i = static_cast<size_t>(bag * bag_size + j);
      entries.push_back(Entry{id_at(input.ids, i), weight_at(input.weights, i), j});
    }
    result.bags.push_back(entries);
  }
  return result;
}

Bags bags_of(const RaggedIds& input) {
  std::vector<int64_t> splits;
  std::visit(
      [&splits](auto values) {
        for (auto value : values) splits.push_back(static_cast<int64_t>(value));
      },
      input.row_splits);
  Bags result;
  result.shape = {static_cast<int64_t>(splits.size()) - 1};
  for (size_t b = 0; b + 1 < splits.size(); ++b) {
    std::vector<Entry> entries;
    for (int64_t i = splits[b]; i < splits[b + 1]; ++i) {
      const auto index = static_cast<size_t>(i);
      entries.push_back(
          Entry{id_at(input.values, index), weight_at(input.weights, index), i - splits[b]});
    }
    result.bags.push_back(entries);
  }
  return result;
}

Bags bags_of(const SparseIds& input) {
  const size_t rank = input.dense_shape.size();
  Bags result;
  result.shape.assign(input.dense_shape.begin(), input.dense_shape.end() - 1);
  result.bags.resize(static_cast<size_t>(product(result.shape)));
  for (size_t i = 0; i < count_of(input.values); ++i) {
    // Row-major index of indices[i, :-1] in shape.
    int64_t bag = 0;
    for (size_t axis = 0; axis + 1 < rank; ++axis) {
      bag = bag * input.dense_shape[axis] + input.indices[i * rank + axis];
    }
    const int64_t position = input.indices[i * rank + rank - 1];
    result.bags[static_cast<size_t>(bag)].push_back(
        Entry{id_at(input.values, i), weight_at(input.weights, i), position});
  }
  return result;
}

Bags bags_of(const FeatureInput& input) {
  return std::visit([](const auto& ids) { return bags_of(ids); }, input);
}

double clip(double x, double lower, double upper) { return std::min(std::max(x, lower), upper); }

// docs/semantics.md §3 (Quantization): simulated quantization of a gathered value.
double quantize(double x, const QuantizationConfig& config) {
  const double lower = config.lower;
  const double upper = config.upper;
  x = clip(x, lower, upper);
  const double step = (upper - lower) / static_cast<double>(config.num_buckets - 1);
  return std::floor((x - lower) / step + 0.5) * step + lower;
}

const CommonHyperparameters& common_of(const Optimizer& optimizer) {
  return std::visit([](const auto& o) -> const CommonHyperparameters& { return o.common; },
                    optimizer);
}

const LearningRate& learning_rate_of(const Optimizer& optimizer) {
  return std::visit([](const auto& o) -> const LearningRate& { return o.learning_rate; },
                    optimizer);
}

}  // namespace

double learning_rate_at(const LearningRate& learning_rate, int64_t step) {
  if (const auto* constant = std::get_if<float>(&learning_rate)) {
    return static_cast<double>(*constant);
  }
  if (const auto* decay = std::get_if<ExponentialDecay>(&learning_rate)) {
    double exponent = static_cast<double>(step) / static_cast<double>(decay->decay_steps);
    if (decay->staircase) exponent = std::floor(exponent);
    return static_cast<double>(decay->initial_learning_rate) *
           std::pow(static_cast<double>(decay->decay_rate), exponent);
  }
  if (const auto* piecewise = std::get_if<PiecewiseConstant>(&learning_rate)) {
    for (size_t i = 0; i < piecewise->boundaries.size(); ++i) {
      if (step <= piecewise->boundaries[i]) return static_cast<double>(piecewise->values[i]);
    }
    return static_cast<double>(piecewise->values.back());
  }
  if (const auto* warmup = std::get_if<LinearWarmup>(&learning_rate)) {
    const double target = warmup->target_learning_rate;
    if (step >= warmup->warmup_steps) return target;
    const double initial = warmup->initial_learning_rate;
    return initial + (target - initial) * static_cast<double>(step) /
                         static_cast<double>(warmup->warmup_steps);
  }
  return static_cast<double>(std::get<LearningRateCallback>(learning_rate)(step));
}

std::vector<std::string> slot_names_of(const Optimizer& optimizer) {
  if (std::holds_alternative<Sgd>(optimizer)) return {};
  if (std::holds_alternative<Adagrad>(optimizer)) return {"accumulators"};
  if (std::holds_alternative<AdagradMomentum>(optimizer)) return {"accumulators", "momenta"};
  if (std::holds_alternative<Adam>(optimizer)) return {"momenta", "velocities"};
  if (std::holds_alternative<Ftrl>(optimizer)) return {"accumulators", "linears"};
  return {"accumulators"};  // RowwiseAdagrad
}

ReferenceEmbedding::ReferenceEmbedding(std::vector<TableConfig> tables,
                                       std::vector<FeatureConfig> features,
                                       EmbeddingOptions options,
                                       const std::vector<std::vector<float>>& initial_parameters)
    : features_(std::move(features)), options_(std::move(options)) {
  if (initial_parameters.size() != tables.size()) {
    throw std::logic_error("reference: one initial parameter array per table");
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    Table table;
    table.config = std::move(tables[t]);
    table.optimizer = table.config.optimizer ? table.config.optimizer : options_.optimizer;
    const int64_t rows = table.config.vocabulary_size;
    const auto size = static_cast<size_t>(rows * table.config.dim);
    if (initial_parameters[t].size() != size) {
      throw std::logic_error("reference: wrong initial parameter size for " + table.config.name);
    }
    table.variables["parameters"].assign(initial_parameters[t].begin(),
                                         initial_parameters[t].end());
    // Initial slot values, docs/semantics.md §5 and optimizer.h.
    if (table.optimizer) {
      const Optimizer& optimizer = *table.optimizer;
      if (const auto* adagrad = std::get_if<Adagrad>(&optimizer)) {
        table.variables["accumulators"].assign(size, adagrad->initial_accumulator_value);
      } else if (std::holds_alternative<AdagradMomentum>(optimizer)) {
        table.variables["accumulators"].assign(size, 0.0);
        table.variables["momenta"].assign(size, 0.0);
      } else if (std::holds_alternative<Adam>(optimizer)) {
        table.variables["momenta"].assign(size, 0.0);
        table.variables["velocities"].assign(size, 0.0);
      } else if (const auto* ftrl = std::get_if<Ftrl>(&optimizer)) {
        table.variables["accumulators"].assign(size, ftrl->initial_accumulator_value);
        table.variables["linears"].assign(size, 0.0);
      } else if (const auto* rowwise = std::get_if<RowwiseAdagrad>(&optimizer)) {
        table.variables["accumulators"].assign(static_cast<size_t>(rows),
                                               rowwise->initial_accumulator_value);
      }
    }
    tables_.push_back(std::move(table));
  }
}

ReferenceEmbedding ReferenceEmbedding::like(const Embedding& layer) {
  std::vector<std::vector<float>> parameters;
  for (const TableConfig& table : layer.tables()) {
    std::vector<float> values(static_cast<size_t>(table.vocabulary_size * table.dim));
    layer.read_variable(table.name, "parameters", values);
    parameters.push_back(std::move(values));
  }
  return ReferenceEmbedding(layer.tables(), layer.features(), layer.options(), parameters);
}

size_t ReferenceEmbedding::table_index(std::string_view name) const {
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (tables_[t].config.name == name) return t;
  }
  throw std::logic_error("reference: no table " + std::string(name));
}

std::vector<std::string> ReferenceEmbedding::variable_names(std::string_view table) const {
  const Table& t = tables_[table_index(table)];
  std::vector<std::string> names = {"parameters"};
  if (t.optimizer) {
    for (const std::string& slot : slot_names_of(*t.optimizer)) names.push_back(slot);
  }
  return names;
}

std::vector<int64_t> ReferenceEmbedding::variable_shape(std::string_view table,
                                                        std::string_view variable) const {
  const Table& t = tables_[table_index(table)];
  if (variable == "accumulators" && t.optimizer &&
      std::holds_alternative<RowwiseAdagrad>(*t.optimizer)) {
    return {t.config.vocabulary_size};
  }
  return {t.config.vocabulary_size, t.config.dim};
}

const std::vector<double>& ReferenceEmbedding::variable(std::string_view table,
                                                        std::string_view variable) const {
  const Table& t = tables_[table_index(table)];
  auto it = t.variables.find(variable);
  if (it == t.variables.end()) {
    throw std::logic_error("reference: table " + std::string(table) + " has no variable " +
                           std::string(variable));
  }
  return it->second;
}

void ReferenceEmbedding::set_variable(std::string_view table, std::string_view variable,
                                      std::span<const float> values) {
  Table& t = tables_[table_index(table)];
  auto it = t.variables.find(variable);
  if (it == t.variables.end() || it->second.size() != values.size()) {
    throw std::logic_error("reference: bad set_variable of " + std::string(variable));
  }
  it->second.assign(values.begin(), values.end());
}

// docs/semantics.md §2-§3 and FeatureConfig's contract: which ids make up each activation vector.
ReferenceEmbedding::ExpandedFeature ReferenceEmbedding::expand(size_t feature,
                                                               const FeatureInput& input) const {
  const FeatureConfig& config = features_[feature];
  Bags bags = bags_of(input);
  const auto num_bags = static_cast<int64_t>(bags.bags.size());

  // A sequence of `length` positions per example: cell (b, p) holds the id at position p of
  // example b; positions >= length are dropped, missing ones stay empty (zero vectors).
  auto as_sequence = [&](int64_t length, std::vector<int64_t> output_shape) {
    if (bags.shape.size() != 1) throw std::logic_error("reference: sequence needs [B, N] input");
    ExpandedFeature result;
    result.output_shape = std::move(output_shape);
    result.cells.resize(static_cast<size_t>(num_bags * length));
    for (int64_t b = 0; b < num_bags; ++b) {
      for (const Entry& entry : bags.bags[static_cast<size_t>(b)]) {
        if (entry.position < length) {
          result.cells[static_cast<size_t>(b * length + entry.position)].push_back(
              Occurrence{entry.row, entry.weight});
        }
      }
    }
    return result;
  };
  // Every bag is one cell.
  auto as_bags = [&](std::vector<int64_t> output_shape) {
    ExpandedFeature result;
    result.output_shape = std::move(output_shape);
    for (const auto& bag : bags.bags) {
      Cell cell;
      for (const Entry& entry : bag) cell.push_back(Occurrence{entry.row, entry.weight});
      result.cells.push_back(cell);
    }
    return result;
  };

  if (!config.output_shape.empty()) {
    const int64_t cells = product(config.output_shape);
    if (cells == num_bags) return as_bags(config.output_shape);
    if (bags.shape.size() == 1 && num_bags > 0 && cells % num_bags == 0) {
      return as_sequence(cells / num_bags, config.output_shape);
    }
    throw std::logic_error("reference: output_shape does not fit the input");
  }
  if (config.max_sequence_length > 0) {
    return as_sequence(config.max_sequence_length, {num_bags, config.max_sequence_length});
  }
  return as_bags(bags.shape);
}

// docs/semantics.md §3-§4: gain_j = c_j * r, r = 1 (sum), 1 / sum c (mean), 1 / sqrt(sum c^2)
// (sqrtn), and r = 0 when the denominator is 0.
std::vector<double> ReferenceEmbedding::gains(const Cell& cell, Combiner combiner) const {
  double sum = 0.0;
  double sum_of_squares = 0.0;
  for (const Occurrence& occurrence : cell) {
    sum += occurrence.weight;
    sum_of_squares += occurrence.weight * occurrence.weight;
  }
  double scale = 1.0;
  if (combiner == Combiner::kMean) scale = sum == 0.0 ? 0.0 : 1.0 / sum;
  if (combiner == Combiner::kSqrtn) {
    scale = sum_of_squares == 0.0 ? 0.0 : 1.0 / std::sqrt(sum_of_squares);
  }
  std::vector<double> result;
  for (const Occurrence& occurrence : cell) result.push_back(occurrence.weight * scale);
  return result;
}

std::vector<int64_t> ReferenceEmbedding::activation_shape(size_t feature,
                                                          const FeatureInput& input) const {
  std::vector<int64_t> shape = expand(feature, input).output_shape;
  shape.push_back(tables_[table_index(features_[feature].table)].config.dim);
  return shape;
}

std::vector<std::vector<double>> ReferenceEmbedding::lookup(std::span<const FeatureInput> inputs) {
  return lookup_into(inputs, nullptr);
}

std::vector<std::vector<double>> ReferenceEmbedding::lookup(std::span<const FeatureInput> inputs,
                                                            Batch& batch) {
  batch.applicable_ = false;
  std::vector<Batch::Feature> record;
  std::vector<std::vector<double>> activations = lookup_into(inputs, &record);
  batch.features_ = std::move(record);
  batch.applicable_ = true;
  return activations;
}

std::vector<std::vector<double>> ReferenceEmbedding::lookup_into(
    std::span<const FeatureInput> inputs, std::vector<Batch::Feature>* record) const {
  if (inputs.size() != features_.size()) throw std::logic_error("reference: one input per feature");
  std::vector<std::vector<double>> activations;
  for (size_t f = 0; f < features_.size(); ++f) {
    const size_t t = table_index(features_[f].table);
    const Table& table = tables_[t];
    const int64_t dim = table.config.dim;
    const std::vector<double>& parameters = table.variables.at("parameters");
    const ExpandedFeature expanded = expand(f, inputs[f]);

    std::vector<double> activation(expanded.cells.size() * static_cast<size_t>(dim), 0.0);
    Batch::Feature recorded{t, dim, {}};
    for (size_t k = 0; k < expanded.cells.size(); ++k) {
      const Cell& cell = expanded.cells[k];
      const std::vector<double> cell_gains = gains(cell, table.config.combiner);
      Batch::Cell recorded_cell;
      for (size_t j = 0; j < cell.size(); ++j) {
        const int64_t row = cell[j].row;
        if (row < 0 || row >= table.config.vocabulary_size) {
          throw std::logic_error("reference: id out of range");
        }
        for (int64_t d = 0; d < dim; ++d) {
          double value = parameters[static_cast<size_t>(row * dim + d)];
          if (table.config.quantization_config) {
            value = quantize(value, *table.config.quantization_config);
          }
          activation[k * static_cast<size_t>(dim) + static_cast<size_t>(d)] +=
              cell_gains[j] * value;
        }
        recorded_cell.occurrences.push_back(Batch::Occurrence{row, cell_gains[j]});
      }
      recorded.cells.push_back(std::move(recorded_cell));
    }
    activations.push_back(std::move(activation));
    if (record != nullptr) record->push_back(std::move(recorded));
  }
  return activations;
}

void ReferenceEmbedding::apply_gradients(Batch& batch,
                                         std::span<const std::span<const float>> gradients) {
  if (!batch.applicable_) {
    throw std::logic_error("reference: apply_gradients of a batch without an unapplied lookup");
  }
  if (gradients.size() != features_.size() || batch.features_.size() != features_.size()) {
    throw std::logic_error("reference: one gradient per feature");
  }
  // docs/semantics.md §4: per table, per row, the contributions gain * gradient in (feature,
  // example, position) order (the cells are row-major over (example, position) and a bag keeps its
  // ids in order).
  std::vector<std::map<int64_t, std::vector<std::vector<double>>>> contributions(tables_.size());
  for (size_t f = 0; f < features_.size(); ++f) {
    const Batch::Feature& feature = batch.features_[f];
    const auto dim = static_cast<size_t>(feature.dim);
    const std::span<const float> gradient = gradients[f];
    if (!gradient.empty() && gradient.size() != feature.cells.size() * dim) {
      throw std::logic_error("reference: wrong gradient size");
    }
    for (size_t k = 0; k < feature.cells.size(); ++k) {
      for (const Batch::Occurrence& occurrence : feature.cells[k].occurrences) {
        std::vector<double> contribution(dim, 0.0);
        for (size_t d = 0; d < dim; ++d) {
          const double g = gradient.empty() ? 0.0 : static_cast<double>(gradient[k * dim + d]);
          if (!std::isfinite(g) && options_.non_finite_gradients == NonFiniteGradients::kReject) {
            throw std::logic_error("reference: non-finite gradient");
          }
          contribution[d] = occurrence.gain * g;
        }
        contributions[feature.table][occurrence.row].push_back(std::move(contribution));
      }
    }
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (!contributions[t].empty() && !tables_[t].optimizer) {
      throw std::logic_error("reference: touched table without optimizer");
    }
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (tables_[t].optimizer) update_table(tables_[t], contributions[t]);
  }
  batch.applicable_ = false;
  ++step_;
}

// docs/semantics.md §4 pipeline and §5 updates (+ RowwiseAdagrad and Adam's bias correction from
// optimizer.h), one row at a time, in double.
void ReferenceEmbedding::update_table(
    Table& table, const std::map<int64_t, std::vector<std::vector<double>>>& contributions_by_row) {
  const Optimizer& optimizer = *table.optimizer;
  const CommonHyperparameters& common = common_of(optimizer);
  const double lr = reference::learning_rate_at(learning_rate_of(optimizer), step_);
  const auto dim = static_cast<size_t>(table.config.dim);
  std::vector<double>& parameters = table.variables["parameters"];

  // g -> clip -> optimizer -> decoupled weight decay -> weight clip, for one row.
  auto run_pipeline = [&](int64_t row, std::vector<double> g) {
    const size_t base = static_cast<size_t>(row) * dim;
    for (size_t d = 0; d < dim; ++d) {
      g[d] = clip(g[d], common.clip_gradient_min, common.clip_gradient_max);
    }
    std::vector<double> w_old(parameters.begin() + static_cast<std::ptrdiff_t>(base),
                              parameters.begin() + static_cast<std::ptrdiff_t>(base + dim));

    if (std::holds_alternative<Sgd>(optimizer)) {
      for (size_t d = 0; d < dim; ++d) parameters[base + d] -= lr * g[d];
    } else if (std::holds_alternative<Adagrad>(optimizer)) {
      std::vector<double>& a = table.variables["accumulators"];
      for (size_t d = 0; d < dim; ++d) {
        a[base + d] += g[d] * g[d];
        parameters[base + d] -= lr * g[d] / std::sqrt(a[base + d]);
      }
    } else if (const auto* momentum = std::get_if<AdagradMomentum>(&optimizer)) {
      std::vector<double>& a = table.variables["accumulators"];
      std::vector<double>& m = table.variables["momenta"];
      const double beta2 = momentum->beta2;
      const double mu = momentum->momentum;
      for (size_t d = 0; d < dim; ++d) {
        if (momentum->beta2 == 1.0f) {
          a[base + d] = a[base + d] + g[d] * g[d];
        } else {
          a[base + d] = beta2 * a[base + d] + (1.0 - beta2) * g[d] * g[d];
        }
        const double scaled = std::pow(a[base + d] + static_cast<double>(momentum->epsilon),
                                       -1.0 / static_cast<double>(momentum->exponent)) *
                              g[d];
        m[base + d] = mu * m[base + d] + scaled;
        const double update = momentum->use_nesterov ? mu * m[base + d] + scaled : m[base + d];
        parameters[base + d] -= lr * update;
      }
    } else if (const auto* adam = std::get_if<Adam>(&optimizer)) {
      std::vector<double>& m = table.variables["momenta"];
      std::vector<double>& v = table.variables["velocities"];
      const double beta_1 = adam->beta_1;
      const double beta_2 = adam->beta_2;
      const double epsilon = adam->epsilon;
      double step_lr = lr;
      if (adam->bias_correction) {
        const auto t = static_cast<double>(step_ + 1);
        step_lr = lr * std::sqrt(1.0 - std::pow(beta_2, t)) / (1.0 - std::pow(beta_1, t));
      }
      for (size_t d = 0; d < dim; ++d) {
        m[base + d] = beta_1 * m[base + d] + (1.0 - beta_1) * g[d];
        v[base + d] = beta_2 * v[base + d] + (1.0 - beta_2) * g[d] * g[d];
        const double denominator = adam->sum_inside_sqrt
                                       ? std::sqrt(v[base + d] + epsilon * epsilon)
                                       : std::sqrt(v[base + d]) + epsilon;
        parameters[base + d] -= step_lr * m[base + d] / denominator;
      }
    } else if (const auto* ftrl = std::get_if<Ftrl>(&optimizer)) {
      std::vector<double>& n = table.variables["accumulators"];
      std::vector<double>& z = table.variables["linears"];
      const double p = -static_cast<double>(ftrl->learning_rate_power);
      const double l1 = ftrl->l1_regularization_strength;
      const double l2 = ftrl->l2_regularization_strength;
      const double beta = ftrl->beta;
      for (size_t d = 0; d < dim; ++d) {
        const double n_old = n[base + d];
        const double n_new = n_old + g[d] * g[d];
        const double w = parameters[base + d];
        if (!ftrl->multiply_linear_by_learning_rate) {
          z[base + d] += g[d] - (std::pow(n_new, p) - std::pow(n_old, p)) / lr * w;
          const double zz = z[base + d];
          if (std::abs(zz) <= l1) {
            parameters[base + d] = 0.0;
          } else {
            const double sign = zz > 0.0 ? 1.0 : -1.0;
            parameters[base + d] = (sign * l1 - zz) / ((std::pow(n_new, p) + beta) / lr + 2.0 * l2);
          }
        } else {
          z[base + d] += lr * g[d] - (std::pow(n_new, p) - std::pow(n_old, p)) * w;
          const double zz = z[base + d];
          parameters[base + d] =
              (clip(zz, -lr * l1, lr * l1) - zz) / (std::pow(n_new, p) + 2.0 * lr * l2 + beta);
        }
        n[base + d] = n_new;
      }
    } else if (const auto* rowwise = std::get_if<RowwiseAdagrad>(&optimizer)) {
      std::vector<double>& a = table.variables["accumulators"];
      double mean_square = 0.0;
      for (size_t d = 0; d < dim; ++d) mean_square += g[d] * g[d];
      mean_square /= static_cast<double>(dim);
      a[static_cast<size_t>(row)] += mean_square;
      const double denominator =
          std::sqrt(a[static_cast<size_t>(row)]) + static_cast<double>(rowwise->epsilon);
      for (size_t d = 0; d < dim; ++d) parameters[base + d] -= lr * g[d] / denominator;
    }

    double decay = common.weight_decay_factor;
    if (common.multiply_weight_decay_factor_by_learning_rate) decay *= lr;
    for (size_t d = 0; d < dim; ++d) {
      parameters[base + d] -= decay * w_old[d];
      parameters[base + d] =
          clip(parameters[base + d], common.clip_weight_min, common.clip_weight_max);
    }
  };

  std::vector<int64_t> rows;
  const auto* adam = std::get_if<Adam>(&optimizer);
  if (adam != nullptr && !adam->lazy_adam) {
    for (int64_t row = 0; row < table.config.vocabulary_size; ++row) rows.push_back(row);
  } else {
    for (const auto& [row, unused] : contributions_by_row) rows.push_back(row);
  }
  const std::vector<std::vector<double>> none;
  for (int64_t row : rows) {
    auto it = contributions_by_row.find(row);
    const std::vector<std::vector<double>>& contributions =
        it == contributions_by_row.end() ? none : it->second;
    if (options_.non_finite_gradients == NonFiniteGradients::kSkipRows) {
      bool finite = true;
      for (const auto& contribution : contributions) {
        for (double value : contribution) finite = finite && std::isfinite(value);
      }
      if (!finite) {
        ++skipped_rows_;
        continue;
      }
    }
    if (common.use_gradient_accumulation) {
      std::vector<double> g(dim, 0.0);
      for (const auto& contribution : contributions) {
        for (size_t d = 0; d < dim; ++d) g[d] += contribution[d];
      }
      run_pipeline(row, g);
    } else {
      for (const auto& contribution : contributions) run_pipeline(row, contribution);
    }
  }
}

}  // namespace recemb::reference
