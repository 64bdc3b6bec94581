// A file system for tests (support/file_system.h, in the spirit of leveldb's fault_injection_test)
// that forwards to the POSIX one and can make its calls fail or the machine crash:
//   - fail(): the Nth write, file fsync, rename or directory fsync throws std::system_error with a
//     chosen errno (ENOSPC, EIO, ...); a write can first write part of its bytes (a short write);
//   - fail_read(), shorten_read(): the Nth read of a file throws, or returns fewer bytes;
//   - crash_at(): from the Nth call that changes anything on, every call throws SimulatedCrash;
//     drop_unsynced() then loses what a real crash would: every file's bytes since its last fsync
//     (a file never fsynced becomes empty) and every creation and rename of a directory entry not
//     followed by an fsync of that directory (undone, newest first). Removals are not undone.
// Constructing one installs it as the file system in use; destroying it puts the POSIX one back.
// Thread-safe (the ranks of in_process_communicators share it).
#ifndef RECEMB_TESTS_TESTING_FAULT_FILE_SYSTEM_H_
#define RECEMB_TESTS_TESTING_FAULT_FILE_SYSTEM_H_

#include <array>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/file_system.h"

namespace recemb::test {

// The calls fail() can make fail.
enum class FaultPoint { kWrite, kSync, kRename, kSyncDirectory };
inline constexpr std::array<FaultPoint, 4> kFaultPoints = {
    FaultPoint::kWrite, FaultPoint::kSync, FaultPoint::kRename, FaultPoint::kSyncDirectory};
std::string fault_point_name(FaultPoint point);

// What every call throws once the simulated machine has crashed.
class SimulatedCrash : public std::runtime_error {
 public:
  SimulatedCrash() : std::runtime_error("simulated crash") {}
};

class FaultFileSystem final : public support::FileSystem {
 public:
  FaultFileSystem();
  ~FaultFileSystem() override;
  FaultFileSystem(const FaultFileSystem&) = delete;
  FaultFileSystem& operator=(const FaultFileSystem&) = delete;

  // How many calls of `point` ran (or failed) so far.
  int count(FaultPoint point) const;
  // How many calls that change anything (create, open for writing, write, resize, fsync, close,
  // rename, remove, mkdir, directory fsync) ran so far.
  int changes() const;

  // The call of `point` number `nth` (1-based, counted as count() counts) throws
  // std::system_error `error`; a write first writes the first half of its bytes when
  // `short_write`. Replaces an earlier fail().
  void fail(FaultPoint point, int nth, int error, bool short_write = false);
  // Every write to a file whose path contains `path_part` throws std::system_error `error` (a
  // disk full for one file: its temporary's name holds it too). Replaces an earlier call.
  void fail_writes_to(const std::string& path_part, int error);
  // How many reads (ReadableFile::read_at) of files opened through this file system ran so far.
  int reads() const;
  // The read number `nth` (1-based, as reads() counts) throws std::system_error `error`.
  void fail_read(int nth, int error);
  // The read number `nth` returns at most `max_bytes` bytes (0: as at the end of the file).
  void shorten_read(int nth, size_t max_bytes);

  // The change number `nth` (as changes() counts) and every call after it throw SimulatedCrash.
  void crash_at(int nth);
  // After a crash (or at any time): undoes what was not synced, as described above, and lets
  // calls through again.
  void drop_unsynced();

  std::unique_ptr<support::WritableFile> create(const std::filesystem::path& path,
                                                support::ExistingFile existing) override;
  std::unique_ptr<support::WritableFile> open_for_writing(
      const std::filesystem::path& path) override;
  std::unique_ptr<support::ReadableFile> open(const std::filesystem::path& path) override;
  void rename(const std::filesystem::path& from, const std::filesystem::path& to) override;
  void remove_all(const std::filesystem::path& path) override;
  void create_directory(const std::filesystem::path& path) override;
  void sync_directory(const std::filesystem::path& directory) override;
  std::vector<std::filesystem::path> list(const std::filesystem::path& directory) override;

 private:
  friend class FaultWritableFile;
  friend class FaultReadableFile;

  // A created or renamed directory entry, undone by a crash unless its directory was synced.
  struct EntryChange {
    enum Kind { kCreateFile, kCreateDirectory, kRename } kind;
    std::filesystem::path path;  // the new entry (kRename: the destination)
    std::filesystem::path from;  // kRename: the source
  };
  // A file written through this file system: its contents at its last fsync.
  struct FileState {
    std::string synced;
    bool dirty = false;
  };

  // Counts a change (and a call of `point`, if any); throws if it is to crash or fail. Returns
  // whether a write is to be short. Requires mutex_.
  bool before(std::optional<FaultPoint> point, const std::string& what);
  void track_new_file(const std::filesystem::path& path);
  void mark_dirty(const std::filesystem::path& path);
  void mark_synced(const std::filesystem::path& path);
  // Moves the states of `from` and of the files under it to `to`.
  void move_states(const std::filesystem::path& from, const std::filesystem::path& to);

  support::FileSystem& posix_;
  mutable std::mutex mutex_;
  std::array<int, kFaultPoints.size()> counts_{};
  int changes_ = 0;
  std::optional<FaultPoint> fail_point_;
  int fail_nth_ = 0;
  int fail_error_ = 0;
  bool fail_short_ = false;
  std::string fail_writes_to_;  // empty: none
  int fail_writes_to_error_ = 0;
  int crash_at_ = 0;  // 0: never
  bool crashed_ = false;
  int reads_ = 0;
  int fail_read_nth_ = 0;  // 0: never
  int fail_read_error_ = 0;
  int short_read_nth_ = 0;  // 0: never
  size_t short_read_bytes_ = 0;
  std::vector<EntryChange> unsynced_entries_;
  std::map<std::filesystem::path, FileState> files_;
};

}  // namespace recemb::test

#endif  // RECEMB_TESTS_TESTING_FAULT_FILE_SYSTEM_H_
