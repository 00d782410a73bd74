// emu.h: the CPU emulation of CUDA C++ that `make EMU=1` compiles the
// project's .cu files against (tests/emu/README.md). emucc.py force-includes
// it and rewrites each launch `k<<<grid, block, shared, stream>>>(args)` into
// emu::launch, with the arguments evaluated at the launch into a tuple and the
// kernel queued to run later (emu_internal.h); everything else in a .cu file
// compiles as ordinary C++.
//
// A kernel runs one block at a time; each thread of the block is a fiber
// (its own stack) that runs until it finishes or waits at __syncthreads or a
// warp shuffle, so block barriers and warp exchanges behave as on the GPU,
// and a barrier not every thread reaches is reported, not hung on.
// emucc.py rewrites __shared__ variables into places in one shared-memory
// arena (emu_shared.cpp): one copy each, which is right because only one
// block runs at a time, and one address range, which the race check tells
// shared memory by.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
// Any __shared__ left is one emucc.py did not see (a header outside the
// .cu's folder): it would escape the race check.
#define __shared__ \
  static_assert(false, "emucc.py rewrites the __shared__ of a .cu and its folder's .cuh only");
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)

namespace emu {

// The calling thread's indices; set by the scheduler before each switch.
struct ThreadState {
  uint3 thread_idx;
};
extern ThreadState *current;
extern uint3 block_idx;
extern dim3 block_dim, grid_dim;

// Runs body once per thread of every block (blocks in order, x fastest).
// name is the kernel's name for messages. Dies with a message on a bad
// configuration (as cudaGetLastError would report) or a barrier deadlock.
void launch(const char *name, const std::function<void()> &body, dim3 grid, dim3 block,
            size_t shared_bytes = 0, cudaStream_t stream = 0);

// The block's dynamic shared memory (`extern __shared__ T name[]`).
void *dynamic_shared();

// A static __shared__ variable: emucc.py rewrites `__shared__ T x[N];` into
// `static auto &x = emu::shared_static<T[N]>("x");`. The place is taken the
// first time the declaration runs; where it was declared names it in
// reports.
void *shared_static_place(size_t bytes, size_t align, const char *name, const char *func,
                          const char *file, int line);
template <typename T>
T &shared_static(const char *name, const char *func = __builtin_FUNCTION(),
                 const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
  return *static_cast<T *>(shared_static_place(sizeof(T), alignof(T), name, func, file, line));
}

// An atomic read-modify-write, for the race check: several threads' atomics
// on one location are no race; an atomic and another thread's plain access
// without a barrier between are.
void shared_atomic(const void *p, size_t bytes, const void *pc);

// __syncthreads: waits for every thread of the block that has not exited.
void sync_block();

// Warp exchange behind the shuffles: publishes this lane's 8 bytes, waits
// for every lane named in mask, and returns the bytes src_lane published
// (its own when src_lane is outside [0, 32) or not a lane of the block).
uint64_t warp_exchange(unsigned mask, uint64_t mine, int src_lane);

int lane_id();

template <typename T>
T shuffle(unsigned mask, T v, int src_lane) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle: 8 bytes at most");
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  uint64_t got = warp_exchange(mask, bits, src_lane);
  T out;
  memcpy(&out, &got, sizeof(T));
  return out;
}

}  // namespace emu

#define threadIdx (emu::current->thread_idx)
#define blockIdx (emu::block_idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)
#ifndef warpSize
#define warpSize 32
#endif

inline void __syncthreads() { emu::sync_block(); }

// Shuffles within segments of `width` lanes, as the CUDA intrinsics.
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  int lane = emu::lane_id(), src = lane ^ lane_mask;
  if (src / width != lane / width) src = lane;
  return emu::shuffle(mask, v, src);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  int lane = emu::lane_id(), src = lane + (int)delta;
  if (src / width != lane / width) src = lane;
  return emu::shuffle(mask, v, src);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  int lane = emu::lane_id(), src = lane - (int)delta;
  if (src < 0 || src / width != lane / width) src = lane;
  return emu::shuffle(mask, v, src);
}
template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  int lane = emu::lane_id();
  return emu::shuffle(mask, v, lane / width * width + src_lane % width);
}

// Atomics: only one fiber runs at a time, so a plain read-modify-write is
// atomic. Under the race check they are not instrumented as plain accesses
// but reported as atomics, from a call (not inlined) whose return address
// is the caller's line.
#if defined(__SANITIZE_THREAD__)
#define EMU_ATOMIC __attribute__((no_sanitize_thread, noinline))
#define EMU_ATOMIC_ACCESS(p) emu::shared_atomic(p, sizeof *(p), __builtin_return_address(0))
#else
#define EMU_ATOMIC inline
#define EMU_ATOMIC_ACCESS(p) (void)0
#endif
template <typename T>
EMU_ATOMIC T atomicAdd(T *address, T v) {
  EMU_ATOMIC_ACCESS(address);
  T old = *address;
  *address = old + v;
  return old;
}
template <typename T>
EMU_ATOMIC T atomicMax(T *address, T v) {
  EMU_ATOMIC_ACCESS(address);
  T old = *address;
  if (v > old) *address = v;
  return old;
}
template <typename T>
EMU_ATOMIC T atomicMin(T *address, T v) {
  EMU_ATOMIC_ACCESS(address);
  T old = *address;
  if (v < old) *address = v;
  return old;
}
template <typename T>
EMU_ATOMIC T atomicCAS(T *address, T compare, T v) {
  EMU_ATOMIC_ACCESS(address);
  T old = *address;
  if (old == compare) *address = v;
  return old;
}
template <typename T>
EMU_ATOMIC T atomicExch(T *address, T v) {
  EMU_ATOMIC_ACCESS(address);
  T old = *address;
  *address = v;
  return old;
}

namespace emu {
// The bits of v read as a To (the reinterpreting intrinsics below).
template <typename To, typename From>
inline To bit_cast(From v) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast: sizes differ");
  To out;
  memcpy(&out, &v, sizeof out);
  return out;
}
}  // namespace emu

inline float __uint_as_float(unsigned u) { return emu::bit_cast<float>(u); }
inline unsigned __float_as_uint(float f) { return emu::bit_cast<unsigned>(f); }
inline float __int_as_float(int i) { return emu::bit_cast<float>(i); }
inline int __float_as_int(float f) { return emu::bit_cast<int>(f); }
// Built with -ffp-contract=off, so these round after each operation as the
// _rn intrinsics promise.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
inline float __expf(float a) { return expf(a); }
inline float __logf(float a) { return logf(a); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float a) { return a < 0 ? 0 : a > 1 ? 1 : a; }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz((unsigned)v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
template <typename T>
inline T __ldg(const T *p) {
  return *p;
}

// CUDA's integer and float min/max overloads, mixed types promoted as in C.
template <typename A, typename B>
inline auto min(A a, B b) -> decltype(a + b) {
  return b < a ? b : a;
}
template <typename A, typename B>
inline auto max(A a, B b) -> decltype(a + b) {
  return a < b ? b : a;
}
