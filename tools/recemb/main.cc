// The recemb command:
//   recemb train [options]                   train the DLRM-style click model (docs/training.md)
//   recemb checkpoint inspect DIR            a checkpoint's step, tables, files and checksums
//   recemb export CKPT OUT [--dtype int8]    a checkpoint as a model directory for serving
//   recemb lookup MODEL                      serving lookups, JSON lines on stdin -> stdout
//   recemb predict MODEL_DIR [--data FILE]   click probabilities of Criteo lines
//   recemb serve MODEL_DIR [--listen A:P]   the models of MODEL_DIR over HTTP (until SIGTERM)
//   recemb hash --feature C3 [MODEL]         raw Criteo values -> the trainer's table rows
//   recemb plan --shards N                   how the model's tables would be sharded
// `recemb SUBCOMMAND --help` lists the options; `recemb --version` prints the version. The one file
// that includes CLI11.
#include <CLI/CLI.hpp>
#include <csignal>
#include <exception>
#include <iostream>
#include <string>
#include <unistd.h>

#include "recemb/error.h"
#include "recemb/placement.h"

#include "tools/recemb/checkpoint_commands.h"
#include "tools/recemb/hash_command.h"
#include "tools/recemb/lookup_command.h"
#include "tools/recemb/plan_command.h"
#include "tools/recemb/predict_command.h"
#include "tools/recemb/serve_command.h"
#include "tools/recemb/train_command.h"

