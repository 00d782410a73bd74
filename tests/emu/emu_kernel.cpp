// emu_kernel.cpp: kernel launches for the CUDA emulation (emu.h), checked at
// the launch and queued on the device (emu_internal.h); when the queue runs
// one, its blocks go one after another, the threads of a block as fibers
// with block and warp barriers.
//
// The scheduler runs every ready fiber until it finishes or waits; when none
// is ready it releases a warp whose named lanes all wait at a shuffle, or
// else the block when every live thread waits at __syncthreads. Anything
// else is a deadlock on the GPU too (a barrier some threads never reach, a
// shuffle naming a lane that has exited), and stops the program with the
// kernel's name.
//
// On x86-64 a fiber switch is a dozen instructions (emu_switch below);
// elsewhere it is ucontext's swapcontext, which also makes a system call.
//
// EMU_REVERSE=1 runs the blocks, and the fibers of each pass, in reverse
// order, so that a missing barrier between one thread's write and another's
// read, or a block counting on another to have run first, shows up as a
// different result in one of the two orders.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <vector>

#include "emu.h"
#include "emu_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores the stack
// pointer in *save, and continues on the stack `load` (which another
// emu_switch saved, or fiber_stack_init prepared).
extern "C" void emu_switch(void **save, void *load);
asm(R"(
  .text
  .globl emu_switch
  .type emu_switch, @function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_switch, .-emu_switch
)");
#define EMU_FAST_SWITCH 1
#else
#define EMU_FAST_SWITCH 0
#endif

namespace emu {

ThreadState *current;
uint3 block_idx;
dim3 block_dim, grid_dim;

namespace {

enum State { kReady, kWaitBlock, kWaitWarp, kDone };

struct Fiber {
  ThreadState state;
#if EMU_FAST_SWITCH
  void *sp;  // saved stack pointer while switched out
#else
  ucontext_t context;
#endif
  State run_state;
  unsigned wait_mask;  // lanes named by the shuffle it waits at
  int lane, warp;
  unsigned exchanges;  // shuffles passed: picks the slot buffer
};

const size_t kStackBytes = (size_t)256 << 10;
const int kMaxThreads = 1024;

pthread_mutex_t g_launch_lock = PTHREAD_MUTEX_INITIALIZER;
const char *g_kernel;
const std::function<void()> *g_body;
std::vector<Fiber> g_fibers;
std::vector<char *> g_stacks;
Fiber *g_running;
#if EMU_FAST_SWITCH
void *g_scheduler_sp;
#else
ucontext_t g_scheduler;
#endif
// Two slot buffers per thread: lanes may run one exchange ahead of slower
// lanes still reading the previous one, never two.
std::vector<uint64_t> g_slots[2];
#if EMU_ASAN
void *g_scheduler_fake_stack;
const void *g_scheduler_stack_bottom;  // the launching thread's stack, for ASan
size_t g_scheduler_stack_size;
#endif

[[noreturn]] void kernel_die(const char *fmt, int a, int b) {
  char what[256];
  snprintf(what, sizeof what, fmt, a, b);
  kernel_fail(what);
}

// ASan is told of every switch: the stack it goes to, and on arrival the
// stack it came from (the scheduler's, which the fibers switch back to).
void fiber_body() {
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_scheduler_stack_bottom, &g_scheduler_stack_size);
#endif
  (*g_body)();
  g_running->run_state = kDone;
#if EMU_ASAN  // this fiber ends: no fake stack to keep
  __sanitizer_start_switch_fiber(nullptr, g_scheduler_stack_bottom, g_scheduler_stack_size);
#endif
}

#if EMU_FAST_SWITCH
[[noreturn]] void fiber_entry() {
  fiber_body();
  void *unused;
  emu_switch(&unused, g_scheduler_sp);
  __builtin_unreachable();
}

// A fresh stack whose first emu_switch "returns" into fiber_entry: six
// zero registers, then fiber_entry as the return address, placed so that
// fiber_entry starts with the stack aligned as a called function expects.
void fiber_stack_init(Fiber *f, char *stack) {
#if EMU_ASAN  // a fiber that ended never unwound: its frames are still marked
  __asan_unpoison_memory_region(stack, kStackBytes);
#endif
  uintptr_t top = ((uintptr_t)stack + kStackBytes) & ~(uintptr_t)15;
  void **frame = (void **)(top - 16);
  frame[0] = (void *)fiber_entry;
  for (int r = 1; r <= 6; r++) frame[-r] = nullptr;
  f->sp = frame - 6;
}

void switch_to(Fiber *f) { emu_switch(&g_scheduler_sp, f->sp); }
void switch_back(Fiber *self) { emu_switch(&self->sp, g_scheduler_sp); }
#else
void fiber_entry() { fiber_body(); }  // returning resumes uc_link, the scheduler

void fiber_stack_init(Fiber *f, char *stack) {
  getcontext(&f->context);
  f->context.uc_stack.ss_sp = stack;
  f->context.uc_stack.ss_size = kStackBytes;
  f->context.uc_link = &g_scheduler;
  makecontext(&f->context, fiber_entry, 0);
}

void switch_to(Fiber *f) { swapcontext(&g_scheduler, &f->context); }
void switch_back(Fiber *self) { swapcontext(&self->context, &g_scheduler); }
#endif

// From a fiber back to the scheduler.
void yield_to_scheduler() {
  Fiber *self = g_running;
#if EMU_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, g_scheduler_stack_bottom, g_scheduler_stack_size);
#endif
  switch_back(self);
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, &g_scheduler_stack_bottom, &g_scheduler_stack_size);
#endif
}

