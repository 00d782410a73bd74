// emu_shared.cpp: shared memory for the CUDA emulation, and the race check
// on it (tests/emu/README.md), in the manner of compute-sanitizer's
// racecheck.
//
// One arena holds a guard, the running block's dynamic shared memory, and
// then every static __shared__ variable (emucc.py's rewrite places each
// the first time its declaration runs, with a redzone after it). So "is
// this shared memory?" is one subtraction and compare.
//
// emucc.py compiles the .cu files with GCC's ThreadSanitizer
// instrumentation, but libtsan is not linked: the __tsan_* hooks every
// load and store of those files calls are defined here. For any address
// outside the arena a hook returns at once. Inside it, a shadow entry per
// byte records who accessed the byte since the block's latest barrier: its
// writer, and up to two different readers and two different atomic
// updaters. A second thread's write (or atomic) after a read or write, or
// a read after another thread's write, in the same barrier interval is a
// race: the program stops, naming the kernel, the block, the variable and
// byte, the two threads and the lines of both accesses. A barrier or a new
// block starts a new interval by bumping an epoch, not by clearing the
// shadow.
//
// The arena's bytes outside any variable (the guard, the dynamic part past
// what the launch asked for, the redzones) are checked too: an access
// there stops the program as out of bounds. Under EMU_ASAN=1 (no
// instrumentation) they are poisoned for AddressSanitizer instead.
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "emu.h"
#include "emu_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define EMU_POISON(p, n) __asan_poison_memory_region(p, n)
#define EMU_UNPOISON(p, n) __asan_unpoison_memory_region(p, n)
#else
#define EMU_POISON(p, n) (void)0
#define EMU_UNPOISON(p, n) (void)0
#endif

