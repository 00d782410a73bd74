// test_emu_racecheck.cu: the emulator's shared-memory race check
// (emu_shared.cpp). Each kernel here comes with the barrier it needs and
// without: without it the program must stop (exit status 70) with a
// one-line report of the race, with it the kernel must run and give the
// right result. Each case runs in a forked child, whose stderr the parent
// reads.
//
// The report names the accesses in the order the emulation ran them, so
// with EMU_REVERSE=1 a read then a write (WAR) may be reported as a write
// then a read (RAW): each case names its kind in both orders.
//
// Under EMU_ASAN=1 there is no race check (emucc.py): the out-of-bounds
// cases then check that AddressSanitizer stops them instead.
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "emu_test.h"
#include "ops/cuda.cuh"

static const int kThreads = 64;
static const size_t kDynamicBytes = kThreads * sizeof(float);

// The kernels use a static __shared__ array or the dynamic one.
#define SHARED_ARRAY(kDynamic)             \
  __shared__ float fixed[kThreads];        \
  extern __shared__ float dynamic[];       \
  float *s = (kDynamic) ? dynamic : fixed; \
  (void)fixed

// Thread 0 writes s[5], every thread reads it.
template <bool kSync, bool kDynamic>
__global__ void raw_kernel(float *out) {
  SHARED_ARRAY(kDynamic);
  if (threadIdx.x == 0) s[5] = 1.0f;
  if (kSync) __syncthreads();
  out[threadIdx.x] = s[5];
}

// Thread 0 reads s[5], then thread 1 overwrites it.
template <bool kSync, bool kDynamic>
__global__ void war_kernel(float *out) {
  SHARED_ARRAY(kDynamic);
  s[threadIdx.x] = 1.0f;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = s[5];
  if (kSync) __syncthreads();
  if (threadIdx.x == 1) s[5] = 2.0f;
}

// Threads 0 and 1 both write s[5].
template <bool kSync, bool kDynamic>
__global__ void waw_kernel(float *out) {
  SHARED_ARRAY(kDynamic);
  if (threadIdx.x == 0) s[5] = 1.0f;
  if (kSync) __syncthreads();
  if (threadIdx.x == 1) s[5] = 2.0f;
  __syncthreads();
  out[threadIdx.x] = s[5];
}

// ops_block_sum (common/ops/cuda.cuh) with its first barrier optional: a
// second call writes `shared` while the first call's reads may be pending.
template <bool kFirstBarrier>
__device__ float block_sum(float v, float *shared) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = ops_warp_sum(v);
  if (kFirstBarrier) __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : 0.0f;
  return ops_warp_sum(v);
}

// kReal: the project's own ops_block_sum.
template <bool kFirstBarrier, bool kReal>
__global__ void sum_twice_kernel(float *out) {
  __shared__ float shared[32];
  float a = kReal ? ops_block_sum(1.0f, shared) : block_sum<kFirstBarrier>(1.0f, shared);
  float b = kReal ? ops_block_sum(a, shared) : block_sum<kFirstBarrier>(a, shared);
  out[threadIdx.x] = b;
}

// Every thread adds 1 atomically, then thread 1 reads the total.
template <bool kSync>
__global__ void atomic_kernel(float *out) {
  __shared__ float total;
  if (threadIdx.x == 0) total = 0.0f;
  __syncthreads();
  atomicAdd(&total, 1.0f);
  if (kSync) __syncthreads();
  if (threadIdx.x == 1) out[0] = total;
}

// Lane 0 writes, lane 1 reads after a shuffle: a shuffle exchanges
// registers, it does not order shared memory.
template <bool kSync>
__global__ void shuffle_kernel(float *out) {
  __shared__ float s[1];
  if (threadIdx.x == 0) s[0] = 1.0f;
  float v = __shfl_sync(0xffffffffu, (float)threadIdx.x, 0);
  if (kSync) __syncthreads();
  if (threadIdx.x == 1) out[0] = s[0] + v;
}

// No barrier at all, and no race: each thread reads and writes its own
// element, and the two blocks touch the same bytes from different threads
// (a new block starts clean).
__global__ void blocks_kernel(float *out) {
  __shared__ float s[kThreads];
  int t = blockIdx.x == 0 ? threadIdx.x : (threadIdx.x + 1) % kThreads;
  s[t] = (float)t;
  s[t] += 1.0f;
  out[blockIdx.x * kThreads + t] = s[t];
}

