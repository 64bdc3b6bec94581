// What a run of `recemb train` must keep of the checkpoint it continues: all the settings that
// change the training for a resumed run (--resume), the model's shape for a run initialised from
// another run's checkpoint (--init-from).
#ifndef RECEMB_TRAIN_CONFIG_RESUME_SETTINGS_H_
#define RECEMB_TRAIN_CONFIG_RESUME_SETTINGS_H_

#include <string>
#include <string_view>

#include "recemb/checkpoint.h"

#include "dlrm/dlrm_dense_model.h"
#include "train/config/embedding_model.h"
#include "train/config/train_config.h"

namespace recemb::train {

// The metadata key under which a trainer checkpoint holds the to_toml of its run's settings.
inline constexpr char kSettingsMetadata[] = "train_config";

// For `--resume`: throws InvalidArgument when `config` changes a setting of `saved_toml` (the
// to_toml of the run's settings, saved in its checkpoint `checkpoint`) that a resumed run must
// keep, naming the setting and both values. A setting `saved_toml` lacks (added since) had its
// default. May change: train.steps, eval_every, log_every, overlap, checkpoint.dir, every, keep,
// output.dir, embedding.threads, embedding.sharding, data.max_malformed and data.reader_threads
// (docs/training.md, "Checkpoints and --resume").
void check_resume_settings(std::string_view saved_toml, const TrainConfig& config,
                           const std::string& checkpoint);

// For `--init-from`: throws InvalidArgument when the model of the checkpoint `checkpoint`
// (`info`, inspect_checkpoint's description of it) is not the shape of this run's, `model` (its
// tables and global optimizer), `dense` and `dense_optimizer` (dense.optimizer), naming every
// difference with both values: the set of table names, each table's vocabulary_size, dim,
// optimizer kind and vocabulary (hashed or dynamic), the dense model's embedding_dim, bottom_mlp
// and top_mlp, and the dense optimizer's kind. Everything else may change: the data, the steps,
// the learning rates, the output (docs/training.md, "Day after day: --init-from").
void check_init_settings(const CheckpointInfo& info, const EmbeddingModel& model,
                         const dlrm::DlrmDenseConfig& dense, std::string_view dense_optimizer,
                         const std::string& checkpoint);

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_CONFIG_RESUME_SETTINGS_H_
