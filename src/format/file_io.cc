#include "format/file_io.h"

#include <atomic>
#include <cerrno>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

#include "recemb/error.h"

namespace recemb::format {
namespace {

[[noreturn]] void throw_system_error(int error, const char* call,
                                     const std::filesystem::path& path) {
  throw std::system_error(error, std::generic_category(),
                          std::string(call) + " '" + path.string() + "'");
}

int open_or_throw(const std::filesystem::path& path, int flags, const char* call) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == ENOENT && (flags & O_CREAT) == 0) {
      throw InvalidArgument("file '" + path.string() + "' does not exist");
    }
    throw_system_error(errno, call, path);
  }
  return fd;
}

void sync_or_throw(int fd, const std::filesystem::path& path) {
  // fsync is not restarted after EINTR on every system; a retry is harmless.
  int result;
  do {
    result = ::fsync(fd);
  } while (result != 0 && errno == EINTR);
  if (result != 0) throw_system_error(errno, "fsync", path);
}

// close() is not retried on EINTR: on Linux the descriptor is released either way.
int close_quietly(int fd) { return fd >= 0 ? ::close(fd) : 0; }

// A name for a temporary file next to `path`, unique among concurrent writers of this process
// (the counter) and of other processes (the pid).
std::filesystem::path temporary_path(const std::filesystem::path& path) {
  static std::atomic<uint64_t> counter{0};
  return path.parent_path() / ("." + path.filename().string() + ".tmp-" +
                               std::to_string(::getpid()) + "-" + std::to_string(++counter));
}

}  // namespace

OutputFile OutputFile::create(const std::filesystem::path& path) {
  return OutputFile(open_or_throw(path, O_WRONLY | O_CREAT | O_TRUNC, "create"), path);
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    close_quietly(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

OutputFile::~OutputFile() { close_quietly(fd_); }

void OutputFile::write(std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd_, bytes.data(), bytes.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      throw_system_error(errno, "write", path_);
    }
    bytes = bytes.subspan(static_cast<size_t>(written));
  }
}

void OutputFile::sync() { sync_or_throw(fd_, path_); }

void OutputFile::close() {
  if (close_quietly(std::exchange(fd_, -1)) != 0) throw_system_error(errno, "close", path_);
}

InputFile InputFile::open(const std::filesystem::path& path) {
  const int fd = open_or_throw(path, O_RDONLY, "open");
  struct stat status {};
  if (::fstat(fd, &status) != 0) {
    const int error = errno;
    close_quietly(fd);
    throw_system_error(error, "fstat", path);
  }
  return InputFile(fd, static_cast<uint64_t>(status.st_size), path);
}

InputFile::InputFile(InputFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_), path_(std::move(other.path_)) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    close_quietly(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    path_ = std::move(other.path_);
  }
  return *this;
}

InputFile::~InputFile() { close_quietly(fd_); }

void InputFile::read_at(uint64_t offset, std::span<std::byte> bytes) const {
  uint64_t position = offset;
  while (!bytes.empty()) {
    const ssize_t count = ::pread(fd_, bytes.data(), bytes.size(), static_cast<off_t>(position));
    if (count < 0) {
      if (errno == EINTR) continue;
      throw_system_error(errno, "read", path_);
    }
    if (count == 0) {
      throw InvalidArgument("file '" + path_.string() + "' is truncated: it ends at byte " +
                            std::to_string(position) + ", a read needs bytes up to " +
                            std::to_string(position + bytes.size()));
    }
    bytes = bytes.subspan(static_cast<size_t>(count));
    position += static_cast<uint64_t>(count);
  }
}

std::string read_file(const std::filesystem::path& path, uint64_t max_bytes) {
  const InputFile file = InputFile::open(path);
  if (file.size() > max_bytes) {
    throw InvalidArgument("file '" + path.string() + "' has " + std::to_string(file.size()) +
                          " bytes, more than the " + std::to_string(max_bytes) + " expected");
  }
  std::string text(file.size(), '\0');
  file.read_at(0, std::as_writable_bytes(std::span(text)));
  return text;
}

void write_file(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  OutputFile file = OutputFile::create(path);
  file.write(bytes);
  file.sync();
  file.close();
}

void sync_directory(const std::filesystem::path& directory) {
  const int fd = open_or_throw(directory, O_RDONLY | O_DIRECTORY, "open directory");
  try {
    sync_or_throw(fd, directory);
  } catch (...) {
    close_quietly(fd);
    throw;
  }
  close_quietly(fd);
}

void publish(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    throw std::system_error(errno, std::generic_category(),
                            "rename '" + from.string() + "' to '" + to.string() + "'");
  }
  const std::filesystem::path parent = to.parent_path();
  sync_directory(parent.empty() ? std::filesystem::path(".") : parent);
}

void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(OutputFile& file)>& write) {
  const std::filesystem::path temporary = temporary_path(path);
  OutputFile file = [&] {
    try {
      return OutputFile::create(temporary);
    } catch (const std::system_error& error) {
      // The directory is missing: the caller knows `path`, not the temporary's made-up name.
      if (error.code() != std::errc::no_such_file_or_directory) throw;
      throw_system_error(ENOENT, "create", path);
    }
  }();
  try {
    write(file);
    file.sync();
    file.close();
    publish(temporary, path);
  } catch (...) {
    std::error_code ignored;  // the temporary may be gone already; the original error matters
    std::filesystem::remove(temporary, ignored);
    throw;
  }
}

}  // namespace recemb::format
