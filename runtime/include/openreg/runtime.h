/*
 * libopenreg: the runtime of the emulated OpenReg accelerator.
 *
 * A C API in the shape of the CUDA runtime. Every entry point returns an orError_t; none throws,
 * none aborts on bad input. The header compiles as C99 and as C++.
 *
 * Model (docs/runtime.md has the whole design):
 *  - Devices 0..N-1 (OPENREG_DEVICE_COUNT, default 2). The current device is per host thread and
 *    starts at 0.
 *  - Device memory lives in a per-device address range that the host cannot touch: a host
 *    dereference of a pointer from orMalloc faults and the runtime reports it before the process
 *    dies. Work running on a stream reaches that memory through orGetKernelPointer.
 *  - A stream is an in-order queue of tasks executed asynchronously by the device's workers.
 *    The NULL stream (0) names the current device's default stream.
 *  - Events mark a point in a stream; they can be queried, waited on by the host or by another
 *    stream (of any device), and timed.
 *  - A task that fails poisons the device memory it declared as written (openreg::launch with an
 *    accesses() member, copies, memsets): a later copy, memset or task that reads poisoned bytes
 *    fails with the original failure (orErrorLaunchFailure, same message) instead of running, and
 *    a write that covers the bytes makes them data again. Failures also reach the next
 *    synchronizing call on the stream or device, once. See docs/errors.md.
 *
 * Threading: every function may be called from several host threads at once unless its comment
 * says otherwise. Handles are not reference counted: destroying a handle while another thread
 * still uses it is a caller error, detected (orErrorInvalidResourceHandle) only when the destroy
 * happens-before the use.
 *
 * Functions that must not be called from inside a task (a function running on a stream): every
 * synchronizing call (orDeviceSynchronize, orStreamSynchronize, orEventSynchronize, orMemcpy,
 * orMemset, orFree, orFreeHost, orIpcCloseMemHandle, orIpcDiscardMemHandle, and orMemcpyAsync with
 * pageable memory). Where CUDA would deadlock the task's own stream, they return
 * orErrorNotPermitted and do nothing.
 */
#ifndef OPENREG_RUNTIME_H
#define OPENREG_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(OPENREG_RUNTIME_BUILDING)
#define OPENREG_RUNTIME_API __attribute__((visibility("default")))
#else
#define OPENREG_RUNTIME_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define OPENREG_RUNTIME_VERSION 1000 /* major * 1000 + minor */

/* The device's name, one fact for every layer: device strings ("openreg:0"), the prefix of every
 * message ("openreg: ..."), process-visible names. C++ joins it to literals: OR_DEVICE_NAME ": ".
 */
#define OR_DEVICE_NAME "openreg"
/* How every layer names a stream in messages: its device, then its number, 0 for the default
 * stream, else the slot of its handle (small, and unique among the live streams). */
#define OR_STREAM_NAME_FORMAT OR_DEVICE_NAME ":%d stream %u"

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */

typedef enum orError {
  orSuccess = 0,                     /* the call did what it says */
  orErrorNotReady = 1,               /* a query: the work is still pending (not a failure) */
  orErrorMemoryAllocation = 2,       /* device capacity or host memory exhausted; nothing leaked */
  orErrorInvalidValue = 3,           /* a null out-pointer, a bad flag, a bad size or range */
  orErrorInvalidDevice = 4,          /* a device index outside 0..count-1 */
  orErrorInvalidResourceHandle = 5,  /* a stream or event handle that is not (or no longer) live,
                                        or used on the wrong device */
  orErrorInvalidDevicePointer = 6,   /* not the start of a live allocation, or not device memory */
  orErrorInvalidMemcpyDirection = 7, /* the pointers do not match the orMemcpyKind given */
  orErrorInitializationError = 8,    /* bad configuration, or use in a child forked after init */
  orErrorLaunchFailure = 9,          /* a task failed; orGetLastErrorMessage says which and why */
  orErrorNotPermitted = 10,          /* destroying a default stream; synchronizing in a task */
  orErrorStreamCaptureUnsupported = 11, /* the call conflicts with a stream capture in progress;
                                           the capture is invalidated (see Graphs below) */
  orErrorStreamCaptureInvalidated = 12, /* the capture was invalidated by an earlier error, or
                                           ended with a forked stream not joined back */
  orErrorOutOfResources = 13, /* the system refused a resource other than device capacity (file
                                 descriptors, memory mappings); the arguments were fine */
} orError_t;

/* A static string naming the code ("orErrorInvalidValue"); unknown codes give
 * "orErrorUnknownCode". Never NULL. */
OPENREG_RUNTIME_API const char* orGetErrorName(orError_t error);

/* A static English description of the code. Never NULL. */
OPENREG_RUNTIME_API const char* orGetErrorString(orError_t error);

/* The detailed message of the last failing call on this host thread (which device, which
 * allocation, which task, what to do), or "" when there is none. The pointer stays valid until
 * the next runtime call on this thread. Calling it does not clear the message. */
OPENREG_RUNTIME_API const char* orGetLastErrorMessage(void);

/* [out] category: the category of the failure orGetLastErrorMessage describes when that is a
 * task's failure: the value the task gave orTaskFail (an integer the runtime carries and does not
 * interpret; the PyTorch layer maps it to an exception type), else 0. orErrorInvalidValue if
 * category is NULL. Reading it clears nothing. */
OPENREG_RUNTIME_API orError_t orGetLastErrorCategory(int* category);

/* Initializes the runtime now: reads the configuration and sets up every device (address range,
 * workers, default stream). Optional, as every call initializes what it needs; device queries
 * (count, current device, properties) need only the configuration and set up no device, so they
 * never make a later fork() unsafe. flags must be 0. orErrorInitializationError as for any call. */
OPENREG_RUNTIME_API orError_t orInit(unsigned int flags);

/* [out] version: OPENREG_RUNTIME_VERSION of the library. orErrorInvalidValue if NULL. */
OPENREG_RUNTIME_API orError_t orRuntimeGetVersion(int* version);

