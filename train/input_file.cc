// The one file of recemb that includes zlib (Debian zlib1g-dev): gzopen's reader decompresses
// gzip files and passes any other file through unchanged ("transparent" reading).
#include "train/input_file.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <fcntl.h>
#include <mutex>
#include <sys/stat.h>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <vector>
#include <zlib.h>

#include "recemb/error.h"

namespace recemb::train {
namespace {

// zlib's input and output buffers (each): large reads of a gzip file decompress straight into
// the caller's buffer, so this only sizes the reads of compressed bytes.
constexpr unsigned kZlibBufferBytes = 1u << 17;

gzFile as_gz(void* file) { return static_cast<gzFile>(file); }

[[noreturn]] void throw_system_error(const std::string& what, const std::string& path) {
  throw std::system_error(errno, std::generic_category(), what + " '" + path + "'");
}

// Whether the file open as `fd` starts with the gzip magic bytes 1f 8b.
bool has_gzip_magic(int fd, const std::string& path) {
  std::array<unsigned char, 2> magic{};
  const ssize_t read = ::pread(fd, magic.data(), magic.size(), 0);
  if (read < 0) throw_system_error("reading", path);
  return read == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

// The chunks the thread decompresses ahead: kAheadChunks of kAheadChunkBytes at most.
constexpr size_t kAheadChunkBytes = size_t{1} << 20;
constexpr size_t kAheadChunks = 4;

}  // namespace

// A thread that calls read_file() into chunks, kAheadChunks ahead of read(); it owns file_ and
// offset_ while it runs, and ends at the end of the file, at an error (kept for read() to throw
// in turn) or when destroyed.
class InputFile::Decompressor {
 public:
  explicit Decompressor(InputFile& file) : thread_([this, &file] { run(file); }) {}
  ~Decompressor() {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;

  size_t read(char* data, size_t size) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !ready_.empty() || finished_; });
    if (ready_.empty()) {
      if (error_) std::rethrow_exception(error_);
      return 0;
    }
    std::vector<char>& chunk = ready_.front();
    const size_t count = std::min(size, chunk.size() - consumed_);
    std::memcpy(data, chunk.data() + consumed_, count);
    consumed_ += count;
    if (consumed_ == chunk.size()) {
      spare_ = std::move(chunk);
      ready_.pop_front();
      consumed_ = 0;
      changed_.notify_all();
    }
    return count;
  }

 private:
  void run(InputFile& file) {
    try {
      for (;;) {
        std::vector<char> chunk;
        {
          std::unique_lock lock(mutex_);
          changed_.wait(lock, [&] { return stopping_ || ready_.size() < kAheadChunks; });
          if (stopping_) break;
          chunk = std::move(spare_);
        }
        chunk.resize(kAheadChunkBytes);
        chunk.resize(file.read_file(chunk.data(), chunk.size()));
        const std::lock_guard lock(mutex_);
        if (chunk.empty()) break;
        ready_.push_back(std::move(chunk));
        changed_.notify_all();
      }
    } catch (...) {
      const std::lock_guard lock(mutex_);
      error_ = std::current_exception();
    }
    const std::lock_guard lock(mutex_);
    finished_ = true;
    changed_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  // Guarded by mutex_.
  std::deque<std::vector<char>> ready_;  // decompressed, not yet read; the front from consumed_
  size_t consumed_ = 0;
  std::vector<char> spare_;  // a chunk read, for the thread to reuse
  bool stopping_ = false;
  bool finished_ = false;  // the thread has ended: the end of the file, or error_
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once the rest is built
};

InputFile::InputFile(std::string path, bool decompress_ahead) : path_(std::move(path)) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_system_error("opening", path_);
  try {
    compressed_ = has_gzip_magic(fd, path_);
  } catch (...) {
    ::close(fd);
    throw;
  }
  file_ = gzdopen(fd, "rb");  // owns fd from here, closed by gzclose
  if (file_ == nullptr) {
    ::close(fd);
    errno = ENOMEM;
    throw_system_error("opening", path_);
  }
  gzbuffer(as_gz(file_), kZlibBufferBytes);
  if (decompress_ahead && compressed_) {
    try {
      ahead_ = std::make_unique<Decompressor>(*this);
    } catch (...) {
      gzclose_r(as_gz(file_));
      throw;
    }
  }
}

InputFile::~InputFile() {
  ahead_.reset();  // the thread stops before the file closes
  gzclose_r(as_gz(file_));
}

void InputFile::throw_error(int zlib_error, const char* zlib_message) const {
  if (zlib_error == Z_ERRNO) throw_system_error("reading", path_);
  const std::string where =
      "'" + path_ + "' after " + std::to_string(offset_) + " decompressed bytes";
  if (zlib_error == Z_BUF_ERROR) {
    throw DataLoss(where + ": the gzip data is truncated (the file ends inside it; zlib: " +
                   zlib_message + "): copy or download the file again");
  }
  throw DataLoss(where + ": the gzip data is corrupt (zlib: " + std::string(zlib_message) +
                 "): copy or download the file again");
}

size_t InputFile::read(char* data, size_t size) {
  return ahead_ != nullptr ? ahead_->read(data, size) : read_file(data, size);
}

size_t InputFile::read_file(char* data, size_t size) {
  const int read = gzread(as_gz(file_), data, static_cast<unsigned>(size));
  int error = Z_OK;
  const char* message = gzerror(as_gz(file_), &error);
  // Z_BUF_ERROR: the input ended inside a gzip member (zlib lets a reader of a file still being
  // written go on). The bytes before it are returned; the next read, finding no more, throws.
  if (read < 0 || (error != Z_OK && (error != Z_BUF_ERROR || read == 0))) {
    throw_error(error, message);
  }
  offset_ += read;
  return static_cast<size_t>(read);
}

void InputFile::seek(int64_t offset) {
  const bool decompress_ahead = ahead_ != nullptr;
  ahead_.reset();  // the chunks ahead are dropped; the thread restarts from `offset`
  if (gzseek(as_gz(file_), static_cast<z_off_t>(offset), SEEK_SET) < 0) {
    int error = Z_OK;
    const char* message = gzerror(as_gz(file_), &error);
    throw_error(error, message);
  }
  offset_ = offset;
  if (decompress_ahead) ahead_ = std::make_unique<Decompressor>(*this);
}

std::optional<int64_t> plain_file_size(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_system_error("opening", path);
  struct stat status {};
  const bool gzip = [&] {
    try {
      return has_gzip_magic(fd, path);
    } catch (...) {
      ::close(fd);
      throw;
    }
  }();
  const int stat_result = ::fstat(fd, &status);
  ::close(fd);
  if (stat_result != 0) throw_system_error("reading", path);
  if (gzip) return std::nullopt;
  return static_cast<int64_t>(status.st_size);
}

}  // namespace recemb::train
