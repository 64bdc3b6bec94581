// Checkpoints: an Embedding's tables, optimizer slots, step and configs on disk, saved atomically
// and restored bit for bit (the format is specified in docs/formats.md, "Checkpoint format").
//
//   recemb::save_checkpoint(layer, "/ckpt", {.keep_last = 3});        // /ckpt/ckpt-000000001000
//   ...  after a crash or a restart, with the same configs:
//   if (auto latest = recemb::latest_checkpoint("/ckpt")) {
//     recemb::restore_checkpoint(layer, *latest);                      // step() is 1000 again
//   }
//
// A checkpoint stores whole logical tables (one file per table variable, as TF saves one tensor
// per table and slot), independent of the threads or placement that trained them. Training that
// resumes from a checkpoint continues exactly as if it had not stopped.
//
// Several ranks. For an Embedding of several ranks (EmbeddingOptions::communicator),
// save_checkpoint and restore_checkpoint are collective, like its other calls: every rank calls
// them in the same order with the same root or checkpoint, a directory every rank sees (one
// machine, or a shared file system on a cluster: NFS, Lustre, GPFS). Each rank writes and reads
// only the rows and columns of the table parts it holds, at their places in the files, in
// parallel; no rank ever holds a whole table it does not own. The checkpoint is the same whatever
// wrote it, so it restores under any placement and rank count, in one process or several. A
// dynamic table is saved as its keys (with their rows, slots, last-seen steps and counts) and
// restored key by key into the parts owning them.
//
// Thread safety: these functions read or write `embedding` like any other call on it (no other
// call on the same Embedding may run meanwhile). One job at a time may save into a root.
#ifndef RECEMB_CHECKPOINT_H_
#define RECEMB_CHECKPOINT_H_

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/export.h"