namespace emu {
namespace {

const size_t kGuardBytes = 64;  // before the dynamic part: catches a negative index
const size_t kStaticAt = kGuardBytes + kDynamicSharedMaxBytes;
// Every instantiation of every kernel keeps its static variables for the
// program's life: the fused attention kernels alone take ~250 KiB over their
// two dtypes and three head sizes. The shadows are untouched (zero) pages
// until used.
const size_t kArenaBytes = (size_t)1 << 20;
const size_t kRedzoneBytes = 32;

alignas(64) unsigned char g_arena[kArenaBytes];

struct Variable {
  size_t at, bytes;
  const char *name, *func, *file;
  int line;
};
std::vector<Variable> g_variables;  // in arena order
size_t g_static_end = kStaticAt;
bool g_placed[kArenaBytes];  // a byte of a static variable
size_t g_dynamic_bytes;      // what the running launch asked for

enum Kind { kRead, kWrite, kAtomic };

// Who accessed a byte in the current interval: its writer (a second one is
// a race), and the first two different threads that read it and that
// updated it atomically. Each slot holds a linear thread index + 1 (0: none).
// 16 bytes, with the return addresses into the instrumented code apart in
// g_lines, which only a new slot writes and only a report reads: the check
// touches little memory.
enum Slot { kWriter = 0, kReaders = 1, kAtomics = 3, kSlots = 5 };
struct Shadow {
  uint32_t epoch;  // the interval of the slots; an older one: all empty
  uint16_t thread[kSlots];
};
Shadow g_shadow[kArenaBytes];
const void *g_lines[kArenaBytes][kSlots];
uint32_t g_epoch = 1;
int g_thread = -1;  // the running thread's linear index; -1 between blocks

// A new barrier interval: every shadow entry is now of an older one.
void next_epoch() {
  if (++g_epoch == 0) {  // wrapped: entries of the old epoch 1 would look current
    memset(g_shadow, 0, sizeof g_shadow);
    g_epoch = 1;
  }
}

bool in_arena(const void *p) { return (uintptr_t)p - (uintptr_t)g_arena < kArenaBytes; }

std::string thread_name(int linear) {
  int x = (int)block_dim.x, y = (int)block_dim.y;
  char s[64];
  snprintf(s, sizeof s, "thread (%d, %d, %d)", linear % x, linear / x % y, linear / x / y);
  return s;
}

// "file:line" of a return address into instrumented code, from addr2line
// (the .cu files are built with -g); the address itself if that fails.
std::string source_line(const void *pc) {
  char s[512];
  snprintf(s, sizeof s, "pc %p", pc);
  Dl_info info;
  if (!pc || !dladdr(pc, &info) || !info.dli_fbase) return s;
  // A position-independent file's line table is by offset from its base.
  uintptr_t at = (uintptr_t)pc - 1;
  if (((const ElfW(Ehdr) *)info.dli_fbase)->e_type == ET_DYN) at -= (uintptr_t)info.dli_fbase;
  char exe[64], cmd[1024];
  snprintf(exe, sizeof exe, "/proc/%d/exe", (int)getpid());  // the program's, not addr2line's
  const char *file = info.dli_fname && info.dli_fname[0] == '/' ? info.dli_fname : exe;
  snprintf(cmd, sizeof cmd, "addr2line -s -e '%s' 0x%lx 2>/dev/null", file, (unsigned long)at);
  FILE *p = popen(cmd, "r");
  if (!p) return s;
  char line[512] = "";
  bool got = fgets(line, sizeof line, p) && line[0] != '?';
  pclose(p);
  if (got) {
    line[strcspn(line, " \n")] = 0;  // drops " (discriminator N)"
    snprintf(s, sizeof s, "%s", line);
  }
  return s;
}

// What the arena byte `at` is, for a report.
std::string describe(size_t at) {
  char s[512];
  if (at < kGuardBytes) {
    snprintf(s, sizeof s, "%zu bytes before the dynamic shared memory", kGuardBytes - at);
  } else if (at < kStaticAt) {
    snprintf(s, sizeof s, "byte %zu of the dynamic shared memory (%zu bytes)", at - kGuardBytes,
             g_dynamic_bytes);
  } else {
    const Variable *v = nullptr;
    for (const Variable &each : g_variables)
      if (each.at <= at) v = &each;
    if (!v) return "unplaced static shared memory";
    snprintf(s, sizeof s, "byte %zu of %s (%zu bytes, __shared__ in %s, %s:%d)", at - v->at,
             v->name, v->bytes, v->func, v->file, v->line);
  }
  return s;
}

const char *verb(Kind k) {
  return k == kRead ? "read" : k == kWrite ? "wrote" : "atomically updated";
}

// The access `now` at pc races with the one in `slot` of byte `at`.
[[noreturn]] void report_race(size_t at, int slot, Kind now, const void *pc) {
  Kind before = slot == kWriter ? kWrite : slot < kAtomics ? kRead : kAtomic;
  const char *kind = before == kRead ? "WAR" : now == kRead ? "RAW" : "WAW";
  std::string what = std::string("shared-memory race (") + kind + ") on " + describe(at) + ": " +
                     thread_name(g_thread) + " " + verb(now) + " it at " + source_line(pc) +
                     " after " + thread_name(g_shadow[at].thread[slot] - 1) + " " + verb(before) +
                     " it at " + source_line(g_lines[at][slot]) + ", with no __syncthreads between";
  kernel_fail(what.c_str());
}

[[noreturn]] void report_out_of_bounds(size_t at, size_t bytes, Kind now, const void *pc) {
  char n[32];
  snprintf(n, sizeof n, "%zu", bytes);
  std::string what = std::string("out-of-bounds shared-memory access: ") + thread_name(g_thread) +
                     " " + verb(now) + " " + n + " bytes at " + describe(at) + ", at " +
                     source_line(pc);
  kernel_fail(what.c_str());
}

// The slot of the `count` from `first` that holds another thread than me,
// if any (-1).
int other(const Shadow &s, int first, int count, uint16_t me) {
  for (int i = first; i < first + count; i++)
    if (s.thread[i] && s.thread[i] != me) return i;
  return -1;
}

// Me into the first of `count` slots from `first` that is empty, unless one
// holds me already.
void record(size_t at, int first, int count, uint16_t me, const void *pc) {
  Shadow &s = g_shadow[at];
  for (int i = first; i < first + count; i++) {
    if (s.thread[i] == me) return;
    if (!s.thread[i]) {
      s.thread[i] = me;
      g_lines[at][i] = pc;
      return;
    }
  }
}

void check_byte(size_t at, Kind now, const void *pc) {
  Shadow &s = g_shadow[at];
  uint16_t me = (uint16_t)(g_thread + 1);
  int first = now == kRead ? kReaders : now == kWrite ? kWriter : kAtomics;
  // The common cases first: the byte's first access in the interval, and
  // one by its writer or by a thread that made the same kind of access
  // before (no other thread could have written it since without a report).
  if (s.epoch != g_epoch) {
    s = Shadow{g_epoch, {}};
    s.thread[first] = me;
    g_lines[at][first] = pc;
    return;
  }
  if (s.thread[kWriter] == me ||
      (now != kWrite && (s.thread[first] == me || s.thread[first + 1] == me)))
    return;
  int slot = other(s, kWriter, 1, me);
  if (slot < 0 && now != kAtomic) slot = other(s, kAtomics, 2, me);
  if (slot < 0 && now != kRead) slot = other(s, kReaders, 2, me);
  if (slot >= 0) report_race(at, slot, now, pc);
  record(at, first, now == kWrite ? 1 : 2, me, pc);
}

bool addressable(size_t at) {
  if (at < kGuardBytes) return false;
  if (at < kStaticAt) return at - kGuardBytes < g_dynamic_bytes;
  return g_placed[at];
}

// An access of `bytes` at p, which may overlap the arena.
void check(const void *p, size_t bytes, Kind now, const void *pc) {
  if (g_thread < 0) return;  // host code
  uintptr_t lo = (uintptr_t)p, hi = lo + bytes, base = (uintptr_t)g_arena;
  lo = lo > base ? lo : base;
  hi = hi < base + kArenaBytes ? hi : base + kArenaBytes;
  for (uintptr_t byte = lo; byte < hi; byte++) {
    size_t at = byte - base;
    if (!addressable(at)) report_out_of_bounds(at, bytes, now, pc);
    check_byte(at, now, pc);
  }
}

}  // namespace

void *dynamic_shared() { return g_arena + kGuardBytes; }

void *shared_static_place(size_t bytes, size_t align, const char *name, const char *func,
                          const char *file, int line) {
  if (align < 16) align = 16;
  size_t at = (g_static_end + kRedzoneBytes + align - 1) / align * align;
  if (at + bytes > kArenaBytes) {
    fprintf(stderr, "emu: static __shared__ %s (%s, %s:%d) overflows the %zu KiB arena\n", name,
            func, file, line, kArenaBytes >> 10);
    exit(70);
  }
  g_variables.push_back({at, bytes, name, func, file, line});
  memset(g_placed + at, 1, bytes);
  g_static_end = at + bytes;
  EMU_UNPOISON(g_arena + at, bytes);
  EMU_POISON(g_arena + g_static_end, kArenaBytes - g_static_end);
  return g_arena + at;
}

void shared_block_begin(size_t dynamic_bytes) {
  next_epoch();
  g_dynamic_bytes = dynamic_bytes;
  unsigned char *dynamic = g_arena + kGuardBytes;
  EMU_POISON(g_arena, kGuardBytes);
  EMU_UNPOISON(dynamic, dynamic_bytes);
  EMU_POISON(dynamic + dynamic_bytes, kDynamicSharedMaxBytes - dynamic_bytes);
  // Fresh each block and never zero, as on the GPU: a read before a write
  // sees NaN bytes.
  memset(dynamic, 0xff, dynamic_bytes);
}

void shared_barrier() { next_epoch(); }

void shared_set_thread(int linear) { g_thread = linear; }

void shared_atomic(const void *p, size_t bytes, const void *pc) {
  if (in_arena(p)) check(p, bytes, kAtomic, pc);
}

}  // namespace emu

