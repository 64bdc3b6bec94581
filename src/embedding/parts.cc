#include "embedding/parts.h"

#include <limits>

#include "embedding/embedding_impl.h"

namespace recemb::internal {

template <class Float>
std::vector<LocalPart<Float>> PartAccess::parts_of(const Embedding& embedding) {
  Embedding::Impl& impl = *embedding.impl_;
  impl.execution.join_prefetch();
  const Model& model = impl.model;
  std::vector<LocalPart<Float>> parts;
  parts.reserve(model.states.size());
  for (TableState& state : impl.model.states) {
    const TablePart& held = state.part();
    const TableConfig& config = state.table();
    LocalPart<Float>& local =
        parts.emplace_back(LocalPart<Float>{.part = held, .dynamic = state.dynamic()});
    for (std::string& name : model.variable_names(config.name)) {
      TableStorage& storage = state.storage();
      const int64_t width = model.variable_width(config.name, name);
      // A variable as wide as the table is split with the columns; a narrower one (a row-wise
      // slot) is kept whole by every part (the planner splits no such table by columns).
      const bool split = width == config.dim;
      const std::span<float> values = storage.variable(name)->span();
      local.variables.push_back({.name = std::move(name),
                                 .width = width,
                                 .first_column = split ? held.first_column : 0,
                                 .columns = split ? held.num_columns : width,
                                 .values = values});
    }
  }
  return parts;
}

std::vector<LocalPart<const float>> PartAccess::local_parts(const Embedding& embedding) {
  return parts_of<const float>(embedding);
}

std::vector<LocalPart<float>> PartAccess::local_parts(Embedding& embedding) {
  std::vector<LocalPart<float>> parts = parts_of<float>(embedding);
  embedding.impl_->model.untracked_writes = true;  // the caller may write the rows
  return parts;
}

Model& PartAccess::model(Embedding& embedding) {
  embedding.impl_->execution.join_prefetch();
  return embedding.impl_->model;
}

Communicator& PartAccess::communicator(const Embedding& embedding) {
  return embedding.impl_->exchange.communicator();
}

bool PartAccess::has_pending_training_lookup(const Embedding& embedding) {
  return embedding.impl_->pending_lookups->oldest() != std::numeric_limits<int64_t>::max();
}

}  // namespace recemb::internal
