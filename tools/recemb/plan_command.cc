#include "tools/recemb/plan_command.h"

#include "recemb/placement.h"

#include "tools/recemb/train_command.h"
#include "train/config/embedding_model.h"
#include "train/config/train_config.h"

namespace recemb::tools {

int run_plan_command(const PlanArguments& args, std::ostream& out) {
  const train::TrainConfig config = train::load_train_config(
      args.config_path,
      train_overrides(
          {.config_path = args.config_path, .overrides = args.overrides, .preset = args.preset}));
  const train::EmbeddingModel model = train::embedding_model(config);
  const Placement placement = plan_placement(
      model.tables, model.features, model.optimizer,
      {.num_shards = args.shards, .strategy = parse_sharding_strategy(args.strategy)});
  out << format_placement(placement);
  return 0;
}

}  // namespace recemb::tools