/* ---------------------------------------------------------------------------------------------
 * Configuration
 * Every environment variable openreg reads, the runtime's and those of the layers above it, is
 * declared once, in the runtime's registry (docs/runtime.md, "Configuration"). The layers above
 * read theirs through orConfigGetValue, so every value is checked, and refused, the same way.
 * ------------------------------------------------------------------------------------------- */

typedef struct orConfigVariable {
  const char* name;         /* "OPENREG_DEVICE_COUNT" */
  const char* reader;       /* "runtime", "PyTorch layer" or "Python package" */
  const char* defaultValue; /* as documented: "2", "empty", "a quarter of physical memory ..." */
  const char* accepted;     /* what a value may be: "an integer from 1 to 64" */
  const char* meaning;      /* one line */
} orConfigVariable;

typedef enum orConfigSource {
  orConfigSourceDefault = 0,     /* unset or empty in the environment */
  orConfigSourceEnvironment = 1, /* the environment's value */
} orConfigSource;

/* [out] count: the number of variables in the registry. orErrorInvalidValue if NULL. Needs no
 * initialization. */
OPENREG_RUNTIME_API orError_t orConfigGetVariableCount(int* count);

/* [out] variable: the registry's entry `index` (0 to count-1); its strings are static.
 * orErrorInvalidValue for an index out of range or a NULL pointer. Needs no initialization. */
OPENREG_RUNTIME_API orError_t orConfigGetVariable(int index, orConfigVariable* variable);

/* [out] value: the value in effect of the variable `name`, as text; [out] source (may be NULL):
 * where it came from. For the runtime's variables, the value its configuration holds (read once,
 * the default device memory computed): this configures the runtime as a device query does, and
 * returns its orErrorInitializationError. For the others, the environment's text, checked against
 * the registry now, or the default ("" for "empty"). *value stays valid until the calling
 * thread's next orConfigGetValue. orErrorInvalidValue for an unknown name or an invalid value:
 * orGetLastErrorMessage names the variable, the value and what it accepts. */
OPENREG_RUNTIME_API orError_t orConfigGetValue(const char* name, const char** value,
                                               orConfigSource* source);

/* For a layer that parses a variable's value itself (free text in the registry, such as
 * PYTORCH_ALLOC_CONF): refuses `value` of the variable `name` in the one format of every invalid
 * value, "openreg: invalid NAME='value': REASON; expected ACCEPTED." (without "REASON; " when
 * reason is NULL), ACCEPTED from the registry. The message becomes the calling thread's last error
 * message. Always returns orErrorInvalidValue; for an unknown name or a NULL name or value, the
 * message says so instead. Needs no initialization; safe from any thread. */
OPENREG_RUNTIME_API orError_t orConfigRefuseValue(const char* name, const char* value,
                                                  const char* reason);

/* ---------------------------------------------------------------------------------------------
 * Devices
 * ------------------------------------------------------------------------------------------- */

typedef struct orDeviceProp {
  char name[64];          /* "OpenReg Emulated Device" */
  size_t totalGlobalMem;  /* capacity in bytes (OPENREG_DEVICE_MEMORY) */
  int workerCount;        /* threads executing this device's streams (OPENREG_STREAM_WORKERS) */
  size_t memoryAlignment; /* alignment of every orMalloc result, in bytes */
  int major;              /* emulated compute capability */
  int minor;
} orDeviceProp;

/* [out] count: number of devices. Never fails once initialised; orErrorInitializationError if
 * the configuration is invalid (orGetLastErrorMessage names the variable). */
OPENREG_RUNTIME_API orError_t orGetDeviceCount(int* count);

/* Makes `device` current for the calling thread. orErrorInvalidDevice if out of range. */
OPENREG_RUNTIME_API orError_t orSetDevice(int device);

/* [out] device: the calling thread's current device. */
OPENREG_RUNTIME_API orError_t orGetDevice(int* device);

/* [out] prop: the properties of `device`. orErrorInvalidDevice, orErrorInvalidValue (NULL). */
OPENREG_RUNTIME_API orError_t orGetDeviceProperties(orDeviceProp* prop, int device);

/* Blocks until every task on every stream of the current device has completed. Returns
 * orErrorLaunchFailure if one of them failed and its failure has not been reported yet (by any
 * call, on any thread: see docs/errors.md, "When the error state ends"). */
OPENREG_RUNTIME_API orError_t orDeviceSynchronize(void);

/* [out] count: how many times a host thread has waited for device work since the process
 * started: every stream, device and event synchronization, blocking copy and launch that must
 * complete, on any device and thread (a full queue's wait for room is not counted). Never fails
 * once initialised; may be called from several threads at once. */
OPENREG_RUNTIME_API orError_t orGetSynchronizationCount(uint64_t* count);

/* [out] free, total: bytes neither held by live allocations nor mapped into reservations
 * (orMemMap), and the capacity, of the current device. `free` may be split into several ranges. */
OPENREG_RUNTIME_API orError_t orMemGetInfo(size_t* free, size_t* total);

/* [out] leastPriority, greatestPriority: the stream priority range, CUDA's convention: a lower
 * number is a higher priority. Either pointer may be NULL. */
OPENREG_RUNTIME_API orError_t orDeviceGetStreamPriorityRange(int* leastPriority,
                                                             int* greatestPriority);

/* ---------------------------------------------------------------------------------------------
 * Streams (handles are opaque; 0 is the current device's default stream)
 * ------------------------------------------------------------------------------------------- */

typedef struct orStream_st* orStream_t;
typedef struct orEvent_st* orEvent_t;

/* [out] stream: a new stream on the current device, priority 0 (the lowest). */
OPENREG_RUNTIME_API orError_t orStreamCreate(orStream_t* stream);

/* [out] stream; priority is clamped into the range of orDeviceGetStreamPriorityRange. Ready
 * high-priority streams are served by the device's workers before ready low-priority ones. */
OPENREG_RUNTIME_API orError_t orStreamCreateWithPriority(orStream_t* stream, unsigned int flags,
                                                         int priority);

/* [out] priority of `stream`. */
OPENREG_RUNTIME_API orError_t orStreamGetPriority(orStream_t stream, int* priority);

