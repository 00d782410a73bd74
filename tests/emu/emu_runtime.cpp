// emu_runtime.cpp: the CUDA runtime calls the project makes, for the CUDA
// emulation (emu.h). Devices whose memory is host memory, and streams whose
// work waits in queues (emu_internal.h) until the host needs it; events
// record the wall clock at the moment their record runs.
//
// Device allocations are filled with 0xff bytes (a NaN in every float
// type), as freshly allocated GPU memory holds whatever was there: code that
// reads before it writes gets NaNs, not convenient zeros.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <new>
#include <mutex>
#include <set>
#include <vector>

#include "emu_activity.h"
#include "emu_internal.h"

namespace emu {
namespace {
cudaError_t g_last_error = cudaSuccess;
double now_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}
int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}
}  // namespace
void set_error(cudaError_t e) {
  if (g_last_error == cudaSuccess) g_last_error = e;
}

// A stream's queued work.
struct Stream {
  bool blocking;                // ordered against the legacy default stream
  std::deque<WorkRef> pending;  // in issue order
  WorkRef last;                 // the latest issued, done or not
};

// One piece of queued device work.
struct Work {
  std::function<void()> run;  // empty for a marker or a wait on an event
  Stream *stream;             // valid while not done
  uint64_t seq;               // issue order over all streams
  // Work on other streams this waits for; all issued earlier, so the
  // dependencies never form a cycle.
  std::vector<WorkRef> after;
  bool done = false;
};

namespace {

struct Event {
  std::shared_ptr<double> ms;  // shared with a queued record
  WorkRef recorded;            // the latest record issued
};

std::mutex g_lock;      // guards the streams, their work and g_seq
std::mutex g_run_lock;  // one thread runs device work at a time
Stream g_legacy = {true, {}, nullptr};
std::set<Stream *> g_streams = {&g_legacy};
uint64_t g_seq;

Stream *stream_of(cudaStream_t handle);

// emu_activity.h: what this host thread asked of the device while watched.
struct Watch {
  bool on;
  cudaStream_t stream;
  EmuActivity counts;
};
thread_local Watch t_watch;

void note_allocation() {
  if (t_watch.on) t_watch.counts.allocations++;
}

// Counts work queued on s from this thread if s is not the watched stream.
// Under g_lock.
void note_queued(Stream *s) {
  if (t_watch.on && s != stream_of(t_watch.stream)) t_watch.counts.other_streams++;
}

bool run_at_once() {
  static const bool at_once = env_int("EMU_SYNC", 0) == 1;
  return at_once;
}
bool newest_first() {
  static const bool reverse = env_int("EMU_REVERSE", 0) == 1;
  return reverse;
}

// The stream a handle names (0 and the two special handles are the legacy
// default stream); nullptr for one never created. Under g_lock.
Stream *stream_of(cudaStream_t handle) {
  if (handle == 0 || handle == cudaStreamLegacy || handle == cudaStreamPerThread)
    return &g_legacy;
  Stream *s = reinterpret_cast<Stream *>(handle);
  return g_streams.count(s) ? s : nullptr;
}

bool ready(const Work &w) {
  for (const WorkRef &d : w.after)
    if (!d->done) return false;
  return true;
}

// Queues run on s after `after`, and after what CUDA orders it behind: work
// on the legacy stream waits for all work issued before it on the blocking
// streams, and work on a blocking stream for the legacy stream's. Under g_lock.
WorkRef submit(Stream *s, std::function<void()> run, std::vector<WorkRef> after) {
  WorkRef w = std::make_shared<Work>();
  w->run = std::move(run);
  w->stream = s;
  w->seq = g_seq++;
  w->after = std::move(after);
  if (s == &g_legacy) {
    for (Stream *o : g_streams)
      if (o != s && o->blocking && o->last && !o->last->done) w->after.push_back(o->last);
  } else if (s->blocking && g_legacy.last && !g_legacy.last->done) {
    w->after.push_back(g_legacy.last);
  }
  s->pending.push_back(w);
  s->last = w;
  return w;
}

// Runs w, the head of its stream with its dependencies done. With g_run_lock
// and g_lock held; g_lock is let go while the work runs, so that other host
// threads may queue more meanwhile.
void run_one(std::unique_lock<std::mutex> &held, const WorkRef &w) {
  held.unlock();
  if (w->run) w->run();
  held.lock();
  w->done = true;
  w->after.clear();
  w->stream->pending.pop_front();
}

// The work to run next: the oldest head of a stream that may run, or with
// EMU_REVERSE=1 the newest. The oldest head may always run, since all it
// waits for was issued before it. nullptr when nothing is queued. Under g_lock.
WorkRef next_ready() {
  WorkRef pick;
  for (Stream *s : g_streams) {
    if (s->pending.empty() || !ready(*s->pending.front())) continue;
    const WorkRef &w = s->pending.front();
    if (!pick || (newest_first() ? w->seq > pick->seq : w->seq < pick->seq)) pick = w;
  }
  return pick;
}

// Runs until target is done. By default only target and what it depends on:
// each time the head of target's stream or, if that waits, of the stream of
// its first unfinished dependency, and so on back; work that nothing awaits
// stays queued. With EMU_REVERSE=1, the newest work that may run, each time,
// until target is done: later work on other streams then runs before earlier
// work that it did not wait for. Under g_run_lock.
void run_until(const WorkRef &target) {
  std::unique_lock<std::mutex> held(g_lock);
  while (!target->done) {
    WorkRef w;
    if (newest_first()) {
      w = next_ready();
    } else {
      w = target->stream->pending.front();
      for (;;) {
        auto dep = std::find_if(w->after.begin(), w->after.end(),
                                [](const WorkRef &d) { return !d->done; });
        if (dep == w->after.end()) break;
        w = (*dep)->stream->pending.front();
      }
    }
    run_one(held, w);
  }
}

// Runs all queued work, in next_ready's order. Under g_run_lock.
void run_all() {
  std::unique_lock<std::mutex> held(g_lock);
  while (WorkRef w = next_ready()) run_one(held, w);
}
}  // namespace

