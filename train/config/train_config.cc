// Reading `recemb train`'s settings from TOML (a file, then --set overrides) and writing them as
// TOML: the one file of recemb that includes toml++. The defaults document (default_config.h) is
// parsed like any user file: it defines which keys exist and their types, so a key missing from
// it is unknown everywhere.
#include "train/config/train_config.h"

#include <charconv>
#include <set>
#include <sstream>
#include <toml++/toml.h>
#include <utility>

#include "recemb/error.h"

#include "train/config/config_validation.h"
#include "train/config/default_config.h"

namespace recemb::train {
namespace {

constexpr int kNumTables = 26;

std::string type_name(const toml::node& node) {
  std::ostringstream name;
  name << node.type();
  return name.str();
}

// Copies `value` into `target[key]`, which must exist with the same type (an integer is accepted
// where a float is expected).
void assign_checked(toml::table& target, const std::string& key, const toml::node& value,
                    const std::string& where) {
  toml::node* existing = target.get(key);
  if (existing->is_floating_point() && value.is_integer()) {
    target.insert_or_assign(key, static_cast<double>(value.as_integer()->get()));
    return;
  }
  const bool same_type = existing->type() == value.type() &&
                         (!existing->is_array() || value.as_array()->empty() ||
                          value.as_array()->is_homogeneous(existing->as_array()->front().type()));
  if (!same_type) {
    throw InvalidArgument(where + ": expected " + type_name(*existing) + ", got " +
                          type_name(value));
  }
  value.visit([&](const auto& typed) { target.insert_or_assign(key, typed); });
}

std::string keys_of(const toml::table& table) {
  std::string keys;
  for (const auto& [key, value] : table) {
    if (!keys.empty()) keys += ", ";
    keys += key.str();
  }
  return keys;
}

void merge_table_override(std::map<std::string, TableOverride>& tables, const std::string& name,
                          const std::string& field, const toml::node& value,
                          const std::string& where);

// Merges `source` into `target` (the defaults or their merge so far); `path` is the dotted prefix.
// Adds the dotted keys it sets to `assigned`.
void merge(toml::table& target, const toml::table& source, const std::string& path,
           std::map<std::string, TableOverride>& tables, std::set<std::string>& assigned,
           const std::string& origin) {
  for (const auto& [key_view, value] : source) {
    const std::string key(key_view.str());
    const std::string dotted = path.empty() ? key : path + "." + key;
    if (path.empty() && key == "tables") {
      if (!value.is_table()) throw InvalidArgument(origin + ": 'tables' must be a table");
      for (const auto& [table_name, fields] : *value.as_table()) {
        if (!fields.is_table()) {
          throw InvalidArgument(origin + ": 'tables." + std::string(table_name.str()) +
                                "' must be a table");
        }
        for (const auto& [field, field_value] : *fields.as_table()) {
          merge_table_override(tables, std::string(table_name.str()), std::string(field.str()),
                               field_value, origin);
        }
      }
      continue;
    }
    toml::node* existing = target.get(key);
    if (existing == nullptr) {
      throw InvalidArgument(origin + ": unknown key '" + dotted + "' (valid " +
                            (path.empty() ? "sections" : "keys of [" + path + "]") + ": " +
                            keys_of(target) + ")");
    }
    if (existing->is_table()) {
      if (!value.is_table()) throw InvalidArgument(origin + ": '" + dotted + "' must be a table");
      merge(*existing->as_table(), *value.as_table(), dotted, tables, assigned, origin);
    } else if (dotted == "data.path" && value.is_array()) {
      // data.path: one string, or a list of them (several files or globs).
      if (!value.as_array()->empty() &&
          !value.as_array()->is_homogeneous(toml::node_type::string)) {
        throw InvalidArgument(origin + ": 'data.path' must be a string or a list of strings");
      }
      target.insert_or_assign(key, *value.as_array());
      assigned.insert(dotted);
    } else {
      assign_checked(target, key, value, origin + ": '" + dotted + "'");
      assigned.insert(dotted);
    }
  }
}

void merge_table_override(std::map<std::string, TableOverride>& tables, const std::string& name,
                          const std::string& field, const toml::node& value,
                          const std::string& where) {
  const std::string dotted = "tables." + name + "." + field;
  int index = 0;
  const bool valid_name = name.size() >= 2 && name[0] == 'C' &&
                          std::from_chars(name.data() + 1, name.data() + name.size(), index).ptr ==
                              name.data() + name.size() &&
                          index >= 1 && index <= kNumTables;
  if (!valid_name) {
    throw InvalidArgument(where + ": unknown table in '" + dotted + "' (tables are C1..C26)");
  }
  TableOverride& table = tables[name];
  if (field == "vocabulary_size" && value.is_integer()) {
    table.vocabulary_size = value.as_integer()->get();
  } else if (field == "optimizer" && value.is_string()) {
    table.optimizer = value.as_string()->get();
  } else if (field == "learning_rate" && value.is_number()) {
    table.learning_rate = value.value<double>().value();
  } else if (field == "vocabulary_size" || field == "optimizer" || field == "learning_rate") {
    throw InvalidArgument(where + ": '" + dotted + "' has the wrong type (" + type_name(value) +
                          ")");
  } else {
    throw InvalidArgument(where + ": unknown key '" + dotted +
                          "' (valid: vocabulary_size, optimizer, learning_rate)");
  }
}

toml::table parse_document(std::string_view text, const std::string& origin) {
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& error) {
    std::ostringstream message;
    message << origin << ":" << error.source().begin.line << ":" << error.source().begin.column
            << ": " << error.description();
    throw InvalidArgument(message.str());
  }
}

// What a setting of `existing`'s type takes, in words: "a number", "an integer", ...
std::string value_kind(const toml::node& existing) {
  if (existing.is_floating_point()) return "a number";
  if (existing.is_integer()) return "an integer";
  if (existing.is_boolean()) return "true or false";
  if (existing.is_array()) return "a list ([...])";
  return type_name(existing);
}

// Whether the setting at dotted `key` holds a string.
bool is_string_setting(const toml::table& config, const std::string& key) {
  if (key.starts_with("tables.") && key.ends_with(".optimizer")) return true;
  const toml::node* node = config.at_path(key).node();
  return node != nullptr && node->is_string();
}

// A value a shell leaves of an unquoted word (--set embedding.optimizer=adam): no spaces, quotes,
// brackets, braces or other TOML punctuation, so that quoting it gives the string it reads as.
bool is_bare_word(std::string_view text) {
  return !text.empty() && text.find_first_of(" \t\"'\\[]{}=#,") == std::string_view::npos;
}

// Applies one "a.b.c=value" override. Where the setting is a string, a bare word is that string
// (--set embedding.optimizer=rowwise_adagrad, as a shell passes --set ...="rowwise_adagrad").
void apply_override(toml::table& config, std::map<std::string, TableOverride>& tables,
                    std::set<std::string>& assigned, const std::string& assignment) {
  const std::string origin = "override '" + assignment + "'";
  const size_t equals = assignment.find('=');
  if (equals == std::string::npos || equals == 0) {
    throw InvalidArgument(origin + ": expected section.key=value");
  }
  const std::string key = assignment.substr(0, equals);
  std::string value = assignment.substr(equals + 1);
  const bool string_setting = is_string_setting(config, key);
  if (string_setting && is_bare_word(value)) value = '"' + value + '"';
  toml::table parsed;
  try {
    parsed = parse_document("value = " + value, origin);
  } catch (const InvalidArgument& error) {
    if (string_setting) {
      throw InvalidArgument(std::string(error.what()) + " (" + key +
                            " is a string: quote it as TOML does, past the shell: --set " + key +
                            "='\"...\"')");
    }
    // Not a TOML value: say what the setting takes rather than what the parser guessed.
    const toml::node* existing = config.at_path(key).node();
    if (existing == nullptr || existing->is_table()) throw;
    throw InvalidArgument(origin + ": " + key + ": expected " + value_kind(*existing) + ", got '" +
                          value + "'");
  }
  // Rebuild the dotted key as nested tables and merge it like a file.
  toml::table nested;
  toml::table* level = &nested;
  size_t start = 0;
  for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', start)) {
    auto [it, inserted] = level->insert(key.substr(start, dot - start), toml::table{});
    level = it->second.as_table();
    start = dot + 1;
  }
  parsed.get("value")->visit([&](const auto& typed) { level->insert(key.substr(start), typed); });
  merge(config, nested, "", tables, assigned, origin);
}