// One element past the end.
template <bool kDynamic>
__global__ void overflow_kernel(float *out) {
  SHARED_ARRAY(kDynamic);
  s[threadIdx.x] = 1.0f;
  if (threadIdx.x == 0) s[kThreads] = 2.0f;
  out[threadIdx.x] = s[threadIdx.x];
}

static float *g_out;  // (2 * kThreads) on the device

template <typename Launch>
static void run(Launch launch) {
  cudaMalloc(&g_out, 2 * kThreads * sizeof(float));
  launch();
}

struct Outcome {
  int status;       // exit status, or -1 when killed by a signal
  std::string err;  // what it wrote to stderr
  float out[2 * kThreads];
};

// Runs body (launches) in a child process, synchronises there, and returns
// its exit status, its stderr and what the kernels wrote to g_out.
template <typename Body>
static Outcome in_child(Body body) {
  Outcome o = {};
  int err_pipe[2], out_pipe[2];
  if (pipe(err_pipe) || pipe(out_pipe)) {
    printf("FAIL setup: pipe\n");
    exit(1);
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(err_pipe[1], 2);
    close(err_pipe[0]);
    close(out_pipe[0]);
    run(body);
    cudaDeviceSynchronize();
    float host[2 * kThreads];
    cudaMemcpy(host, g_out, sizeof host, cudaMemcpyDeviceToHost);
    ssize_t wrote = write(out_pipe[1], host, sizeof host);
    _exit(wrote == (ssize_t)sizeof host ? 0 : 1);
  }
  close(err_pipe[1]);
  close(out_pipe[1]);
  char buf[4096];
  for (ssize_t n; (n = read(err_pipe[0], buf, sizeof buf)) > 0;) o.err.append(buf, (size_t)n);
  size_t got = 0;
  for (ssize_t n;
       got < sizeof o.out && (n = read(out_pipe[0], (char *)o.out + got, sizeof o.out - got)) > 0;)
    got += (size_t)n;
  close(err_pipe[0]);
  close(out_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  o.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

static bool g_reverse;

static std::string first_line(const std::string &s) { return s.substr(0, s.find('\n')); }

// The kernel must stop the program with one line that holds each of
// `parts`, and "race (KIND)" with the kind of this order (forward, reverse).
template <typename Body>
static void expect_report(const char *name, Body body, const char *forward, const char *reverse,
                          std::initializer_list<const char *> parts) {
  Outcome o = in_child(body);
  const char *kind = g_reverse ? reverse : forward;
  std::string want = kind ? std::string("race (") + kind : "";  // "": any kind
  bool ok = o.status == 70 && o.err.find('\n') == o.err.size() - 1 &&
            o.err.find("emulated kernel") == 0 && o.err.find(want) != std::string::npos;
  for (const char *p : parts) ok &= o.err.find(p) != std::string::npos;
  check(ok, name, "exit status %d, stderr: %s", o.status, first_line(o.err).c_str());
}

// The kernel must run, and leave in g_out what `good` accepts.
template <typename Body, typename Good>
static void expect_clean(const char *name, Body body, Good good) {
  Outcome o = in_child(body);
  check(o.status == 0 && o.err.empty() && good(o.out), name,
        "exit status %d, out[0] %g, stderr: %s", o.status, o.out[0], first_line(o.err).c_str());
}

// Accepts out[0..n) all equal to value.
static auto all_equal(int n, float value) {
  return [n, value](const float *out) {
    for (int i = 0; i < n; i++)
      if (out[i] != value) return false;
    return true;
  };
}

#if defined(__SANITIZE_ADDRESS__)
// AddressSanitizer, not the race check, stops the out-of-bounds writes.
static void expect_asan(const char *name, void (*body)()) {
  Outcome o = in_child(body);
  check(o.status != 0 && o.err.find("AddressSanitizer") != std::string::npos, name,
        "exit status %d, stderr: %s", o.status, first_line(o.err).c_str());
}

int main() {
  expect_asan("overflow_static", [] { overflow_kernel<false><<<1, kThreads>>>(g_out); });
  expect_asan("overflow_dynamic",
              [] { overflow_kernel<true><<<1, kThreads, kDynamicBytes>>>(g_out); });
  printf("SKIP racecheck: EMU_ASAN=1 builds the .cu files without the race check\n");
  return g_failures ? 1 : 0;
}
#else
static const char *const kLine = "at test_emu_racecheck.cu:";  // an access's, from addr2line

// RAW, WAR and WAW on static or dynamic shared memory: reported without
// their barrier, clean with it, and out-of-bounds reported.
template <bool kDynamic>
static void each_kind() {
  size_t bytes = kDynamic ? kDynamicBytes : 0;
  std::string where = kDynamic ? "_dynamic" : "_static";
  const char *byte20 =
      kDynamic ? "byte 20 of the dynamic shared memory (256 bytes)" : "byte 20 of fixed (256 bytes";
  const char *byte256 = kDynamic ? "byte 256 of the dynamic shared memory (256 bytes)"
                                 : "byte 256 of fixed (256 bytes";
  expect_report(("raw" + where).c_str(),
                [bytes] { raw_kernel<false, kDynamic><<<1, kThreads, bytes>>>(g_out); }, "RAW",
                "WAR", {"raw_kernel", byte20, "thread (0, 0, 0) wrote", kLine});
  expect_report(("war" + where).c_str(),
                [bytes] { war_kernel<false, kDynamic><<<1, kThreads, bytes>>>(g_out); }, "WAR",
                "RAW", {"war_kernel", byte20, "thread (0, 0, 0) read", "thread (1, 0, 0) wrote"});
  expect_report(("waw" + where).c_str(),
                [bytes] { waw_kernel<false, kDynamic><<<1, kThreads, bytes>>>(g_out); }, "WAW",
                "WAW", {"waw_kernel", byte20, "thread (0, 0, 0) wrote", "thread (1, 0, 0) wrote"});
  expect_report(("overflow" + where).c_str(),
                [bytes] { overflow_kernel<kDynamic><<<1, kThreads, bytes>>>(g_out); }, nullptr,
                nullptr, {"out-of-bounds", "wrote 4 bytes at", byte256, kLine});
  expect_clean(("raw" + where + "_synced").c_str(),
               [bytes] { raw_kernel<true, kDynamic><<<1, kThreads, bytes>>>(g_out); },
               all_equal(kThreads, 1.0f));
  expect_clean(("war" + where + "_synced").c_str(),
               [bytes] { war_kernel<true, kDynamic><<<1, kThreads, bytes>>>(g_out); },
               all_equal(1, 1.0f));
  expect_clean(("waw" + where + "_synced").c_str(),
               [bytes] { waw_kernel<true, kDynamic><<<1, kThreads, bytes>>>(g_out); },
               all_equal(kThreads, 2.0f));
}

int main() {
  const char *reverse = getenv("EMU_REVERSE");
  g_reverse = reverse && atoi(reverse) == 1;
  each_kind<false>();
  each_kind<true>();
  // Either kind, by which of the two calls' accesses the scheduler runs first.
  expect_report("block_sum_twice_without_first_barrier",
                [] { sum_twice_kernel<false, false><<<1, kThreads>>>(g_out); }, "", "",
                {"sum_twice_kernel", "of shared (128 bytes", kLine});
  expect_clean(
      "block_sum_twice", [] { sum_twice_kernel<true, false><<<1, kThreads>>>(g_out); },
      all_equal(kThreads, (float)kThreads * kThreads));
  expect_clean(
      "ops_block_sum_twice", [] { sum_twice_kernel<true, true><<<1, kThreads>>>(g_out); },
      all_equal(kThreads, (float)kThreads * kThreads));
  expect_report("atomic_then_read", [] { atomic_kernel<false><<<1, kThreads>>>(g_out); }, "RAW",
                "RAW", {"of total (4 bytes", "atomically updated it", "thread (1, 0, 0) read"});
  expect_clean(
      "atomics_then_barrier", [] { atomic_kernel<true><<<1, kThreads>>>(g_out); },
      all_equal(1, (float)kThreads));
  expect_report("shuffle_is_no_barrier", [] { shuffle_kernel<false><<<1, 32>>>(g_out); }, "RAW",
                "RAW", {"thread (1, 0, 0) read it", "thread (0, 0, 0) wrote it"});
  expect_clean(
      "shuffle_then_barrier", [] { shuffle_kernel<true><<<1, 32>>>(g_out); }, all_equal(1, 1.0f));
  expect_clean(
      "own_bytes_and_new_blocks", [] { blocks_kernel<<<2, kThreads>>>(g_out); },
      [](const float *out) {
        for (int i = 0; i < 2 * kThreads; i++)
          if (out[i] != (float)(i % kThreads) + 1.0f) return false;
        return true;
      });
  return g_failures ? 1 : 0;
}
#endif
