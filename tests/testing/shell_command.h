// Running a shell command from a test (jobs under mpirun, the `recemb` program): its exit status,
// its combined stdout and stderr, and how long it took.
#ifndef RECEMB_TESTS_TESTING_SHELL_COMMAND_H_
#define RECEMB_TESTS_TESTING_SHELL_COMMAND_H_

#include <string>

namespace recemb::test {

struct CommandOutcome {
  int status = -1;  // the exit status; -1 if the command did not exit normally or did not start
  double seconds = 0;
  std::string output;  // stdout and stderr, interleaved as written
};

// Runs `command` with /bin/sh, stderr redirected into stdout, and waits for it.
CommandOutcome run_shell_command(const std::string& command);

}  // namespace recemb::test

#endif  // RECEMB_TESTS_TESTING_SHELL_COMMAND_H_
