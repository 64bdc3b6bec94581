// JSON for recemb's manifests (checkpoint, serving model): the one file that includes nlohmann's
// JSON library. Ordered objects, so a written manifest lists its keys in the order they were set.
// Documents are parsed and read with format/json_reader.h.
#ifndef RECEMB_FORMAT_JSON_H_
#define RECEMB_FORMAT_JSON_H_

#include <nlohmann/json.hpp>

namespace recemb::format {

using Json = nlohmann::ordered_json;
using JsonError = nlohmann::json::exception;

}  // namespace recemb::format

#endif  // RECEMB_FORMAT_JSON_H_