// The value at `path`, whose type the merge has checked; a number outside T's range throws.
template <typename T>
T get(const toml::table& config, std::string_view path) {
  const std::optional<T> value = config.at_path(path).value<T>();
  if (!value) throw InvalidArgument("'" + std::string(path) + "' is out of range");
  return *value;
}

std::vector<int64_t> get_widths(const toml::table& config, std::string_view path) {
  std::vector<int64_t> widths;
  for (const toml::node& width : *config.at_path(path).as_array()) {
    widths.push_back(width.value<int64_t>().value());
  }
  return widths;
}

// data.path: "" (none), one path, or a list of them.
std::vector<std::string> get_paths(const toml::table& config, std::string_view path) {
  const toml::node* node = config.at_path(path).node();
  if (const toml::array* list = node->as_array()) {
    std::vector<std::string> paths;
    for (const toml::node& entry : *list) paths.push_back(entry.value<std::string>().value());
    return paths;
  }
  std::string one = node->value<std::string>().value();
  if (one.empty()) return {};
  return {std::move(one)};
}

// Every setting of `table` as "dotted.key" -> its TOML text.
void flatten(const toml::table& table, const std::string& prefix,
             std::map<std::string, std::string>& settings) {
  for (const auto& [key, value] : table) {
    const std::string dotted = prefix + std::string(key.str());
    if (value.is_table()) {
      flatten(*value.as_table(), dotted + ".", settings);
    } else {
      std::ostringstream text;
      value.visit([&](const auto& typed) { text << typed; });
      settings[dotted] = text.str();
    }
  }
}

}  // namespace

