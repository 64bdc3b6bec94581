// Writes the seed corpus of serving_fuzz into the directory argv[1]: serving models of a small
// Embedding (two static tables and a dynamic one, features of every kind) in each dtype, as whole
// files and in the harness's manifest form ([uint64 data_size][manifest text]); and that form with
// hostile values added to the manifest (an array nested 100,000 deep, a number beyond double's
// range).
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "recemb/embedding.h"
#include "recemb/serving.h"

#include "seeds_main.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  return recemb::fuzz::seeds_main(argc, argv, [](const fs::path& corpus, const fs::path& scratch) {
    recemb::Embedding layer(
        {{.name = "items", .vocabulary_size = 6, .dim = 3, .combiner = recemb::Combiner::kSqrtn},
         {.name = "users",
          .vocabulary_size = 4,
          .dim = 5,
          .quantization_config =
              recemb::QuantizationConfig{.num_buckets = 3, .lower = -1.0f, .upper = 1.0f}},
         {.name = "sessions",
          .dim = 2,
          .dynamic_vocabulary = recemb::DynamicVocabulary{.capacity = 8}}},
        {{.name = "clicks", .table = "items"},
         {.name = "history", .table = "items", .max_sequence_length = 2},
         {.name = "friends", .table = "users", .output_shape = {1}},
         {.name = "session", .table = "sessions"}},
        {.num_threads = 1});
    // Key 0 (the harness's lookup) among them.
    layer.write_dynamic_table(
        "sessions",
        {.keys = {-3, 0, 9}, .parameters = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f}, .slots = {}});
    for (const recemb::ServingDtype dtype :
         {recemb::ServingDtype::kFloat32, recemb::ServingDtype::kFloat16,
          recemb::ServingDtype::kInt8}) {
      const std::string dtype_name(recemb::serving_dtype_name(dtype));
      const fs::path model = scratch / (dtype_name + ".recemb");
      recemb::export_serving_model(layer, model, {.dtype = dtype});
      const std::string bytes = recemb::fuzz::read_file(model);
      recemb::fuzz::write_file(corpus / ("model-" + dtype_name), bytes);

      uint64_t manifest_size;
      std::memcpy(&manifest_size, bytes.data() + 16, sizeof manifest_size);
      const uint64_t data_size = bytes.size() - 64 - manifest_size;
      std::string manifest_form(sizeof data_size, '\0');
      std::memcpy(manifest_form.data(), &data_size, sizeof data_size);
      manifest_form += bytes.substr(64, manifest_size);
      recemb::fuzz::write_file(corpus / ("manifest-" + dtype_name), manifest_form);
      if (dtype == recemb::ServingDtype::kFloat32) {
        recemb::fuzz::write_hostile_json_seeds(corpus, "manifest", manifest_form);
      }
    }
  });
}
