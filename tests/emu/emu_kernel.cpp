// emu_kernel.cpp: kernel launches for the CUDA emulation (emu.h): blocks one
// after another, the threads of a block as fibers with block and warp
// barriers.
//
// The scheduler runs every ready fiber until it finishes or waits; when none
// is ready it releases a warp whose named lanes all wait at a shuffle, or
// else the block when every live thread waits at __syncthreads. Anything
// else is a deadlock on the GPU too (a barrier some threads never reach, a
// shuffle naming a lane that has exited), and stops the program with the
// kernel's name.
//
// EMU_REVERSE=1 runs the fibers of each pass in reverse order, so that a
// missing barrier between one thread's write and another's read shows up
// as a different result in one of the two orders.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <vector>

#include "emu.h"
#include "emu_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

namespace emu {

ThreadState *current;
uint3 block_idx;
dim3 block_dim, grid_dim;

namespace {

enum State { kReady, kWaitBlock, kWaitWarp, kDone };

struct Fiber {
  ThreadState state;
  ucontext_t context;
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
ucontext_t g_scheduler;
std::vector<unsigned char> g_dynamic_shared;
// Two slot buffers per thread: lanes may run one exchange ahead of slower
// lanes still reading the previous one, never two.
std::vector<uint64_t> g_slots[2];
#if EMU_ASAN
void *g_scheduler_fake_stack;
#endif

[[noreturn]] void kernel_die(const char *fmt, int a, int b) {
  fprintf(stderr, "emulated kernel %s, block (%u, %u, %u): ", g_kernel, block_idx.x, block_idx.y,
          block_idx.z);
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n");
  exit(70);
}

void fiber_entry() {
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  (*g_body)();
  g_running->run_state = kDone;
#if EMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, g_scheduler.uc_stack.ss_sp, g_scheduler.uc_stack.ss_size);
#endif
  // Returning resumes uc_link, the scheduler.
}

// From a fiber back to the scheduler.
void yield_to_scheduler() {
  Fiber *self = g_running;
#if EMU_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, nullptr, 0);
#endif
  swapcontext(&self->context, &g_scheduler);
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void resume(Fiber *f, size_t index) {
  g_running = f;
  current = &f->state;
#if EMU_ASAN
  __sanitizer_start_switch_fiber(&g_scheduler_fake_stack, g_stacks[index], kStackBytes);
#endif
  swapcontext(&g_scheduler, &f->context);
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
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = g_stacks[t];
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &g_scheduler;
    makecontext(&f.context, fiber_entry, 0);
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
    if (live == 0) return;
    if (release_warps(n)) continue;
    if (at_block == live) {
      for (int t = 0; t < n; t++)
        if (g_fibers[t].run_state == kWaitBlock) g_fibers[t].run_state = kReady;
      continue;
    }
    kernel_die("deadlock: %d live threads, %d of them at __syncthreads, the rest at a shuffle",
               live, at_block);
  }
}

}  // namespace

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

void *dynamic_shared() { return g_dynamic_shared.data(); }

void launch(const char *name, const std::function<void()> &body, dim3 grid, dim3 block,
            size_t shared_bytes, cudaStream_t stream) {
  (void)stream;  // every launch runs to completion before it returns
  uint64_t threads = (uint64_t)block.x * block.y * block.z;
  if (threads == 0 || threads > kMaxThreads || block.z > 64 || grid.x == 0 || grid.y == 0 ||
      grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
    set_error(cudaErrorInvalidConfiguration);
    return;
  }
  if (shared_bytes > 48 * 1024) {  // more needs cudaFuncSetAttribute first
    set_error(cudaErrorInvalidValue);
    return;
  }
  pthread_mutex_lock(&g_launch_lock);
  g_kernel = name;
  g_body = &body;
  int n = (int)threads;
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
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) {
        block_idx = uint3{x, y, z};
        // Fresh each block and never zero, as on the GPU: a read before a
        // write sees NaN bytes.
        g_dynamic_shared.assign(shared_bytes, 0xff);
        run_block(n, reverse);
      }
  current = nullptr;
  g_running = nullptr;
  pthread_mutex_unlock(&g_launch_lock);
}

}  // namespace emu
