// What a resumed run of `recemb train` must keep of the settings its checkpoint was trained with.
#ifndef RECEMB_TRAIN_RESUME_SETTINGS_H_
#define RECEMB_TRAIN_RESUME_SETTINGS_H_

#include <string>
#include <string_view>

#include "train/train_config.h"

namespace recemb::train {

// For `--resume`: throws InvalidArgument when `config` changes a setting of `saved_toml` (the
// to_toml of the run's settings, saved in its checkpoint `checkpoint`) that a resumed run must
// keep, naming the setting and both values. A setting `saved_toml` lacks (added since) had its
// default. May change: train.steps, eval_every, log_every, overlap, checkpoint.dir, every, keep,
// output.dir, embedding.threads, embedding.sharding, data.max_malformed and data.reader_threads
// (docs/training.md, "Checkpoints and --resume").
void check_resume_settings(std::string_view saved_toml, const TrainConfig& config,
                           const std::string& checkpoint);

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_RESUME_SETTINGS_H_
