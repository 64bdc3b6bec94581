#include "support/file_io.h"

#include <atomic>
#include <cerrno>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

#include "recemb/error.h"

namespace recemb::support {
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
  if (fd < 0) throw_system_error(errno, call, path);
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

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  PosixWritableFile(const PosixWritableFile&) = delete;
  PosixWritableFile& operator=(const PosixWritableFile&) = delete;
  ~PosixWritableFile() override { close_quietly(fd_); }

  void append(std::span<const std::byte> bytes) override {
    write_all(bytes, [&](std::span<const std::byte> rest) {
      return ::write(fd_, rest.data(), rest.size());
    });
  }

  void write_at(uint64_t offset, std::span<const std::byte> bytes) override {
    write_all(bytes, [&](std::span<const std::byte> rest) {
      const ssize_t written = ::pwrite(fd_, rest.data(), rest.size(), static_cast<off_t>(offset));
      if (written > 0) offset += static_cast<uint64_t>(written);
      return written;
    });
  }

  void resize(uint64_t bytes) override {
    int result;
    do {
      result = ::ftruncate(fd_, static_cast<off_t>(bytes));
    } while (result != 0 && errno == EINTR);
    if (result != 0) throw_system_error(errno, "ftruncate", path_);
  }

  void sync() override { sync_or_throw(fd_, path_); }

  void close() override {
    if (close_quietly(std::exchange(fd_, -1)) != 0) throw_system_error(errno, "close", path_);
  }

 private:
  // Calls write_some(the bytes not written yet) until every byte is written, retrying EINTR.
  template <class WriteSome>
  void write_all(std::span<const std::byte> bytes, WriteSome&& write_some) {
    while (!bytes.empty()) {
      const ssize_t written = write_some(bytes);
      if (written < 0) {
        if (errno == EINTR) continue;
        throw_system_error(errno, "write", path_);
      }
      bytes = bytes.subspan(static_cast<size_t>(written));
    }
  }

  int fd_;
  std::filesystem::path path_;
};

class PosixReadableFile final : public ReadableFile {
 public:
  PosixReadableFile(int fd, uint64_t size, std::filesystem::path path)
      : fd_(fd), size_(size), path_(std::move(path)) {}
  PosixReadableFile(const PosixReadableFile&) = delete;
  PosixReadableFile& operator=(const PosixReadableFile&) = delete;
  ~PosixReadableFile() override { close_quietly(fd_); }

  uint64_t size() const override { return size_; }

  size_t read_at(uint64_t offset, std::span<std::byte> bytes) const override {
    while (true) {
      const ssize_t count = ::pread(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset));
      if (count >= 0) return static_cast<size_t>(count);
      if (errno != EINTR) throw_system_error(errno, "read", path_);
    }
  }

 private:
  int fd_;
  uint64_t size_;
  std::filesystem::path path_;
};

class PosixFileSystem final : public FileSystem {
 public:
  std::unique_ptr<WritableFile> create(const std::filesystem::path& path,
                                       ExistingFile existing) override {
    const int flags = O_WRONLY | O_CREAT | (existing == ExistingFile::kTruncate ? O_TRUNC : O_EXCL);
    return std::make_unique<PosixWritableFile>(open_or_throw(path, flags, "create"), path);
  }

  std::unique_ptr<WritableFile> open_for_writing(const std::filesystem::path& path) override {
    return std::make_unique<PosixWritableFile>(open_or_throw(path, O_WRONLY, "open"), path);
  }

  std::unique_ptr<ReadableFile> open(const std::filesystem::path& path) override {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. It does not
    // change reads of a regular file.
    const int fd = open_or_throw(path, O_RDONLY | O_NONBLOCK, "open");
    struct stat status {};
    if (::fstat(fd, &status) != 0) {
      const int error = errno;
      close_quietly(fd);
      throw_system_error(error, "fstat", path);
    }
    if (!S_ISREG(status.st_mode)) {
      close_quietly(fd);
      throw InvalidArgument("'" + path.string() + "' is not a regular file");
    }
    return std::make_unique<PosixReadableFile>(fd, static_cast<uint64_t>(status.st_size), path);
  }

  void rename(const std::filesystem::path& from, const std::filesystem::path& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      throw std::system_error(errno, std::generic_category(),
                              "rename '" + from.string() + "' to '" + to.string() + "'");
    }
  }

  void remove_all(const std::filesystem::path& path) override { std::filesystem::remove_all(path); }

  void create_directory(const std::filesystem::path& path) override {
    if (::mkdir(path.c_str(), 0755) != 0) throw_system_error(errno, "mkdir", path);
  }

  void sync_directory(const std::filesystem::path& directory) override {
    const int fd = open_or_throw(directory, O_RDONLY | O_DIRECTORY, "open directory");
    try {
      sync_or_throw(fd, directory);
    } catch (...) {
      close_quietly(fd);
      throw;
    }
    close_quietly(fd);
  }

  std::vector<std::filesystem::path> list(const std::filesystem::path& directory) override {
    std::vector<std::filesystem::path> entries;
    for (const std::filesystem::directory_entry& entry :
         std::filesystem::directory_iterator(directory)) {
      entries.push_back(entry.path());
    }
    return entries;
  }
};

std::atomic<FileSystem*> installed{nullptr};

// A name for a temporary file next to `path`, unique among concurrent writers of this process
// (the counter) and of other processes (the pid).
std::filesystem::path temporary_path(const std::filesystem::path& path) {
  static std::atomic<uint64_t> counter{0};
  return path.parent_path() / ("." + path.filename().string() + ".tmp-" +
                               std::to_string(::getpid()) + "-" + std::to_string(++counter));
}

}  // namespace

FileSystem& posix_file_system() {
  static PosixFileSystem posix;
  return posix;
}

FileSystem& file_system() {
  FileSystem* const test_file_system = installed.load(std::memory_order_acquire);
  return test_file_system != nullptr ? *test_file_system : posix_file_system();
}

void set_file_system_for_testing(FileSystem* file_system) {
  installed.store(file_system, std::memory_order_release);
}

OutputFile OutputFile::create(const std::filesystem::path& path) {
  return OutputFile(file_system().create(path, ExistingFile::kTruncate), path);
}

void OutputFile::write(std::span<const std::byte> bytes) { file_->append(bytes); }

InputFile InputFile::open(const std::filesystem::path& path) {
  return InputFile(file_system().open(path), path);
}

void InputFile::read_at(uint64_t offset, std::span<std::byte> bytes) const {
  uint64_t position = offset;
  while (!bytes.empty()) {
    const size_t count = file_->read_at(position, bytes);
    if (count == 0) {
      throw DataLoss("file '" + path_.string() + "' is truncated: it ends at byte " +
                     std::to_string(position) + ", a read needs bytes up to " +
                     std::to_string(position + bytes.size()));
    }
    bytes = bytes.subspan(count);
    position += count;
  }
}

std::string read_file(const std::filesystem::path& path, uint64_t max_bytes) {
  const InputFile file = InputFile::open(path);
  if (file.size() > max_bytes) {
    throw DataLoss("file '" + path.string() + "' has " + std::to_string(file.size()) +
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

void publish(const std::filesystem::path& from, const std::filesystem::path& to) {
  file_system().rename(from, to);
  const std::filesystem::path parent = to.parent_path();
  file_system().sync_directory(parent.empty() ? std::filesystem::path(".") : parent);
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
    try {  // the temporary may be gone already; the original error matters
      file_system().remove_all(temporary);
    } catch (...) {
    }
    throw;
  }
}

}  // namespace recemb::support
