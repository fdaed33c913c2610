// Devices: count, current device, properties, configuration, errors, fork.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "TestUtil.h"

using namespace openreg_test;

TEST(Device, CountDefaultsToTwo) {
  if (std::getenv("OPENREG_DEVICE_COUNT") != nullptr) GTEST_SKIP() << "OPENREG_DEVICE_COUNT is set";
  int count = 0;
  OR_OK(orGetDeviceCount(&count));
  EXPECT_EQ(count, 2);
}

TEST(Device, CurrentDeviceIsPerThread) {
  OR_OK(orSetDevice(1));
  int here = -1, there = -1;
  std::thread([&] { OR_EXPECT_OK(orGetDevice(&there)); }).join();
  OR_OK(orGetDevice(&here));
  EXPECT_EQ(here, 1);
  EXPECT_EQ(there, 0);
  OR_OK(orSetDevice(0));
}

TEST(Device, BadIndexIsInvalidDevice) {
  int count = 0;
  OR_OK(orGetDeviceCount(&count));
  EXPECT_EQ(orSetDevice(-1), orErrorInvalidDevice);
  EXPECT_EQ(orSetDevice(count), orErrorInvalidDevice);
  EXPECT_NE(lastMessage().find("invalid device index " + std::to_string(count)), std::string::npos);
  orDeviceProp prop;
  EXPECT_EQ(orGetDeviceProperties(&prop, count), orErrorInvalidDevice);
  orStream_t s;
  EXPECT_EQ(orDeviceGetDefaultStream(99, &s), orErrorInvalidDevice);
  int current = -1;
  OR_OK(orGetDevice(&current));
  EXPECT_EQ(current, 0);  // a failed orSetDevice changes nothing
}

TEST(Device, NullOutPointersAreInvalidValue) {
  EXPECT_EQ(orGetDeviceCount(nullptr), orErrorInvalidValue);
  EXPECT_EQ(orGetDevice(nullptr), orErrorInvalidValue);
  EXPECT_EQ(orGetDeviceProperties(nullptr, 0), orErrorInvalidValue);
  size_t total = 0;
  EXPECT_EQ(orMemGetInfo(nullptr, &total), orErrorInvalidValue);
  EXPECT_EQ(orRuntimeGetVersion(nullptr), orErrorInvalidValue);
  EXPECT_EQ(orStreamCreate(nullptr), orErrorInvalidValue);
  EXPECT_EQ(orEventCreate(nullptr), orErrorInvalidValue);
  EXPECT_EQ(orMalloc(nullptr, 16), orErrorInvalidValue);
}

TEST(Device, PropertiesMatchMemoryInfo) {
  orDeviceProp prop;
  OR_OK(orGetDeviceProperties(&prop, 1));
  EXPECT_STREQ(prop.name, "OpenReg Emulated Device");
  EXPECT_EQ(prop.memoryAlignment, 4096u);
  EXPECT_GE(prop.workerCount, 1);
  OR_OK(orSetDevice(1));
  size_t free = 0, total = 0;
  OR_OK(orMemGetInfo(&free, &total));
  OR_OK(orSetDevice(0));
  EXPECT_EQ(total, prop.totalGlobalMem);
  EXPECT_EQ(free, total);
  int version = 0;
  OR_OK(orRuntimeGetVersion(&version));
  EXPECT_EQ(version, OPENREG_RUNTIME_VERSION);
}

TEST(Device, StreamPriorityRangeFollowsCuda) {
  int least = 5, greatest = 5;
  OR_OK(orDeviceGetStreamPriorityRange(&least, &greatest));
  EXPECT_EQ(least, 0);
  EXPECT_EQ(greatest, -1);
  OR_OK(orDeviceGetStreamPriorityRange(nullptr, nullptr));
}

TEST(Device, EveryErrorCodeHasANameAndString) {
  for (int code = orSuccess; code <= orErrorOutOfResources; ++code) {
    const auto e = static_cast<orError_t>(code);
    EXPECT_STRNE(orGetErrorName(e), "orErrorUnknownCode") << code;
    EXPECT_STRNE(orGetErrorString(e), "unknown error code") << code;
  }
  EXPECT_STREQ(orGetErrorName(orErrorInvalidValue), "orErrorInvalidValue");
  EXPECT_STREQ(orGetErrorName(static_cast<orError_t>(999)), "orErrorUnknownCode");
  EXPECT_STREQ(orGetErrorString(static_cast<orError_t>(999)), "unknown error code");
}

