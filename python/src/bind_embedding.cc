// recemb/embedding.h. lookup, apply_gradients, read_variable, write_variable and the constructor
// release the interpreter lock (the Embedding runs its own worker threads, and with several ranks
// these calls are collective: ranks that are threads of this process must run meanwhile); Python
// callbacks (initializers, learning rates) take it back when they are called. variable_data returns
// a numpy view of the variable whose base is the Embedding object.
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/error.h"

#include "bind.h"

namespace recemb::python {

void bind_embedding(py::module_& module) {
  py::enum_<NonFiniteGradients>(module, "NonFiniteGradients",
                                "What apply_gradients does with a NaN or infinite gradient.")
      .value("kReject", NonFiniteGradients::kReject)
      .value("kSkipRows", NonFiniteGradients::kSkipRows);
  module.def("non_finite_gradients_name", &non_finite_gradients_name, py::arg("value"),
             "'reject' or 'skip_rows'.");
  module.def("parse_non_finite_gradients", &parse_non_finite_gradients, py::arg("name"),
             "The inverse of non_finite_gradients_name; anything else raises InvalidArgument "
             "listing the valid names.");

  py::enum_<PipelineStaleness>(module, "PipelineStaleness",
                               "What prefetch does ahead of finish_lookup: kNone (everything but "
                               "reading the tables), kOneStep (everything).")
      .value("kNone", PipelineStaleness::kNone)
      .value("kOneStep", PipelineStaleness::kOneStep);
  module.def("pipeline_staleness_name", &pipeline_staleness_name, py::arg("value"),
             "'none' or 'one_step'.");
  module.def("parse_pipeline_staleness", &parse_pipeline_staleness, py::arg("name"),
             "The inverse of pipeline_staleness_name; anything else raises InvalidArgument "
             "listing the valid names.");

  py::class_<EmbeddingOptions> options(module, "EmbeddingOptions");
  bind_fields(options, Field{"optimizer", &EmbeddingOptions::optimizer},
              Field{"num_threads", &EmbeddingOptions::num_threads},
              Field{"executor", &EmbeddingOptions::executor},
              Field{"seed", &EmbeddingOptions::seed},
              Field{"non_finite_gradients", &EmbeddingOptions::non_finite_gradients},
              Field{"placement", &EmbeddingOptions::placement},
              Field{"communicator", &EmbeddingOptions::communicator},
              Field{"pipeline_staleness", &EmbeddingOptions::pipeline_staleness});

  py::class_<VocabularyStats> stats(module, "VocabularyStats",
                                    "A dynamic table's keys: held now, and inserted, evicted and "
                                    "not-admitted lookups since construction (or restore).");
  bind_fields(stats, Field{"size", &VocabularyStats::size},
              Field{"inserted", &VocabularyStats::inserted},
              Field{"evicted", &VocabularyStats::evicted},
              Field{"not_admitted_lookups", &VocabularyStats::not_admitted_lookups});

  py::class_<LookupBatch>(module, "LookupBatch",
                          "The validated ids of one training lookup: what apply_gradients needs. "
                          "Belongs to the Embedding that filled it.")
      .def(py::init<>())
      .def("applicable", &LookupBatch::applicable, "Whether it holds a lookup not applied yet.");

  using Inputs = std::span<const FeatureInput>;
  using Activations = std::span<const std::span<float>>;
  using Release = py::call_guard<py::gil_scoped_release>;

  py::class_<Embedding>(module, "Embedding",
                        "Many tables, many features, lookups with combiners and optimizers fused "
                        "into apply_gradients. Not safe for concurrent calls.")
      .def(py::init<std::vector<TableConfig>, std::vector<FeatureConfig>, EmbeddingOptions>(),
           py::arg("tables"), py::arg("features"), py::arg("options") = EmbeddingOptions{},
           Release())
      .def("tables", &Embedding::tables)
      .def("features", &Embedding::features)
      .def("options", &Embedding::options)
      .def("placement", &Embedding::placement, "The plan the tables follow (a copy).")
      .def("rank", &Embedding::rank, "This process's rank (0 without a communicator).")
      .def("world_size", &Embedding::world_size, "The number of ranks (1 without a communicator).")
      .def("step", &Embedding::step, "Number of apply_gradients calls so far.")
      .def("set_step", &Embedding::set_step, py::arg("step"),
           "Sets the step counter, as a restore from a checkpoint does.")
      .def("activation_shape", &Embedding::activation_shape, py::arg("feature"), py::arg("input"),
           "The shape of feature `feature`'s activation for `input`: output shape + [dim].")
      .def("lookup", py::overload_cast<Inputs, Activations>(&Embedding::lookup), py::arg("inputs"),
           py::arg("activations"), Release(),
           "Pure lookup: activations[f] (float32, C-contiguous, writeable) receives feature f's "
           "combined rows; nothing is kept for training.")
      .def("lookup", py::overload_cast<Inputs, Activations, LookupBatch&>(&Embedding::lookup),
           py::arg("inputs"), py::arg("activations"), py::arg("batch"), Release(),
           "Training lookup: also keeps in `batch` what apply_gradients needs.")
      .def("prefetch", &Embedding::prefetch, py::arg("inputs"), py::arg("activations"),
           py::arg("batch"), Release(),
           "Starts the training lookup of `inputs` on a background thread and returns at once; "
           "finish_lookup(batch) completes it. The arrays of `inputs` and `activations` must stay "
           "alive until then.")
      .def("finish_lookup", &Embedding::finish_lookup, py::arg("batch"), Release(),
           "Completes the prefetch into `batch`: its activations hold the results and `batch` is "
           "applicable, as after lookup(inputs, activations, batch). Raises the lookup's "
           "validation errors.")
      .def(
          "agree_on_error",
          [](Embedding& embedding, const py::object& error) {
            std::exception_ptr cpp_error;
            if (!error.is_none()) {
              const std::string message = py::str(error);
              cpp_error = PyErr_GivenExceptionMatches(error.ptr(), PyExc_ValueError)
                              ? std::make_exception_ptr(InvalidArgument(message))
                              : std::make_exception_ptr(FailedPrecondition(message));
            }
            py::gil_scoped_release release;
            embedding.agree_on_error(cpp_error);
          },
          py::arg("error"),
          "Collective: agrees with every rank on the checks made before a collective call. "
          "`error` is None or this rank's exception: a ValueError travels as InvalidArgument, any "
          "other as FailedPrecondition. Returns when no rank passed one, else raises on every "
          "rank ('rank R: <message>').")
      .def("apply_gradients", &Embedding::apply_gradients, py::arg("batch"), py::arg("gradients"),
           Release(),
           "Applies d(loss)/d(activations) of the lookup in `batch` (one float32 array per "
           "feature; an empty one stands for zeros) and increments step().")
      .def("skipped_rows", &Embedding::skipped_rows)
      .def("variable_names", &Embedding::variable_names, py::arg("table"))
      .def("variable_shape", &Embedding::variable_shape, py::arg("table"), py::arg("variable"))
      .def("read_variable", &Embedding::read_variable, py::arg("table"), py::arg("variable"),
           py::arg("out"), Release(),
           "Copies the whole variable into `out` (float32, its exact size), whatever the "
           "placement. Collective with several ranks.")
      .def("write_variable", &Embedding::write_variable, py::arg("table"), py::arg("variable"),
           py::arg("values"), Release(),
           "Copies the whole variable from `values` (float32, its exact size, finite); each rank "
           "keeps the parts it holds. Collective with several ranks.")
      .def("has_whole_table", &Embedding::has_whole_table, py::arg("table"),
           "Whether this rank holds the whole table (and so variable_data works).")
      .def("vocabulary_stats", &Embedding::vocabulary_stats, py::arg("table"), Release(),
           "A dynamic table's VocabularyStats (every part of it must be on this rank).")
      .def(
          "read_dynamic_table",
          [](const Embedding& embedding, std::string_view table) {
            DynamicTableContents contents;
            {
              py::gil_scoped_release release;
              contents = embedding.read_dynamic_table(table);
            }
            return contents_tuple(std::move(contents));
          },
          py::arg("table"),
          "A dynamic table's (keys int64 [n] increasing, parameters float32 [n * dim], [(slot "
          "name, float32 [n * width])]), flat arrays (every part of it must be on this rank).")
      .def(
          "write_dynamic_table",
          [](Embedding& embedding, std::string_view table, std::span<const int64_t> keys,
             std::span<const float> parameters,
             const std::vector<std::pair<std::string, std::span<const float>>>& slots) {
            DynamicTableContents contents{.keys = {keys.begin(), keys.end()},
                                          .parameters = {parameters.begin(), parameters.end()},
                                          .slots = {}};
            for (const auto& [name, values] : slots) {
              contents.slots.emplace_back(name, std::vector<float>(values.begin(), values.end()));
            }
            py::gil_scoped_release release;
            embedding.write_dynamic_table(table, contents);
          },
          py::arg("table"), py::arg("keys"), py::arg("parameters"), py::arg("slots"),
          "Replaces a dynamic table's keys, rows and slots (flat arrays as read_dynamic_table "
          "gives them; validated, nothing changed on error).")
      .def("variable_data",
           py::overload_cast<std::string_view, std::string_view>(&Embedding::variable_data),
           py::arg("table"), py::arg("variable"), py::return_value_policy::reference_internal,
           "The variable's memory as a flat float32 array whose base is this Embedding. Writing "
           "through it is allowed while no other call runs; values written are not validated. "
           "Raises FailedPrecondition unless has_whole_table(table).")
      .def("half_parameter_data",
           py::overload_cast<std::string_view>(&Embedding::half_parameter_data), py::arg("table"),
           py::return_value_policy::reference_internal,
           "A 16-bit table's rows as it stores them: a flat uint16 array of bfloat16 or float16 "
           "bit patterns (the table's dtype) whose base is this Embedding; as variable_data "
           "otherwise. Raises FailedPrecondition unless has_whole_table(table) and the table is "
           "16-bit.");
}

}  // namespace recemb::python
