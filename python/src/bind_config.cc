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

  py::class_<TableConfig> table(module, "TableConfig",
                                "One table of vocabulary_size rows of dim floats.");
  bind_fields(table, Field{"name", &TableConfig::name},
              Field{"vocabulary_size", &TableConfig::vocabulary_size},
              Field{"dim", &TableConfig::dim}, Field{"initializer", &TableConfig::initializer},
              Field{"optimizer", &TableConfig::optimizer},
              Field{"combiner", &TableConfig::combiner},
              Field{"quantization_config", &TableConfig::quantization_config});

  py::class_<FeatureConfig> feature(module, "FeatureConfig",
                                    "A feature looked up in the table named `table`.");
  bind_fields(feature, Field{"name", &FeatureConfig::name}, Field{"table", &FeatureConfig::table},
              Field{"max_sequence_length", &FeatureConfig::max_sequence_length},
              Field{"output_shape", &FeatureConfig::output_shape},
              Field{"validate_weights_and_indices", &FeatureConfig::validate_weights_and_indices});
}

}  // namespace recemb::python
