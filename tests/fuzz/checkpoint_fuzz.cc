// libFuzzer target for the checkpoint reader: the input is a manifest.json. It is written, with a
// matching manifest.xxh3 (so that the parser, not only the checksum, is exercised), into a
// checkpoint whose data files are those of save_fuzz_checkpoint; then inspect_checkpoint,
// restore_checkpoint and load_checkpoint must either succeed or throw, never crash, abort, leak
// or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <span>
#include <stdlib.h>
#include <string>

#include "recemb/checkpoint.h"

#include "checkpoint_fuzz_fixture.h"
#include "format/checksum.h"

namespace {

namespace fs = std::filesystem;

struct Fixture {
  fs::path root;
  fs::path checkpoint;
  recemb::Embedding target = recemb::fuzz::fuzz_embedding();

  Fixture() {
    std::string name = (fs::temp_directory_path() / "recemb-fuzz-XXXXXX").string();
    if (::mkdtemp(name.data()) == nullptr) std::abort();
    root = name;
    checkpoint = recemb::fuzz::save_fuzz_checkpoint(root);
  }
  ~Fixture() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fixture;
  // Plain writes: an fsync per input would slow the fuzzer down tenfold.
  std::ofstream(fixture.checkpoint / "manifest.json", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  std::ofstream(fixture.checkpoint / "manifest.xxh3", std::ios::trunc)
      << recemb::format::checksum_to_hex(
             recemb::format::checksum(std::as_bytes(std::span(data, size))))
      << "\n";
  try {
    recemb::inspect_checkpoint(fixture.checkpoint);
  } catch (const std::exception&) {
  }
  try {
    recemb::restore_checkpoint(fixture.target, fixture.checkpoint,
                               {.resize = recemb::VocabularyResize::kGrowOrShrink});
  } catch (const std::exception&) {
  }
  for (const bool tables_only : {false, true}) {
    try {
      recemb::load_checkpoint(fixture.checkpoint, {.tables_only = tables_only, .num_threads = 1});
    } catch (const std::exception&) {
    }
  }
  return 0;
}
