// test_emu_streams.cpp: the emulated device's streams and events
// (emu_runtime.cpp): what runs when the host synchronises, in what order,
// and what a missing wait leaves behind. Emulated device memory is host
// memory, so each case looks at a buffer without synchronising to see
// whether the work writing it has run yet. cudaMalloc fills with 0xff bytes:
// a byte still 0xff was not written.
//
// Run by tests/run_tests.sh in both orders. Some outcomes differ between
// them, by design: by default a synchronisation runs only what it needs;
// with EMU_REVERSE=1 it runs the newest work that may run, each time.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "emu_activity.h"
#include "emu_test.h"

static bool g_reverse;

static uint8_t *device_bytes(size_t n) {
  void *p = nullptr;
  if (cudaMalloc(&p, n) != cudaSuccess) {
    printf("FAIL setup: cudaMalloc\n");
    exit(1);
  }
  return static_cast<uint8_t *>(p);
}

static bool all_are(const uint8_t *p, size_t n, uint8_t value) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != value) return false;
  return true;
}

enum { kBytes = 64 };
static const uint8_t kUnwritten = 0xff;

struct Streams {
  cudaStream_t a, b;
  Streams() {
    if (cudaStreamCreateWithFlags(&a, cudaStreamDefault) != cudaSuccess ||
        cudaStreamCreateWithFlags(&b, cudaStreamDefault) != cudaSuccess) {
      printf("FAIL setup: cudaStreamCreateWithFlags\n");
      exit(1);
    }
  }
  ~Streams() {
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
  }
};

// Work queued on a stream runs when that stream is synchronised, not before,
// and not when another stream is.
static void work_waits_for_its_stream() {
  Streams s;
  uint8_t *x = device_bytes(kBytes);
  bool ok = cudaMemsetAsync(x, 1, kBytes, s.a) == cudaSuccess && all_are(x, kBytes, kUnwritten);
  ok &= cudaStreamSynchronize(s.b) == cudaSuccess && all_are(x, kBytes, kUnwritten);
  ok &= cudaStreamSynchronize(s.a) == cudaSuccess && all_are(x, kBytes, 1);
  check(ok, "work_waits_for_its_stream", "x[0] = %d", x[0]);
  cudaFree(x);
}

// Stream b copies what stream a wrote: with a wait on an event recorded
// after the write it gets the data, without one it gets the stale bytes
// (in either order: by default b's synchronisation does not run a's work,
// newest first runs b's copy before a's older write).
static void wait_event_orders_streams() {
  Streams s;
  cudaEvent_t written;
  cudaEventCreateWithFlags(&written, cudaEventDisableTiming);
  uint8_t *x = device_bytes(kBytes), *y = device_bytes(kBytes);
  bool ok = cudaMemsetAsync(x, 7, kBytes, s.a) == cudaSuccess &&
            cudaEventRecord(written, s.a) == cudaSuccess &&
            cudaStreamWaitEvent(s.b, written, 0) == cudaSuccess &&
            cudaMemcpyAsync(y, x, kBytes, cudaMemcpyDeviceToDevice, s.b) == cudaSuccess &&
            cudaStreamSynchronize(s.b) == cudaSuccess;
  check(ok && all_are(y, kBytes, 7), "wait_event_orders_streams", "copy after the wait: y[0] = %d",
        y[0]);
  uint8_t *u = device_bytes(kBytes), *v = device_bytes(kBytes);
  ok = cudaMemsetAsync(u, 9, kBytes, s.a) == cudaSuccess &&
       cudaMemcpyAsync(v, u, kBytes, cudaMemcpyDeviceToDevice, s.b) == cudaSuccess &&
       cudaStreamSynchronize(s.b) == cudaSuccess;
  check(ok && all_are(v, kBytes, kUnwritten), "missing_wait_reads_stale_data",
        "copy without a wait: v[0] = %d (expected the unwritten 0x%x)", v[0], kUnwritten);
  cudaDeviceSynchronize();
  for (uint8_t *p : {x, y, u, v}) cudaFree(p);
  cudaEventDestroy(written);
}

// A wait is for the record issued last before it; recording the event again
// later does not move the wait.
static void wait_takes_the_record_issued_before_it() {
  Streams s;
  cudaEvent_t e;
  cudaEventCreate(&e);
  uint8_t *x = device_bytes(kBytes), *later = device_bytes(kBytes);
  bool ok = cudaMemsetAsync(x, 1, kBytes, s.a) == cudaSuccess && cudaEventRecord(e, s.a) == 0 &&
            cudaStreamWaitEvent(s.b, e, 0) == cudaSuccess &&
            cudaMemsetAsync(later, 2, kBytes, s.a) == cudaSuccess &&
            cudaEventRecord(e, s.a) == cudaSuccess && cudaStreamSynchronize(s.b) == cudaSuccess;
  ok &= all_are(x, kBytes, 1);
  // Newest first may run a's later work as well; by default it stays queued.
  if (!g_reverse) ok &= all_are(later, kBytes, kUnwritten);
  check(ok, "wait_takes_the_record_issued_before_it", "x[0] = %d, later[0] = %d", x[0], later[0]);
  cudaDeviceSynchronize();
  cudaFree(x);
  cudaFree(later);
  cudaEventDestroy(e);
}

