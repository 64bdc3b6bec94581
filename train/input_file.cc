// The one file of recemb that includes zlib (Debian zlib1g-dev): gzopen's reader decompresses
// gzip files and passes any other file through unchanged ("transparent" reading).
#include "train/input_file.h"

#include <array>
#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>
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

}  // namespace

InputFile::InputFile(std::string path) : path_(std::move(path)) {
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
}

InputFile::~InputFile() { gzclose_r(as_gz(file_)); }

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
  if (gzseek(as_gz(file_), static_cast<z_off_t>(offset), SEEK_SET) < 0) {
    int error = Z_OK;
    const char* message = gzerror(as_gz(file_), &error);
    throw_error(error, message);
  }
  offset_ = offset;
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
