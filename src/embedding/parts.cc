#include "embedding/parts.h"

#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "embedding/embedding_impl.h"

namespace recemb::internal {

template <class Float>
std::vector<LocalPart<Float>> PartAccess::parts_of(const Embedding& embedding) {
  Embedding::Impl& impl = *embedding.impl_;
  impl.execution.prefetcher.wait();
  const Model& model = impl.model;
  std::vector<LocalPart<Float>> parts;
  parts.reserve(model.states.size());
  for (TableState& state : impl.model.states) {
    const TablePart& held = state.part();
    const TableConfig& config = state.table();
    LocalPart<Float>& local =
        parts.emplace_back(LocalPart<Float>{.part = held, .dynamic = state.dynamic()});
    // Writers come in through the untracked door: the next publish writes a base.
    auto& storage = [&state]() -> decltype(auto) {
      if constexpr (std::is_const_v<Float>) {
        return state.storage();
      } else {
        return state.untracked_storage();
      }
    }();
    for (std::string& name : model.variable_names(config.name)) {
      const int64_t width = model.variable_width(config.name, name);
      // A variable as wide as the table is split with the columns; a narrower one (a row-wise
      // slot) is kept whole by every part (the planner splits no such table by columns).
      const bool split = width == config.dim;
      PartVariable<Float> variable{.name = std::move(name),
                                   .width = width,
                                   .first_column = split ? held.first_column : 0,
                                   .columns = split ? held.num_columns : width};
      if (variable.name == "parameters") {
        variable.dtype = storage.dtype();
        variable.bytes = storage.parameter_bytes();
      } else {
        const auto values = storage.variable(variable.name)->span();
        if constexpr (std::is_const_v<Float>) {
          variable.bytes = std::as_bytes(values);
        } else {
          variable.bytes = std::as_writable_bytes(values);
        }
      }
      local.variables.push_back(std::move(variable));
    }
  }
  return parts;
}

std::vector<LocalPart<const float>> PartAccess::local_parts(const Embedding& embedding) {
  return parts_of<const float>(embedding);
}

std::vector<LocalPart<float>> PartAccess::local_parts(Embedding& embedding) {
  return parts_of<float>(embedding);
}

std::vector<PartChanges> ChangeAccess::changes(Embedding& embedding) {
  embedding.impl_->execution.prefetcher.wait();
  const Model& model = embedding.impl_->model;
  std::vector<PartChanges> changes;
  changes.reserve(model.states.size());
  for (const TableState& state : model.states) {
    const ChangeLog& log = state.changes();
    changes.push_back({.part = state.part(),
                       .changed_rows = log.changed_rows(),
                       .removed_keys = log.removed_keys(),
                       .untracked = log.untracked(),
                       .dynamic = state.dynamic(),
                       .storage = &state.storage(),
                       .whole = model.whole_state(state.part().table) == &state});
  }
  return changes;
}

void ChangeAccess::start_tracking(Embedding& embedding) {
  embedding.impl_->execution.prefetcher.wait();
  for (TableState& state : embedding.impl_->model.states) state.changes().start(state.rows());
}

void ChangeAccess::clear(Embedding& embedding) {
  embedding.impl_->execution.prefetcher.wait();
  for (TableState& state : embedding.impl_->model.states) state.changes().clear();
}

std::shared_ptr<PublicationState>& ChangeAccess::publication(Embedding& embedding) {
  embedding.impl_->execution.prefetcher.wait();
  return embedding.impl_->model.publication;
}

Communicator& PartAccess::communicator(const Embedding& embedding) {
  return embedding.impl_->exchange.communicator();
}

bool PartAccess::has_pending_training_lookup(const Embedding& embedding) {
  return embedding.impl_->pending_lookups->oldest() != std::numeric_limits<int64_t>::max();
}

}  // namespace recemb::internal