TrainConfig load_train_config(const std::string& config_path,
                              const std::vector<std::string>& overrides) {
  toml::table config = parse_document(default_config_toml(), "defaults");
  std::map<std::string, TableOverride> tables;
  std::set<std::string> assigned;  // the keys the file and the overrides set
  if (!config_path.empty()) {
    toml::table file;
    try {
      file = toml::parse_file(config_path);
    } catch (const toml::parse_error& error) {
      std::ostringstream message;
      message << config_path << ":" << error.source().begin.line << ":"
              << error.source().begin.column << ": " << error.description();
      throw InvalidArgument(message.str());
    }
    merge(config, file, "", tables, assigned, config_path);
  }
  for (const std::string& assignment : overrides) {
    apply_override(config, tables, assigned, assignment);
  }

  TrainConfig c;
  c.data.paths = get_paths(config, "data.path");
  c.data.eval_path = get<std::string>(config, "data.eval_path");
  c.data.eval_fraction = get<double>(config, "data.eval_fraction");
  c.data.strict = get<bool>(config, "data.strict");
  c.data.reader_threads = get<int>(config, "data.reader_threads");
  c.data.preset = get<std::string>(config, "data.preset");
  c.data.table_budget_mib = get<int64_t>(config, "data.table_budget_mib");
  c.data.eval_examples = get<int64_t>(config, "data.eval_examples");
  c.data.max_malformed = get<int64_t>(config, "data.max_malformed");
  c.data.synthetic_seed = get<uint64_t>(config, "data.synthetic_seed");
  c.data.synthetic_item_lifetime = get<int64_t>(config, "data.synthetic_item_lifetime");
  c.model.embedding_dim = get<int64_t>(config, "model.embedding_dim");
  c.model.bottom_mlp = get_widths(config, "model.bottom_mlp");
  c.model.top_mlp = get_widths(config, "model.top_mlp");
  c.model.seed = get<uint64_t>(config, "model.seed");
  c.embedding.optimizer = get<std::string>(config, "embedding.optimizer");
  c.embedding.learning_rate = get<double>(config, "embedding.learning_rate");
  c.embedding.threads = get<int>(config, "embedding.threads");
  c.embedding.sharding = get<std::string>(config, "embedding.sharding");
  c.embedding.vocabulary = get<std::string>(config, "embedding.vocabulary");
  c.embedding.capacity = get<int64_t>(config, "embedding.capacity");
  c.embedding.min_count = get<int64_t>(config, "embedding.min_count");
  c.embedding.ttl_steps = get<int64_t>(config, "embedding.ttl_steps");
  c.embedding.when_full = get<std::string>(config, "embedding.when_full");
  c.embedding.dtype = get<std::string>(config, "embedding.dtype");
  c.dense.optimizer = get<std::string>(config, "dense.optimizer");
  c.dense.learning_rate = get<double>(config, "dense.learning_rate");
  c.train.steps = get<int64_t>(config, "train.steps");
  c.train.epochs = get<int64_t>(config, "train.epochs");
  c.train.batch_size = get<int64_t>(config, "train.batch_size");
  c.train.eval_every = get<int64_t>(config, "train.eval_every");
  c.train.log_every = get<int64_t>(config, "train.log_every");
  c.train.overlap = get<bool>(config, "train.overlap");
  c.checkpoint.dir = get<std::string>(config, "checkpoint.dir");
  c.checkpoint.every = get<int64_t>(config, "checkpoint.every");
  c.checkpoint.keep = get<int>(config, "checkpoint.keep");
  c.output.dir = get<std::string>(config, "output.dir");
  c.serving.publish_dir = get<std::string>(config, "serving.publish_dir");
  c.serving.publish_every_seconds = get<double>(config, "serving.publish_every_seconds");
  c.serving.publish_dtype = get<std::string>(config, "serving.publish_dtype");
  c.serving.base_every_deltas = get<int64_t>(config, "serving.base_every_deltas");
  c.serving.base_every_bytes = get<int64_t>(config, "serving.base_every_bytes");
  c.serving.keep_versions = get<int>(config, "serving.keep_versions");
  c.tables = std::move(tables);
  validate_train_config(c);
  // Learning rates not given are the optimizer's own (docs/training.md, "Learning rates").
  if (!assigned.contains("embedding.learning_rate")) {
    c.embedding.learning_rate = default_learning_rate(c.embedding.optimizer);
  }
  for (auto& [name, table] : c.tables) {
    if (table.optimizer && !table.learning_rate && *table.optimizer != c.embedding.optimizer) {
      table.learning_rate = default_learning_rate(*table.optimizer);
    }
  }
  return c;
}