TEST(Device, SynchronizeWaitsForEveryStreamOfTheDevice) {
  orStream_t a, b;
  OR_OK(orStreamCreate(&a));
  OR_OK(orStreamCreate(&b));
  std::atomic<int> done{0};
  for (orStream_t s : {a, b, static_cast<orStream_t>(nullptr)}) {
    OR_OK(openreg::launch(s, [&done] {
      sleepMs(20);
      done.fetch_add(1);
    }));
  }
  OR_OK(orDeviceSynchronize());
  EXPECT_EQ(done.load(), 3);
  OR_OK(orStreamDestroy(a));
  OR_OK(orStreamDestroy(b));
}

// The configuration is read once, from the environment, at the first call. Each of these runs in
// a fresh child process (threadsafe death tests re-execute the binary).
TEST(DeviceConfig, IsReadFromTheEnvironment) {
  EXPECT_EXIT(
      {
        setenv("OPENREG_DEVICE_COUNT", "3", 1);
        setenv("OPENREG_DEVICE_MEMORY", "64M", 1);
        setenv("OPENREG_STREAM_WORKERS", "3", 1);
        int count = 0;
        orDeviceProp prop;
        bool good = orGetDeviceCount(&count) == orSuccess && count == 3 &&
                    orGetDeviceProperties(&prop, 2) == orSuccess &&
                    prop.totalGlobalMem == (64u << 20) && prop.workerCount == 3;
        std::exit(good ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(DeviceConfig, InvalidValueFailsInitializationNamingTheVariable) {
  EXPECT_EXIT(
      {
        setenv("OPENREG_DEVICE_MEMORY", "lots", 1);
        int count = 0;
        orError_t e = orGetDeviceCount(&count);
        fprintf(stderr, "%s|%s\n", orGetErrorName(e), orGetLastErrorMessage());
        // Every later call fails the same way.
        std::exit(e == orErrorInitializationError && orSetDevice(0) == orErrorInitializationError
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0),
      "orErrorInitializationError\\|openreg: invalid OPENREG_DEVICE_MEMORY='lots'");
  EXPECT_EXIT(
      {
        setenv("OPENREG_DEVICE_COUNT", "0", 1);
        int count = 0;
        std::exit(orGetDeviceCount(&count) == orErrorInitializationError &&
                          std::strstr(orGetLastErrorMessage(), "OPENREG_DEVICE_COUNT") != nullptr
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// Note [Configuration variables]: the registry declares every variable once, with every field;
// the runtime's values are its configuration's, the others' the environment's once valid.
TEST(DeviceConfig, TheRegistryDeclaresEachVariableAndReportsItsValue) {
  int count = 0;
  OR_OK(orConfigGetVariableCount(&count));
  EXPECT_EQ(count, 17);
  std::set<std::string> names;
  for (int i = 0; i < count; ++i) {
    orConfigVariable v{};
    OR_OK(orConfigGetVariable(i, &v));
    ASSERT_TRUE(v.name && v.reader && v.defaultValue && v.accepted && v.meaning);
    EXPECT_TRUE(names.insert(v.name).second) << v.name << " is declared twice";
  }
  orConfigVariable past{};
  EXPECT_EQ(orConfigGetVariable(count, &past), orErrorInvalidValue);
  EXPECT_NE(std::strstr(orGetLastErrorMessage(), "orConfigGetVariable: index 17"), nullptr);

  const char* value = nullptr;
  orConfigSource source = orConfigSourceEnvironment;
  orDeviceProp prop;
  OR_OK(orGetDeviceProperties(&prop, 0));
  OR_OK(orConfigGetValue("OPENREG_DEVICE_MEMORY", &value, &source));
  EXPECT_EQ(std::to_string(prop.totalGlobalMem), value);
  OR_OK(orConfigGetValue("OPENREG_OPENMP_RELEASE", &value, nullptr));
  EXPECT_TRUE(std::string(value) == "0" || std::string(value) == "1" ||
              std::string(value) == "auto");
  EXPECT_EQ(orConfigGetValue("OPENREG_NO_SUCH", &value, nullptr), orErrorInvalidValue);
  EXPECT_NE(std::strstr(orGetLastErrorMessage(), "OPENREG_NO_SUCH is not a variable"), nullptr);
  EXPECT_EQ(orConfigGetValue(nullptr, &value, nullptr), orErrorInvalidValue);

  // A variable the runtime does not read itself: checked when it is asked for.
  unsetenv("OPENREG_FALLBACK");
  OR_OK(orConfigGetValue("OPENREG_FALLBACK", &value, &source));
  EXPECT_STREQ(value, "allow");
  EXPECT_EQ(source, orConfigSourceDefault);
  setenv("OPENREG_FALLBACK", "warn", 1);
  OR_OK(orConfigGetValue("OPENREG_FALLBACK", &value, &source));
  EXPECT_STREQ(value, "warn");
  EXPECT_EQ(source, orConfigSourceEnvironment);
  setenv("OPENREG_FALLBACK", "sometimes", 1);
  EXPECT_EQ(orConfigGetValue("OPENREG_FALLBACK", &value, &source), orErrorInvalidValue);
  EXPECT_STREQ(orGetLastErrorMessage(),
               "openreg: invalid OPENREG_FALLBACK='sometimes': expected allow, warn or error.");
  unsetenv("OPENREG_FALLBACK");

  // A layer that parses its variable itself refuses a value in the same format, with its reason.
  EXPECT_EQ(orConfigRefuseValue("OPENREG_FAULT_INJECTION", "oom=3", "'oom=3' is not an option"),
            orErrorInvalidValue);
  EXPECT_STREQ(
      orGetLastErrorMessage(),
      "openreg: invalid OPENREG_FAULT_INJECTION='oom=3': 'oom=3' is not an option; expected "
      "comma-separated oom_at=, kernel_at=, lose_device=.");
  EXPECT_EQ(orConfigRefuseValue("OPENREG_QUEUE_DEPTH", "0", nullptr), orErrorInvalidValue);
  EXPECT_STREQ(orGetLastErrorMessage(),
               "openreg: invalid OPENREG_QUEUE_DEPTH='0': expected an integer from 1 to 16777216.");
  EXPECT_EQ(orConfigRefuseValue("OPENREG_NO_SUCH", "0", nullptr), orErrorInvalidValue);
  EXPECT_NE(std::strstr(orGetLastErrorMessage(), "OPENREG_NO_SUCH is not a variable"), nullptr);
  EXPECT_EQ(orConfigRefuseValue("OPENREG_QUEUE_DEPTH", nullptr, nullptr), orErrorInvalidValue);
}

TEST(DeviceFork, ChildForkedAfterInitGetsAClearError) {
  EXPECT_EQ(orInit(1), orErrorInvalidValue);
  OR_OK(orInit(0));  // devices are set up, workers run
  void* before = nullptr;
  OR_OK(orMalloc(&before, 64));
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    void* p = nullptr;
    int count = 0;
    const bool good = orMalloc(&p, 64) == orErrorInitializationError &&
                      std::strstr(orGetLastErrorMessage(), "forked subprocess") != nullptr &&
                      std::strstr(orGetLastErrorMessage(), "spawn") != nullptr &&
                      orStreamSynchronize(nullptr) == orErrorInitializationError &&
                      // Device queries still answer, as torch.cuda.device_count() does.
                      orGetDeviceCount(&count) == orSuccess && count == 2;
    _exit(good ? 0 : 1);
  }
  OR_OK(orFree(before));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The parent is unaffected.
  void* p = nullptr;
  OR_OK(orMalloc(&p, 64));
  OR_OK(orFree(p));
}

TEST(DeviceFork, DeviceQueriesDoNotPoisonFork) {
  EXPECT_EXIT(
      {
        int count = 0;
        int current = -1;
        orDeviceProp prop;
        int least = 0;
        int greatest = 0;
        orGetDeviceCount(&count);
        orGetDeviceProperties(&prop, 1);
        orSetDevice(1);
        orGetDevice(&current);
        orDeviceGetStreamPriorityRange(&least, &greatest);
        const pid_t pid = fork();
        if (pid == 0) {
          void* p = nullptr;
          _exit(orMalloc(&p, 64) == orSuccess && orFree(p) == orSuccess ? 0 : 1);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        std::exit(WIFEXITED(status) && WEXITSTATUS(status) == 0 && current == 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(DeviceFork, ChildForkedBeforeInitInitializesNormally) {
  EXPECT_EXIT(
      {
        const pid_t pid = fork();
        if (pid == 0) {
          int value = 7;
          int back = 0;
          void* p = nullptr;
          const bool good = orMalloc(&p, sizeof value) == orSuccess &&
                            orMemcpy(p, &value, sizeof value, orMemcpyHostToDevice) == orSuccess &&
                            orMemcpy(&back, p, sizeof back, orMemcpyDeviceToHost) == orSuccess &&
                            back == 7;
          _exit(good ? 0 : 1);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        std::exit(WIFEXITED(status) ? WEXITSTATUS(status) : 2);
      },
      ::testing::ExitedWithCode(0), "");
}
