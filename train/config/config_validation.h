// The validation of `recemb train`'s settings (train_config.h), once they are read.
#ifndef RECEMB_TRAIN_CONFIG_CONFIG_VALIDATION_H_
#define RECEMB_TRAIN_CONFIG_CONFIG_VALIDATION_H_

#include "train/config/train_config.h"

namespace recemb::train {

// Throws InvalidArgument naming the setting, its value and the valid ones when a setting of `c` is
// out of range (train.batch_size up to kMaxBatchSize, embedding.threads up to kMaxNumThreads),
// names no known optimizer, sharding strategy or vocabulary policy, or contradicts another
// (model.bottom_mlp's last width and model.embedding_dim; data.eval_fraction and data.eval_path).
void validate_train_config(const TrainConfig& c);

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_CONFIG_CONFIG_VALIDATION_H_