void resume(Fiber *f, size_t index) {
  g_running = f;
  current = &f->state;
  shared_set_thread((int)index);
#if EMU_ASAN
  __sanitizer_start_switch_fiber(&g_scheduler_fake_stack, g_stacks[index], kStackBytes);
#else
  (void)index;
#endif
  switch_to(f);
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(g_scheduler_fake_stack, nullptr, nullptr);
#endif
}

// Releases every warp whose waiting lanes' masks are all satisfied; true if
// any was.
bool release_warps(int n) {
  bool released = false;
  for (int first = 0; first < n; first += 32) {
    int last = first + 32 < n ? first + 32 : n;
    unsigned waiting = 0, mask = 0;
    for (int t = first; t < last; t++)
      if (g_fibers[t].run_state == kWaitWarp) {
        waiting |= 1u << (t - first);
        mask |= g_fibers[t].wait_mask;
      }
    if (!waiting) continue;
    unsigned present = last - first == 32 ? ~0u : (1u << (last - first)) - 1;
    for (int t = first; t < last; t++) {
      unsigned bit = 1u << (t - first);
      if ((mask & bit) && g_fibers[t].run_state == kDone)
        kernel_die("a shuffle names lane %d of warp %d, which has exited", t - first, first / 32);
    }
    if ((mask & present & ~waiting) != 0) continue;  // a named lane is yet to arrive
    for (int t = first; t < last; t++)
      if (waiting & (1u << (t - first))) g_fibers[t].run_state = kReady;
    released = true;
  }
  return released;
}

void run_block(int n, bool reverse) {
  for (int t = 0; t < n; t++) {
    Fiber &f = g_fibers[t];
    int linear = t;
    f.state.thread_idx.x = (unsigned)(linear % (int)block_dim.x);
    linear /= (int)block_dim.x;
    f.state.thread_idx.y = (unsigned)(linear % (int)block_dim.y);
    f.state.thread_idx.z = (unsigned)(linear / (int)block_dim.y);
    f.run_state = kReady;
    f.wait_mask = 0;
    f.lane = t % 32;
    f.warp = t / 32;
    f.exchanges = 0;
    fiber_stack_init(&f, g_stacks[t]);
  }
  for (;;) {
    for (int i = 0; i < n; i++) {
      int t = reverse ? n - 1 - i : i;
      if (g_fibers[t].run_state == kReady) resume(&g_fibers[t], (size_t)t);
    }
    int live = 0, at_block = 0;
    for (int t = 0; t < n; t++) {
      live += g_fibers[t].run_state != kDone;
      at_block += g_fibers[t].run_state == kWaitBlock;
    }
    if (live == 0) {
      shared_set_thread(-1);
      return;
    }
    if (release_warps(n)) continue;
    if (at_block == live) {
      shared_barrier();
      for (int t = 0; t < n; t++)
        if (g_fibers[t].run_state == kWaitBlock) g_fibers[t].run_state = kReady;
      continue;
    }
    kernel_die("deadlock: %d live threads, %d of them at __syncthreads, the rest at a shuffle",
               live, at_block);
  }
}

}  // namespace