/* [out] stream: the handle of `device`'s default stream (the stream that 0 names while `device`
 * is current). Default streams cannot be destroyed. */
OPENREG_RUNTIME_API orError_t orDeviceGetDefaultStream(int device, orStream_t* stream);

/* [out] device owning `stream`. */
OPENREG_RUNTIME_API orError_t orStreamGetDevice(orStream_t stream, int* device);

/* Releases `stream`. Returns at once; work already queued still runs to completion, after which
 * the stream's resources are freed. orErrorNotPermitted for a default stream. */
OPENREG_RUNTIME_API orError_t orStreamDestroy(orStream_t stream);

/* orSuccess if every task queued on `stream` has completed (a dequeued task still running counts
 * as pending), orErrorNotReady otherwise; orErrorLaunchFailure if a task failed. */
OPENREG_RUNTIME_API orError_t orStreamQuery(orStream_t stream);

/* Blocks until every task queued on `stream` before the call has completed. orErrorLaunchFailure
 * if one failed and no call has reported that failure yet (a report by any call ends the failure's
 * hold on every stream and event; memory it poisoned stays poisoned: see docs/errors.md). */
OPENREG_RUNTIME_API orError_t orStreamSynchronize(orStream_t stream);

/* Makes all future work on `stream` wait until the work captured by the most recent
 * orEventRecord of `event` has completed. `event` may belong to another device. The wait happens
 * on the device: the host returns at once and no worker blocks. Waiting on an event never
 * recorded is a no-op. flags must be 0. */
OPENREG_RUNTIME_API orError_t orStreamWaitEvent(orStream_t stream, orEvent_t event,
                                                unsigned int flags);

/* The kernel launch: enqueues fn(arg) on `stream` and returns at once. fn runs on a device worker
 * thread, after all earlier work on the stream. Synchronizing runtime functions called by fn
 * return orErrorNotPermitted. With OPENREG_LAUNCH_BLOCKING=1 the call returns after fn has run
 * (unless made from inside a task). */
OPENREG_RUNTIME_API orError_t orLaunchHostFunc(orStream_t stream, void (*fn)(void*), void* arg);

/* ---------------------------------------------------------------------------------------------
 * Tasks: launching an object the runtime owns (the C form of openreg::launch)
 *
 * [marker: tasks-c-abi]
 * Note [Tasks across the C ABI]
 * orLaunchHostFunc runs a function on an argument the caller keeps alive. orLaunchTask runs a
 * task object: at most OR_TASK_INLINE_BYTES bytes that the runtime takes over and stores inline
 * in the stream's queue, so a launch allocates nothing for it, described by a table of functions
 * of the caller's (orTaskOps) through which the runtime runs, moves, destroys, names it and asks
 * which memory it touches. Only C crosses here: a task written in C++ with any compiler and any
 * standard library (openreg::Task in <openreg/task.hpp> is such a header-only wrapper) catches its
 * own exceptions and reports a failure with orTaskFail (a category and a message the runtime
 * copies), and lists its memory as an array of orMemoryAccess. The runtime never sees the
 * caller's exceptions, strings or containers, so libopenreg and its caller may be built with
 * different compilers and C++ standard libraries (docs/runtime.md, "The C ABI").
 * A failed task is handled as Note [Task errors] in runtime/src/Stream.cpp says: it poisons the
 * memory it declares as written, and its failure reaches the stream's next synchronizing call.
 * ------------------------------------------------------------------------------------------- */

#define OR_TASK_INLINE_BYTES 64 /* the largest task object orLaunchTask takes, in bytes */
#define OR_TASK_ALIGNMENT 16    /* the largest alignment a task object may require */

/* One range of device memory a task touches. */
typedef struct orMemoryAccess {
  const void* ptr; /* a device address or its kernel-window alias (orGetKernelPointer); a range
                      outside every device is ignored */
  size_t bytes;
  bool read;
  bool write;
  bool cover; /* with write: the task stores every byte of the range (a dense output, not a
                 strided view with gaps), so its success makes the range valid data again */
} orMemoryAccess;

/* Where a running task reports its failure (orTaskFail). Passed to orTaskOps.run and valid only
 * until that call returns. */
typedef struct orTaskContext_st* orTaskContext_t;

/* The functions through which the runtime handles a task object. `task` is the address at which
 * the runtime holds the object (aligned to OR_TASK_ALIGNMENT). None may throw a C++ exception or
 * otherwise unwind into the runtime. */
typedef struct orTaskOps {
  /* Required. Runs the task on a device worker thread. A failure is reported by calling
   * orTaskFail(context, ...) before returning. Called once per launch; a task captured into a
   * graph runs once per orGraphLaunch, never on two threads at once. */
  void (*run)(void* task, orTaskContext_t context);
  /* Required. Move-constructs the object at `dst` (uninitialized storage of OR_TASK_INLINE_BYTES
   * bytes) from the one at `src`, and ends the life of the one at `src`. Must not fail. */
  void (*relocate)(void* dst, void* src);
  /* Required. Destroys the object (it is never used again). Must not fail. */
  void (*destroy)(void* task);
  /* Optional (NULL: the task declares no memory, so it neither is stopped by poisoned inputs nor
   * poisons its outputs). Writes the first min(n, capacity) of the task's n accesses to `out` and
   * returns n; the runtime calls again with a larger array when n > capacity. Asked only when some
   * memory is poisoned, when the task failed, or to describe a graph; any thread; the same list
   * every time. */
  size_t (*accesses)(const void* task, orMemoryAccess* out, size_t capacity);
  /* Optional (NULL: unnamed). What the task calls itself (the operator it runs), a string that
   * lives as long as the task. Describes captured graphs (orGraphDebugDotPrint). */
  const char* (*name)(const void* task);
} orTaskOps;

enum {
  orLaunchTaskDefault = 0x0,
  orLaunchTaskWait = 0x1 /* return once the task has run (below) */
};

