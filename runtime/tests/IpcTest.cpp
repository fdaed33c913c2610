// Sharing device memory between processes: orIpc* (Note [Sharing device memory between
// processes] in runtime/src/Ipc.h). The two-process tests start this binary again with a filter
// naming one DISABLED_IpcChild test, which runs the other process's side and reports through its
// exit status; the handle travels in the environment, the steps are paced through two pipes.
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "TestUtil.h"

extern char** environ;

using namespace openreg_test;

namespace {

constexpr std::size_t kBytes = 64 * 1024;

std::string toHex(const orIpcMemHandle_t& handle) {
  std::string s;
  for (unsigned char c : handle.reserved) {
    s += "0123456789abcdef"[c >> 4];
    s += "0123456789abcdef"[c & 15];
  }
  return s;
}

orIpcMemHandle_t fromHex(const std::string& s) {
  orIpcMemHandle_t handle{};
  for (std::size_t i = 0; i < sizeof handle.reserved && 2 * i + 1 < s.size(); ++i) {
    handle.reserved[i] = static_cast<unsigned char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  }
  return handle;
}

std::vector<unsigned char> pattern(std::size_t n) {
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(i % 251);
  return v;
}

std::size_t freeBytes() {
  std::size_t free = 0, total = 0;
  EXPECT_EQ(orMemGetInfo(&free, &total), orSuccess);
  return free;
}

// The other process: this binary running one DISABLED_IpcChild test.
struct Child {
  pid_t pid = -1;
  int toChild = -1;    // the parent writes one byte per step
  int fromChild = -1;  // the child answers one byte per step