void kernel_fail(const char *what) {
  fprintf(stderr, "emulated kernel %s, block (%u, %u, %u): %s\n", g_kernel, block_idx.x,
          block_idx.y, block_idx.z, what);
  exit(70);
}

int lane_id() { return g_running->lane; }

void sync_block() {
  g_running->run_state = kWaitBlock;
  yield_to_scheduler();
}

uint64_t warp_exchange(unsigned mask, uint64_t mine, int src_lane) {
  Fiber *self = g_running;
  if (!(mask & (1u << self->lane)))
    kernel_die("lane %d of warp %d shuffles with a mask that leaves it out", self->lane, self->warp);
  std::vector<uint64_t> &slots = g_slots[self->exchanges & 1];
  size_t me = (size_t)(self - g_fibers.data());
  slots[me] = mine;
  self->wait_mask = mask;
  self->run_state = kWaitWarp;
  yield_to_scheduler();
  self->exchanges++;
  size_t src = (size_t)self->warp * 32 + (size_t)src_lane;
  int n = (int)(block_dim.x * block_dim.y * block_dim.z);
  if (src_lane < 0 || src_lane >= 32 || src >= (size_t)n || !(mask & (1u << src_lane)))
    return mine;  // as the GPU: an absent source lane yields the caller's value
  return slots[src];
}

namespace {

// Runs one launch to completion (from the device queue).
void run_launch(const char *name, const std::function<void()> &body, dim3 grid, dim3 block,
                size_t shared_bytes) {
  int n = (int)(block.x * block.y * block.z);
  pthread_mutex_lock(&g_launch_lock);
  g_kernel = name;
  g_body = &body;
  if ((int)g_fibers.size() < n) g_fibers.resize((size_t)n);
  while ((int)g_stacks.size() < n) {
    void *s = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (s == MAP_FAILED) {
      perror("emu: mmap of a fiber stack");
      exit(70);
    }
    g_stacks.push_back((char *)s);
  }
  for (auto &slots : g_slots) slots.assign((size_t)n, 0);
  const char *rev = getenv("EMU_REVERSE");
  bool reverse = rev && rev[0] == '1';
  block_dim = block;
  grid_dim = grid;
  uint64_t blocks = (uint64_t)grid.x * grid.y * grid.z;
  for (uint64_t i = 0; i < blocks; i++) {
    uint64_t b = reverse ? blocks - 1 - i : i;
    block_idx = uint3{(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y),
                      (unsigned)(b / grid.x / grid.y)};
    shared_block_begin(shared_bytes);
    run_block(n, reverse);
  }
  current = nullptr;
  g_running = nullptr;
  pthread_mutex_unlock(&g_launch_lock);
}

}  // namespace

void launch(const char *name, const std::function<void()> &body, dim3 grid, dim3 block,
            size_t shared_bytes, cudaStream_t stream) {
  uint64_t threads = (uint64_t)block.x * block.y * block.z;
  if (threads == 0 || threads > kMaxThreads || block.z > 64 || grid.x == 0 || grid.y == 0 ||
      grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
    set_error(cudaErrorInvalidConfiguration);
    return;
  }
  if (shared_bytes > kDynamicSharedMaxBytes) {
    set_error(cudaErrorInvalidValue);
    return;
  }
  // Queued with its arguments as they are now, as a launch captures them.
  cudaError_t queued = enqueue(stream, [name, body, grid, block, shared_bytes]() {
    run_launch(name, body, grid, block, shared_bytes);
  });
  if (queued != cudaSuccess) set_error(queued);
}

}  // namespace emu
