// Writes the seed corpus of checkpoint_fuzz into the directory argv[1]: the manifest of
// save_fuzz_checkpoint as written, compacted, and with its optional parts removed.
#include <filesystem>
#include <string>

#include "checkpoint_fuzz_fixture.h"
#include "format/json.h"
#include "seeds_main.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  using recemb::format::Json;
  return recemb::fuzz::seeds_main(argc, argv, [](const fs::path& corpus, const fs::path& scratch) {
    const fs::path checkpoint = recemb::fuzz::save_fuzz_checkpoint(scratch);
    const std::string text = recemb::fuzz::read_file(checkpoint / "manifest.json");
    Json json = Json::parse(text);
    recemb::fuzz::write_file(corpus / "manifest", text);
    recemb::fuzz::write_file(corpus / "manifest-compact", json.dump());
    json["extra_arrays"] = Json::array();
    json["metadata"] = Json::object();
    json["features"].erase(1);
    json["tables"][1]["config"].erase("quantization_config");
    recemb::fuzz::write_file(corpus / "manifest-minimal", json.dump());
  });
}