/* Enqueues the task object at `task` (`size` bytes) on `stream` (0: the current device's default
 * stream) and returns at once; with OPENREG_LAUNCH_BLOCKING=1, after it has run (not from inside a
 * task). `ops` must stay valid as long as the task does (a static table).
 * With flags orLaunchTaskWait, returns once the task has run: orErrorLaunchFailure with the
 * task's own failure if it failed (whatever another thread's synchronization has reported
 * meanwhile), else the stream's pending failure, if any, as orStreamSynchronize would.
 * Ownership: if ops, task, ops->run, ops->relocate or ops->destroy is NULL, the call returns
 * orErrorInvalidValue and does nothing: the object stays the caller's. On every other return the
 * runtime has taken it over: relocated it into the stream (or into a capture), or, when the
 * launch failed, destroyed it without running it; the caller must not use or destroy it again.
 * Errors: orErrorInvalidValue: a NULL above, size 0 or above OR_TASK_INLINE_BYTES, unknown flags.
 * orErrorInvalidResourceHandle: stream not live. orErrorNotPermitted: orLaunchTaskWait from inside
 * a task. orErrorStreamCaptureUnsupported: orLaunchTaskWait on a capturing stream.
 * orErrorLaunchFailure: as above, or as a blocking launch reports the stream's failure.
 * Any host thread, several at once. */
OPENREG_RUNTIME_API orError_t orLaunchTask(orStream_t stream, const orTaskOps* ops, void* task,
                                           size_t size, unsigned int flags);

/* From a task's run function: reports that the task failed, with `category` (0: none; read back
 * with orGetLastErrorCategory) and `message` (copied; NULL gives "a task failed without a
 * message"). The first report of a run counts; later ones return orSuccess and are ignored.
 * orErrorInvalidValue if context is NULL. */
OPENREG_RUNTIME_API orError_t orTaskFail(orTaskContext_t context, int category,
                                         const char* message);

/* For work that reads device memory on the host thread after synchronizing (a synchronous
 * fallback): orErrorLaunchFailure, with the failure's message and category, if any byte of the
 * `count` ranges read is poisoned (see docs/errors.md); else orSuccess, and the covering writes
 * are then taken as done (the caller writes them before it next synchronizes).
 * orErrorInvalidValue if accesses is NULL and count is not 0. */
OPENREG_RUNTIME_API orError_t orCheckHostAccesses(const orMemoryAccess* accesses, size_t count);

/* ---------------------------------------------------------------------------------------------
 * Events (handles are opaque; recorded on streams, waited on by streams and by the host)
 * ------------------------------------------------------------------------------------------- */

/* orEventDisableFailure: the event's records carry no task failure (orEventQuery and
 * orEventSynchronize return orSuccess once complete, a stream waiting on it takes no failure from
 * it), for events that only order work, such as an allocator's frees. */
enum { orEventDefault = 0x0, orEventDisableTiming = 0x2, orEventDisableFailure = 0x4 };

/* [out] event: a timing event of the current device. */
OPENREG_RUNTIME_API orError_t orEventCreate(orEvent_t* event);

/* [out] event; flags is orEventDefault or a combination of orEventDisableTiming and
 * orEventDisableFailure, anything else is orErrorInvalidValue. */
OPENREG_RUNTIME_API orError_t orEventCreateWithFlags(orEvent_t* event, unsigned int flags);

/* Captures the work queued on `stream` so far. Re-recording replaces what later queries and waits
 * refer to; waits already issued keep referring to the record they saw. The stream must belong to
 * the event's device (orErrorInvalidResourceHandle otherwise). */
OPENREG_RUNTIME_API orError_t orEventRecord(orEvent_t event, orStream_t stream);

/* orSuccess if the most recent record has completed (or the event was never recorded),
 * orErrorNotReady otherwise; orErrorLaunchFailure if the record carries a task failure (one its
 * stream had not reported when the record completed) that no call has reported since: the first
 * report, this one or any other, ends it. */
OPENREG_RUNTIME_API orError_t orEventQuery(orEvent_t event);

/* Blocks until the most recent record has completed. orErrorLaunchFailure as orEventQuery. */
OPENREG_RUNTIME_API orError_t orEventSynchronize(orEvent_t event);

/* [out] ms: time between the completions of the most recent records of `start` and `end`, taken
 * from the worker's clock. orErrorNotReady if either is pending; orErrorInvalidResourceHandle if
 * either has timing disabled, was never recorded, or they belong to different devices. */
OPENREG_RUNTIME_API orError_t orEventElapsedTime(float* ms, orEvent_t start, orEvent_t end);

/* Releases `event`. Pending records still complete; waits on them still resolve. A pending host
 * record (orEventRecordHost) is completed with a failure, so that no stream waits on it for ever.
 */
OPENREG_RUNTIME_API orError_t orEventDestroy(orEvent_t event);

/* Arms `event` for completion by the host: its most recent record becomes a new pending record
 * that no stream completes, only orEventCompleteHost. Waits, queries and synchronizations then
 * treat it as an ordinary record: a stream that waits on it (orStreamWaitEvent) parks without
 * holding a worker until the host completes it. orErrorNotPermitted if the event's previous host
 * record is still pending. See Note [Host-completed records] in runtime/src/Event.h. */
OPENREG_RUNTIME_API orError_t orEventRecordHost(orEvent_t event);

/* Completes the pending host record of `event`, from any host thread (not from a task). With
 * failureMessage NULL it completes successfully; otherwise the record carries a failure with that
 * message: orEventQuery and orEventSynchronize return orErrorLaunchFailure with it, and a stream
 * waiting on the record takes it as its own pending failure (reported by its next synchronizing
 * call, as a failed task's). orErrorNotPermitted if no host record is pending. */
OPENREG_RUNTIME_API orError_t orEventCompleteHost(orEvent_t event, const char* failureMessage);

/* ---------------------------------------------------------------------------------------------
 * Memory
 * ------------------------------------------------------------------------------------------- */

typedef enum orMemcpyKind {
  orMemcpyHostToHost = 0,
  orMemcpyHostToDevice = 1,
  orMemcpyDeviceToHost = 2,
  orMemcpyDeviceToDevice = 3,
  orMemcpyDefault = 4, /* direction inferred from the pointers */
} orMemcpyKind;

