// A failed initialization leaves no thread, mapping or file behind, and every later call, device
// queries included, returns its error. Each test runs in a child process with its own environment.
// See Note [Runtime initialization] in runtime/src/Runtime.h.
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "ProcessInfo.h"
#include "TestUtil.h"

using namespace openreg_test;

namespace {

int deviceMappings() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) {
    n += line.find("openreg-device") != std::string::npos ? 1 : 0;
  }
  return n;
}

// Every later call fails the same way, device queries included.
bool everyCallReportsTheFailure(const char* needle) {
  int count = -1;
  void* p = nullptr;
  const bool queries = orGetDeviceCount(&count) == orErrorInitializationError && count == -1 &&
                       std::strstr(orGetLastErrorMessage(), needle) != nullptr &&
                       orSetDevice(0) == orErrorInitializationError;
  return queries && orMalloc(&p, 64) == orErrorInitializationError &&
         orInit(0) == orErrorInitializationError;
}

}  // namespace

// 64 devices of 4 TiB need 4096 TiB of address space, and 2 devices of 4 TiB 128 TiB (each maps
// 8 x 4 TiB twice: Note [Reserved address ranges]; 2 devices fitted before reservations): the
// configuration is rejected before any device is set up, so device_count() in the PyTorch layer
// is 0 from the first query on.
TEST(InitFailure, AConfigurationThatCannotFitFailsAtTheFirstQueryAndStartsNothing) {
  for (const char* count : {"64", "2"}) {
    SCOPED_TRACE(count);
    EXPECT_EXIT(
        {
          setenv("OPENREG_DEVICE_COUNT", count, 1);
          setenv("OPENREG_DEVICE_MEMORY", "4T", 1);
          const int threadsBefore = threadCount();
          const orError_t init = orInit(0);
          fprintf(stderr, "%s|%s\n", orGetErrorName(init), orGetLastErrorMessage());
          const int threadsAfter = threadCount();
          fprintf(stderr, "threads %d -> %d, device mappings %d\n", threadsBefore, threadsAfter,
                  deviceMappings());
          std::exit(init == orErrorInitializationError && threadsAfter == threadsBefore &&
                            deviceMappings() == 0 && everyCallReportsTheFailure("address space")
                        ? 0
                        : 1);
        },
        ::testing::ExitedWithCode(0),
        std::string("orErrorInitializationError\\|openreg: OPENREG_DEVICE_COUNT=") + count +
            " devices of OPENREG_DEVICE_MEMORY=4T need [0-9]+ TiB of address space \\(each "
            "device maps 8 x its capacity");
  }
}

// Device 3 cannot get its memory file: devices 0 to 2, already mapped, are unmapped again, their
// files closed, and no worker was started.
TEST(InitFailure, ADeviceThatCannotBeSetUpLeavesNothingBehind) {
  EXPECT_EXIT(
      {
        setenv("OPENREG_DEVICE_COUNT", "8", 1);
        setenv("OPENREG_DEVICE_MEMORY", "64M", 1);
        setenv("OPENREG_STREAM_WORKERS", "2", 1);
        int count = 0;
        if (orGetDeviceCount(&count) != orSuccess || count != 8) std::exit(2);
        // Leave exactly three free file descriptors: one memory file each for devices 0 to 2.
        rlimit limit;
        getrlimit(RLIMIT_NOFILE, &limit);
        limit.rlim_cur = 64;
        if (setrlimit(RLIMIT_NOFILE, &limit) != 0) std::exit(3);
        std::vector<int> fillers;
        for (int fd; (fd = open("/dev/null", O_RDONLY)) >= 0;) fillers.push_back(fd);
        for (int i = 0; i < 3; ++i) {
          close(fillers.back());
          fillers.pop_back();
        }
        const int threadsBefore = threadCount();
        const orError_t init = orInit(0);
        fprintf(stderr, "%s|%s\n", orGetErrorName(init), orGetLastErrorMessage());
        const int threadsAfter = threadCount();
        const int mappings = deviceMappings();
        // The three files were closed again: three descriptors are free.
        int reopened = 0;
        for (int fd; reopened < 3 && (fd = open("/dev/null", O_RDONLY)) >= 0; ++reopened) {
          fillers.push_back(fd);
        }
        // Give the descriptors back: the sanitizers' runtime needs some to report anything.
        for (int fd : fillers) close(fd);
        fprintf(stderr, "threads %d -> %d, device mappings %d, descriptors back %d\n",
                threadsBefore, threadsAfter, mappings, reopened);
        std::exit(init == orErrorInitializationError && threadsAfter == threadsBefore &&
                          mappings == 0 && reopened == 3 && everyCallReportsTheFailure("device 3")
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0),
      "orErrorInitializationError\\|openreg: cannot set up device 3: memfd_create failed");
}
