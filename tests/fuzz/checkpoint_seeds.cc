// Writes the seed corpus of checkpoint_fuzz into the directory argv[1]: the manifest of
// save_fuzz_checkpoint as written, compacted, and with its optional parts removed.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdlib.h>
#include <string>

#include "checkpoint_fuzz_fixture.h"
#include "format/json.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIRECTORY\n", argv[0]);
    return 2;
  }
  const fs::path corpus = argv[1];
  fs::create_directories(corpus);
  std::string name = (fs::temp_directory_path() / "recemb-seeds-XXXXXX").string();
  if (::mkdtemp(name.data()) == nullptr) return 1;
  const fs::path checkpoint = recemb::fuzz::save_fuzz_checkpoint(name);
  std::ifstream stream(checkpoint / "manifest.json");
  const std::string text((std::istreambuf_iterator<char>(stream)), {});
  fs::remove_all(name);

  recemb::format::Json json = recemb::format::Json::parse(text);
  std::ofstream(corpus / "manifest") << text;
  std::ofstream(corpus / "manifest-compact") << json.dump();
  json["extra_arrays"] = recemb::format::Json::array();
  json["metadata"] = recemb::format::Json::object();
  json["features"].erase(1);
  json["tables"][1]["config"].erase("quantization_config");
  std::ofstream(corpus / "manifest-minimal") << json.dump();
  return 0;
}
