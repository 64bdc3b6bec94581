#include "serve/server.h"

#include <charconv>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "recemb/combiner.h"
#include "recemb/error.h"
#include "recemb/publish.h"

#include "serve/json_ids.h"
#include "serve/request_codec.h"
#include "train/model_file.h"

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
  return {.status = status,
          .body = "{\"error\": {\"code\": " + json_string(code) +
                  ", \"message\": " + json_string(message) + "}}"};
}

// The media type of a Content-Type header, without parameters ("application/json").
std::string_view media_type(std::string_view content_type) {
  const size_t end = content_type.find(';');
  std::string_view type = content_type.substr(0, end);
  while (!type.empty() && type.back() == ' ') type.remove_suffix(1);
  return type;
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
  } catch (const InvalidArgument& error) {
    response = error_response(400, "InvalidArgument", error.what());
  } catch (const std::exception& error) {
    response = error_response(500, "Internal", error.what());
  }
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
  metrics_.record_request(route_of_request.model, route_of_request.method, response.status,
                          seconds.count());
  return response;
}

HttpResponse Server::refusal(int status) {
  HttpResponse response;
  if (status == 413) {
    response = error_response(
        413, "PayloadTooLarge",
        "the body is longer than --max-body-bytes " + std::to_string(options_.max_body_bytes));
  } else {
    response = error_response(
        status, status == 400 ? "InvalidArgument" : "HttpError",
        "the request was refused by the HTTP layer (status " + std::to_string(status) + ")");
  }
  metrics_.record_request("", "other", status, 0.0);
  return response;
}

HttpResponse Server::route(const HttpRequest& request, Route& route) {
  const auto require = [&request](std::string_view method) {
    if (request.method != method) {
      throw RequestError{405, "MethodNotAllowed",
                         truncated(request.method) + " " + truncated(request.path, 80) + ": use " +
                             std::string(method)};
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
  if (!request.path.starts_with(kModelsPrefix)) {
    throw not_found("no such path '" + truncated(request.path, 80) +
                    "' (GET /healthz, GET /metrics, GET /v1/models/NAME, POST "
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
      throw not_found("no such path '" + truncated(request.path, 80) +
                      "' (expected /v1/models/NAME or /v1/models/NAME/versions/VERSION, VERSION "
                      "a positive integer)");
    }
  }
  if (colon == std::string_view::npos) {
    route.method = "metadata";
  } else if (verb == "lookup" || verb == "predict") {
    route.method = std::string(verb);
  } else {
    throw not_found("unknown method ':" + truncated(verb) + "' (expected :lookup or :predict)");
  }
  const std::shared_ptr<const ServedModel> model =
      is_valid_model_name(name) ? registry_->find(name) : nullptr;
  if (!model) {
    std::string served;
    for (const std::string& served_name : registry_->names()) {
      served += (served.empty() ? "" : ", ") + served_name;
    }
    throw not_found("model '" + truncated(name) + "' is not served (serving: " + served + ")");
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
  const std::string_view type = media_type(request.content_type);
  const bool binary = type == kBinaryType;
  if (!binary && !type.empty() && type != kJsonType) {
    throw RequestError{415, "UnsupportedMediaType",
                       "Content-Type '" + truncated(type) + "': send " + std::string(kJsonType) +
                           " or " + std::string(kBinaryType)};
  }
  const LookupRequest decoded =
      binary ? decode_binary_lookup(request.body, model.model, options_.max_examples)
             : decode_json_lookup(request.body, model.model, options_.max_examples);
  HttpResponse response = binary ? HttpResponse{.content_type = std::string(kBinaryType),
                                                .body = look_up_binary(model.model, decoded)}
                                 : HttpResponse{.body = encode_json_activations(
                                                    model.model, look_up(model.model, decoded))};
  metrics_.add_rows(model.name, decoded.examples);
  return response;
}

HttpResponse Server::predict(const HttpRequest& request, const ServedModel& model) {
  if (!model.predictor) {
    throw InvalidArgument("model '" + model.name + "' cannot predict: " + model.no_predict_reason);
  }
  const std::string_view type = media_type(request.content_type);
  if (!type.empty() && type != kJsonType) {
    throw RequestError{415, "UnsupportedMediaType",
                       "Content-Type '" + truncated(type) + "': send " + std::string(kJsonType)};
  }
  const std::vector<std::string> lines = decode_json_instances(request.body, options_.max_examples);
  const std::vector<std::string_view> views(lines.begin(), lines.end());
  std::vector<train::Prediction> results(lines.size());
  model.predictor->predict(views, results);
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
  const ServingModel& model = served.model;
  nlohmann::json tables = nlohmann::json::array();
  for (const TableConfig& table : model.tables()) {
    nlohmann::json entry = {{"name", table.name},
                            {"dim", table.dim},
                            {"dtype", serving_dtype_name(model.dtype())},
                            {"combiner", combiner_name(table.combiner)},
                            {"dynamic", model.is_dynamic(table.name)}};
    if (model.is_dynamic(table.name)) {
      entry["keys"] = model.num_keys(table.name);
    } else {
      entry["vocabulary_size"] = table.vocabulary_size;
    }
    tables.push_back(std::move(entry));
  }
  nlohmann::json features = nlohmann::json::array();
  for (const FeatureConfig& feature : model.features()) {
    nlohmann::json entry = {{"name", feature.name}, {"table", feature.table}};
    if (feature.max_sequence_length > 0) {
      entry["max_sequence_length"] = feature.max_sequence_length;
    }
    if (!feature.output_shape.empty()) entry["output_shape"] = feature.output_shape;
    features.push_back(std::move(entry));
  }
  nlohmann::json description = {{"name", served.name},
                                {"version", served.version},
                                {"versions", registry_->versions(served.name)},
                                {"delta_sequence", model.delta_sequence()},
                                {"dtype", serving_dtype_name(model.dtype())},
                                {"predict", served.predictor != nullptr},
                                {"tables", std::move(tables)},
                                {"features", std::move(features)},
                                {"metadata", model.metadata()}};
  // The step the tables were trained to, as a number, when the export recorded it.
  if (const auto step = model.metadata().find(train::kStepMetadata);
      step != model.metadata().end()) {
    int64_t value = 0;
    const char* end = step->second.data() + step->second.size();
    if (std::from_chars(step->second.data(), end, value).ptr == end) description["step"] = value;
  }
  return {.body = description.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
}

}  // namespace recemb::serve
