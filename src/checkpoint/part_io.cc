#include "checkpoint/part_io.h"

#include <cerrno>
#include <fcntl.h>
#include <limits>
#include <string>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace recemb::internal {
namespace {

[[noreturn]] void throw_system_error(int error, const char* call,
                                     const std::filesystem::path& path) {
  throw std::system_error(error, std::generic_category(),
                          std::string(call) + " '" + path.string() + "'");
}

// An open file descriptor, closed by the destructor (errors ignored: close() reports them).
class Descriptor {
 public:
  Descriptor(const std::filesystem::path& path, int flags) : path_(path) {
    do {
      fd_ = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
    } while (fd_ < 0 && errno == EINTR);
    if (fd_ < 0) throw_system_error(errno, (flags & O_CREAT) != 0 ? "create" : "open", path);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }

  int fd() const { return fd_; }
  void sync_and_close() {
    int result;
    do {
      result = ::fsync(fd_);
    } while (result != 0 && errno == EINTR);
    if (result != 0) throw_system_error(errno, "fsync", path_);
    // Not retried on EINTR: on Linux the descriptor is released either way.
    if (::close(std::exchange(fd_, -1)) != 0) throw_system_error(errno, "close", path_);
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// Calls run(file_offset, first_local_row, num_local_rows) for the byte ranges of the local rows
// of `variable` whose table row is below num_rows, in local row order; consecutive rows whose
// ranges touch are one call.
template <class Float, class Run>
void for_each_run(const TablePart& part, const PartVariable<Float>& variable, int64_t num_rows,
                  Run&& run) {
  const auto row_bytes = static_cast<uint64_t>(variable.columns) * sizeof(float);
  auto offset_of = [&](int64_t local) {
    return static_cast<uint64_t>(part.global_row(local) * variable.width + variable.first_column) *
           sizeof(float);
  };
  int64_t first = 0;
  int64_t count = 0;
  for (int64_t local = 0; local < part.rows && part.global_row(local) < num_rows; ++local) {
    if (count > 0 &&
        offset_of(first) + static_cast<uint64_t>(count) * row_bytes == offset_of(local)) {
      ++count;
      continue;
    }
    if (count > 0) run(offset_of(first), first, count);
    first = local;
    count = 1;
  }
  if (count > 0) run(offset_of(first), first, count);
}

}  // namespace

void create_sized_file(const std::filesystem::path& path, uint64_t bytes) {
  Descriptor file(path, O_WRONLY | O_CREAT | O_EXCL);
  int result;
  do {
    result = ::ftruncate(file.fd(), static_cast<off_t>(bytes));
  } while (result != 0 && errno == EINTR);
  if (result != 0) throw_system_error(errno, "ftruncate", path);
  file.sync_and_close();
}

void write_part_rows(const std::filesystem::path& path, const TablePart& part,
                     const PartVariable<const float>& variable) {
  Descriptor file(path, O_WRONLY);
  for_each_run(
      part, variable, std::numeric_limits<int64_t>::max(),
      [&](uint64_t offset, int64_t first, int64_t count) {
        const auto* bytes =
            reinterpret_cast<const char*>(variable.values.data() + first * variable.columns);
        size_t remaining = static_cast<size_t>(count * variable.columns) * sizeof(float);
        while (remaining > 0) {
          const ssize_t written = ::pwrite(file.fd(), bytes, remaining, static_cast<off_t>(offset));
          if (written < 0) {
            if (errno == EINTR) continue;
            throw_system_error(errno, "write", path);
          }
          bytes += written;
          offset += static_cast<uint64_t>(written);
          remaining -= static_cast<size_t>(written);
        }
      });
  file.sync_and_close();
}

void read_part_rows(const format::InputFile& file, const TablePart& part,
                    const PartVariable<float>& variable, int64_t num_rows) {
  for_each_run(part, variable, num_rows, [&](uint64_t offset, int64_t first, int64_t count) {
    file.read_at(offset, std::as_writable_bytes(variable.values.subspan(
                             static_cast<size_t>(first * variable.columns),
                             static_cast<size_t>(count * variable.columns))));
  });
}

}  // namespace recemb::internal
