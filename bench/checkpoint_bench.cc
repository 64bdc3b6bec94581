// Checkpoint save and restore speed (recemb/checkpoint.h): one process, one table of 2^22 rows x
// 64 float32 (1 GiB), trained with Adagrad (a second 1 GiB variable, its accumulators): 2 GiB of
// data files per checkpoint, written into the system's temporary directory and removed at exit.
//
//   checkpoint_bench [repetitions]   (default 3)
//
// With --benchmark_min_time=... (how `make bench-smoke` runs every benchmark program), one
// repetition on a table of 2^12 rows (2 MiB of files): the program keeps running, quickly.
// Prints, per repetition, the seconds of save_checkpoint (write, fsync, rename) and of
// restore_checkpoint (verify, then load) with the files in the page cache, and the medians.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/embedding.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int repetitions = 3;
  int64_t rows = int64_t{1} << 22;
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    if (argument.starts_with("--benchmark_min_time")) {
      repetitions = 1;
      rows = int64_t{1} << 12;
      continue;
    }
    const auto [end, error] =
        std::from_chars(argument.data(), argument.data() + argument.size(), repetitions);
    if (error != std::errc() || end != argument.data() + argument.size() || repetitions < 1) {
      std::fprintf(stderr, "checkpoint_bench: expected a number of repetitions >= 1, got '%s'\n",
                   argv[i]);
      return 2;
    }
  }
  const std::filesystem::path root = std::filesystem::temp_directory_path() /
                                     ("recemb-checkpoint-bench-" + std::to_string(::getpid()));
  recemb::Embedding embedding({{.name = "table", .vocabulary_size = rows, .dim = 64}},
                              {{.name = "feature", .table = "table"}},
                              {.optimizer = recemb::Adagrad{.learning_rate = 0.1f}, .seed = 7});
  std::vector<double> saves;
  std::vector<double> restores;
  for (int repetition = 0; repetition < repetitions; ++repetition) {
    embedding.set_step(repetition + 1);
    auto start = std::chrono::steady_clock::now();
    const std::filesystem::path checkpoint =
        recemb::save_checkpoint(embedding, root, {.keep_last = 1});
    saves.push_back(seconds_since(start));
    start = std::chrono::steady_clock::now();
    recemb::restore_checkpoint(embedding, checkpoint);
    restores.push_back(seconds_since(start));
    std::printf("repetition %d: save %.3f s, restore %.3f s\n", repetition, saves.back(),
                restores.back());
  }
  std::printf("median of %d: save %.3f s, restore %.3f s (%lld rows x 64, with Adagrad)\n",
              repetitions, median(saves), median(restores), static_cast<long long>(rows));
  std::filesystem::remove_all(root);
  return 0;
}