typedef enum orMemoryType {
  orMemoryTypeUnregistered = 0, /* ordinary host memory the runtime does not know */
  orMemoryTypeHost = 1,         /* pinned host memory from orMallocHost */
  orMemoryTypeDevice = 2,       /* device memory from orMalloc, or mapped with orMemMap */
} orMemoryType;

typedef struct orPointerAttributes {
  orMemoryType type;
  int device;          /* owning device, -1 for host memory */
  void* devicePointer; /* the pointer itself for device memory, else NULL */
  void* hostPointer;   /* the pointer itself for host memory, else NULL */
  void* base;          /* start of the allocation containing the pointer (for mapped memory: of its
                          reservation), NULL if unregistered */
  size_t size;         /* size requested for that allocation (or reservation), 0 if unregistered */
} orPointerAttributes;

/* [out] devPtr: `size` bytes of device memory on the current device, aligned to
 * orDeviceProp.memoryAlignment. size 0 gives NULL and orSuccess. orErrorMemoryAllocation when the
 * device's capacity, less what allocations hold and orMemMap mapped, cannot hold it (the device
 * stays fully usable; orGetLastErrorMessage says what is held). Never touches host memory. */
OPENREG_RUNTIME_API orError_t orMalloc(void** devPtr, size_t size);

/* Frees an allocation from orMalloc, after synchronizing every device (as cudaFree does; work on
 * any device may use it). NULL is a no-op. orErrorInvalidDevicePointer for anything else that is
 * not the start of a live allocation, including a second free and an address in a reservation
 * (orMemUnmap and orMemAddressFree release those). Never returns a task failure: it stays pending
 * for the next synchronizing call. Poison in the allocation is cleared. */
OPENREG_RUNTIME_API orError_t orFree(void* devPtr);

/* A caching allocator above orMalloc gives [devPtr, devPtr + size), inside one live allocation or
 * mapped in whole inside one reservation (orMemMap), to a new owner that works on `stream` (NULL:
 * the current device's default stream): its bytes are no one's data, so poison a failed task left
 * there is cleared (Note [Poisoned memory] in runtime/src/Poison.h), in stream order: work queued
 * on `stream` before this call may still read the old owner's bytes, and must still see their
 * failure. The failure itself is not cleared: it stays pending for the next synchronizing call, or
 * ends if one reported it. One atomic load when nothing is poisoned, and nothing queued; otherwise
 * orErrorInvalidDevicePointer if the range is neither, and an operation on `stream`. */
OPENREG_RUNTIME_API orError_t orMemReuse(void* devPtr, size_t size, orStream_t stream);

/* [out] ptr: `size` bytes of page-locked ("pinned") host memory, page aligned. Copies between it
 * and device memory are fully asynchronous. */
OPENREG_RUNTIME_API orError_t orMallocHost(void** ptr, size_t size);

/* Frees memory from orMallocHost, after synchronizing every device (work queued on a stream may
 * still read or write it). orErrorInvalidValue for any other pointer, including a second free.
 * Never returns a task failure, as orFree. */
OPENREG_RUNTIME_API orError_t orFreeHost(void* ptr);

/* [out] attributes of `ptr`: which memory it is in and the allocation containing it. Unknown host
 * pointers succeed with type orMemoryTypeUnregistered. For memory mapped with orMemMap: type
 * device, base and size of the reservation (as orMemAddressReserve gave and took them), not of the
 * mapping. orErrorInvalidDevicePointer for a device address in no live allocation, or in an
 * unmapped part of a reservation. */
OPENREG_RUNTIME_API orError_t orPointerGetAttributes(orPointerAttributes* attributes,
                                                     const void* ptr);

/* Copies `count` bytes and returns when the copy is complete. Device ranges must lie inside one
 * live allocation each, or be mapped in whole inside one reservation: a range may span mappings
 * made by separate orMemMap calls (orErrorInvalidValue otherwise); the pointers must match `kind`
 * (orErrorInvalidMemcpyDirection otherwise). Device-side copies run in order on the default
 * stream of the device owning the (source, for device to device) device pointer. */
OPENREG_RUNTIME_API orError_t orMemcpy(void* dst, const void* src, size_t count, orMemcpyKind kind);

/* Enqueues the copy on `stream` (of any device: every device can reach every device's memory, as
 * with CUDA peer access). With pinned
 * or device memory on both sides it returns at once; with pageable host memory it returns after
 * the copy is complete, as CUDA does, so the host buffer may be reused at once. */
OPENREG_RUNTIME_API orError_t orMemcpyAsync(void* dst, const void* src, size_t count,
                                            orMemcpyKind kind, orStream_t stream);

/* Sets `count` bytes of device memory to `value`: asynchronous on `stream`, or complete on
 * return for orMemset. */
OPENREG_RUNTIME_API orError_t orMemsetAsync(void* devPtr, int value, size_t count,
                                            orStream_t stream);
OPENREG_RUNTIME_API orError_t orMemset(void* devPtr, int value, size_t count);

/* [out] kernelPtr: the address at which a task running on a stream reads and writes the device
 * memory at devPtr. O(1): no lock, no system call. Valid for the life of the allocation; meant
 * for tasks only (the host must not keep or dereference it outside a task, as a real device's
 * memory is out of its reach). orErrorInvalidDevicePointer if devPtr is not in a device range. */
OPENREG_RUNTIME_API orError_t orGetKernelPointer(void** kernelPtr, const void* devPtr);

