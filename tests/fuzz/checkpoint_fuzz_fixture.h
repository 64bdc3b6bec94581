// The checkpoint that checkpoint_fuzz reads and checkpoint_seeds describes: both save the same
// deterministic Embedding, so the seed manifests match the fuzzer's data files.
#ifndef RECEMB_TESTS_FUZZ_CHECKPOINT_FUZZ_FIXTURE_H_
#define RECEMB_TESTS_FUZZ_CHECKPOINT_FUZZ_FIXTURE_H_

#include <filesystem>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/embedding.h"

namespace recemb::fuzz {

inline Embedding fuzz_embedding() {
  return Embedding(
      {{.name = "video", .vocabulary_size = 6, .dim = 4},
       {.name = "words",
        .vocabulary_size = 5,
        .dim = 2,
        .optimizer = Adam{.learning_rate = ExponentialDecay{}},
        .combiner = Combiner::kSqrtn,
        .quantization_config = QuantizationConfig{.num_buckets = 4, .lower = -1, .upper = 1}},
       {.name = "tags", .vocabulary_size = 3, .dim = 2, .optimizer = RowwiseAdagrad{}}},
      {{.name = "watched", .table = "video"},
       {.name = "query", .table = "words", .max_sequence_length = 3},
       {.name = "tag", .table = "tags", .output_shape = {2, 2}}},
      {.optimizer = Adagrad{}, .num_threads = 1, .seed = 5});
}

// Saves fuzz_embedding() (step 7, an extra array, metadata, small checksum blocks) under `root`;
// returns the checkpoint directory.
inline std::filesystem::path save_fuzz_checkpoint(const std::filesystem::path& root) {
  Embedding embedding = fuzz_embedding();
  embedding.set_step(7);
  const std::vector<float> dense = {1.0f, 2.0f, 3.0f};
  return save_checkpoint(embedding, root,
                         {.extra_arrays = {{.name = "dense", .values = dense}},
                          .metadata = {{"data", "part-3"}},
                          .checksum_block_bytes = 16});
}

}  // namespace recemb::fuzz

#endif  // RECEMB_TESTS_FUZZ_CHECKPOINT_FUZZ_FIXTURE_H_