cudaError_t enqueue(cudaStream_t stream, std::function<void()> op, WorkRef after,
                    WorkRef *queued) {
  {
    std::lock_guard<std::mutex> hold(g_lock);
    Stream *s = stream_of(stream);
    if (!s) return cudaErrorInvalidResourceHandle;
    note_queued(s);
    std::vector<WorkRef> deps;
    if (after && !after->done) deps.push_back(std::move(after));
    WorkRef w = submit(s, std::move(op), std::move(deps));
    if (queued) *queued = std::move(w);
  }
  if (run_at_once()) flush();
  return cudaSuccess;
}

cudaError_t sync_stream(cudaStream_t stream) {
  WorkRef until;
  {
    std::lock_guard<std::mutex> hold(g_lock);
    Stream *s = stream_of(stream);
    if (!s) return cudaErrorInvalidResourceHandle;
    // On the legacy stream a marker rather than its last work, so that it
    // also waits for the blocking streams. On any other stream its last
    // work: a marker on a blocking stream would wait for legacy work issued
    // after the stream's own, which synchronising the stream does not.
    until = s == &g_legacy ? submit(s, nullptr, {}) : s->last;
  }
  sync_work(until);
  return cudaSuccess;
}

void sync_work(const WorkRef &work) {
  if (!work) return;
  std::lock_guard<std::mutex> running(g_run_lock);
  run_until(work);
}

void flush() {
  std::lock_guard<std::mutex> running(g_run_lock);
  run_all();
}

void note_host_wait(const char *call) {
  if (!t_watch.on || t_watch.counts.host_waits++) return;
  snprintf(t_watch.counts.first_wait, sizeof t_watch.counts.first_wait, "%s", call);
}

int with_device_idle(const std::function<int()> &call) {
  std::lock_guard<std::mutex> running(g_run_lock);
  run_all();
  return call();
}
}  // namespace emu