/* ---------------------------------------------------------------------------------------------
 * Virtual memory: reserving address ranges and mapping memory into them (cuMemAddressReserve and
 * cuMemMap, simplified; docs/runtime.md, "Reserved address ranges")
 *
 * For a caching allocator's expandable segments: reserve a large range of a device's address
 * space once, and back it with memory as the segment grows (orMemMap), releasing the memory as it
 * shrinks (orMemUnmap), so blocks whose sizes change every step stay contiguous instead of
 * fragmenting the device. Mapped memory is device memory for every other call: copies, memsets,
 * tasks and orGetKernelPointer, poison and orMemReuse, orPointerGetAttributes, the fault report.
 * Mappings made by separate calls that are adjacent in one reservation form one valid range, so a
 * copy may span them. An unmapped part of a reservation is no one's memory: copies and memsets
 * touching it fail as for an address in no allocation. A device's address space holds its
 * orMalloc allocations and, apart from them, reservations totalling up to 7 x its capacity.
 * Reserved and mapped memory cannot be freed with orFree nor shared with orIpcGetMemHandle.
 * Errors besides those named: orErrorInvalidValue for a size that is 0 or not a multiple of the
 * granularity, and for a ptr that is not a device address aligned to it. Any host thread, several
 * at once.
 * ------------------------------------------------------------------------------------------- */

/* [out] granularity: the granularity of reservations and mappings, in bytes (a constant: 2 MiB).
 * Sizes and addresses passed to the calls below are multiples of it. */
OPENREG_RUNTIME_API orError_t orMemGetAllocationGranularity(size_t* granularity);

/* [out] ptr: the start of `size` bytes (a multiple of the granularity, > 0) of the current
 * device's address space, reserved: aligned to the granularity, no memory charged against the
 * device's capacity, and no byte accessible until mapped. The range may be larger than the
 * device's free memory, or its capacity; it is bounded by the device's address space:
 * orErrorMemoryAllocation (the message says how much is left) when no free range holds it. */
OPENREG_RUNTIME_API orError_t orMemAddressReserve(void** ptr, size_t size);

/* Releases a whole reservation: ptr as orMemAddressReserve returned it, size as it was reserved.
 * orErrorInvalidValue if ptr is not the start of a reservation, size is not its size, or any part
 * of it is still mapped (nothing is released then). */
OPENREG_RUNTIME_API orError_t orMemAddressFree(void* ptr, size_t size);

/* Backs [ptr, ptr + size) with device memory: ptr and size multiples of the granularity, the
 * range inside one reservation (of any device: the memory is that device's), no part of it
 * already mapped (orErrorInvalidValue otherwise). Charges `size` against the device's capacity:
 * orErrorMemoryAllocation, with a message as orMalloc gives, when the device has not that much
 * free (orMemGetInfo). The bytes read as zeros (fresh pages). Waits for nothing. */
OPENREG_RUNTIME_API orError_t orMemMap(void* ptr, size_t size);

/* Releases the memory behind [ptr, ptr + size): ptr and size multiples of the granularity, the
 * range inside one reservation and mapped in whole, by one or several orMemMap calls
 * (orErrorInvalidValue otherwise). Its capacity returns to the device and its pages to the
 * system; poison in it is cleared. Like cuMemUnmap it does not synchronize: the caller ensures
 * that no queued work still uses the range. */
OPENREG_RUNTIME_API orError_t orMemUnmap(void* ptr, size_t size);

/* ---------------------------------------------------------------------------------------------
 * Sharing device memory between processes (docs/ipc.md)
 *
 * A handle lets exactly one other process map an allocation: the same memory, not a copy. The
 * handle is plain bytes (send it through a pipe, a socket or a pickle). It holds one reference
 * to the allocation: orIpcGetMemHandle takes it, and it is given back when the importer closes
 * the mapping (orIpcCloseMemHandle), when any process discards the unopened handle
 * (orIpcDiscardMemHandle), or when the importer exits without closing. Until then the exporter's
 * orFree of the allocation succeeds but keeps its range and its bytes (no other allocation gets
 * them); they are released by a later call of the exporter once every handle's reference is back.
 * Ordering between the processes is the caller's: synchronize the work that wrote the memory
 * before sending the handle, and tell the other side when later writes are complete.
 * The importer opens the exporter's device memory file through /proc/<pid>/fd, so the exporter
 * must be alive when a handle is opened (not after); it maps only the allocation's pages, but a
 * process that can open the file could map all of it: share with processes you would let read
 * the device. Both processes must have been started without forking an initialized runtime
 * (spawn), as for every call.
 * ------------------------------------------------------------------------------------------- */

#define OR_IPC_HANDLE_SIZE 64

typedef struct orIpcMemHandle {
  unsigned char reserved[OR_IPC_HANDLE_SIZE];
} orIpcMemHandle_t;

typedef struct orIpcMemHandleInfo {
  int device;        /* the device index in both processes */
  int exporterPid;   /* the process that made the handle */
  uint64_t memoryId; /* identifies the exporter's device memory (with exporterPid) */
  size_t offset;     /* of the allocation in that memory; equal offsets are one allocation */
  size_t size;       /* bytes mapped: the allocation's size rounded up to memoryAlignment */
  uint64_t serial;   /* unique among the handles of the exporter */
} orIpcMemHandleInfo;

/* [out] handle: a handle for the allocation containing devPtr (any address inside it), taking
 * one reference to it (above). orErrorInvalidDevicePointer if devPtr is in no live allocation or
 * in memory imported from another process (it cannot be passed on); orErrorMemoryAllocation if
 * 4096 handles of this process are outstanding; orErrorOutOfResources if the system refuses the
 * file descriptor or the mapping of this process's table of handles (made at the first call);
 * orErrorInvalidValue if handle is NULL or devPtr is in a reservation (memory mapped with
 * orMemMap is not shareable). */
OPENREG_RUNTIME_API orError_t orIpcGetMemHandle(orIpcMemHandle_t* handle, void* devPtr);

/* [out] devPtr: the start of the allocation of `handle`, mapped into this process's range of the
 * handle's device: copies, memsets and tasks reach it as any device memory, and the host faults
 * on it. Takes over the handle's reference; each handle opens once. flags must be 0.
 * orErrorInvalidValue: NULL devPtr, bad flags, bytes that are not a handle, a handle opened,
 * closed or discarded before, made by this process, or whose exporter has exited (the message
 * says which). orErrorInvalidDevice: the handle's device does not exist here.
 * orErrorMemoryAllocation: the device's range has no room for the allocation.
 * orErrorOutOfResources: the system refuses a file descriptor or a mapping for the exporter's
 * files (too many open files, too many mappings). */
