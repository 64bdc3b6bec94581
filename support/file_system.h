// The file system under every file recemb writes or reads for checkpoints and serving models
// (leveldb's Env): one small interface, so that tests can inject failures (ENOSPC, EIO, short
// writes) and crashes that lose what was not synced (tests/testing/fault_file_system.h). The
// POSIX implementation is in support/file_io.cc; support/file_io.h builds on this one.
//
// Errors: a failing call throws std::system_error with its errno, naming the call and the path
// (a missing file: ENOENT). A file that is not a regular file (a FIFO, a device, a directory)
// given to open() throws InvalidArgument, found without blocking.
#ifndef RECEMB_SUPPORT_FILE_SYSTEM_H_
#define RECEMB_SUPPORT_FILE_SYSTEM_H_

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

namespace recemb::support {

// A file open for writing. The destructor closes it and ignores errors, so a writer that cares
// (every one) calls close().
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes all of `bytes` at the current end (write(2)), retrying short writes and EINTR.
  virtual void append(std::span<const std::byte> bytes) = 0;
  // Writes all of `bytes` at `offset` (pwrite(2)), retrying short writes and EINTR.
  virtual void write_at(uint64_t offset, std::span<const std::byte> bytes) = 0;
  // Sets the size to `bytes` (ftruncate): new bytes read as zeros.
  virtual void resize(uint64_t bytes) = 0;
  // fsync: the data written so far survives a crash of the machine.
  virtual void sync() = 0;
  // Closes the file, reporting a failure (a delayed write error shows here on some systems).
  virtual void close() = 0;
};

// A regular file open for reading; closed by the destructor.
class ReadableFile {
 public:
  virtual ~ReadableFile() = default;
  // The size when it was opened.
  virtual uint64_t size() const = 0;
  // Reads up to bytes.size() bytes at `offset`, retrying EINTR; returns how many (0: the end).
  virtual size_t read_at(uint64_t offset, std::span<std::byte> bytes) const = 0;
};

// How create() treats an existing file.
enum class ExistingFile { kTruncate, kFail };

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // A new file `path` (ExistingFile::kFail: EEXIST if it exists), open for writing.
  virtual std::unique_ptr<WritableFile> create(const std::filesystem::path& path,
                                               ExistingFile existing) = 0;
  // The existing file `path`, open for writing in place.
  virtual std::unique_ptr<WritableFile> open_for_writing(const std::filesystem::path& path) = 0;
  // The existing regular file `path`, open for reading.
  virtual std::unique_ptr<ReadableFile> open(const std::filesystem::path& path) = 0;
  // Renames a file or a directory in one atomic step (rename(2)).
  virtual void rename(const std::filesystem::path& from, const std::filesystem::path& to) = 0;
  // Removes a file or a directory with everything in it; nothing if it does not exist.
  virtual void remove_all(const std::filesystem::path& path) = 0;
  // Creates the directory `path` (its parent must exist).
  virtual void create_directory(const std::filesystem::path& path) = 0;
  // fsync of a directory: makes the creation, renaming and removal of its entries durable.
  virtual void sync_directory(const std::filesystem::path& directory) = 0;
  // The entries of `directory` (full paths), in no particular order.
  virtual std::vector<std::filesystem::path> list(const std::filesystem::path& directory) = 0;
};

// The file system in use: the POSIX one, unless a test installed another.
FileSystem& file_system();
// The POSIX file system itself (what a fault-injecting one forwards to).
FileSystem& posix_file_system();
// Tests only: makes `file_system` (null: the POSIX one) the one in use, until the next call. Not
// to be called while another thread uses the file system.
void set_file_system_for_testing(FileSystem* file_system);

}  // namespace recemb::support

#endif  // RECEMB_SUPPORT_FILE_SYSTEM_H_
