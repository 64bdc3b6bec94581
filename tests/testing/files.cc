#include "testing/files.h"

#include <fstream>
#include <iterator>
#include <stdexcept>

namespace recemb::test {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream stream(path, std::ios::binary);
  std::string text{std::istreambuf_iterator<char>(stream), {}};
  if (!stream) throw std::runtime_error("cannot read '" + path.string() + "'");
  return text;
}

std::vector<std::byte> read_bytes(const std::filesystem::path& path) {
  const std::string text = read_text(path);
  const auto bytes = std::as_bytes(std::span(text));
  return {bytes.begin(), bytes.end()};
}

void write_bytes(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  std::ofstream stream(path, std::ios::binary | std::ios::trunc);
  stream.write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  if (!stream) throw std::runtime_error("cannot write '" + path.string() + "'");
}

std::filesystem::path checked_in_data_dir() { return RECEMB_CHECKED_IN_DATA_DIR; }

std::vector<std::byte> random_bytes(std::mt19937_64& rng, size_t size) {
  std::vector<std::byte> bytes(size);
  for (std::byte& byte : bytes) byte = static_cast<std::byte>(rng());
  return bytes;
}

}  // namespace recemb::test