using emu::Event;

extern "C" void emu_activity_begin(void *stream) {
  emu::t_watch = {true, static_cast<cudaStream_t>(stream), {}};
}

extern "C" EmuActivity emu_activity_end(void) {
  emu::t_watch.on = false;
  return emu::t_watch.counts;
}

extern "C" {

// A child forked after its parent used CUDA has no usable CUDA: on a GPU its
// calls fail with "initialization error". The calls below that allocate, copy
// or make streams and events do the same here, so a path that would touch
// CUDA in such a child (a test's forked bad-input case, say) fails on the
// emulation as it would on the GPU.
static std::atomic<pid_t> g_cuda_pid{0};
static cudaError_t usable_here() {
  pid_t me = getpid(), owner = 0;
  if (g_cuda_pid.compare_exchange_strong(owner, me)) return cudaSuccess;
  return owner == me ? cudaSuccess : cudaErrorInitializationError;
}
#define REQUIRE_USABLE()                      \
  do {                                        \
    cudaError_t usable = usable_here();       \
    if (usable != cudaSuccess) return usable; \
  } while (0)

// EMU_GPUS devices (default 2, so that two ranks of an MPI job each have
// their own, as NCCL requires); all alike.
static int device_count() { return emu::env_int("EMU_GPUS", 2); }

cudaError_t cudaGetDeviceCount(int *count) {
  *count = device_count();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  REQUIRE_USABLE();
  return device >= 0 && device < device_count() ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
  if (device < 0 || device >= device_count()) return cudaErrorInvalidDevice;
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "CUDA emulation on the CPU (tests/emu)");
  // Compute capability and SM count of an H100 by default, so that code
  // sized from them takes the H100's paths; EMU_SM_COUNT overrides the count.
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = emu::env_int("EMU_SM_COUNT", 132);
  prop->totalGlobalMem = (size_t)80 << 30;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->sharedMemPerBlock = 48 * 1024;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t bytes) {
  REQUIRE_USABLE();
  emu::note_allocation();
  if (posix_memalign(ptr, 256, bytes ? bytes : 1) != 0) return cudaErrorMemoryAllocation;
  memset(*ptr, 0xff, bytes);
  return cudaSuccess;
}

cudaError_t cudaFree(void *ptr) {
  emu::note_host_wait("cudaFree");
  emu::flush();  // queued work may still use it
  free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t bytes) {
  REQUIRE_USABLE();
  emu::note_allocation();
  if (posix_memalign(ptr, 256, bytes ? bytes : 1) != 0) return cudaErrorMemoryAllocation;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr) {
  emu::note_host_wait("cudaFreeHost");
  emu::flush();
  free(ptr);
  return cudaSuccess;
}

// The synchronous copy and set are work on the legacy default stream (after
// all work issued on the blocking streams, and before their later work) that
// the host waits for.
static void run_on_legacy_stream(std::function<void()> op) {
  emu::WorkRef w;
  {
    std::lock_guard<std::mutex> hold(emu::g_lock);
    w = emu::submit(&emu::g_legacy, std::move(op), {});
  }
  emu::sync_work(w);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
  REQUIRE_USABLE();
  emu::note_host_wait("cudaMemcpy");
  (void)kind;
  run_on_legacy_stream([=]() {
    if (bytes) memmove(dst, src, bytes);
  });
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  (void)kind;
  return emu::enqueue(stream, [dst, src, bytes]() {
    if (bytes) memmove(dst, src, bytes);
  });
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  (void)kind;
  if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
  return emu::enqueue(stream, [=]() {
    for (size_t r = 0; r < height; r++)
      memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
  });
}