OPENREG_RUNTIME_API orError_t orIpcOpenMemHandle(void** devPtr, orIpcMemHandle_t handle,
                                                 unsigned int flags);

/* Unmaps memory opened with orIpcOpenMemHandle, after synchronizing every device (work queued on
 * any stream may still use it; as orFree), and gives the handle's reference back. The bytes stay
 * with the exporter. orErrorInvalidDevicePointer if devPtr is not the start of an open import
 * (orFree refuses imports); orErrorMemoryAllocation if the system refuses to map this process's
 * own memory back (the import then stays open). Never returns a task failure, as orFree. */
OPENREG_RUNTIME_API orError_t orIpcCloseMemHandle(void* devPtr);

/* Gives back the reference of a handle that will not be opened (for example because the
 * allocation is already open here through another handle, whose mapping this process uses). Any
 * process may call it, the exporter included; in another process it first synchronizes every
 * device, as orIpcCloseMemHandle does, since work queued there may use the allocation through
 * another mapping. orErrorInvalidValue for bytes that are not a handle, a handle already opened
 * or given back, or one whose exporter has exited; orErrorOutOfResources as for
 * orIpcOpenMemHandle. Never returns a task failure. */
OPENREG_RUNTIME_API orError_t orIpcDiscardMemHandle(orIpcMemHandle_t handle);

/* In the exporter: orSuccess once the handle's reference has been given back (closed, discarded,
 * or the importer exited), orErrorNotReady while it is held. orErrorInvalidValue for bytes that
 * are not a handle of this process. */
OPENREG_RUNTIME_API orError_t orIpcMemHandleQuery(orIpcMemHandle_t handle);

/* [out] info: what `handle` refers to, read from its bytes (nothing is opened). orErrorInvalidValue
 * for NULL info or bytes that are not a handle. */
OPENREG_RUNTIME_API orError_t orIpcGetMemHandleInfo(orIpcMemHandleInfo* info,
                                                    orIpcMemHandle_t handle);

/* ---------------------------------------------------------------------------------------------
 * Graphs: stream capture and replay (docs/graphs.md)
 *
 * While a stream captures, the work enqueued on it (launches, asynchronous copies between device
 * and pinned memory, memsets, event records and waits) is recorded into a graph instead of run.
 * A stream that waits on an event recorded in the capture joins it (a fork); every such stream
 * must be joined back (the origin stream waits on an event recorded after its last work) before
 * the capture ends. An executable graph made from it runs the recorded tasks, in the order they
 * were captured, as one launch on any stream of the device.
 *
 * What a capture cannot record fails with orErrorStreamCaptureUnsupported and invalidates the
 * capture: synchronizing the capturing stream (orStreamSynchronize, orStreamQuery), a launch or
 * copy that must complete before it returns (pageable host memory, OPENREG_LAUNCH_BLOCKING does
 * not count), a wait on an event recorded outside the capture whose work is still pending,
 * querying or synchronizing an event recorded in the capture, a graph launch. Under the two
 * strict modes, the synchronizing calls orDeviceSynchronize, orEventSynchronize, orMemcpy,
 * orMemset, orFree and orFreeHost also fail that way: from any host thread while a
 * orStreamCaptureModeGlobal capture is in progress, from the capturing thread under
 * orStreamCaptureModeThreadLocal; orStreamCaptureModeRelaxed allows them (they do not wait for
 * captured work, which is not queued). Ending an invalidated capture returns
 * orErrorStreamCaptureInvalidated with the first error's message, and ends the capture.
 * ------------------------------------------------------------------------------------------- */

typedef struct orGraph_st* orGraph_t;         /* a captured graph */
typedef struct orGraphExec_st* orGraphExec_t; /* an executable graph, made from a graph */

typedef enum orStreamCaptureMode {
  orStreamCaptureModeGlobal = 0,
  orStreamCaptureModeThreadLocal = 1,
  orStreamCaptureModeRelaxed = 2,
} orStreamCaptureMode;

typedef enum orStreamCaptureStatus {
  orStreamCaptureStatusNone = 0,        /* not capturing */
  orStreamCaptureStatusActive = 1,      /* capturing */
  orStreamCaptureStatusInvalidated = 2, /* capturing, but an error invalidated the capture */
} orStreamCaptureStatus;

/* Starts capturing on `stream` (of any device; 0: the current device's default stream).
 * orErrorInvalidValue for a mode outside the enumeration; orErrorNotPermitted if the stream
 * already belongs to a capture. */
OPENREG_RUNTIME_API orError_t orStreamBeginCapture(orStream_t stream, orStreamCaptureMode mode);

/* Ends the capture that `stream` began. [out] graph: the captured graph, or NULL on error.
 * orErrorNotPermitted if `stream` did not begin a capture in progress (a forked stream cannot end
 * it); orErrorStreamCaptureInvalidated (capture ended, no graph) as described above. */
OPENREG_RUNTIME_API orError_t orStreamEndCapture(orStream_t stream, orGraph_t* graph);

/* [out] status of `stream`; [out] id (may be NULL): a number unique to the capture the stream
 * belongs to, 0 when it captures nothing. */
OPENREG_RUNTIME_API orError_t orStreamGetCaptureInfo(orStream_t stream,
                                                     orStreamCaptureStatus* status,
                                                     unsigned long long* id);

/* [out] tasks: the tasks `graph` runs per launch; [out] streams: the streams it was captured on
 * (the origin and those forked off it). Either pointer may be NULL. */
OPENREG_RUNTIME_API orError_t orGraphGetInfo(orGraph_t graph, size_t* tasks, int* streams);

/* [out] exec: an executable graph that runs `graph`'s tasks. Several may be made from one graph;
 * each stays valid after orGraphDestroy(graph). flags must be 0. */
OPENREG_RUNTIME_API orError_t orGraphInstantiate(orGraphExec_t* exec, orGraph_t graph,
                                                 unsigned int flags);