// The legacy default stream (cudaMemcpy, stream 0) waits for the work issued
// before it on blocking streams, not on non-blocking ones; a blocking
// stream's later work waits for it.
static void legacy_stream_ordering() {
  Streams s;
  cudaStream_t nb;
  cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking);
  uint8_t *x = device_bytes(kBytes), *y = device_bytes(kBytes), *z = device_bytes(kBytes),
          *w = device_bytes(kBytes);
  uint8_t host[kBytes];
  bool ok = cudaMemsetAsync(x, 3, kBytes, s.a) == cudaSuccess &&
            cudaMemcpy(host, x, kBytes, cudaMemcpyDeviceToHost) == cudaSuccess &&
            all_are(host, kBytes, 3);
  check(ok, "legacy_stream_waits_for_blocking_streams", "host[0] = %d", host[0]);
  ok = cudaMemsetAsync(y, 4, kBytes, nb) == cudaSuccess &&
       cudaMemcpy(host, y, kBytes, cudaMemcpyDeviceToHost) == cudaSuccess &&
       all_are(host, kBytes, kUnwritten);
  check(ok, "legacy_stream_skips_non_blocking_streams", "host[0] = %d", host[0]);
  ok = cudaMemsetAsync(z, 5, kBytes, 0) == cudaSuccess &&
       cudaMemcpyAsync(w, z, kBytes, cudaMemcpyDeviceToDevice, s.b) == cudaSuccess &&
       cudaStreamSynchronize(s.b) == cudaSuccess && all_are(w, kBytes, 5);
  check(ok, "blocking_stream_waits_for_legacy_stream", "w[0] = %d", w[0]);
  // Synchronising a blocking stream waits for its own work, not for legacy
  // work issued after it (which waits for that stream, not the other way).
  uint8_t *u = device_bytes(kBytes), *v = device_bytes(kBytes);
  ok = cudaMemsetAsync(u, 6, kBytes, s.a) == cudaSuccess &&
       cudaMemsetAsync(v, 7, kBytes, 0) == cudaSuccess &&
       cudaStreamSynchronize(s.a) == cudaSuccess && all_are(u, kBytes, 6) &&
       all_are(v, kBytes, kUnwritten);
  check(ok, "stream_sync_skips_later_legacy_work", "u[0] = %d, v[0] = %d", u[0], v[0]);
  cudaStreamDestroy(nb);
  cudaDeviceSynchronize();
  for (uint8_t *p : {x, y, z, w, u, v}) cudaFree(p);
}

// Synchronising on an event runs its record and what that waits for; device
// synchronisation runs everything.
static void event_and_device_sync() {
  Streams s;
  cudaEvent_t e;
  cudaEventCreate(&e);
  uint8_t *x = device_bytes(kBytes), *y = device_bytes(kBytes);
  bool ok = cudaMemsetAsync(x, 1, kBytes, s.a) == cudaSuccess && cudaEventRecord(e, s.a) == 0 &&
            cudaMemsetAsync(y, 2, kBytes, s.b) == cudaSuccess &&
            cudaEventSynchronize(e) == cudaSuccess && all_are(x, kBytes, 1);
  if (!g_reverse) ok &= all_are(y, kBytes, kUnwritten);  // newest first runs it too
  check(ok, "event_sync_runs_its_record", "x[0] = %d, y[0] = %d", x[0], y[0]);
  ok = cudaDeviceSynchronize() == cudaSuccess && all_are(y, kBytes, 2);
  check(ok, "device_sync_runs_everything", "y[0] = %d", y[0]);
  cudaFree(x);
  cudaFree(y);
  cudaEventDestroy(e);
}

// Two streams write the same bytes without waiting for each other: device
// synchronisation runs the older write first by default, the newer with
// EMU_REVERSE=1, so the other write is the one left.
static void unordered_writes_follow_the_order() {
  Streams s;
  uint8_t *x = device_bytes(kBytes);
  bool ok = cudaMemsetAsync(x, 1, kBytes, s.a) == cudaSuccess &&
            cudaMemsetAsync(x, 2, kBytes, s.b) == cudaSuccess &&
            cudaDeviceSynchronize() == cudaSuccess && all_are(x, kBytes, g_reverse ? 1 : 2);
  check(ok, "unordered_writes_follow_the_order", "x[0] = %d with EMU_REVERSE=%d", x[0],
        g_reverse);
  cudaFree(x);
}

