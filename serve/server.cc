#include "serve/server.h"

#include <charconv>
#include <chrono>
#include <cstdint>
#include <new>
#include <optional>
#include <string_view>
#include <vector>

#include "recemb/combiner.h"
#include "recemb/error.h"
#include "recemb/publish.h"

#include "dlrm/model_file.h"
#include "serve/json_ids.h"
#include "serve/request_codec.h"
#include "support/json.h"

namespace recemb::serve {
namespace {

constexpr std::string_view kModelsPrefix = "/v1/models/";
constexpr std::string_view kBinaryType = "application/octet-stream";
constexpr std::string_view kJsonType = "application/json";

// A request refused with an HTTP status and a code naming why.
struct RequestError {
  int status;
  std::string code;
  std::string message;
};

RequestError not_found(const std::string& message) { return {404, "NotFound", message}; }

HttpResponse error_response(int status, const std::string& code, const std::string& message) {
  support::JsonWriter json;
  json.begin_object().key("error").begin_object().key("code").string(code);
  json.key("message").string(message).end_object().end_object();
  return {.status = status, .body = json.take()};
}

// The media type of a Content-Type header, without parameters and in lower case (media types
// are case-insensitive, RFC 9110 8.3.1): "application/json".
std::string media_type(std::string_view content_type) {
  std::string_view type = content_type.substr(0, content_type.find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  while (!type.empty() && (type.front() == ' ' || type.front() == '\t')) type.remove_prefix(1);
  std::string lower(type);
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return lower;
}

// The code of an HTTP layer's refusal of `status` (docs/serving.md, "Errors").
std::string refusal_code(int status) {
  switch (status) {
    case 400:
      return "InvalidArgument";
    case 408:
      return "RequestTimeout";
    case 413:
      return "PayloadTooLarge";
    case 414:
      return "UriTooLong";
    case 431:
      return "RequestHeaderFieldsTooLarge";
    case 501:
      return "NotImplemented";
    case 503:
      return "ResourceExhausted";
    default:
      return "HttpError";
  }
}

// A JSON list of integers.
void write_integers(const std::vector<int64_t>& values, support::JsonWriter& json) {
  json.begin_array();
  for (const int64_t value : values) json.integer(value);
  json.end_array();
}

}  // namespace

// What a request's path names: the method ("lookup", "predict", "metadata", "healthz",
// "metrics", "other"), and for /v1/models/... the model and version asked for.
struct Server::Route {
  std::string method = "other";
  std::string model = {};  // the served model's name, once found (the metrics' label)
  int64_t version = 0;     // 0: the served one
};

Server::Server(std::shared_ptr<const ModelRegistry> registry, const ServerOptions& options)
    : registry_(std::move(registry)), options_(options) {}

HttpResponse Server::handle(const HttpRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  Route route_of_request;
  HttpResponse response;
  try {
    response = route(request, route_of_request);
  } catch (const RequestError& error) {
    response = error_response(error.status, error.code, error.message);
  } catch (const RequestTooLarge& error) {
    response = error_response(413, "PayloadTooLarge", error.what());
  } catch (const InvalidArgument& error) {
    response = error_response(400, "InvalidArgument", error.what());
  } catch (const std::bad_alloc& error) {
    // Some allocation failed (the bounds keep a request's memory to --max-request-memory, but the
    // process may be short of it): the request is refused, the server goes on.
    response = error_response(503, "ResourceExhausted",
                              "the server is out of memory for this request (" +
                                  std::string(error.what()) + "): retry later, or send less");
  } catch (const std::exception& error) {
    response = error_response(500, "Internal", error.what());
  }
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
  metrics_.record_request(route_of_request.model, route_of_request.method, response.status,
                          seconds.count());
  return response;
}

HttpResponse Server::refusal(const HttpRefusal& refusal) {
  metrics_.record_request("", "other", refusal.status, 0.0);
  return error_response(refusal.status, refusal_code(refusal.status), refusal.message);
}

HttpResponse Server::route(const HttpRequest& request, Route& route) {
  const auto require = [&request](std::string_view method) {
    if (request.method != method) {
      throw RequestError{405, "MethodNotAllowed",
                         support::excerpt(request.method) + " " +
                             support::excerpt(request.path, 80) + ": use " + std::string(method)};
    }
  };
  if (request.path == "/healthz") {
    route.method = "healthz";
    require("GET");
    return {.body = "{\"status\": \"ok\"}"};
  }
  if (request.path == "/metrics") {
    route.method = "metrics";
    require("GET");
    for (const std::string& name : registry_->names()) {  // as served now, after any swap
      const std::shared_ptr<const ServedModel> served = registry_->find(name);
      metrics_.set_served_version(name, served->version, served->model.delta_sequence());
    }
    return {.content_type = "text/plain; version=0.0.4", .body = metrics_.render()};
  }
  if (request.path == "/v1/models" || request.path == kModelsPrefix) {
    route.method = "metadata";
    require("GET");
    return list_models();
  }
  if (!request.path.starts_with(kModelsPrefix)) {
    throw not_found("no such path '" + support::excerpt(request.path, 80) +
                    "' (GET /healthz, GET /metrics, GET /v1/models, GET /v1/models/NAME, POST "
                    "/v1/models/NAME:lookup, POST /v1/models/NAME:predict)");
  }
  // NAME[/versions/V][:verb]
  std::string_view rest = std::string_view(request.path).substr(kModelsPrefix.size());
  const size_t colon = rest.rfind(':');
  std::string_view verb;
  if (colon != std::string_view::npos) {
    verb = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
  }
  std::string_view name = rest;
  std::optional<int64_t> version;
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    name = rest.substr(0, slash);
    constexpr std::string_view kVersions = "/versions/";
    const std::string_view tail = rest.substr(slash);
    if (!tail.starts_with(kVersions) ||
        !(version = model_version_of(tail.substr(kVersions.size())))) {
      throw not_found("no such path '" + support::excerpt(request.path, 80) +
                      "' (expected /v1/models/NAME or /v1/models/NAME/versions/VERSION, VERSION "
                      "a positive integer)");
    }
  }
  if (colon == std::string_view::npos) {
    route.method = "metadata";
  } else if (verb == "lookup" || verb == "predict") {
    route.method = std::string(verb);
  } else {
    throw not_found("unknown method ':" + support::excerpt(verb) +
                    "' (expected :lookup or :predict)");
  }
  const std::shared_ptr<const ServedModel> model =
      is_valid_model_name(name) ? registry_->find(name) : nullptr;
  if (!model) {
    std::string served;
    for (const std::string& served_name : registry_->names()) {
      served += (served.empty() ? "" : ", ") + served_name;
    }
    throw not_found("model '" + support::excerpt(name) + "' is not served (serving: " + served +
                    ")");
  }
  route.model = model->name;
  if (version && *version != model->version) {
    throw not_found("model '" + model->name + "' version " + std::to_string(*version) +
                    " is not served (serving version " + std::to_string(model->version) + ")");
  }
  if (route.method == "metadata") {
    require("GET");
    return describe_model(*model);
  }
  require("POST");
  if (request.body.size() > static_cast<size_t>(options_.max_body_bytes)) {
    throw RequestError{
        413, "PayloadTooLarge",
        "the body is longer than --max-body-bytes " + std::to_string(options_.max_body_bytes)};
  }
  return route.method == "lookup" ? lookup(request, *model) : predict(request, *model);
}

HttpResponse Server::lookup(const HttpRequest& request, const ServedModel& model) {
  const std::string type = media_type(request.content_type);
  const bool binary = type == kBinaryType;
  if (!binary && !type.empty() && type != kJsonType) {
    throw RequestError{415, "UnsupportedMediaType",
                       "Content-Type '" + support::excerpt(request.content_type) + "': send " +
                           std::string(kJsonType) + " or " + std::string(kBinaryType)};
  }
  const RequestLimits& limits = options_.limits;
  HttpResponse response;
  int64_t examples = 0;
  if (binary) {
    LookupRequest decoded;
    try {
      decoded = decode_binary_lookup(request.body, model.model, model.feature_fingerprint, limits);
    } catch (const FeatureOrderConflict& conflict) {
      throw RequestError{409, "Conflict",
                         "model '" + model.name + "' version " + std::to_string(model.version) +
                             ": " + conflict.what()};
    }
    response = {.content_type = std::string(kBinaryType),
                .body = look_up_binary(model.model, decoded, limits)};
    examples = decoded.examples;
  } else {
    const LookupRequest decoded = decode_json_lookup(request.body, model.model, limits);
    response = {.body = look_up_json(model.model, decoded, limits)};
    examples = decoded.examples;
  }
  metrics_.add_rows(model.name, examples);
  return response;
}

HttpResponse Server::predict(const HttpRequest& request, const ServedModel& model) {
  if (!model.predictor) {
    throw InvalidArgument("model '" + model.name + "' cannot predict: " + model.no_predict_reason);
  }
  const std::string type = media_type(request.content_type);
  if (!type.empty() && type != kJsonType) {
    throw RequestError{415, "UnsupportedMediaType",
                       "Content-Type '" + support::excerpt(request.content_type) + "': send " +
                           std::string(kJsonType)};
  }
  const PredictRequest predict_request =
      decode_json_instances(request.body, options_.limits.max_examples);
  const std::vector<std::string>& lines = predict_request.lines;
  const std::vector<std::string_view> views(lines.begin(), lines.end());
  std::vector<dlrm::Prediction> results(lines.size());
  model.predictor->predict(views, results, predict_request.labels);
  std::vector<float> probabilities;
  probabilities.reserve(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].error.empty()) {
      throw InvalidArgument("instance " + std::to_string(i) + ": " + results[i].error);
    }
    probabilities.push_back(results[i].probability);
  }
  metrics_.add_rows(model.name, static_cast<int64_t>(lines.size()));
  return {.body = encode_json_predictions(probabilities)};
}

