// The frame of every <name>_seeds program (see CMakeLists.txt): `<name>_seeds CORPUS_DIRECTORY`
// writes seed inputs into the corpus directory, using a scratch directory for the files it builds
// from the library (checkpoints, models) before it turns them into seeds.
#ifndef RECEMB_TESTS_FUZZ_SEEDS_MAIN_H_
#define RECEMB_TESTS_FUZZ_SEEDS_MAIN_H_

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdlib.h>
#include <string>

namespace recemb::fuzz {

// The whole file, as bytes in a string.
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream stream(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(stream), {}};
}

inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Two seeds every JSON reader must refuse without crashing: `json_text` (whose last '}' closes the
// document's object) with a member nested 100,000 arrays deep (corpus/<prefix>-deep), and with a
// member holding a number beyond double's range (corpus/<prefix>-1e400).
inline void write_hostile_json_seeds(const std::filesystem::path& corpus, const std::string& prefix,
                                     const std::string& json_text) {
  const auto with_member = [&json_text](const std::string& member) {
    std::string hostile = json_text;
    hostile.insert(hostile.rfind('}'), ", " + member);
    return hostile;
  };
  write_file(corpus / (prefix + "-deep"),
             with_member("\"deep\": " + std::string(100000, '[') + std::string(100000, ']')));
  write_file(corpus / (prefix + "-1e400"), with_member("\"huge\": [1e400]"));
}

// main() of a seeds program: checks the arguments, creates the corpus directory and a fresh scratch
// directory, calls write_seeds(corpus, scratch), then removes the scratch directory. Returns the
// exit status (2 for a usage error, 1 if the scratch directory cannot be created).
inline int seeds_main(
    int argc, char** argv,
    const std::function<void(const std::filesystem::path& corpus,
                             const std::filesystem::path& scratch)>& write_seeds) {
  namespace fs = std::filesystem;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIRECTORY\n", argv[0]);
    return 2;
  }
  const fs::path corpus = argv[1];
  fs::create_directories(corpus);
  std::string scratch = (fs::temp_directory_path() / "recemb-seeds-XXXXXX").string();
  if (::mkdtemp(scratch.data()) == nullptr) return 1;
  write_seeds(corpus, scratch);
  fs::remove_all(scratch);
  return 0;
}

}  // namespace recemb::fuzz

#endif  // RECEMB_TESTS_FUZZ_SEEDS_MAIN_H_