// A destroyed stream is refused; a destroyed event's queued record still
// runs (into memory of its own).
static void destroyed_handles() {
  Streams s;  // before: a stream made after the destroy could reuse the handle
  cudaEvent_t e;
  cudaEventCreate(&e);
  cudaStream_t gone;
  cudaStreamCreate(&gone);
  uint8_t *x = device_bytes(kBytes);
  bool ok = cudaMemsetAsync(x, 6, kBytes, gone) == cudaSuccess &&
            cudaStreamDestroy(gone) == cudaSuccess && all_are(x, kBytes, 6);
  ok &= cudaMemsetAsync(x, 1, kBytes, gone) == cudaErrorInvalidResourceHandle;
  ok &= cudaStreamSynchronize(gone) == cudaErrorInvalidResourceHandle;
  ok &= cudaEventRecord(e, gone) == cudaErrorInvalidResourceHandle;
  ok &= cudaStreamDestroy(0) == cudaErrorInvalidResourceHandle;
  ok &= cudaEventRecord(e, s.a) == cudaSuccess && cudaEventDestroy(e) == cudaSuccess &&
        cudaStreamSynchronize(s.a) == cudaSuccess;
  check(ok, "destroyed_handles", "a call on a destroyed stream or event went wrong");
  cudaFree(x);
}

// An NCCL collective is queued on its stream like any other work.
static void nccl_collective_is_queued() {
  Streams s;
  ncclUniqueId id;
  ncclComm_t comm;
  float *send = (float *)device_bytes(16 * sizeof(float));
  float *recv = (float *)device_bytes(16 * sizeof(float));
  float host[16];
  for (int i = 0; i < 16; i++) host[i] = (float)i;
  bool ok = ncclGetUniqueId(&id) == ncclSuccess && ncclCommInitRank(&comm, 1, id, 0) == 0 &&
            cudaMemcpyAsync(send, host, sizeof host, cudaMemcpyHostToDevice, s.a) == 0 &&
            ncclAllReduce(send, recv, 16, ncclFloat, ncclSum, comm, s.a) == ncclSuccess;
  ok &= all_are((const uint8_t *)recv, 16 * sizeof(float), kUnwritten);
  ok &= cudaStreamSynchronize(s.a) == cudaSuccess && memcmp(recv, host, sizeof host) == 0;
  ok &= ncclCommDestroy(comm) == ncclSuccess;
  check(ok, "nccl_collective_is_queued", "recv[1] = %g", recv[1]);
  cudaFree(send);
  cudaFree(recv);
}

// emu_activity.h counts what the watching thread asks, by kind, and
// nothing another thread asks.
static void activity_counts_this_thread() {
  Streams s;
  uint8_t *x = device_bytes(kBytes);
  emu_activity_begin(s.a);
  void *p = nullptr;
  cudaMemsetAsync(x, 1, kBytes, s.a);
  cudaMemsetAsync(x, 2, kBytes, s.b);
  cudaMalloc(&p, 8);
  std::thread([&]() {
    cudaMemsetAsync(x, 3, kBytes, s.b);
    cudaStreamSynchronize(s.b);
  }).join();
  cudaStreamSynchronize(s.a);
  cudaFree(p);
  EmuActivity a = emu_activity_end();
  cudaDeviceSynchronize();
  check(a.host_waits == 2 && strcmp(a.first_wait, "cudaStreamSynchronize") == 0 &&
            a.allocations == 1 && a.other_streams == 1,
        "activity_counts_this_thread", "waits %ld (first %s), allocations %ld, other streams %ld",
        a.host_waits, a.first_wait, a.allocations, a.other_streams);
  cudaFree(x);
}

// A child forked after the parent used CUDA gets "initialization error" from
// the calls that allocate, copy or make streams, as on a GPU; the parent's
// CUDA goes on working.
static void forked_child_has_no_cuda() {
  uint8_t *x = device_bytes(kBytes);
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    void *p = NULL;
    cudaStream_t st;
    bool refused = cudaMalloc(&p, 16) == cudaErrorInitializationError &&
                   cudaMallocHost(&p, 16) == cudaErrorInitializationError &&
                   cudaMemset(x, 0, kBytes) == cudaErrorInitializationError &&
                   cudaStreamCreate(&st) == cudaErrorInitializationError;
    _exit(refused ? 0 : 1);
  }
  int status = 0;
  bool ok = child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0;
  check(ok, "forked_child_has_no_cuda", "a forked child's CUDA calls did not fail as on a GPU");
  check(cudaMemset(x, 3, kBytes) == cudaSuccess && all_are(x, kBytes, 3), "parent_keeps_cuda_after_fork",
        "the parent's CUDA stopped working after the fork");
  cudaFree(x);
}

int main() {
  const char *reverse = getenv("EMU_REVERSE");
  g_reverse = reverse && atoi(reverse) == 1;
  if (getenv("EMU_SYNC") && atoi(getenv("EMU_SYNC")) == 1) {
    printf("SKIP streams: EMU_SYNC=1 runs every call at once\n");
    return 0;
  }
  work_waits_for_its_stream();
  wait_event_orders_streams();
  wait_takes_the_record_issued_before_it();
  legacy_stream_ordering();
  event_and_device_sync();
  unordered_writes_follow_the_order();
  destroyed_handles();
  nccl_collective_is_queued();
  activity_counts_this_thread();
  forked_child_has_no_cuda();
  return g_failures ? 1 : 0;
}
