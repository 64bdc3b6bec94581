// `recemb plan`: where the tables of `recemb train`'s model would live on N shards
// (recemb/placement.h), printed as a table per shard and per table part.
#ifndef RECEMB_TOOLS_RECEMB_PLAN_COMMAND_H_
#define RECEMB_TOOLS_RECEMB_PLAN_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace recemb::tools {

struct PlanArguments {
  std::string config_path = {};             // as recemb train: TOML settings file
  std::vector<std::string> overrides = {};  // as recemb train: "section.key=value"
  std::string preset = {};                  // shortcut for data.preset
  int shards = 1;                           // >= 1
  std::string strategy = "auto";  // auto | table_wise | row_wise | column_wise | replicated
};

// Prints the plan of the model the settings describe, every feature looked up once per example
// (Criteo's one id per categorical feature). Returns 0; bad settings throw InvalidArgument.
int run_plan_command(const PlanArguments& args, std::ostream& out);

}  // namespace recemb::tools

#endif  // RECEMB_TOOLS_RECEMB_PLAN_COMMAND_H_