namespace {

using recemb::tools::ExportArguments;
using recemb::tools::HashArguments;
using recemb::tools::InspectArguments;
using recemb::tools::LookupArguments;
using recemb::tools::PlanArguments;
using recemb::tools::PredictArguments;
using recemb::tools::ServeArguments;
using recemb::tools::TrainArguments;

CLI::App* add_train(CLI::App& app, TrainArguments& args) {
  CLI::App* train = app.add_subcommand(
      "train", "Train a DLRM-style click-through model (synthetic Criteo-like data by default)");
  train
      ->add_option("-c,--config", args.config_path,
                   "TOML settings file (see --print-default-config)")
      ->check(CLI::ExistingFile);
  train->add_option("-s,--set", args.overrides,
                    "Change one setting: section.key=value, the value in TOML syntax "
                    "(--set model.top_mlp=[128,64]); repeatable, applied in order, last wins");
  train->add_option("--data", args.data,
                    "Criteo TSV files (plain or gzip) or globs to train on, in order (data.path)");
  train->add_option("--eval-data", args.eval_data, "Held-out Criteo TSV file (data.eval_path)");
  train->add_option("--preset", args.preset, "Table sizes: small, criteo-kaggle, criteo-1tb");
  train->add_option("--steps", args.steps, "Training steps (train.steps)");
  train->add_option("--batch-size", args.batch_size, "Examples per step (train.batch_size)");
  train->add_option("--threads", args.threads, "Embedding threads, 0 = one per core");
  train->add_option("-o,--output", args.output, "Output directory (output.dir)");
  CLI::Option* resume =
      train->add_flag("--resume", args.resume, "Continue this run from its newest checkpoint");
  train
      ->add_option("--init-from", args.init_from,
                   "Start a new run from this checkpoint's tables, slots and dense model "
                   "(a ckpt-* directory, or a checkpoint directory: its newest)")
      ->excludes(resume);
  train->add_flag("--print-config", args.print_config, "Print the effective settings and exit");
  train->add_flag("--print-default-config", args.print_default_config,
                  "Print every setting with its default and meaning, and exit");
  return train;
}

CLI::App* add_inspect(CLI::App& app, InspectArguments& args) {
  CLI::App* checkpoint = app.add_subcommand("checkpoint", "Checkpoint tools");
  checkpoint->require_subcommand(1);
  CLI::App* inspect = checkpoint->add_subcommand(
      "inspect", "Show a checkpoint's step, tables and files, and verify its checksums");
  inspect->add_option("DIR", args.checkpoint, "A ckpt-* directory, or a root (its newest)")
      ->required();
  inspect->add_flag_callback(
      "--no-verify", [&args] { args.verify = false; }, "Check file sizes only, not checksums");
  return inspect;
}

CLI::App* add_export(CLI::App& app, ExportArguments& args) {
  CLI::App* exporter = app.add_subcommand(
      "export", "Write a checkpoint's model (tables + dense part) as a serving model");
  exporter->add_option("CKPT", args.checkpoint, "A ckpt-* directory, or a root (its newest)")
      ->required();
  exporter->add_option("OUT", args.output, "The model directory to write: its model.recemb")
      ->required();
  exporter->add_option("--dtype", args.dtype, "float32 | float16 | int8 (row-wise scale and bias)")
      ->check(CLI::IsMember({"float32", "float16", "int8"}));
  exporter->add_option("--threads", args.threads, "Threads for loading, 0 = one per core");
  return exporter;
}

CLI::App* add_lookup(CLI::App& app, LookupArguments& args) {
  CLI::App* lookup = app.add_subcommand(
      "lookup", "Serving lookups: one JSON object of feature ids per stdin line, embeddings out");
  lookup
      ->add_option("MODEL", args.model,
                   "A serving model file, or a model directory (recemb export): its model.recemb")
      ->required();
  lookup->add_flag_callback(
      "--no-verify", [&args] { args.verify = false; }, "Skip checksum verification when opening");
  return lookup;
}

CLI::App* add_predict(CLI::App& app, PredictArguments& args) {
  CLI::App* predict = app.add_subcommand(
      "predict", "Click probabilities of Criteo lines (stdin or --data), one line out per line in");
  predict
      ->add_option("MODEL_DIR", args.model,
                   "A model directory, or its model.recemb (recemb export of a train run)")
      ->required();
  predict->add_option("--data", args.data,
                      "Criteo TSV files to predict, in order (default: stdin)");
  predict
      ->add_option_function<std::string>(
          "--labels",
          [&args](const std::string& value) {
            args.labels = value == "yes" ? recemb::dlrm::CriteoLabel::kPresent
                                         : recemb::dlrm::CriteoLabel::kAbsent;
          },
          "Whether every line starts with the label field: yes or no (default: lines of 40 fields "
          "have it, lines of 39 are refused as ambiguous)")
      ->check(CLI::IsMember({"yes", "no"}));
  predict->add_flag_callback(
      "--no-verify", [&args] { args.verify = false; }, "Skip checksum verification when opening");
  return predict;
}

CLI::App* add_serve(CLI::App& app, ServeArguments& args) {
  CLI::App* serve = app.add_subcommand(
      "serve", "Serve MODEL_DIR/NAME/VERSION/model.recemb over HTTP until SIGINT or SIGTERM");
  serve->add_option("MODEL_DIR", args.model_dir, "A directory of models: NAME/VERSION/model.recemb")
      ->required();
  serve->add_option("--listen", args.listen, "HOST:PORT to listen on (port 0: any free port)")
      ->capture_default_str();
  serve
      ->add_option("--threads", args.threads,
                   "Threads running the event loop; 0 (or more than the cores): one per core")
      ->capture_default_str();
  serve->add_option("--max-body-bytes", args.max_body_bytes, "Longer request bodies get 413")
      ->capture_default_str();
  serve
      ->add_option("--poll-seconds", args.poll_seconds,
                   "Scan MODEL_DIR for new versions this often: 0.01 to 86400, or 0: never")
      ->capture_default_str();
  serve
      ->add_option("--max-examples", args.max_examples,
                   "More examples in a request get 400: 1 to 1000000")
      ->capture_default_str();
  serve
      ->add_option("--max-request-memory", args.max_request_memory,
                   "Bytes one request's ids and answer may take; more get 413")
      ->capture_default_str();
  serve
      ->add_option("--max-buffered-bytes", args.max_buffered_bytes,
                   "Bytes of request bodies held at once; a body beyond gets 503")
      ->capture_default_str();
  return serve;
}

CLI::App* add_hash(CLI::App& app, HashArguments& args) {
  CLI::App* hash = app.add_subcommand(
      "hash", "The table rows recemb train uses for raw Criteo values (one per stdin line)");
  hash->add_option("--feature", args.feature, "The categorical feature: C1 .. C26")->required();
  hash->add_option("MODEL", args.model,
                   "A serving model exported from recemb train (else the settings below)");
  hash->add_option("-c,--config", args.config_path, "TOML settings file, as for train")
      ->check(CLI::ExistingFile);
  hash->add_option("-s,--set", args.overrides, "Change one setting, as for train");
  hash->add_option("--preset", args.preset, "Table sizes: small, criteo-kaggle, criteo-1tb");
  return hash;
}

CLI::App* add_plan(CLI::App& app, PlanArguments& args) {
  CLI::App* plan = app.add_subcommand(
      "plan",
      "Print how recemb train's tables would be placed on N shards (table, row, column "
      "wise or replicated): rows, bytes and lookups per shard");
  plan->add_option("--shards", args.shards, "Number of shards (threads, processes or hosts)")
      ->check(CLI::Range(1, recemb::kMaxNumShards));
  plan->add_option("--strategy", args.strategy,
                   "auto | table_wise | row_wise | column_wise | replicated");
  plan->add_option("-c,--config", args.config_path, "TOML settings file, as for train")
      ->check(CLI::ExistingFile);
  plan->add_option("-s,--set", args.overrides, "Change one setting, as for train");
  plan->add_option("--preset", args.preset, "Table sizes: small, criteo-kaggle, criteo-1tb");
  return plan;
}

// "recemb: error: <what>" as one line in one write: under mpirun every rank may report the same
// error at once, and a line written in pieces would interleave with another rank's.
void report_error(const std::exception& error) {
  std::cerr << std::string("recemb: error: ") + error.what() + "\n" << std::flush;
}

}  // namespace

