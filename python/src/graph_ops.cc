// recemb._recemb.GraphOps: an Embedding behind graph_op_abi.h's plain-C functions, for the op
// libraries of graph frameworks (docs/keras.md, "How the layer runs").
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/string_key.h"

#include "bind.h"
#include "graph_op_abi.h"

namespace recemb::python {
namespace {

// Training lookups kept for their gradients at most: beyond it the oldest is dropped (a forward
// pass in training mode that no gradient reached, such as a call outside a GradientTape).
constexpr size_t kMaxPendingBatches = 8;
// Applied batches kept for the next training lookups to reuse their memory (a training step
// applies one batch and looks up the next).
constexpr size_t kSpareBatches = 2;

FeatureInput feature_input(const RecembGraphInput& input) {
  const std::span<const int64_t> ids(input.ids, static_cast<size_t>(input.id_count));
  const std::span<const float> weights(input.weights, static_cast<size_t>(input.weight_count));
  const std::span<const int64_t> index(input.index, static_cast<size_t>(input.index_count));
  const std::vector<int64_t> shape(input.shape, input.shape + input.shape_rank);
  switch (input.kind) {
    case RECEMB_INPUT_RAGGED:
      return RaggedIds{ids, index, weights};
    case RECEMB_INPUT_SPARSE:
      return SparseIds{index, ids, shape, weights};
    default:
      return DenseIds{ids, shape, weights};
  }
}

// Runs `call`, turning its exception into a status and a message.
template <class Call>
int32_t guarded(char* message, size_t message_size, Call call) {
  auto fail = [&](int32_t status, const char* what) {
    if (message_size > 0) std::snprintf(message, message_size, "%s", what);
    return status;
  };
  try {
    call();
    return RECEMB_GRAPH_OK;
  } catch (const InvalidArgument& error) {
    return fail(RECEMB_GRAPH_INVALID_ARGUMENT, error.what());
  } catch (const FailedPrecondition& error) {
    return fail(RECEMB_GRAPH_FAILED_PRECONDITION, error.what());
  } catch (const std::bad_alloc& error) {  // ResourceExhausted too
    return fail(RECEMB_GRAPH_RESOURCE_EXHAUSTED, error.what());
  } catch (const py::error_already_set& error) {  // a Python callback raised
    py::gil_scoped_acquire gil;
    return fail(RECEMB_GRAPH_INTERNAL, error.what());
  } catch (const std::exception& error) {
    return fail(RECEMB_GRAPH_INTERNAL, error.what());
  }
}

class GraphOps;

// The registered layers, by id: a call finds its GraphOps here (and holds it while it runs), so a
// graph that outlived its layer gets an error, not freed memory. Never destroyed (ops may run
// while the interpreter shuts down).
class Registry {
 public:
  static Registry& instance() {
    static Registry* registry = new Registry();
    return *registry;
  }
  int64_t add(const std::shared_ptr<GraphOps>& ops) {
    std::lock_guard lock(mutex_);
    layers_.emplace(next_id_, ops);
    return next_id_++;
  }
  void remove(int64_t id) {
    std::lock_guard lock(mutex_);
    layers_.erase(id);
  }
  // The GraphOps of `id`; throws FailedPrecondition when none is registered under it.
  std::shared_ptr<GraphOps> find(int64_t id) {
    std::lock_guard lock(mutex_);
    const auto found = layers_.find(id);
    std::shared_ptr<GraphOps> ops = found == layers_.end() ? nullptr : found->second.lock();
    if (ops == nullptr) {
      throw FailedPrecondition("recemb: the layer " + std::to_string(id) +
                               " that this graph's ops call no longer exists (the graph outlived "
                               "its recemb layer; docs/keras.md)");
    }
    return ops;
  }

 private:
  std::mutex mutex_;
  int64_t next_id_ = 1;
  std::map<int64_t, std::weak_ptr<GraphOps>> layers_;
};

class GraphOps {
 public:
  // Holds `embedding` (a recemb._recemb.Embedding) while it lives: a call in flight keeps both.
  explicit GraphOps(py::object embedding)
      : object_(std::move(embedding)), embedding_(object_.cast<Embedding&>()) {}
  ~GraphOps() {
    Registry::instance().remove(id_);
    py::gil_scoped_acquire gil;  // the last holder may be an op's thread
    object_ = py::object();
  }
  GraphOps(const GraphOps&) = delete;
  GraphOps& operator=(const GraphOps&) = delete;

  static std::shared_ptr<GraphOps> create(py::object embedding) {
    auto ops = std::make_shared<GraphOps>(std::move(embedding));
    ops->id_ = Registry::instance().add(ops);
    return ops;
  }

  int64_t layer_id() const { return id_; }

  size_t pending() {
    std::lock_guard lock(mutex_);
    return batches_.size();
  }

  static const RecembGraphApi kApi;

 private:
  static int32_t activation_shape_entry(int64_t layer, int32_t feature,
                                        const RecembGraphInput* input, int64_t* shape,
                                        int32_t* rank, char* message, size_t message_size) {
    return guarded(message, message_size, [&] {
      const std::shared_ptr<GraphOps> ops = Registry::instance().find(layer);
      GraphOps& self = *ops;
      if (feature < 0 || static_cast<size_t>(feature) >= self.embedding_.features().size()) {
        throw InvalidArgument("GraphOps: feature " + std::to_string(feature) + " of " +
                              std::to_string(self.embedding_.features().size()));
      }
      const std::vector<int64_t> dims =
          self.embedding_.activation_shape(static_cast<size_t>(feature), feature_input(*input));
      if (dims.size() > RECEMB_GRAPH_MAX_RANK) {
        throw InvalidArgument("GraphOps: an activation of rank " + std::to_string(dims.size()));
      }
      std::copy(dims.begin(), dims.end(), shape);
      *rank = static_cast<int32_t>(dims.size());
    });
  }

