#include "tools/recemb/hash_command.h"

#include <cstdint>
#include <optional>

#include "recemb/error.h"
#include "recemb/serving.h"

#include "dlrm/criteo_profile.h"
#include "dlrm/criteo_reader.h"
#include "tools/recemb/lookup_command.h"
#include "tools/recemb/train_command.h"
#include "train/config/embedding_model.h"
#include "train/config/train_config.h"

namespace recemb::tools {
namespace {

// How many characters of a bad value an error message quotes.
constexpr size_t kMaxQuotedLength = 40;

// The index of categorical feature `name` (C1 is 0).
int categorical_feature_index(const std::string& name) {
  for (int f = 0; f < dlrm::kNumCategoricalFeatures; ++f) {
    if (dlrm::categorical_feature_name(f) == name) return f;
  }
  throw InvalidArgument("feature '" + name.substr(0, kMaxQuotedLength) +
                        "' is not a Criteo categorical feature (C1 .. C26)");
}

// The vocabulary_size of the table of feature `name`: in the model, or in the settings.
int64_t vocabulary_size(const HashArguments& args) {
  if (!args.model.empty()) {
    if (!args.config_path.empty() || !args.overrides.empty() || !args.preset.empty()) {
      throw InvalidArgument(
          "the table sizes come from the model or from the settings: give MODEL, or --config, "
          "--set and --preset, not both");
    }
    const ServingModel model = ServingModel::open(args.model, {.verify = false});
    for (const FeatureConfig& feature : model.features()) {
      if (feature.name != args.feature) continue;
      for (const TableConfig& table : model.tables()) {
        if (table.name == feature.table) return table.vocabulary_size;
      }
    }
    throw InvalidArgument("serving model '" + args.model + "' has no feature '" + args.feature +
                          "'");
  }
  const train::TrainConfig config = train::load_train_config(
      args.config_path,
      train_overrides(
          {.config_path = args.config_path, .overrides = args.overrides, .preset = args.preset}));
  const train::EmbeddingModel model = train::embedding_model(config);
  return model.tables[static_cast<size_t>(categorical_feature_index(args.feature))].vocabulary_size;
}

}  // namespace

int run_hash_command(const HashArguments& args, std::istream& in, std::ostream& out,
                     std::ostream& err) {
  const int feature = categorical_feature_index(args.feature);
  const int64_t rows = vocabulary_size(args);
  int status = 0;
  std::string line;
  for (int64_t line_number = 1; std::getline(in, line); ++line_number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // A dynamic table (vocabulary_size 0) is keyed by the field itself: every field has a key.
    const std::optional<int64_t> id =
        rows == 0 ? dlrm::categorical_key(line) : dlrm::categorical_field_id(feature, line, rows);
    if (id) {
      out << *id << "\n" << std::flush;
      continue;
    }
    const std::string message =
        "feature '" + args.feature + "': value '" + line.substr(0, kMaxQuotedLength) +
        (line.size() > kMaxQuotedLength ? "..." : "") +
        "' is not 1 to 16 hexadecimal digits (or empty, for a missing value)";
    write_error_answer(line_number, message, out);
    out << std::flush;
    err << "recemb hash: line " << line_number << ": " << message << "\n";
    status = 1;
  }
  return status;
}

}  // namespace recemb::tools
