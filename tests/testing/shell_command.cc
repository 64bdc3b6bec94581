#include "testing/shell_command.h"

#include <chrono>
#include <cstdio>
#include <sys/wait.h>

namespace recemb::test {

CommandOutcome run_shell_command(const std::string& command) {
  const auto start = std::chrono::steady_clock::now();
  CommandOutcome outcome;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return outcome;
  char buffer[4096];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) outcome.output += buffer;
  const int status = pclose(pipe);
  outcome.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return outcome;
}

}  // namespace recemb::test
