#include "tools/recemb/train_command.h"

#include "train/train_config.h"
#include "train/trainer.h"

namespace recemb::tools {
namespace {

// A TOML basic string holding `text`.
std::string toml_string(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  quoted += '"';
  return quoted;
}

}  // namespace

std::vector<std::string> train_overrides(const TrainArguments& args) {
  std::vector<std::string> overrides;
  if (!args.data.empty()) overrides.push_back("data.path=" + toml_string(args.data));
  if (!args.eval_data.empty()) overrides.push_back("data.eval_path=" + toml_string(args.eval_data));
  if (!args.preset.empty()) overrides.push_back("data.preset=" + toml_string(args.preset));
  if (!args.output.empty()) overrides.push_back("output.dir=" + toml_string(args.output));
  if (args.steps != 0) overrides.push_back("train.steps=" + std::to_string(args.steps));
  if (args.batch_size != 0) {
    overrides.push_back("train.batch_size=" + std::to_string(args.batch_size));
  }
  if (args.threads >= 0) overrides.push_back("embedding.threads=" + std::to_string(args.threads));
  overrides.insert(overrides.end(), args.overrides.begin(), args.overrides.end());
  return overrides;
}

int run_train_command(const TrainArguments& args, std::ostream& out, std::ostream& log,
                      train::ProgressMode progress) {
  if (args.print_default_config) {
    out << train::default_config_toml();
    return 0;
  }
  const train::TrainConfig config =
      train::load_train_config(args.config_path, train_overrides(args));
  if (args.print_config) {
    out << train::to_toml(config);
    return 0;
  }
  const train::TrainSummary summary =
      train::run_training(config, {.resume = args.resume, .log = &log, .progress = progress});
  out << train::format_summary(summary);
  out << "wrote " << config.output.dir
      << "/{config.toml,metrics.jsonl,summary.json,training.svg}\n";
  return 0;
}

}  // namespace recemb::tools
