// Writes the seed corpus of checkpoint_fuzz into the directory argv[1]: the manifest of
// save_fuzz_checkpoint as written, compacted, with its optional parts removed, and with hostile
// values added (an array nested 100,000 deep, a number beyond double's range).
#include <filesystem>
#include <string>

#include "checkpoint_fuzz_fixture.h"
#include "seeds_main.h"
#include "support/json.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  using recemb::support::Json;
  return recemb::fuzz::seeds_main(argc, argv, [](const fs::path& corpus, const fs::path& scratch) {
    const fs::path checkpoint = recemb::fuzz::save_fuzz_checkpoint(scratch);
    const std::string text = recemb::fuzz::read_file(checkpoint / "manifest.json");
    Json json = Json::parse(text);
    recemb::fuzz::write_file(corpus / "manifest", text);
    const std::string compact = json.dump();
    recemb::fuzz::write_file(corpus / "manifest-compact", compact);
    recemb::fuzz::write_hostile_json_seeds(corpus, "manifest", compact);
    json["extra_arrays"] = Json::array();
    json["metadata"] = Json::object();
    json["features"].erase(1);
    json["tables"][1]["config"].erase("quantization_config");
    recemb::fuzz::write_file(corpus / "manifest-minimal", json.dump());
  });
}
