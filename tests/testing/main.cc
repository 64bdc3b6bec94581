// The main() of every test program: GoogleTest's, plus a note of how to reproduce a failure.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
