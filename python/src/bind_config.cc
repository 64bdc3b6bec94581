// recemb/config.h.
#include "recemb/config.h"

#include "bind.h"

namespace recemb::python {

void bind_config(py::module_& module) {
  py::class_<QuantizationConfig> quantization(
      module, "QuantizationConfig",
      "Simulated quantization of looked-up rows (forward only, straight-through backward).");
  bind_fields(quantization, Field{"num_buckets", &QuantizationConfig::num_buckets},
              Field{"lower", &QuantizationConfig::lower},
              Field{"upper", &QuantizationConfig::upper});

  py::enum_<WhenFull>(module, "WhenFull",
                      "What a dynamic table does when admitting a key would exceed its capacity.")
      .value("kEvictLeastRecent", WhenFull::kEvictLeastRecent)
      .value("kEvictLeastFrequent", WhenFull::kEvictLeastFrequent)
      .value("kError", WhenFull::kError);
  module.def("when_full_name", &when_full_name, py::arg("value"),
             "'evict_least_recent', 'evict_least_frequent' or 'error'.");
  module.def("parse_when_full", &parse_when_full, py::arg("name"),
             "The inverse of when_full_name; anything else raises InvalidArgument listing the "
             "valid names.");

  py::enum_<DType>(module, "DType", "The type of a table's rows: float32, bfloat16 or float16.")
      .value("kFloat32", DType::kFloat32)
      .value("kBFloat16", DType::kBFloat16)
      .value("kFloat16", DType::kFloat16);
  module.def("dtype_name", &dtype_name, py::arg("value"), "'float32', 'bfloat16' or 'float16'.");
  module.def("parse_dtype", &parse_dtype, py::arg("name"),
             "The inverse of dtype_name; anything else raises InvalidArgument listing the valid "
             "names.");
  py::enum_<Rounding>(module, "Rounding", "How updates round a 16-bit table's rows.")
      .value("kStochastic", Rounding::kStochastic)
      .value("kNearest", Rounding::kNearest);
  module.def("rounding_name", &rounding_name, py::arg("value"), "'stochastic' or 'nearest'.");
  module.def("parse_rounding", &parse_rounding, py::arg("name"),
             "The inverse of rounding_name; anything else raises InvalidArgument listing the "
             "valid names.");

  py::class_<DynamicVocabulary> vocabulary(
      module, "DynamicVocabulary",
      "A dynamic table's keys: capacity, admission (min_count) and eviction (ttl_steps, "
      "when_full).");
  bind_fields(vocabulary, Field{"capacity", &DynamicVocabulary::capacity},
              Field{"min_count", &DynamicVocabulary::min_count},
              Field{"ttl_steps", &DynamicVocabulary::ttl_steps},
              Field{"when_full", &DynamicVocabulary::when_full});
  module.def("validate_dynamic_vocabulary", &validate_dynamic_vocabulary, py::arg("vocabulary"),
             py::arg("owner"),
             "Raises InvalidArgument naming `owner` and the field for a capacity or min_count < 1, "
             "a ttl_steps < 1.");

  py::class_<TableConfig> table(
      module, "TableConfig",
      "One table of vocabulary_size rows of dim values (of dtype), or a dynamic one "
      "(dynamic_vocabulary).");
  bind_fields(table, Field{"name", &TableConfig::name},
              Field{"vocabulary_size", &TableConfig::vocabulary_size},
              Field{"dim", &TableConfig::dim}, Field{"initializer", &TableConfig::initializer},
              Field{"optimizer", &TableConfig::optimizer},
              Field{"combiner", &TableConfig::combiner},
              Field{"quantization_config", &TableConfig::quantization_config},
              Field{"dynamic_vocabulary", &TableConfig::dynamic_vocabulary},
              Field{"dtype", &TableConfig::dtype}, Field{"rounding", &TableConfig::rounding});

  py::class_<FeatureConfig> feature(module, "FeatureConfig",
                                    "A feature looked up in the table named `table`.");
  bind_fields(feature, Field{"name", &FeatureConfig::name}, Field{"table", &FeatureConfig::table},
              Field{"max_sequence_length", &FeatureConfig::max_sequence_length},
              Field{"output_shape", &FeatureConfig::output_shape},
              Field{"validate_weights_and_indices", &FeatureConfig::validate_weights_and_indices});
}

}  // namespace recemb::python