  // With `stderrFile` >= 0 the child's standard error goes there.
  static Child start(const char* role, const orIpcMemHandle_t& handle, int stderrFile = -1) {
    int down[2], up[2];
    EXPECT_EQ(pipe(down), 0);
    EXPECT_EQ(pipe(up), 0);
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.push_back("OPENREG_IPC_TEST_HANDLE=" + toHex(handle));
    env.push_back("OPENREG_IPC_TEST_PIPES=" + std::to_string(down[0]) + "," +
                  std::to_string(up[1]));
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string filter = std::string("--gtest_filter=DISABLED_IpcChild.") + role;
    std::string disabled = "--gtest_also_run_disabled_tests";
    char exe[] = "/proc/self/exe";
    char* argv[] = {exe, filter.data(), disabled.data(), nullptr};
    Child c;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (stderrFile >= 0) posix_spawn_file_actions_adddup2(&actions, stderrFile, STDERR_FILENO);
    EXPECT_EQ(posix_spawn(&c.pid, exe, &actions, nullptr, argv, envp.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
    close(down[0]);
    close(up[1]);
    c.toChild = down[1];
    c.fromChild = up[0];
    return c;
  }
  char receive() const {
    char c = 0;
    return read(fromChild, &c, 1) == 1 ? c : 0;
  }
  void send(char c) const { EXPECT_EQ(write(toChild, &c, 1), 1); }
  int wait() {
    close(toChild);
    close(fromChild);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

// The child's side: the handle and the pipes from the environment.
struct Parent {
  orIpcMemHandle_t handle = fromHex(std::getenv("OPENREG_IPC_TEST_HANDLE"));
  int fromParent = -1, toParent = -1;
  Parent() { std::sscanf(std::getenv("OPENREG_IPC_TEST_PIPES"), "%d,%d", &fromParent, &toParent); }
  void send(char c) const { EXPECT_EQ(write(toParent, &c, 1), 1); }
  char receive() const {
    char c = 0;
    return read(fromParent, &c, 1) == 1 ? c : 0;
  }
};

}  // namespace

TEST(Ipc, AChildProcessMapsTheSameMemoryAndTheFreeWaitsForItsClose) {
  const std::size_t baseline = freeBytes();
  void* p = nullptr;
  OR_OK(orMalloc(&p, kBytes));
  const auto bytes = pattern(kBytes);
  OR_OK(orMemcpy(p, bytes.data(), kBytes, orMemcpyHostToDevice));
  orIpcMemHandle_t handle;
  // Any address inside the allocation names the whole allocation.
  OR_OK(orIpcGetMemHandle(&handle, static_cast<char*>(p) + 100));
  orIpcMemHandleInfo info;
  OR_OK(orIpcGetMemHandleInfo(&info, handle));
  EXPECT_EQ(info.exporterPid, getpid());
  EXPECT_EQ(info.device, 0);
  EXPECT_EQ(info.size, kBytes);
  EXPECT_EQ(orIpcMemHandleQuery(handle), orErrorNotReady);

  Child child = Child::start("OpensWritesAndCloses", handle);
  ASSERT_EQ(child.receive(), 'w');  // the child read the pattern and wrote 0xab everywhere
  std::vector<unsigned char> seen(kBytes);
  OR_OK(orMemcpy(seen.data(), p, kBytes, orMemcpyDeviceToHost));
  EXPECT_EQ(seen, std::vector<unsigned char>(kBytes, 0xab));
  OR_OK(orMemset(p, 0x5c, kBytes));  // and the child sees this write

  // Freed while the child maps it: retired, not released. Its range is not handed out again.
  OR_OK(orFree(p));
  EXPECT_EQ(orFree(p), orErrorInvalidDevicePointer);
  EXPECT_LT(freeBytes(), baseline);
  void* q = nullptr;
  OR_OK(orMalloc(&q, kBytes));
  EXPECT_NE(q, p);
  OR_OK(orFree(q));
  EXPECT_EQ(orIpcMemHandleQuery(handle), orErrorNotReady);

  child.send('r');                  // read again, then close
  ASSERT_EQ(child.receive(), 'c');  // closed
  EXPECT_EQ(orIpcMemHandleQuery(handle), orSuccess);
  EXPECT_EQ(child.wait(), 0);
  // The next allocation collects the retired one: every byte is back.
  OR_OK(orMalloc(&q, 4096));
  OR_OK(orFree(q));
  EXPECT_EQ(freeBytes(), baseline);
}

TEST(DISABLED_IpcChild, OpensWritesAndCloses) {
  Parent parent;
  void* p = nullptr;
  OR_OK(orIpcOpenMemHandle(&p, parent.handle, 0));
  std::vector<unsigned char> seen(kBytes);
  OR_OK(orMemcpy(seen.data(), p, kBytes, orMemcpyDeviceToHost));
  EXPECT_EQ(seen, pattern(kBytes));
  // One open per handle; the memory cannot be freed or passed on from here.
  void* again = nullptr;
  EXPECT_EQ(orIpcOpenMemHandle(&again, parent.handle, 0), orErrorInvalidValue);
  EXPECT_NE(lastMessage().find("already opened"), std::string::npos) << lastMessage();
  EXPECT_EQ(orFree(p), orErrorInvalidDevicePointer);
  EXPECT_NE(lastMessage().find("orIpcCloseMemHandle"), std::string::npos) << lastMessage();
  orIpcMemHandle_t onward;
  EXPECT_EQ(orIpcGetMemHandle(&onward, p), orErrorInvalidDevicePointer);
  // Tasks reach it through the kernel window, as any device memory.
  orStream_t stream;
  OR_OK(orStreamCreate(&stream));
  OR_OK(orMemsetAsync(p, 0xab, kBytes, stream));
  OR_OK(orStreamSynchronize(stream));
  parent.send('w');
  ASSERT_EQ(parent.receive(), 'r');
  OR_OK(orMemcpy(seen.data(), p, kBytes, orMemcpyDeviceToHost));
  EXPECT_EQ(seen, std::vector<unsigned char>(kBytes, 0x5c));  // the parent's write, after its free
  OR_OK(orIpcCloseMemHandle(p));
  EXPECT_EQ(orIpcCloseMemHandle(p), orErrorInvalidDevicePointer);
  OR_OK(orStreamDestroy(stream));
  parent.send('c');
}

TEST(Ipc, AnImporterThatExitsWithoutClosingGivesTheReferenceBack) {
  const std::size_t baseline = freeBytes();
  void* p = nullptr;
  OR_OK(orMalloc(&p, kBytes));
  orIpcMemHandle_t handle;
  OR_OK(orIpcGetMemHandle(&handle, p));
  Child child = Child::start("OpensAndExits", handle);
  ASSERT_EQ(child.receive(), 'o');
  OR_OK(orFree(p));
  EXPECT_EQ(orIpcMemHandleQuery(handle), orErrorNotReady);
  EXPECT_EQ(child.wait(), 0);
  EXPECT_EQ(orIpcMemHandleQuery(handle), orSuccess);
  void* q = nullptr;
  OR_OK(orMalloc(&q, 4096));
  OR_OK(orFree(q));
  EXPECT_EQ(freeBytes(), baseline);
}

TEST(DISABLED_IpcChild, OpensAndExits) {
  Parent parent;
  void* p = nullptr;
  OR_OK(orIpcOpenMemHandle(&p, parent.handle, 0));
  parent.send('o');
}

TEST(Ipc, AHostAccessToSharedMemoryIsReportedNamingTheExporter) {
  void* p = nullptr;
  OR_OK(orMalloc(&p, kBytes));
  orIpcMemHandle_t handle;
  OR_OK(orIpcGetMemHandle(&handle, p));
  int err[2];
  ASSERT_EQ(pipe(err), 0);
  Child child = Child::start("TouchesTheSharedMemory", handle, err[1]);
  close(err[1]);
  std::string report;
  char buffer[512];
  for (ssize_t n; (n = read(err[0], buffer, sizeof buffer)) > 0;) report.append(buffer, n);
  close(err[0]);
  EXPECT_EQ(child.wait(), 128 + SIGSEGV);
  EXPECT_NE(report.find("host code touched openreg device memory"), std::string::npos) << report;
  EXPECT_NE(report.find("memory shared by process " + std::to_string(getpid())), std::string::npos)
      << report;
  OR_OK(orFree(p));  // the dead importer's reference is back: released at once
  EXPECT_EQ(orIpcMemHandleQuery(handle), orSuccess);
}

TEST(DISABLED_IpcChild, TouchesTheSharedMemory) {
  Parent parent;
  void* p = nullptr;
  OR_OK(orIpcOpenMemHandle(&p, parent.handle, 0));
  volatile char* host = static_cast<volatile char*>(p) + 10;
  *host = 1;  // faults: the report names the allocation and the exporter, then the process dies
}

TEST(Ipc, AnImporterDiscardsAHandleOnlyAfterItsQueuedWorkIsDone) {
  void* p = nullptr;
  OR_OK(orMalloc(&p, kBytes));
  OR_OK(orMemset(p, 0, kBytes));
  orIpcMemHandle_t handles[2];
  OR_OK(orIpcGetMemHandle(&handles[0], p));
  OR_OK(orIpcGetMemHandle(&handles[1], p));
  std::string both = toHex(handles[1]);  // the child opens the first, holds the second
  setenv("OPENREG_IPC_TEST_SECOND_HANDLE", both.c_str(), 1);
  Child child = Child::start("DiscardsAfterQueuedWork", handles[0]);
  unsetenv("OPENREG_IPC_TEST_SECOND_HANDLE");
  ASSERT_EQ(child.receive(), 'd');
  // The second handle is back, so the work the child queued before discarding it is done.
  EXPECT_EQ(orIpcMemHandleQuery(handles[1]), orSuccess);
  std::vector<unsigned char> seen(kBytes);
  OR_OK(orMemcpy(seen.data(), p, kBytes, orMemcpyDeviceToHost));
  EXPECT_EQ(seen, std::vector<unsigned char>(kBytes, 0x77));
  child.send('x');
  EXPECT_EQ(child.wait(), 0);
  OR_OK(orFree(p));
}

TEST(DISABLED_IpcChild, DiscardsAfterQueuedWork) {
  Parent parent;
  const orIpcMemHandle_t second = fromHex(std::getenv("OPENREG_IPC_TEST_SECOND_HANDLE"));
  void* p = nullptr;
  OR_OK(orIpcOpenMemHandle(&p, parent.handle, 0));
  void* kernel = nullptr;
  OR_OK(orGetKernelPointer(&kernel, p));
  OR_OK(openreg::launch(nullptr, [kernel] {
    sleepMs(200);
    std::memset(kernel, 0x77, kBytes);
  }));
  OR_OK(orIpcDiscardMemHandle(second));  // waits for the task above
  parent.send('d');
  ASSERT_EQ(parent.receive(), 'x');
  OR_OK(orIpcCloseMemHandle(p));
}

TEST(Ipc, AHandleIsOpenedInAnotherProcessOnly) {
  void* p = nullptr;
  OR_OK(orMalloc(&p, 4096));
  orIpcMemHandle_t handle;
  OR_OK(orIpcGetMemHandle(&handle, p));
  void* opened = nullptr;
  EXPECT_EQ(orIpcOpenMemHandle(&opened, handle, 0), orErrorInvalidValue);
  EXPECT_NE(lastMessage().find("made by this process"), std::string::npos) << lastMessage();
  EXPECT_EQ(orIpcOpenMemHandle(&opened, handle, 1), orErrorInvalidValue);
  EXPECT_EQ(orIpcOpenMemHandle(nullptr, handle, 0), orErrorInvalidValue);
  // Discarding gives the reference back, once.
  EXPECT_EQ(orIpcMemHandleQuery(handle), orErrorNotReady);
  OR_OK(orIpcDiscardMemHandle(handle));
  EXPECT_EQ(orIpcMemHandleQuery(handle), orSuccess);
  EXPECT_EQ(orIpcDiscardMemHandle(handle), orErrorInvalidValue);
  OR_OK(orFree(p));
}

TEST(Ipc, FreeingAnExportedAllocationKeepsItUntilTheHandleIsDiscarded) {
  const std::size_t baseline = freeBytes();
  void* p = nullptr;
  OR_OK(orMalloc(&p, kBytes));
  orIpcMemHandle_t handle;
  OR_OK(orIpcGetMemHandle(&handle, p));
  OR_OK(orFree(p));
  EXPECT_EQ(freeBytes(), baseline - kBytes);
  OR_OK(orIpcDiscardMemHandle(handle));
  EXPECT_EQ(freeBytes(), baseline);
}

TEST(Ipc, BadArgumentsAreRefusedWithTheirOwnCodes) {
  orIpcMemHandle_t garbage;
  std::memset(garbage.reserved, 0x11, sizeof garbage.reserved);
  void* opened = nullptr;
  EXPECT_EQ(orIpcOpenMemHandle(&opened, garbage, 0), orErrorInvalidValue);
  EXPECT_NE(lastMessage().find("not an openreg IPC handle"), std::string::npos) << lastMessage();
  EXPECT_EQ(orIpcDiscardMemHandle(garbage), orErrorInvalidValue);
  EXPECT_EQ(orIpcMemHandleQuery(garbage), orErrorInvalidValue);
  orIpcMemHandleInfo info;
  EXPECT_EQ(orIpcGetMemHandleInfo(&info, garbage), orErrorInvalidValue);
  orIpcMemHandle_t handle;
  int host = 0;
  EXPECT_EQ(orIpcGetMemHandle(&handle, &host), orErrorInvalidDevicePointer);
  EXPECT_EQ(orIpcGetMemHandle(nullptr, &host), orErrorInvalidValue);
  EXPECT_EQ(orIpcCloseMemHandle(&host), orErrorInvalidDevicePointer);
  void* p = nullptr;
  OR_OK(orMalloc(&p, 4096));
  EXPECT_EQ(orIpcCloseMemHandle(p), orErrorInvalidDevicePointer);
  OR_OK(orFree(p));
  EXPECT_EQ(orIpcGetMemHandle(&handle, p), orErrorInvalidDevicePointer);
}

namespace {
// Runs in a death-test child, whose limit of open files it lowers to none: the first export
// needs a descriptor for the table of handles, and the system refuses it.
int exportWithNoFileDescriptorLeft() {
  void* p = nullptr;
  if (orMalloc(&p, kBytes) != orSuccess) return 2;  // the runtime's own files are open by now
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = 0;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return 3;
  orIpcMemHandle_t handle;
  const orError_t e = orIpcGetMemHandle(&handle, p);
  const std::string message = orGetLastErrorMessage();
  if (e != orErrorOutOfResources) return 4;
  return message.rfind("openreg: orIpcGetMemHandle: cannot create the export table: ", 0) == 0 ? 0
                                                                                               : 5;
}
}  // namespace

// A failure of the system's resources is not a bad argument: its own code, not
// orErrorInvalidValue.
TEST(Ipc, AnExportTheSystemRefusesAFileDescriptorIsAResourceFailure) {
  // _exit: with no descriptor left, the exit handlers of a sanitized build (UBSan reads
  // /proc/self/maps to check a destructor's type) would fail on their own.
  EXPECT_EXIT(_exit(exportWithNoFileDescriptorLeft()), ::testing::ExitedWithCode(0), "");
}