cudaError_t cudaMemset(void *ptr, int value, size_t bytes) {
  REQUIRE_USABLE();
  emu::note_host_wait("cudaMemset");
  run_on_legacy_stream([=]() {
    if (bytes) memset(ptr, value, bytes);
  });
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream) {
  return emu::enqueue(stream, [ptr, value, bytes]() {
    if (bytes) memset(ptr, value, bytes);
  });
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags) {
  REQUIRE_USABLE();
  if (!stream) return cudaErrorInvalidValue;
  emu::Stream *s = new emu::Stream{!(flags & cudaStreamNonBlocking), {}, nullptr};
  std::lock_guard<std::mutex> hold(emu::g_lock);
  emu::g_streams.insert(s);
  *stream = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

// The stream's queued work runs first (on a GPU it would finish after the
// call returned; running it now is one of the orders it could take).
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  emu::note_host_wait("cudaStreamDestroy");
  if (stream == 0 || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return cudaErrorInvalidResourceHandle;
  emu::WorkRef last;
  emu::Stream *s;
  {
    std::lock_guard<std::mutex> hold(emu::g_lock);
    s = emu::stream_of(stream);
    if (!s) return cudaErrorInvalidResourceHandle;
    last = s->last;
  }
  emu::sync_work(last);
  std::lock_guard<std::mutex> hold(emu::g_lock);
  emu::g_streams.erase(s);
  delete s;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  emu::note_host_wait("cudaStreamSynchronize");
  return emu::sync_stream(stream);
}

// Later work on the stream waits for the event's latest record as issued now.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  (void)flags;
  if (!event) return cudaErrorInvalidResourceHandle;
  std::lock_guard<std::mutex> hold(emu::g_lock);
  emu::Stream *s = emu::stream_of(stream);
  if (!s) return cudaErrorInvalidResourceHandle;
  emu::note_queued(s);
  emu::WorkRef record = ((Event *)event)->recorded;
  if (record && !record->done) emu::submit(s, nullptr, {record});
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  emu::note_host_wait("cudaDeviceSynchronize");
  emu::flush();
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
  REQUIRE_USABLE();
  if (!event) return cudaErrorInvalidValue;
  Event *e = new (std::nothrow) Event{std::make_shared<double>(0.0), nullptr};
  if (!e) return cudaErrorMemoryAllocation;
  *event = (cudaEvent_t)e;
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags) {
  REQUIRE_USABLE();
  (void)flags;
  return cudaEventCreate(event);
}

// A record still queued writes its own copy of the time.
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return cudaErrorInvalidResourceHandle;
  std::lock_guard<std::mutex> hold(emu::g_lock);
  delete (Event *)event;
  return cudaSuccess;
}

// The record becomes the event's latest (set under the queue's lock).
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event) return cudaErrorInvalidResourceHandle;
  Event *e = (Event *)event;
  std::shared_ptr<double> ms = e->ms;
  return emu::enqueue(stream, [ms]() { *ms = emu::now_ms(); }, nullptr, &e->recorded);
}

static emu::WorkRef latest_record(cudaEvent_t event) {
  std::lock_guard<std::mutex> hold(emu::g_lock);
  return ((Event *)event)->recorded;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  emu::note_host_wait("cudaEventSynchronize");
  if (!event) return cudaErrorInvalidResourceHandle;
  emu::sync_work(latest_record(event));
  return cudaSuccess;
}

// Done, once asked about: the record and what it waits for run now.
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return cudaErrorInvalidResourceHandle;
  emu::note_host_wait("cudaEventQuery");
  emu::sync_work(latest_record(event));
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  emu::note_host_wait("cudaEventElapsedTime");
  if (!ms || !start || !end) return cudaErrorInvalidResourceHandle;
  emu::sync_work(latest_record(start));
  emu::sync_work(latest_record(end));
  *ms = (float)(*((Event *)end)->ms - *((Event *)start)->ms);
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = emu::g_last_error;
  emu::g_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return emu::g_last_error; }

const char *cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorInitializationError: return "initialization error";
    default: return "emulated CUDA error";
  }
}

const char *cudaGetErrorName(cudaError_t error) { return cudaGetErrorString(error); }

}  // extern "C"
