// Checkpoint save and restore speed (recemb/checkpoint.h): one process, one table of 2^22 rows x
// 64 float32 (1 GiB), trained with Adagrad (a second 1 GiB variable, its accumulators): 2 GiB of
// data files per checkpoint, written into the system's temporary directory and removed at exit.
//
//   checkpoint_bench [repetitions]   (default 3)
//
// Prints, per repetition, the seconds of save_checkpoint (write, fsync, rename) and of
// restore_checkpoint (verify, then load) with the files in the page cache, and the medians.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
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
  const int repetitions = argc > 1 ? std::atoi(argv[1]) : 3;
  const std::filesystem::path root = std::filesystem::temp_directory_path() /
                                     ("recemb-checkpoint-bench-" + std::to_string(::getpid()));
  recemb::Embedding embedding({{.name = "table", .vocabulary_size = int64_t{1} << 22, .dim = 64}},
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
  std::printf("median of %d: save %.3f s, restore %.3f s (2 GiB of data files)\n", repetitions,
              median(saves), median(restores));
  std::filesystem::remove_all(root);
  return 0;
}
