// Reading speed of the trainer's Criteo reader (dlrm/criteo_reader.h): lines parsed and hashed
// into batches of 2048 (`recemb train` runs the reader on a background thread, PrefetchingSource,
// while the training step runs), from a plain file and from the same file gzip-compressed, on one
// thread or two (gzip decompressed on a thread of its own: data.reader_threads = 2); and the bytes
// of the files alone (InputFile, no parsing). Rates are of wall time (UseRealTime: a second
// thread's work only shows there); the CPU column is the whole process's.
//
// The input: 200k synthetic lines written by the bench itself, in Criteo's shape (label, 13
// integers, 26 eight-digit hexadecimal values drawn from 2000 per feature, about a tenth of the
// fields empty), so that gzip compresses it about as it does the real files. Counters:
// bytes_per_second = decompressed text bytes, items_per_second = lines.
#include <benchmark/benchmark.h>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>
#include <zlib.h>

#include "dlrm/criteo_profile.h"
#include "dlrm/criteo_reader.h"
#include "dlrm/input_file.h"

namespace {

using recemb::dlrm::CriteoReader;
using recemb::dlrm::ExampleBatch;
using recemb::dlrm::InputFile;

constexpr int kLines = 200'000;
constexpr int64_t kBatch = 2048;

struct Files {
  std::filesystem::path directory;
  std::string plain, gzip;
  int64_t text_bytes = 0;

  Files() {
    directory = std::filesystem::temp_directory_path() /
                ("recemb-criteo-reader-bench-" + std::to_string(::getpid()));
    std::filesystem::create_directories(directory);
    std::mt19937_64 random(1);
    std::string text;
    char hex[16];
    for (int i = 0; i < kLines; ++i) {
      text += random() % 4 == 0 ? '1' : '0';
      for (int j = 0; j < 13; ++j) {
        text += '\t';
        if (random() % 10 != 0) text += std::to_string(random() % (j < 3 ? 20 : 3000));
      }
      for (int f = 0; f < 26; ++f) {
        text += '\t';
        if (random() % 10 == 0) continue;
        std::snprintf(hex, sizeof hex, "%08x",
                      static_cast<unsigned>((random() % 2000) * 2654435761u + f));
        text += hex;
      }
      text += '\n';
    }
    text_bytes = static_cast<int64_t>(text.size());
    plain = (directory / "day.tsv").string();
    std::ofstream(plain, std::ios::binary) << text;
    gzip = (directory / "day.tsv.gz").string();
    gzFile file = gzopen(gzip.c_str(), "wb6");  // gzip's default level
    gzwrite(file, text.data(), static_cast<unsigned>(text.size()));
    gzclose(file);
  }
  ~Files() { std::filesystem::remove_all(directory); }
};

const Files& files() {
  static const Files instance;
  return instance;
}

const std::string& path_of(const benchmark::State& state) {
  return state.range(0) == 0 ? files().plain : files().gzip;
}

void BM_CriteoReader(benchmark::State& state) {
  const std::string& path = path_of(state);
  const std::vector<int64_t> sizes = recemb::dlrm::preset_vocabulary_sizes("small");
  const bool decompress_ahead = state.range(1) == 2;
  ExampleBatch batch;
  int64_t lines = 0;
  for (auto _ : state) {
    CriteoReader reader({path}, {.vocabulary_sizes = sizes, .decompress_ahead = decompress_ahead});
    while (const int64_t read = reader.next(batch, kBatch)) lines += read;
  }
  state.SetItemsProcessed(lines);
  state.SetBytesProcessed(state.iterations() * files().text_bytes);
  state.SetLabel(state.range(0) == 0 ? "plain" : "gzip");
  state.counters["file_bytes_per_text_byte"] =
      static_cast<double>(std::filesystem::file_size(path)) /
      static_cast<double>(files().text_bytes);
}

void BM_InputFile(benchmark::State& state) {
  const std::string& path = path_of(state);
  std::vector<char> buffer(size_t{1} << 20);
  for (auto _ : state) {
    InputFile file(path);
    while (file.read(buffer.data(), buffer.size()) > 0) {
    }
  }
  state.SetItemsProcessed(state.iterations() * kLines);
  state.SetBytesProcessed(state.iterations() * files().text_bytes);
  state.SetLabel(state.range(0) == 0 ? "plain" : "gzip");
}

BENCHMARK(BM_CriteoReader)
    ->ArgNames({"gzip", "threads"})
    ->Args({0, 1})
    ->Args({1, 1})
    ->Args({1, 2})
    ->UseRealTime()
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_InputFile)
    ->ArgName("gzip")
    ->Arg(0)
    ->Arg(1)
    ->UseRealTime()
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