ShardingStrategy sharding_strategy(std::string_view name) {
  try {
    return parse_sharding_strategy(name);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(std::string("embedding.sharding: ") + error.what());
  }
}

bool dynamic_vocabulary(const TrainConfig& config) {
  return config.embedding.vocabulary == "dynamic";
}

std::map<std::string, std::string> flat_settings(std::string_view toml_text,
                                                 const std::string& origin) {
  std::map<std::string, std::string> settings;
  flatten(parse_document(toml_text, origin), "", settings);
  return settings;
}

std::string to_toml(const TrainConfig& c) {
  auto widths = [](const std::vector<int64_t>& values) {
    toml::array array;
    for (int64_t value : values) array.push_back(value);
    return array;
  };
  toml::table tables;
  for (const auto& [name, table] : c.tables) {
    toml::table fields;
    if (table.vocabulary_size) fields.insert("vocabulary_size", *table.vocabulary_size);
    if (table.optimizer) fields.insert("optimizer", *table.optimizer);
    if (table.learning_rate) fields.insert("learning_rate", *table.learning_rate);
    tables.insert(name, std::move(fields));
  }
  toml::table document{
      {"data", toml::table{{"eval_path", c.data.eval_path},
                           {"eval_fraction", c.data.eval_fraction},
                           {"strict", c.data.strict},
                           {"reader_threads", c.data.reader_threads},
                           {"preset", c.data.preset},
                           {"table_budget_mib", c.data.table_budget_mib},
                           {"eval_examples", c.data.eval_examples},
                           {"max_malformed", c.data.max_malformed},
                           {"synthetic_seed", static_cast<int64_t>(c.data.synthetic_seed)},
                           {"synthetic_item_lifetime", c.data.synthetic_item_lifetime}}},
      {"model", toml::table{{"embedding_dim", c.model.embedding_dim},
                            {"bottom_mlp", widths(c.model.bottom_mlp)},
                            {"top_mlp", widths(c.model.top_mlp)},
                            {"seed", static_cast<int64_t>(c.model.seed)}}},
      {"embedding", toml::table{{"optimizer", c.embedding.optimizer},
                                {"learning_rate", c.embedding.learning_rate},
                                {"threads", c.embedding.threads},
                                {"sharding", c.embedding.sharding},
                                {"vocabulary", c.embedding.vocabulary},
                                {"capacity", c.embedding.capacity},
                                {"min_count", c.embedding.min_count},
                                {"ttl_steps", c.embedding.ttl_steps},
                                {"when_full", c.embedding.when_full},
                                {"dtype", c.embedding.dtype}}},
      {"dense",
       toml::table{{"optimizer", c.dense.optimizer}, {"learning_rate", c.dense.learning_rate}}},
      {"train", toml::table{{"steps", c.train.steps},
                            {"epochs", c.train.epochs},
                            {"batch_size", c.train.batch_size},
                            {"eval_every", c.train.eval_every},
                            {"log_every", c.train.log_every},
                            {"overlap", c.train.overlap}}},
      {"checkpoint",
       toml::table{
           {"dir", c.checkpoint.dir}, {"every", c.checkpoint.every}, {"keep", c.checkpoint.keep}}},
      {"output", toml::table{{"dir", c.output.dir}}},
      {"serving", toml::table{{"publish_dir", c.serving.publish_dir},
                              {"publish_every_seconds", c.serving.publish_every_seconds},
                              {"publish_dtype", c.serving.publish_dtype},
                              {"base_every_deltas", c.serving.base_every_deltas},
                              {"base_every_bytes", c.serving.base_every_bytes},
                              {"keep_versions", c.serving.keep_versions}}},
      {"tables", std::move(tables)},
  };
  // data.path: "" or one path as a string (as configs had it), several as a list.
  toml::table& data = *document["data"].as_table();
  if (c.data.paths.size() <= 1) {
    data.insert("path", c.data.paths.empty() ? std::string() : c.data.paths.front());
  } else {
    toml::array paths;
    for (const std::string& path : c.data.paths) paths.push_back(path);
    data.insert("path", std::move(paths));
  }
  std::ostringstream text;
  text << document << "\n";
  return text.str();
}

}  // namespace recemb::train