// The hooks of -fsanitize=thread. Everything else (function entry and
// exit, other atomics, vptr) the instrumentation of the project's .cu files
// does not call: a link error names what a new one needs.
#define EMU_HOOK(name, bytes, kind)                                                     \
  extern "C" void name(void *p) {                                                       \
    if (emu::in_arena(p)) emu::check(p, bytes, emu::kind, __builtin_return_address(0)); \
  }
#define EMU_HOOKS(bytes)                               \
  EMU_HOOK(__tsan_read##bytes, bytes, kRead)           \
  EMU_HOOK(__tsan_write##bytes, bytes, kWrite)         \
  EMU_HOOK(__tsan_unaligned_read##bytes, bytes, kRead) \
  EMU_HOOK(__tsan_unaligned_write##bytes, bytes, kWrite)
EMU_HOOKS(1)
EMU_HOOKS(2)
EMU_HOOKS(4)
EMU_HOOKS(8)
EMU_HOOKS(16)

extern "C" void __tsan_read_range(void *p, unsigned long bytes) {
  emu::check(p, bytes, emu::kRead, __builtin_return_address(0));
}
extern "C" void __tsan_write_range(void *p, unsigned long bytes) {
  emu::check(p, bytes, emu::kWrite, __builtin_return_address(0));
}
extern "C" void __tsan_init() {}
// The guard of a function static's initialisation (emucc.py's rewrite of
// __shared__ makes one per variable): never in shared memory.
extern "C" uint8_t __tsan_atomic8_load(const volatile uint8_t *p, int) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
