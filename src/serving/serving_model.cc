#include <cerrno>
#include <fcntl.h>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>
#include <utility>

#include "recemb/error.h"
#include "recemb/serving.h"

#include "batch/csr_feature.h"
#include "batch/lookup.h"
#include "format/checksum.h"
#include "kernels/pool.h"
#include "serving/format.h"

namespace recemb {
namespace {

// A damaged file (recemb/error.h: DataLoss).
[[noreturn]] void fail(const std::string& context, const std::string& problem) {
  throw DataLoss(context + ": " + problem);
}

// A whole file mapped read-only and shared (pages come from the page cache, no copy), unmapped
// when destroyed. An empty file has no mapping and no bytes.
class Mapping {
 public:
  // Verifying the checksums reads every page anyway, so the mapping is populated in one call
  // (MAP_POPULATE), which beats taking the page faults during the checksums (1.3x for 256 MiB)
  // and leaves no fault for the first lookups; without, it maps lazily.
  Mapping(const std::filesystem::path& path, const std::string& context, bool verify) {
    const Descriptor file(path);
    struct stat status;
    if (::fstat(file.fd, &status) != 0) throw_system_error("fstat", path);
    if (!S_ISREG(status.st_mode)) throw InvalidArgument(context + ": not a regular file");
    size_ = static_cast<size_t>(status.st_size);
    if (size_ > 0) {
      const int flags = MAP_SHARED | (verify ? MAP_POPULATE : 0);
      address_ = ::mmap(nullptr, size_, PROT_READ, flags, file.fd, 0);
      if (address_ == MAP_FAILED) throw_system_error("mmap", path);
    }
  }
  ~Mapping() {
    if (size_ > 0) ::munmap(address_, size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(address_), size_};
  }

 private:
  // Open for reading while the file is being mapped (the mapping outlives it).
  struct Descriptor {
    // O_NONBLOCK: opening a FIFO would otherwise wait for a writer (the file type is checked
    // next); it does not change a regular file's reads or mapping.
    explicit Descriptor(const std::filesystem::path& path) {
      do {
        fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
      } while (fd < 0 && errno == EINTR);
      if (fd < 0) throw_system_error("open", path);
    }
    ~Descriptor() { ::close(fd); }
    Descriptor(const Descriptor&) = delete;
    Descriptor& operator=(const Descriptor&) = delete;
    int fd = -1;
  };

  [[noreturn]] static void throw_system_error(const char* call, const std::filesystem::path& path) {
    throw std::system_error(errno, std::generic_category(),
                            std::string(call) + " '" + path.string() + "'");
  }

  void* address_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

struct ServingModel::State {
  State(const std::filesystem::path& file, const std::string& context, bool verify)
      : path(file), mapping(file, context, verify) {}