namespace recemb {

// Caller state saved with the embedding (for example the dense model's weights). The values are
// borrowed for the duration of save_checkpoint only.
struct NamedArray {
  std::string name = {};  // non-empty, unique among the extra arrays of one save
  std::span<const float> values = {};
};

struct SaveOptions {
  // How many complete checkpoints to keep under the root, this one included (>= 1); older ones
  // (smaller steps) are deleted after this one is published.
  int keep_last = 3;
  std::vector<NamedArray> extra_arrays = {};
  // Small caller strings (data position, run id, ...), returned by restore_checkpoint.
  std::map<std::string, std::string> metadata = {};
  // Each data file is checksummed in blocks of this many bytes (> 0, a multiple of 4), so that
  // verification streams. The default suits any table size; tests use small blocks.
  int64_t checksum_block_bytes = int64_t{64} << 20;
};

// Saves every table and slot, the step, the configs and optimizers of `embedding`, and the
// caller's extra arrays and metadata as the directory root/ckpt-<step(), 12 digits, zero padded>
// (root is created if missing), then deletes the checkpoints beyond options.keep_last and the
// leftovers of interrupted saves. Returns the new checkpoint's path.
//
// Atomic: the files are written into a temporary directory under root, fsynced, and published by
// one rename. A crash (or an exception) at any point leaves every earlier checkpoint intact and
// loadable, and no partial directory under a ckpt-* name. Data is written straight from the
// tables' memory, in blocks, without a copy.
//
// Errors (recemb/error.h); the embedding is never modified, whatever the error:
//   InvalidArgument     bad options (keep_last < 1, an empty or repeated extra-array name, a bad
//                       checksum_block_bytes); nothing was written;
//   FailedPrecondition  a checkpoint of this step already exists under root; nothing was written;
//   std::system_error   a failing file-system call (ENOSPC, EIO, ...), naming the call and the
//                       path, with its errno. Before the publishing rename: the temporary
//                       directory is removed (as far as the file system lets it; the next save
//                       removes what remains) and no checkpoint is published, so the root's latest
//                       checkpoint is the previous one. After it (the root's fsync, or deleting
//                       older checkpoints): the new checkpoint is published and complete.
//
// With several ranks: collective (see the top of this file). Rank 0 checks and creates the
// directories and sizes the files; every rank writes its parts (a replicated table: rank 0's
// copy) and fsyncs them; the ranks then checksum the files, each a share of them, and rank 0
// writes the manifest, publishes and prunes. Extra arrays and metadata are rank 0's (the other
// ranks' are not saved). An error on any rank throws on every rank, of the same type (a
// std::system_error with the same errno) and with the message "rank R: <message>"; what remains
// is as above.
RECEMB_EXPORT std::filesystem::path save_checkpoint(const Embedding& embedding,
                                                    const std::filesystem::path& root,
                                                    const SaveOptions& options = {});

// The complete checkpoint under `root` with the largest step, or nullopt if there is none (or no
// root). Directories of interrupted saves are ignored. Does not verify the checkpoint.
RECEMB_EXPORT std::optional<std::filesystem::path> latest_checkpoint(
    const std::filesystem::path& root);

// What restore_checkpoint does when a table's vocabulary_size differs from the checkpoint's.
enum class VocabularyResize {
  kError,         // a different vocabulary_size is an error
  kGrow,          // a larger vocabulary is allowed: rows (and their slots) beyond the
                  // checkpoint's keep their freshly initialized values; smaller is an error
  kGrowOrShrink,  // also a smaller vocabulary: the checkpoint's rows beyond it are dropped
};

// "error", "grow", "grow_or_shrink"; InvalidArgument for a value that is none of the enumerators.
RECEMB_EXPORT std::string_view vocabulary_resize_name(VocabularyResize resize);
// The inverse of vocabulary_resize_name; anything else throws InvalidArgument listing the valid
// names.
RECEMB_EXPORT VocabularyResize parse_vocabulary_resize(std::string_view name);

struct RestoreOptions {
  VocabularyResize resize = VocabularyResize::kError;
  // A table whose rows the checkpoint holds in another dtype (TableConfig::dtype) is an
  // InvalidArgument unless this is set: then its rows are converted, widened exactly to float32 or
  // rounded to nearest (ties to even) to 16 bits (docs/semantics.md, "16-bit tables").
  bool convert_dtype = false;
};

struct RestoredState {
  int64_t step = 0;
  std::map<std::string, std::vector<float>> extra_arrays = {};
  std::map<std::string, std::string> metadata = {};
};

// Restores the checkpoint `checkpoint` (a ckpt-* directory, or a root: then its
// latest_checkpoint) into `embedding`: every table's parameters and slots, and the step (which
// drives learning-rate schedules). Tables are matched by name; features may differ (they hold no
// state), and so may hyperparameters (the embedding's own are used from now on).
//
// Requirements, each an InvalidArgument naming the table and both values when not met: the same
// set of table names; equal dims; the same dtype unless options.convert_dtype is set; equal
// vocabulary sizes unless options.resize allows the
// difference; the same optimizer (name, hence the same slots), except that a table without an
// optimizer (lookup only) takes the parameters alone.
//
// Dynamic tables (docs/formats.md, "Dynamic tables"): their keys with their last-seen steps and
// counts, the exact counts of keys not yet admitted and the vocabulary_stats counters are
// restored too, each key into the part owning its bucket, so that training continues exactly as
// the saved run would have (counts that were held in a sketch are not saved). Each table must be
// dynamic in both or static in both (read_static_table_as_dynamic converts a static one), the
// embedding must have the checkpoint's seed (InvalidArgument), every part must have room for its
// share of the keys (InvalidArgument naming the table, found after the verification, with nothing
// changed), and no training lookup may be pending (FailedPrecondition).
//
// Verifies the manifest and every checksum of every file before changing anything, then reads
// the rows a second time, straight into the tables (each rank only its parts' rows and columns),
// without verifying them again. Errors (recemb/error.h), and what remains after each:
//   InvalidArgument     the requirements above are not met; the embedding is unchanged;
//   DataLoss            a truncated or damaged data file or manifest, or a format version this
//                       build does not read, naming the file (and the table and variable, or
//                       block); found in the verification: the embedding is unchanged;
//   std::system_error   a failing file-system call, with its errno (ENOENT: no such checkpoint,
//                       or a missing file); in the verification: the embedding is unchanged.
// The one exception is the second read: a file-system error in it, or a file that changed or
// shrank since it was verified (DataLoss), leaves the embedding partially restored (some rows
// and slots read, the step unchanged), and the message says so. Restore again after fixing the
// cause.
//
// With several ranks: collective. The ranks verify the files, each a share of them, and agree
// after each phase, so every rank throws the same error, of the same type, as "rank R: ...", and
// in the verification no rank has changed anything. Every rank returns the same RestoredState
// (extra arrays read by every rank).
RECEMB_EXPORT RestoredState restore_checkpoint(Embedding& embedding,
                                               const std::filesystem::path& checkpoint,
                                               const RestoreOptions& options = {});

// The explicit conversion of a static table into a dynamic one (restore_checkpoint refuses to
// restore either into the other): table `table` of the checkpoint `checkpoint` (a ckpt-* directory
// or a root, as restore_checkpoint), which must be static, as a dynamic table's contents: row r
// becomes key r for r in [0, vocabulary_size), with its parameters and the slots of the optimizer
// that trained it. Its files are verified first. Give it to Embedding::write_dynamic_table of a
// dynamic table with the same dim and optimizer (which counts each key as seen once, at the
// embedding's step, and needs a capacity of at least vocabulary_size):
//
//   layer.write_dynamic_table("user", recemb::read_static_table_as_dynamic(ckpt, "user"));
//
// Errors: InvalidArgument naming the table when the checkpoint has no such table or it is
// dynamic; DataLoss and std::system_error as restore_checkpoint. Holds the whole table in memory.
RECEMB_EXPORT DynamicTableContents
read_static_table_as_dynamic(const std::filesystem::path& checkpoint, std::string_view table);

struct LoadOptions {
  // true: only the tables, no optimizers and no slots (a lookup-only Embedding, as for export).
  bool tables_only = false;
  // EmbeddingOptions::num_threads of the new Embedding.
  int num_threads = 0;
};

// A new Embedding built from the checkpoint's own configs (tables, features, optimizers, seed,
// non-finite-gradient policy), with everything restore_checkpoint restores. Unless tables_only,
// a checkpoint saved with a learning-rate callback cannot be loaded (InvalidArgument naming the
// table: build the Embedding in code and use restore_checkpoint). An initializer callback becomes
// the default initializer (the values are restored anyway). Errors as restore_checkpoint; after
// any error there is no new Embedding.
// Single-process: the new Embedding is this process's alone (whole tables); to resume a job of
// several ranks, build its Embedding and call restore_checkpoint on every rank.
RECEMB_EXPORT Embedding load_checkpoint(const std::filesystem::path& checkpoint,
                                        const LoadOptions& options = {});

// One file of a checkpoint as inspect_checkpoint reports it.
struct CheckpointFile {
  std::string path = {};  // relative to the checkpoint directory
  // What it holds: "manifest", "table 'C1' variable 'parameters'", "extra array 'dense/parameters'"
  std::string holds = {};
  uint64_t bytes = 0;         // as the manifest records it
  std::string checksum = {};  // XXH3-64 of the whole file, 16 hex digits, as recorded
  bool ok = false;            // verified (or, without verification, present with the right size)
  std::string error = {};     // why not ok
};

// A table of a checkpoint as inspect_checkpoint reports it.
struct CheckpointTable {
  std::string name = {};
  int64_t vocabulary_size = 0;
  int64_t dim = 0;
  std::string optimizer = {};  // optimizer_name of the optimizer training it; empty: none
  // A dynamic table (vocabulary_size 0): the keys it holds (docs/formats.md, "Dynamic tables").
  bool dynamic = false;
  int64_t num_keys = 0;
};

struct CheckpointInfo {
  int format_version = 0;
  int64_t step = 0;
  std::vector<CheckpointTable> tables = {};  // in the checkpoint's order
  std::vector<FeatureConfig> features = {};
  std::map<std::string, std::string> metadata = {};  // SaveOptions::metadata, as saved
  std::string manifest_json = {};                    // the manifest's text
  std::vector<CheckpointFile> files = {};            // the manifest first, then every data file
  bool ok = false;                                   // every file ok
};

struct InspectOptions {
  // true: read every data file and check its checksums. false: only the manifest, and the
  // presence and size of each file.
  bool verify = true;
};

// Describes the checkpoint `checkpoint` (a ckpt-* directory or a root, as restore_checkpoint).
// Damage to data files (or a missing one) is reported in the result, not thrown; throws only when
// the manifest itself is damaged (DataLoss) or missing, or for other I/O failures
// (std::system_error).
RECEMB_EXPORT CheckpointInfo inspect_checkpoint(const std::filesystem::path& checkpoint,
                                                const InspectOptions& options = {});

}  // namespace recemb

#endif  // RECEMB_CHECKPOINT_H_
