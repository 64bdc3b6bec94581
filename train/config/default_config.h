// The defaults of `recemb train`'s settings (train_config.h): the documented settings table, and
// each embedding optimizer's learning rate when none is set.
#ifndef RECEMB_TRAIN_CONFIG_DEFAULT_CONFIG_H_
#define RECEMB_TRAIN_CONFIG_DEFAULT_CONFIG_H_

#include <string_view>

namespace recemb::train {

// The defaults as a commented TOML document (what `recemb train --print-default-config` shows):
// every setting with its default value and meaning.
std::string_view default_config_toml();

// The embedding learning rate for `optimizer` (a recemb optimizer name) when none is set: what
// load_train_config gives embedding.learning_rate when neither the file nor an override sets it,
// and a table whose own optimizer differs from embedding.optimizer when it sets no rate (the table
// in docs/training.md, "Learning rates"). InvalidArgument for an unknown name.
double default_learning_rate(std::string_view optimizer);

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_CONFIG_DEFAULT_CONFIG_H_
