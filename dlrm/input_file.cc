// The one file of recemb that includes zlib (Debian zlib1g-dev): its inflate decompresses the
// members of a gzip file one after the other, straight into the reader's buffer; a plain file is
// read with pread.
#include "dlrm/input_file.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <fcntl.h>
#include <limits>
#include <mutex>
#include <new>
#include <sys/stat.h>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <vector>
#include <zlib.h>

#include "recemb/error.h"

namespace recemb::dlrm {
namespace {

// The compressed bytes read at a time (reads decompress straight into the caller's buffer).
constexpr unsigned kZlibBufferBytes = 1u << 17;

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
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw_system_error("opening", path_);
  try {
    compressed_ = has_gzip_magic(fd_, path_);
    if (compressed_) {
      stream_ = std::make_unique<z_stream>();
      // windowBits 15 + 16: gzip members only (zlib's headers and raw deflate are not gzip files).
      if (inflateInit2(stream_.get(), 15 + 16) != Z_OK) {
        stream_.reset();
        throw std::bad_alloc();
      }
      input_.resize(kZlibBufferBytes);
    }
    if (decompress_ahead && compressed_) ahead_ = std::make_unique<Decompressor>(*this);
  } catch (...) {
    if (stream_ != nullptr) inflateEnd(stream_.get());
    ::close(fd_);
    throw;
  }
}

InputFile::~InputFile() {
  ahead_.reset();  // the thread stops before the file closes
  if (stream_ != nullptr) inflateEnd(stream_.get());
  ::close(fd_);
}

int64_t InputFile::compressed_offset() const {
  return input_end_ - static_cast<int64_t>(stream_->avail_in);
}

void InputFile::throw_damaged(const std::string& what) const {
  throw DataLoss("'" + path_ + "' at byte " + std::to_string(compressed_offset()) + " (after " +
                 std::to_string(offset_) + " decompressed bytes): " + what +
                 ": copy or download the file again");
}

size_t InputFile::read(char* data, size_t size) {
  return ahead_ != nullptr ? ahead_->read(data, size) : read_file(data, size);
}

size_t InputFile::read_file(char* data, size_t size) {
  if (compressed_) return inflate_file(data, size);
  for (;;) {
    const ssize_t read = ::pread(fd_, data, size, offset_);
    if (read < 0 && errno == EINTR) continue;
    if (read < 0) throw_system_error("reading", path_);
    offset_ += read;
    return static_cast<size_t>(read);
  }
}

bool InputFile::refill_input() {
  for (;;) {
    const ssize_t read = ::pread(fd_, input_.data(), input_.size(), input_end_);
    if (read < 0 && errno == EINTR) continue;
    if (read < 0) throw_system_error("reading", path_);
    stream_->next_in = input_.data();
    stream_->avail_in = static_cast<uInt>(read);
    input_end_ += read;
    return read > 0;
  }
}

size_t InputFile::inflate_file(char* data, size_t size) {
  z_stream& stream = *stream_;
  size_t produced = 0;
  while (produced < size && !at_end_) {
    if (stream.avail_in == 0 && !refill_input()) {
      if (!in_member_) {
        at_end_ = true;
        break;
      }
      // The bytes before are returned first; the next read, finding no more, throws.
      if (produced > 0) break;
      throw_damaged("the gzip data is truncated (the file ends inside a member)");
    }
    if (!in_member_) {
      // Another member must start here: its magic bytes (zcat would ignore the rest of the file
      // as "trailing garbage").
      std::array<unsigned char, 2> magic{};
      const int64_t at = compressed_offset();
      const ssize_t read = ::pread(fd_, magic.data(), magic.size(), at);
      if (read < 0) throw_system_error("reading", path_);
      if (read != 2 || magic[0] != 0x1f || magic[1] != 0x8b) {
        throw_damaged(
            "the bytes after a complete gzip member do not start another (a damaged member "
            "header, or bytes appended to the file)");
      }
      in_member_ = true;
    }
    stream.next_out = reinterpret_cast<Bytef*>(data + produced);
    const size_t room = std::min<size_t>(size - produced, std::numeric_limits<uInt>::max());
    stream.avail_out = static_cast<uInt>(room);
    const int result = inflate(&stream, Z_NO_FLUSH);
    const size_t out = room - stream.avail_out;
    produced += out;
    offset_ += static_cast<int64_t>(out);
    if (result == Z_STREAM_END) {
      // A member's end ends the read: damage in the next one is thrown by a later read, after
      // the caller has every byte before it.
      in_member_ = false;
      inflateReset(&stream);
      if (produced > 0) break;
    } else if (result != Z_OK && result != Z_BUF_ERROR) {
      if (result == Z_MEM_ERROR) throw std::bad_alloc();
      throw_damaged(std::string("the gzip data is corrupt (zlib: ") +
                    (stream.msg != nullptr ? stream.msg : "error " + std::to_string(result)) + ")");
    }
  }
  return produced;
}

void InputFile::rewind() {
  offset_ = 0;
  if (!compressed_) return;
  inflateReset(stream_.get());
  stream_->avail_in = 0;
  input_end_ = 0;
  in_member_ = false;
  at_end_ = false;
}

void InputFile::seek(int64_t offset) {
  const bool decompress_ahead = ahead_ != nullptr;
  ahead_.reset();  // the chunks ahead are dropped; the thread restarts from `offset`
  if (!compressed_) {
    offset_ = offset;
    return;
  }
  if (offset < offset_) rewind();
  std::vector<char> skipped(kZlibBufferBytes);
  while (offset_ < offset) {
    const auto want = static_cast<size_t>(std::min<int64_t>(offset - offset_, kZlibBufferBytes));
    if (inflate_file(skipped.data(), want) == 0) break;  // past the end: at the end
  }
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

}  // namespace recemb::dlrm
