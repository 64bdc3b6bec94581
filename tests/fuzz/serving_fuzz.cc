// libFuzzer target for ServingModel::open (and a lookup of what it opens): any bytes must give
// either a model or DataLoss (a damaged file) or InvalidArgument (a bad lookup), never a crash, a
// hang or a read outside the file.
//
// The input is tried twice:
//   1. as a whole file;
//   2. as [uint64 data_size][manifest text]: the harness wraps the text in a header with valid
//      checksums and appends data_size % 2^20 zero bytes, so that mutations get past the header
//      and manifest checksums to the JSON parser, the config validation and the layout checks.
// Files live in a memfd, opened through /proc/self/fd, so the fuzzer does no disk I/O. Seeds:
// serving_seeds.cc.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#include "recemb/error.h"
#include "recemb/serving.h"

#include "format/checksum.h"
#include "serving/format.h"

namespace {

// Larger activations (a valid model can ask for any size) are not looked up.
constexpr int64_t kMaxActivation = int64_t{1} << 20;

// The memfd every input is written to, and the path that opens it.
struct ScratchFile {
  ScratchFile() : fd(memfd_create("serving_fuzz", 0)), path("/proc/self/fd/" + std::to_string(fd)) {
    if (fd < 0) __builtin_trap();
  }
  void write(std::span<const std::byte> bytes) const {
    if (ftruncate(fd, 0) != 0 || ftruncate(fd, static_cast<off_t>(bytes.size())) != 0) {
      __builtin_trap();
    }
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t written =
          pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (written <= 0) __builtin_trap();
      done += static_cast<size_t>(written);
    }
  }
  int fd;
  std::string path;
};

// Opens the scratch file both ways and, if it opens, looks up id 0 once in every feature (a
// ragged batch of one example), unless an activation would be too large.
void open_and_look_up(const ScratchFile& file) {
  for (const bool verify : {true, false}) {
    try {
      const recemb::ServingModel model = recemb::ServingModel::open(file.path, {.verify = verify});
      const std::vector<int64_t> ids{0};
      const std::vector<int64_t> splits{0, 1};
      const recemb::FeatureInput input = recemb::RaggedIds{
          .values = std::span<const int64_t>(ids), .row_splits = std::span<const int64_t>(splits)};
      std::vector<recemb::FeatureInput> inputs(model.features().size(), input);
      std::vector<std::vector<float>> activations;
      for (size_t f = 0; f < inputs.size(); ++f) {
        int64_t size = 1;
        for (const int64_t extent : model.activation_shape(f, input)) {
          if (__builtin_mul_overflow(size, extent, &size)) return;
        }
        if (size > kMaxActivation) return;  // a valid model (long sequences, wide tables)
        activations.emplace_back(static_cast<size_t>(size));
      }
      const std::vector<std::span<float>> spans(activations.begin(), activations.end());
      model.lookup(inputs, spans);
    } catch (const recemb::DataLoss&) {
      // Rejected as damaged: the expected outcome for almost every input.
    } catch (const recemb::InvalidArgument&) {
      // Rejected by the lookup's own checks.
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchFile file;
  const auto bytes = std::as_bytes(std::span(data, size));
  file.write(bytes);
  open_and_look_up(file);

  if (size < sizeof(uint64_t)) return 0;
  uint64_t data_size;
  std::memcpy(&data_size, data, sizeof data_size);
  data_size %= uint64_t{1} << 20;
  std::vector<std::byte> wrapped(recemb::internal::kServingHeaderSize);
  wrapped.insert(wrapped.end(), bytes.begin() + sizeof data_size, bytes.end());
  wrapped.resize(
      recemb::internal::kServingHeaderSize + recemb::internal::padded_size(size - sizeof data_size),
      std::byte{' '});
  const uint64_t manifest_size = wrapped.size() - recemb::internal::kServingHeaderSize;
  const auto header = recemb::internal::encode_header(
      {.manifest_size = manifest_size,
       .manifest_checksum = recemb::format::checksum(
           std::span(wrapped).subspan(recemb::internal::kServingHeaderSize)),
       .file_size = wrapped.size() + data_size});
  std::memcpy(wrapped.data(), header.data(), header.size());
  wrapped.resize(wrapped.size() + data_size);
  file.write(wrapped);
  open_and_look_up(file);
  return 0;
}
