// Copies whose host side is not host memory return an error instead of killing the process, and
// leave the device usable. See Note [Fault-guarded copies] in runtime/src/GuardedCopy.h.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "TestUtil.h"

using namespace openreg_test;

namespace {

void* const kBadHost = reinterpret_cast<void*>(0x10);

// A page the process owns but cannot touch: the wild pointers these tests use are only this page
// and the address 0x10, both of which every build (sanitizers included) faults on cleanly.
void* inaccessiblePage() {
  void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(page, MAP_FAILED);
  return page;
}

void expectMessage(const char* call, const char* address, const char* what) {
  const std::string message = lastMessage();
  EXPECT_NE(message.find(std::string("openreg: ") + call + ":"), std::string::npos) << message;
  EXPECT_NE(message.find(address), std::string::npos) << message;
  EXPECT_NE(message.find(what), std::string::npos) << message;
}

// The device still copies, launches and synchronizes correctly.
void expectDeviceUsable(void* dev) {
  std::vector<char> in(64, 'x'), out(64, 0);
  OR_OK(orMemcpy(dev, in.data(), 64, orMemcpyHostToDevice));
  OR_OK(orMemcpy(out.data(), dev, 64, orMemcpyDeviceToHost));
  EXPECT_EQ(in, out);
  int ran = 0;
  OR_OK(openreg::launch(nullptr, [&ran] { ran = 1; }));
  OR_OK(orDeviceSynchronize());
  EXPECT_EQ(ran, 1);
}

}  // namespace

TEST(CopyFault, HostToDeviceFromAnInvalidHostSourceIsAnError) {
  void* dev = nullptr;
  OR_OK(orMalloc(&dev, 64));
  EXPECT_EQ(orMemcpy(dev, kBadHost, 64, orMemcpyHostToDevice), orErrorInvalidValue);
  expectMessage("orMemcpy", "64-byte source range at 0x10", "not readable host memory");
  expectDeviceUsable(dev);
  OR_OK(orFree(dev));
}

TEST(CopyFault, DeviceToHostIntoAnInvalidHostDestinationIsAnError) {
  void* dev = nullptr;
  OR_OK(orMalloc(&dev, 64));
  EXPECT_EQ(orMemcpy(kBadHost, dev, 64, orMemcpyDeviceToHost), orErrorInvalidValue);
  expectMessage("orMemcpy", "64-byte destination range at 0x10", "not writable host memory");
  // A read-only page is not writable host memory either.
  void* readOnly = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(readOnly, MAP_FAILED);
  EXPECT_EQ(orMemcpy(readOnly, dev, 64, orMemcpyDefault), orErrorInvalidValue);
  expectMessage("orMemcpy", "destination range", "not writable host memory");
  munmap(readOnly, 4096);
  expectDeviceUsable(dev);
  OR_OK(orFree(dev));
}

TEST(CopyFault, PageableAsyncCopiesReportTheFaultToTheCaller) {
  void* dev = nullptr;
  OR_OK(orMalloc(&dev, 8192));
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  void* page = inaccessiblePage();
  EXPECT_EQ(orMemcpyAsync(dev, page, 8192, orMemcpyHostToDevice, s), orErrorInvalidValue);
  expectMessage("orMemcpyAsync", "8192-byte source range", "not readable host memory");
  EXPECT_EQ(orMemcpyAsync(page, dev, 100, orMemcpyDeviceToHost, s), orErrorInvalidValue);
  expectMessage("orMemcpyAsync", "100-byte destination range", "not writable host memory");
  OR_OK(orStreamSynchronize(s));  // the stream has no pending error: the caller got it
  OR_OK(orStreamDestroy(s));
  expectDeviceUsable(dev);
  munmap(page, 4096);
  OR_OK(orFree(dev));
}

TEST(CopyFault, HostToHostCopiesOnTheCallingThreadAreGuardedToo) {
  std::vector<char> good(256, 'g');
  void* page = inaccessiblePage();
  EXPECT_EQ(orMemcpy(good.data(), page, 256, orMemcpyHostToHost), orErrorInvalidValue);
  expectMessage("orMemcpy", "256-byte source range", "not readable host memory");
  EXPECT_EQ(orMemcpy(page, good.data(), 256, orMemcpyDefault), orErrorInvalidValue);
  expectMessage("orMemcpy", "256-byte destination range", "not writable host memory");
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  EXPECT_EQ(orMemcpyAsync(good.data(), kBadHost, 16, orMemcpyHostToHost, s), orErrorInvalidValue);
  expectMessage("orMemcpyAsync", "16-byte source range at 0x10", "not readable host memory");
  OR_OK(orStreamDestroy(s));
  // The calling thread's copies still work, and its fault handling is intact.
  std::vector<char> out(256, 0);
  OR_OK(orMemcpy(out.data(), good.data(), 256, orMemcpyHostToHost));
  EXPECT_EQ(out, good);
  munmap(page, 4096);
}

TEST(CopyFault, FaultsOutsideAGuardedCopyStillReachThePreviousHandler) {
  EXPECT_EXIT(
      {
        struct sigaction action {};
        action.sa_handler = [](int) {
          const char message[] = "the previous handler ran\n";
          ssize_t ignored = write(STDERR_FILENO, message, sizeof message - 1);
          (void)ignored;
          _exit(7);
        };
        sigaction(SIGSEGV, &action, nullptr);
        void* dev = nullptr;
        orMalloc(&dev, 64);
        // Caught by the runtime: not the previous handler's.
        const orError_t e = orMemcpy(dev, kBadHost, 64, orMemcpyHostToDevice);
        fprintf(stderr, "the copy returned %s\n", orGetErrorName(e));
        // A task touching the same address outside a runtime copy is an ordinary fault.
        openreg::launch(nullptr, [] {
          volatile int* volatile bad = static_cast<int*>(kBadHost);
          std::exit(*bad);
        });
        orDeviceSynchronize();
        std::exit(0);
      },
      ::testing::ExitedWithCode(7),
      "the copy returned orErrorInvalidValue.*the previous handler ran");
}

TEST(CopyFaultDeathTest, HostAccessToDeviceMemoryIsStillReportedAfterAGuardedCopy) {
  EXPECT_EXIT(
      {
        void* dev = nullptr;
        orMalloc(&dev, 64);
        orMemcpy(dev, kBadHost, 64, orMemcpyHostToDevice);
        static_cast<volatile int*>(dev)[4] = 1;
      },
      ::testing::KilledBySignal(SIGSEGV),
      "host code touched openreg device memory: address 0x[0-9a-f]+ is on device 0, inside the "
      "allocation at 0x[0-9a-f]+ of 64 bytes \\(offset 16\\)");
}