/* Enqueues the whole graph on `stream` as one launch (ordered like any other work on it) and
 * returns at once. The stream must belong to the device the graph was captured on
 * (orErrorInvalidResourceHandle). A task of the graph that fails does so as on a stream (Note
 * [Task errors]: it poisons what it writes, later tasks of this and later launches that read it
 * fail with the same error, the next synchronizing call reports it); the others run. Launching
 * into a capturing stream is orErrorStreamCaptureUnsupported. Launches of one executable graph
 * on two streams must be ordered by the caller (an event), as its tasks keep no per-launch state.
 */
OPENREG_RUNTIME_API orError_t orGraphLaunch(orGraphExec_t exec, orStream_t stream);

/* Writes a description of `graph` to the file `path` in Graphviz DOT: one node per captured
 * operation (task, event record, event wait) with its stream and the device memory it declares
 * it reads and writes, and the order edges. flags must be 0. orErrorInvalidValue if the file
 * cannot be written. */
OPENREG_RUNTIME_API orError_t orGraphDebugDotPrint(orGraph_t graph, const char* path,
                                                   unsigned int flags);

/* Release a graph or an executable graph. Launches already enqueued still run. Destroying a
 * handle twice is orErrorInvalidResourceHandle. */
OPENREG_RUNTIME_API orError_t orGraphDestroy(orGraph_t graph);
OPENREG_RUNTIME_API orError_t orGraphExecDestroy(orGraphExec_t exec);

/* ---------------------------------------------------------------------------------------------
 * Task activity: the device-side timeline a profiler reads (what CUPTI's activity API is to CUDA)
 *
 * See Note [Task activity] in <openreg/activity.hpp>, the C++ form. While a recording is on, every
 * task launched (a kernel, a copy, a memset) is timed by the worker that runs it. Times are
 * nanoseconds since the Unix epoch (the system clock), the clock profilers put host events on.
 * ------------------------------------------------------------------------------------------- */

typedef enum orTaskKind {
  orTaskKindKernel = 0,
  orTaskKindMemcpy = 1,
  orTaskKindMemset = 2,
} orTaskKind;

typedef struct orTaskActivity {
  orTaskKind kind;
  const char* name;     /* a static string ("Memcpy HtoD", "Memset", a label set with
                           orActivitySetLabel), or NULL for a kernel launched without a label */
  int device;           /* the stream's device */
  uint64_t stream;      /* the orStream_t handle value */
  uint64_t correlation; /* the launching thread's innermost orActivityPushCorrelation id; 0: none */
  int64_t launchThread; /* OS thread id (gettid) of the launching host thread */
  int64_t launchNs;     /* when the launch queued the task */
  int64_t startNs;      /* when a worker started it */
  int64_t endNs;        /* when it returned */
  bool failed;          /* it failed (or did not run: its inputs were poisoned) */
} orTaskActivity;

/* Starts recording. orErrorNotPermitted (and nothing changes) if a recording is already on.
 * Begin and end from one controlling thread at a time. */
OPENREG_RUNTIME_API orError_t orActivityBegin(void);

/* Stops recording, waits until every task launched during it has run (or been dropped), and
 * returns their activities in completion order. [out] activities: an array to release with
 * orActivityFree, NULL when there are none; [out] count: its length. With no recording on,
 * NULL and 0. orErrorInvalidValue if either pointer is NULL (the recording then goes on);
 * orErrorMemoryAllocation if the array cannot be allocated (the recording has ended, its
 * activities are lost); orErrorNotPermitted from inside a task. */
OPENREG_RUNTIME_API orError_t orActivityEnd(orTaskActivity** activities, size_t* count);

/* Releases an array from orActivityEnd. NULL is a no-op. */
OPENREG_RUNTIME_API void orActivityFree(orTaskActivity* activities);

/* [out] recording: whether a recording is on. One relaxed atomic load. orErrorInvalidValue if
 * recording is NULL. */
OPENREG_RUNTIME_API orError_t orActivityGetRecording(bool* recording);

/* The calling thread's correlation stack: tasks launched while an id is pushed carry the top one.
 * Push: orErrorMemoryAllocation when there is no host memory for it (nothing is pushed; launches
 * keep the enclosing id). Pop: a no-op on an empty stack. */
OPENREG_RUNTIME_API orError_t orActivityPushCorrelation(uint64_t id);
OPENREG_RUNTIME_API orError_t orActivityPopCorrelation(void);

/* Names the tasks the calling thread launches from now on: `kind` and `name` (a string with
 * static storage duration, or NULL) go into their activities. [out] previousKind, previousName
 * (either may be NULL): the label it replaces, to be set back when the labelled region ends.
 * Two thread-local stores. orErrorInvalidValue for a kind outside orTaskKind. */
OPENREG_RUNTIME_API orError_t orActivitySetLabel(orTaskKind kind, const char* name,
                                                 orTaskKind* previousKind,
                                                 const char** previousName);

/* Work a host thread does in a stream's order (a collective run by a communication library on its
 * own threads): see Note [Host-timed activity] in <openreg/activity.hpp>. The caller owns the
 * struct; zero it before orHostActivityBegin. One activity is begun, started and ended once each,
 * in this order, by host threads the caller orders. */
typedef struct orHostActivity {
  orTaskActivity activity;
  uint64_t generation; /* the recording it joined; 0: none (nothing recorded) */
} orHostActivity;

/* Launching thread. `name` must have static storage duration; `stream` as for a launch (0: the
 * current device's default stream). Joins nothing (generation 0, orSuccess) when no recording is
 * on or the stream is not live. orErrorInvalidValue if activity is NULL. */
OPENREG_RUNTIME_API orError_t orHostActivityBegin(orHostActivity* activity, orStream_t stream,
                                                  const char* name);
/* Stamps the start. orErrorInvalidValue if activity is NULL. */
OPENREG_RUNTIME_API orError_t orHostActivityStart(orHostActivity* activity);
/* Stamps the end and records the activity, `failed` or not, if its recording is still on; the
 * struct then joins nothing. orErrorInvalidValue if activity is NULL. */
OPENREG_RUNTIME_API orError_t orHostActivityEnd(orHostActivity* activity, bool failed);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OPENREG_RUNTIME_H */