int main(int argc, char** argv) {
  // A write beyond the file-size limit (ulimit -f) fails with EFBIG, reported as any write error,
  // instead of killing the process without a word.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"recemb: embedding tables for recommendation models"};
  app.set_version_flag("--version", std::string("recemb ") + RECEMB_VERSION);
  app.require_subcommand(1);
  TrainArguments train_args;
  InspectArguments inspect_args;
  ExportArguments export_args;
  LookupArguments lookup_args;
  PlanArguments plan_args;
  PredictArguments predict_args;
  HashArguments hash_args;
  ServeArguments serve_args;
  CLI::App* train = add_train(app, train_args);
  CLI::App* inspect = add_inspect(app, inspect_args);
  CLI::App* exporter = add_export(app, export_args);
  CLI::App* lookup = add_lookup(app, lookup_args);
  CLI::App* plan = add_plan(app, plan_args);
  CLI::App* predict = add_predict(app, predict_args);
  CLI::App* hash = add_hash(app, hash_args);
  CLI::App* serve = add_serve(app, serve_args);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  try {
    if (train->parsed()) {
      return recemb::tools::run_train_command(train_args, std::cout, std::cerr,
                                              isatty(STDERR_FILENO)
                                                  ? recemb::train::ProgressMode::kRedraw
                                                  : recemb::train::ProgressMode::kLines);
    }
    if (inspect->parsed()) return recemb::tools::run_inspect_command(inspect_args, std::cout);
    if (exporter->parsed()) return recemb::tools::run_export_command(export_args, std::cout);
    if (plan->parsed()) return recemb::tools::run_plan_command(plan_args, std::cout);
    if (predict->parsed()) {
      return recemb::tools::run_predict_command(predict_args, std::cin, std::cout, std::cerr);
    }
    if (lookup->parsed()) {
      return recemb::tools::run_lookup_command(lookup_args, std::cin, std::cout, std::cerr);
    }
    if (serve->parsed()) return recemb::tools::run_serve_command(serve_args, std::cerr);
    if (hash->parsed()) {
      return recemb::tools::run_hash_command(hash_args, std::cin, std::cout, std::cerr);
    }
  } catch (const recemb::InvalidArgument& error) {
    report_error(error);
    return 2;
  } catch (const std::exception& error) {
    report_error(error);
    return 1;
  }
  return 0;
}
