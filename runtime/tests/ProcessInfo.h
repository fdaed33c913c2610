// What the tests ask of their own process, without GoogleTest (the fuzzer includes it too).
#pragma once

#include <dirent.h>

namespace openreg_test {

// The number of threads of this process (/proc/self/task).
inline int threadCount() {
  int n = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (dirent* entry = readdir(dir)) n += entry->d_name[0] != '.' ? 1 : 0;
    closedir(dir);
  }
  return n;
}

}  // namespace openreg_test