  std::filesystem::path path;
  Mapping mapping;
  internal::ServingManifest manifest;
  std::vector<size_t> feature_table;        // feature -> table index
  std::vector<internal::TableRows> tables;  // the rows of each table, inside the mapping
};

ServingModel ServingModel::open(const std::filesystem::path& path, const OpenOptions& options) {
  const std::string context = "serving model '" + path.string() + "'";
  auto state = std::make_shared<State>(path, context, options.verify);
  const std::span<const std::byte> file = state->mapping.bytes();
  const internal::ServingHeader header = internal::decode_header(file, context);
  const std::span<const std::byte> manifest =
      file.subspan(internal::kServingHeaderSize, header.manifest_size);
  if (format::checksum(manifest) != header.manifest_checksum) {
    fail(context, "the manifest checksum does not match: the manifest is damaged");
  }
  const std::span<const std::byte> data =
      file.subspan(internal::kServingHeaderSize + header.manifest_size);
  state->manifest = internal::decode_manifest(
      std::string_view(reinterpret_cast<const char*>(manifest.data()), manifest.size()),
      data.size(), context);

  const internal::ServingManifest& parsed = state->manifest;
  for (size_t t = 0; t < parsed.tables.size(); ++t) {
    const internal::TableBlob& blob = parsed.blobs[t];
    const std::span<const std::byte> bytes =
        data.subspan(blob.offset, internal::padded_size(blob.size));
    if (options.verify && format::checksum(bytes) != blob.checksum) {
      const uint64_t begin = internal::kServingHeaderSize + header.manifest_size + blob.offset;
      fail(context, "table '" + parsed.tables[t].name +
                        "': the checksum does not match: its blob (file bytes [" +
                        std::to_string(begin) + ", " + std::to_string(begin + bytes.size()) +
                        ")) is damaged");
    }
    switch (parsed.dtype) {
      case ServingDtype::kFloat32:
        state->tables.emplace_back(reinterpret_cast<const float*>(bytes.data()));
        break;
      case ServingDtype::kFloat16:
        state->tables.emplace_back(
            internal::Float16Rows{reinterpret_cast<const uint16_t*>(bytes.data())});
        break;
      case ServingDtype::kInt8:
        state->tables.emplace_back(
            internal::Int8Rows{reinterpret_cast<const uint8_t*>(bytes.data())});
        break;
    }
  }
  for (const FeatureConfig& feature : parsed.features) {
    size_t t = 0;
    while (parsed.tables[t].name != feature.table) ++t;  // validated: the table exists
    state->feature_table.push_back(t);
  }
  return ServingModel(std::move(state));
}

ServingModel::ServingModel(std::shared_ptr<const State> state) : state_(std::move(state)) {}
ServingModel::ServingModel(const ServingModel&) = default;
ServingModel& ServingModel::operator=(const ServingModel&) = default;
ServingModel::ServingModel(ServingModel&&) noexcept = default;
ServingModel& ServingModel::operator=(ServingModel&&) noexcept = default;
ServingModel::~ServingModel() = default;

const std::filesystem::path& ServingModel::path() const { return state_->path; }
ServingDtype ServingModel::dtype() const { return state_->manifest.dtype; }
const std::vector<TableConfig>& ServingModel::tables() const { return state_->manifest.tables; }
const std::vector<FeatureConfig>& ServingModel::features() const {
  return state_->manifest.features;
}

std::vector<int64_t> ServingModel::activation_shape(size_t feature,
                                                    const FeatureInput& input) const {
  const State& state = *state_;
  if (feature >= state.manifest.features.size()) {
    throw InvalidArgument("feature index " + std::to_string(feature) + " is out of range [0, " +
                          std::to_string(state.manifest.features.size()) + ")");
  }
  return internal::activation_shape(state.manifest.features[feature],
                                    state.manifest.tables[state.feature_table[feature]], input);
}

void ServingModel::lookup(std::span<const FeatureInput> inputs,
                          std::span<const std::span<float>> activations) const {
  const State& state = *state_;
  const std::vector<FeatureConfig>& features = state.manifest.features;
  internal::check_feature_count(features.size(), inputs.size(), "lookup inputs");
  internal::check_feature_count(features.size(), activations.size(), "lookup activations");
  // Per thread, so that concurrent lookups share nothing mutable and a thread's lookups reuse
  // its buffers instead of allocating.
  thread_local std::vector<internal::CsrFeature> batch;
  if (batch.size() < features.size()) batch.resize(features.size());
  for (size_t f = 0; f < features.size(); ++f) {
    internal::normalize_feature(features[f], state.manifest.tables[state.feature_table[f]],
                                inputs[f], batch[f]);
    internal::check_activation_buffer(features[f], batch[f].activation_shape,
                                      activations[f].size());
  }
  // Validated.
  for (size_t f = 0; f < features.size(); ++f) {
    const size_t t = state.feature_table[f];
    internal::pool_bags(internal::pool_input(batch[f], state.manifest.tables[t], state.tables[t]),
                        0, batch[f].num_bags(), activations[f].data());
  }
}

}  // namespace recemb
