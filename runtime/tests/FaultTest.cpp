// Host access to device memory is reported; other faults reach the handler installed before.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>

#include "TestUtil.h"

using namespace openreg_test;

namespace {
void previousHandler(int) {
  const char message[] = "the previous handler ran\n";
  ssize_t ignored = write(STDERR_FILENO, message, sizeof message - 1);
  (void)ignored;
  _exit(7);
}
}  // namespace

TEST(FaultDeathTest, HostStoreToDeviceMemoryIsReported) {
  EXPECT_EXIT(
      {
        void* p = nullptr;
        orMalloc(&p, 64);
        static_cast<volatile int*>(p)[4] = 1;
      },
      ::testing::KilledBySignal(SIGSEGV),
      "host code touched openreg device memory: address 0x[0-9a-f]+ is on device 0, inside the "
      "allocation at 0x[0-9a-f]+ of 64 bytes \\(offset 16\\).*tensor.cpu\\(\\)");
}

TEST(FaultDeathTest, HostLoadOfFreedDeviceMemoryIsReported) {
  EXPECT_EXIT(
      {
        orSetDevice(1);
        void* p = nullptr;
        orMalloc(&p, 4096);
        orFree(p);
        std::exit(static_cast<volatile int*>(p)[0]);
      },
      ::testing::KilledBySignal(SIGSEGV), "is on device 1, in no live allocation");
}

TEST(FaultDeathTest, ATaskUsingADevicePointerInsteadOfAKernelPointerIsReported) {
  EXPECT_EXIT(
      {
        void* p = nullptr;
        orMalloc(&p, 64);
        openreg::launch(nullptr, [p] { static_cast<volatile char*>(p)[0] = 1; });
        orDeviceSynchronize();
      },
      ::testing::KilledBySignal(SIGSEGV), "host code touched openreg device memory");
}

TEST(FaultDeathTest, OtherFaultsReachThePreviousHandler) {
  EXPECT_EXIT(
      {
        struct sigaction action {};
        action.sa_handler = previousHandler;
        sigaction(SIGSEGV, &action, nullptr);
        int count = 0;
        orGetDeviceCount(&count);  // installs the runtime's handler on top
        void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        std::exit(static_cast<volatile int*>(page)[0]);
      },
      ::testing::ExitedWithCode(7), "the previous handler ran");
}

TEST(FaultDeathTest, HandlerCanBeDisabled) {
  EXPECT_EXIT(
      {
        setenv("OPENREG_FAULT_HANDLER", "0", 1);
        struct sigaction action {};
        action.sa_handler = previousHandler;
        sigaction(SIGSEGV, &action, nullptr);
        void* p = nullptr;
        orMalloc(&p, 64);
        std::exit(static_cast<volatile int*>(p)[0]);  // still faults: the range is PROT_NONE
      },
      ::testing::ExitedWithCode(7), "the previous handler ran");
}