HttpResponse Server::describe_model(const ServedModel& served) const {
  // Written as text, not as a JSON tree: destroying a tree allocates (nlohmann's), which under
  // memory pressure would end the process instead of failing the request.
  const ServingModel& model = served.model;
  const std::string_view dtype = serving_dtype_name(model.dtype());
  support::JsonWriter json;
  json.begin_object().key("name").string(served.name).key("version").integer(served.version);
  json.key("versions");
  write_integers(registry_->versions(served.name), json);
  json.key("delta_sequence").integer(model.delta_sequence()).key("dtype").string(dtype);
  json.key("predict").boolean(served.predictor != nullptr);
  json.key("feature_fingerprint").string(fingerprint_text(served.feature_fingerprint));
  json.key("tables").begin_array();
  for (const TableConfig& table : model.tables()) {
    const bool dynamic = model.is_dynamic(table.name);
    json.begin_object().key("name").string(table.name).key("dim").integer(table.dim);
    json.key("dtype").string(dtype).key("combiner").string(combiner_name(table.combiner));
    json.key("dynamic").boolean(dynamic);
    if (dynamic) {
      json.key("keys").integer(model.num_keys(table.name));
    } else {
      json.key("vocabulary_size").integer(table.vocabulary_size);
    }
    json.end_object();
  }
  json.end_array().key("features").begin_array();
  for (const FeatureConfig& feature : model.features()) {
    json.begin_object().key("name").string(feature.name).key("table").string(feature.table);
    if (feature.max_sequence_length > 0) {
      json.key("max_sequence_length").integer(feature.max_sequence_length);
    }
    if (!feature.output_shape.empty()) {
      json.key("output_shape");
      write_integers(feature.output_shape, json);
    }
    json.end_object();
  }
  json.end_array().key("metadata").begin_object();
  for (const auto& [key, value] : model.metadata()) json.key(key).string(value);
  json.end_object();
  // The step the tables were trained to, as a number, when the export recorded it.
  if (const auto step = model.metadata().find(dlrm::kStepMetadata);
      step != model.metadata().end()) {
    int64_t value = 0;
    const char* end = step->second.data() + step->second.size();
    if (std::from_chars(step->second.data(), end, value).ptr == end) {
      json.key("step").integer(value);
    }
  }
  return {.body = json.end_object().take()};
}

HttpResponse Server::list_models() const {
  support::JsonWriter json;
  json.begin_object().key("models").begin_array();
  for (const std::string& name : registry_->names()) {
    const std::shared_ptr<const ServedModel> served = registry_->find(name);
    if (!served) continue;  // gone since names() (not yet: a registry keeps what it served)
    json.begin_object().key("name").string(name).key("version").integer(served->version);
    json.key("versions");
    write_integers(registry_->versions(name), json);
    json.end_object();
  }
  return {.body = json.end_array().end_object().take()};
}

}  // namespace recemb::serve
