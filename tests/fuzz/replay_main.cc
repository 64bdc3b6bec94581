// main() of the fuzz_<name>_replay programs (tests/CMakeLists.txt): a fuzz target's
// LLVMFuzzerTestOneInput linked without libFuzzer and called once on every file of the
// directories given: the inputs its fuzz_<name>_seeds program writes and those checked in under
// tests/fuzz/corpus/<name>/. The test builds run them (under ASan+UBSan a report ends the program),
// so every target keeps compiling and every known input keeps passing; scripts/fuzz runs the same
// targets under libFuzzer, which searches for new inputs.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "seeds_main.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIRECTORY...\n", argv[0]);
    return 2;
  }
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (!fs::is_directory(argv[i])) {
      std::fprintf(stderr, "%s: %s is not a directory\n", argv[0], argv[i]);
      return 2;
    }
    for (const fs::directory_entry& entry : fs::directory_iterator(argv[i])) {
      if (entry.is_regular_file()) inputs.push_back(entry.path());
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "%s: no input files\n", argv[0]);
    return 1;
  }
  std::sort(inputs.begin(), inputs.end());
  for (const fs::path& input : inputs) {
    const std::string bytes = recemb::fuzz::read_file(input);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("%zu inputs replayed\n", inputs.size());
  return 0;
}