  static int32_t lookup_entry(int64_t layer, const RecembGraphInput* inputs, int32_t feature_count,
                              float* const* activations, const int64_t* activation_sizes,
                              int64_t* batch_id, char* message, size_t message_size) {
    return guarded(message, message_size, [&] {
      const std::shared_ptr<GraphOps> ops = Registry::instance().find(layer);
      GraphOps& self = *ops;
      std::vector<FeatureInput> views;
      std::vector<std::span<float>> outputs;
      for (int32_t f = 0; f < feature_count; ++f) {
        views.push_back(feature_input(inputs[f]));
        outputs.emplace_back(activations[f], static_cast<size_t>(activation_sizes[f]));
      }
      std::lock_guard lock(self.mutex_);
      if (batch_id == nullptr) {
        self.embedding_.lookup(views, outputs);
        return;
      }
      std::unique_ptr<LookupBatch> batch;
      if (self.spare_.empty()) {
        batch = std::make_unique<LookupBatch>();
      } else {  // an applied batch: its memory is reused (no allocation once grown)
        batch = std::move(self.spare_.back());
        self.spare_.pop_back();
      }
      try {
        self.embedding_.lookup(views, outputs, *batch);
      } catch (...) {
        self.spare_.push_back(std::move(batch));
        throw;
      }
      *batch_id = self.next_id_++;
      self.batches_.emplace(*batch_id, std::move(batch));
      if (self.batches_.size() > kMaxPendingBatches) self.retire(self.batches_.begin());
    });
  }

  static int32_t apply_gradients_entry(int64_t layer, int64_t batch_id,
                                       const float* const* gradients, const int64_t* gradient_sizes,
                                       int32_t feature_count, char* message, size_t message_size) {
    return guarded(message, message_size, [&] {
      const std::shared_ptr<GraphOps> ops = Registry::instance().find(layer);
      GraphOps& self = *ops;
      std::vector<std::span<const float>> spans;
      for (int32_t f = 0; f < feature_count; ++f) {
        spans.emplace_back(gradients[f], static_cast<size_t>(gradient_sizes[f]));
      }
      std::lock_guard lock(self.mutex_);
      const auto found = self.batches_.find(batch_id);
      if (found == self.batches_.end()) {
        throw FailedPrecondition(
            "recemb: the gradients of training lookup " + std::to_string(batch_id) +
            " came after it was applied or dropped (at most " + std::to_string(kMaxPendingBatches) +
            " training lookups wait for their gradients; docs/keras.md)");
      }
      self.embedding_.apply_gradients(*found->second, spans);  // throws: the batch is kept
      self.retire(found);
    });
  }

  static void string_keys_entry(const char* const* strings, const int64_t* sizes, int64_t count,
                                int64_t* keys) {
    for (int64_t i = 0; i < count; ++i) {
      keys[i] = string_key(std::string_view(strings[i], static_cast<size_t>(sizes[i])));
    }
  }

  // Forgets a pending batch, keeping its memory for the next training lookup. A dropped batch
  // (never applied) releases its lookup first: its dynamic-table keys are no longer pinned.
  void retire(std::map<int64_t, std::unique_ptr<LookupBatch>>::iterator pending) {
    std::unique_ptr<LookupBatch> batch = std::move(pending->second);
    batches_.erase(pending);
    if (batch->applicable()) batch = std::make_unique<LookupBatch>();
    if (spare_.size() < kSpareBatches) spare_.push_back(std::move(batch));
  }

  py::object object_;
  Embedding& embedding_;
  int64_t id_ = 0;
  std::mutex mutex_;
  int64_t next_id_ = 0;
  std::map<int64_t, std::unique_ptr<LookupBatch>> batches_;  // by id: oldest first
  std::vector<std::unique_ptr<LookupBatch>> spare_;          // applied, for reuse
};

const RecembGraphApi GraphOps::kApi = {&GraphOps::activation_shape_entry, &GraphOps::lookup_entry,
                                       &GraphOps::apply_gradients_entry,
                                       &GraphOps::string_keys_entry};

}  // namespace

void bind_graph_ops(py::module_& module) {
  module.def(
      "graph_api_address", [] { return reinterpret_cast<uintptr_t>(&GraphOps::kApi); },
      "The address of the module's RecembGraphApi (graph_op_abi.h), valid for the process.");
  py::class_<GraphOps, std::shared_ptr<GraphOps>>(
      module, "GraphOps",
      "An Embedding behind the plain-C functions of graph_op_abi.h, for a graph framework's op "
      "library (docs/keras.md), registered under layer_id() while it lives.")
      .def(py::init(&GraphOps::create), py::arg("embedding"))
      .def("layer_id", &GraphOps::layer_id, "The id the ops name this layer by.")
      .def("pending", &GraphOps::pending, "Training lookups kept for their gradients (at most 8).");
}

}  // namespace recemb::python
