// A fresh directory under $TMPDIR (or /tmp) for one test, removed with everything in it when the
// object is destroyed.
#ifndef RECEMB_TESTS_TESTING_TEMPORARY_DIRECTORY_H_
#define RECEMB_TESTS_TESTING_TEMPORARY_DIRECTORY_H_

#include <filesystem>
#include <string>
#include <vector>

namespace recemb::test {

class TemporaryDirectory {
 public:
  TemporaryDirectory();
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

  // The names of the directory's entries, sorted.
  std::vector<std::string> entries() const;

 private:
  std::filesystem::path path_;
};

}  // namespace recemb::test

#endif  // RECEMB_TESTS_TESTING_TEMPORARY_DIRECTORY_H_
