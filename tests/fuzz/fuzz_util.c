// fuzz_util.c: the error hook, the ledger of what a parser holds when it
// stops, and the scratch folder (fuzz_util.h).
#include "fuzz_util.h"

#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/check.h"
#include "core/json.h"
#include "object_detection/coco_json.h"

// ---------------------------------------------------------------- the ledger
// The harnesses are linked with -Wl,--wrap=NAME for each function below
// (fuzz.mk): a call to malloc from the suite's code (and the harness's)
// reaches __wrap_malloc, which calls the real one, __real_malloc, and notes
// the block while a FUZZ_RELEASE_LEFTOVERS call runs on this thread. Calls
// made inside the shared C, JPEG, PNG and LMDB libraries are not wrapped;
// the suite hands what those give it back through their own functions.

void *__real_malloc(size_t bytes);
void *__real_calloc(size_t count, size_t size);
void *__real_realloc(void *ptr, size_t bytes);
void __real_free(void *ptr);
char *__real_strdup(const char *s);
int __real_posix_memalign(void **ptr, size_t alignment, size_t bytes);
ssize_t __real_getline(char **line, size_t *capacity, FILE *f);
ssize_t __real___getdelim(char **line, size_t *capacity, int delimiter, FILE *f);
FILE *__real_fopen(const char *path, const char *mode);
int __real_fclose(FILE *f);
int __real_open(const char *path, int flags, ...);
int __real_close(int fd);
void *__real_mmap(void *addr, size_t bytes, int prot, int flags, int fd, off_t offset);
int __real_munmap(void *addr, size_t bytes);

typedef enum { HELD_MEMORY, HELD_FILE, HELD_FD, HELD_MAP } HeldKind;

typedef struct Held {
  HeldKind kind;
  void *ptr;     // memory, FILE or mapping
  int fd;
  size_t bytes;  // of a mapping
} Held;

static _Thread_local bool t_tracking;
static _Thread_local Held *t_held;
static _Thread_local size_t t_held_count, t_held_capacity;

static void hold(Held h) {
  if (t_held_count == t_held_capacity) {
    size_t capacity = t_held_capacity ? 2 * t_held_capacity : 256;
    Held *grown = __real_realloc(t_held, capacity * sizeof *grown);
    if (!grown) abort();
    t_held = grown;
    t_held_capacity = capacity;
  }
  t_held[t_held_count++] = h;
}

// Forgets the entry of kind holding ptr (or fd); false when there is none.
static bool let_go(HeldKind kind, const void *ptr, int fd) {
  for (size_t i = t_held_count; i-- > 0;) {
    if (t_held[i].kind == kind && t_held[i].ptr == ptr && t_held[i].fd == fd) {
      t_held[i] = t_held[--t_held_count];
      return true;
    }
  }
  return false;
}

static void release_held(void) {
  for (size_t i = t_held_count; i-- > 0;) {
    Held *h = &t_held[i];
    switch (h->kind) {
      case HELD_MEMORY: __real_free(h->ptr); break;
      case HELD_FILE: __real_fclose(h->ptr); break;
      case HELD_FD: __real_close(h->fd); break;
      case HELD_MAP: __real_munmap(h->ptr, h->bytes); break;
    }
  }
  t_held_count = 0;
}

static void *held_memory(void *p) {
  if (p && t_tracking) hold((Held){HELD_MEMORY, p, -1, 0});
  return p;
}

void *__wrap_malloc(size_t bytes) { return held_memory(__real_malloc(bytes)); }
void *__wrap_calloc(size_t count, size_t size) { return held_memory(__real_calloc(count, size)); }
char *__wrap_strdup(const char *s) { return held_memory(__real_strdup(s)); }

int __wrap_posix_memalign(void **ptr, size_t alignment, size_t bytes) {
  int rc = __real_posix_memalign(ptr, alignment, bytes);
  if (rc == 0) held_memory(*ptr);
  return rc;
}

// A block from before the call stays its owner's, wherever it moves.
void *__wrap_realloc(void *ptr, size_t bytes) {
  bool ours = t_tracking && (!ptr || let_go(HELD_MEMORY, ptr, -1));
  void *p = __real_realloc(ptr, bytes);
  // NULL: failed (ptr still held) or, for 0 bytes, freed.
  if (ours) held_memory(p ? p : bytes ? ptr : NULL);
  return p;
}

// getline grows its buffer inside the C library, as realloc does. With
// optimisation glibc's stdio.h makes each getline call one to __getdelim.
ssize_t __wrap___getdelim(char **line, size_t *capacity, int delimiter, FILE *f) {
  bool ours = t_tracking && (!*line || let_go(HELD_MEMORY, *line, -1));
  ssize_t n = __real___getdelim(line, capacity, delimiter, f);
  if (ours) held_memory(*line);
  return n;
}

ssize_t __wrap_getline(char **line, size_t *capacity, FILE *f) {
  return __wrap___getdelim(line, capacity, '\n', f);
}

void __wrap_free(void *ptr) {
  if (t_tracking && ptr) let_go(HELD_MEMORY, ptr, -1);
  __real_free(ptr);
}

FILE *__wrap_fopen(const char *path, const char *mode) {
  FILE *f = __real_fopen(path, mode);
  if (f && t_tracking) hold((Held){HELD_FILE, f, -1, 0});
  return f;
}

int __wrap_fclose(FILE *f) {
  if (t_tracking) let_go(HELD_FILE, f, -1);
  return __real_fclose(f);
}

int __wrap_open(const char *path, int flags, ...) {
  mode_t mode = 0;
  if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  int fd = __real_open(path, flags, mode);
  if (fd >= 0 && t_tracking) hold((Held){HELD_FD, NULL, fd, 0});
  return fd;
}

int __wrap_close(int fd) {
  if (t_tracking) let_go(HELD_FD, NULL, fd);
  return __real_close(fd);
}

void *__wrap_mmap(void *addr, size_t bytes, int prot, int flags, int fd, off_t offset) {
  void *p = __real_mmap(addr, bytes, prot, flags, fd, offset);
  if (p != MAP_FAILED && t_tracking) hold((Held){HELD_MAP, p, -1, bytes});
  return p;
}

int __wrap_munmap(void *addr, size_t bytes) {
  if (t_tracking) let_go(HELD_MAP, addr, -1);
  return __real_munmap(addr, bytes);
}

// ---------------------------------------------------------------- fuzz_call
static _Thread_local char t_last_error[2048];

// What the calls of this process ended in: returned, status 1, status 2.
static long g_outcomes[3];

static void print_outcomes(void) {
  fprintf(stderr, "fuzz: parser calls: %ld returned, %ld failed checks, %ld bad input\n",
          g_outcomes[0], g_outcomes[1], g_outcomes[2]);
}

static void on_fatal(void *ctx, int status, const char *message) {
  if (status != 1 && status != 2) {
    fprintf(stderr, "fuzz: internal error (status %d, a broken invariant) on this input:\n%s\n",
            status, message);
    abort();
  }
  snprintf(t_last_error, sizeof t_last_error, "%s", message);
  if (getenv("FUZZ_SHOW_ERRORS")) fprintf(stderr, "fuzz: refused (status %d): %s\n", status, message);
  longjmp(*(jmp_buf *)ctx, status);
}

int fuzz_call(void (*body)(void *ctx), void *ctx, FuzzLeftovers leftovers) {
  static bool summary_registered;
  if (!summary_registered) {
    summary_registered = true;
    atexit(print_outcomes);
    // cJSON allocates inside the shared library, where malloc is not
    // wrapped: its hooks send a parsed tree through the ledger, so that a
    // parser stopping before cJSON_Delete does not leak the tree.
    cJSON_InitHooks(&(cJSON_Hooks){__wrap_malloc, __wrap_free});
  }
  jmp_buf env;
  bool release = leftovers == FUZZ_RELEASE_LEFTOVERS;
  t_held_count = 0;
  check_set_error_hook(on_fatal, &env);
  t_tracking = release;
  int status = setjmp(env);
  if (status == 0) body(ctx);
  t_tracking = false;
  check_set_error_hook(NULL, NULL);
  if (status != 0 && release) release_held();
  t_held_count = 0;  // on success the outputs are the caller's
  g_outcomes[status]++;
  return status;
}

const char *fuzz_last_error(void) { return t_last_error; }

void fuzz_fail(const char *fmt, ...) {
  fprintf(stderr, "fuzz: oracle failed: ");
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  abort();
}

// ---------------------------------------------------------------- scratch files
static char g_temp_dir[512];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag;
  if (ftw->level > 0) remove(path);
  return 0;
}

void fuzz_temp_clear(void) {
  if (g_temp_dir[0]) nftw(g_temp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void remove_temp_dir(void) {
  fuzz_temp_clear();
  rmdir(g_temp_dir);
}

static const char *temp_dir(void) {
  if (g_temp_dir[0]) return g_temp_dir;
  const char *base = getenv("FUZZ_TMPDIR");
  if (!base || !*base) base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(g_temp_dir, sizeof g_temp_dir, "%s/mlsuite-fuzz-XXXXXX", base);
  if (!mkdtemp(g_temp_dir)) {
    perror(g_temp_dir);
    abort();
  }
  atexit(remove_temp_dir);
  return g_temp_dir;
}

// The paths handed out, one per name, so that each stays valid.
enum { kMaxTempNames = 32 };
static char g_temp_names[kMaxTempNames][64], g_temp_paths[kMaxTempNames][1024];

const char *fuzz_temp_path(const char *name) {
  int i = 0;
  for (; i < kMaxTempNames && g_temp_names[i][0]; i++)
    if (!strcmp(g_temp_names[i], name)) return g_temp_paths[i];
  if (i == kMaxTempNames || strlen(name) >= sizeof g_temp_names[i]) {
    fprintf(stderr, "fuzz_temp_path: more than %d names, or '%s' too long\n", kMaxTempNames, name);
    abort();
  }
  snprintf(g_temp_names[i], sizeof g_temp_names[i], "%s", name);
  snprintf(g_temp_paths[i], sizeof g_temp_paths[i], "%s/%s", temp_dir(), name);
  return g_temp_paths[i];
}

void fuzz_write_file(const char *path, const uint8_t *bytes, size_t n_bytes) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(bytes, 1, n_bytes, f) != n_bytes || fclose(f) != 0) {
    perror(path);
    abort();
  }
}

void fuzz_as_is_and_crc_fixed(const uint8_t *data, size_t size,
                              void (*read)(const uint8_t *bytes, size_t n_bytes)) {
  read(data, size);
  if (size < 4) return;
  uint8_t *fixed = malloc(size);
  memcpy(fixed, data, size);
  uint32_t crc = (uint32_t)crc32(crc32(0, NULL, 0), fixed, (uInt)(size - 4));
  memcpy(fixed + size - 4, &crc, 4);
  read(fixed, size);
  free(fixed);
}

size_t fuzz_split(const uint8_t *data, size_t size, const uint8_t **second, size_t *second_bytes) {
  const uint8_t *nul = memchr(data, 0, size);
  size_t first = nul ? (size_t)(nul - data) : size;
  *second = nul ? nul + 1 : data + size;
  *second_bytes = nul ? size - first - 1 : 0;
  return first;
}

void fuzz_write_lines(const char *path, const char *const *lines, int n) {
  FILE *f = fopen(path, "w");
  bool ok = f != NULL;
  for (int i = 0; ok && i < n; i++) ok = fprintf(f, "%s\n", lines[i]) >= 0;
  if (!ok || fclose(f) != 0) {
    perror(path);
    abort();
  }
}

// ---------------------------------------------------------------- COCO
void fuzz_check_coco_stats(const double stats[COCO_N_STATS]) {
  for (int i = 0; i < COCO_N_STATS; i++)
    if (!(stats[i] == -1 || (stats[i] >= 0 && stats[i] <= 1)))
      fuzz_fail("stat %d is %.17g, not -1 or in [0, 1]", i, stats[i]);
}

typedef struct ResultsTrip {
  const CocoDetections *dets;
  const CocoGt *gt;
  const char *path;
  CocoDetections back;
} ResultsTrip;

static void write_and_read(void *ctx) {
  ResultsTrip *t = ctx;
  coco_dets_write_json(t->dets, t->path);
  coco_dets_load_json(&t->back, t->gt, t->path);
}

void fuzz_check_results_round_trip(const CocoDetections *dets, const CocoGt *gt, const char *path) {
  ResultsTrip t = {dets, gt, path, {0}};
  if (fuzz_call(write_and_read, &t, FUZZ_RELEASE_LEFTOVERS) != 0)
    fuzz_fail("detections written as a results file are refused: %s", fuzz_last_error());
  if (t.back.n != dets->n)
    fuzz_fail("%lld detections written, %lld read back", (long long)dets->n, (long long)t.back.n);
  for (int64_t i = 0; i < dets->n; i++) {
    const CocoDetection *a = &dets->dets[i], *b = &t.back.dets[i];
    if (a->image_id != b->image_id || a->category_id != b->category_id || a->score != b->score ||
        memcmp(a->bbox, b->bbox, sizeof a->bbox) != 0)
      fuzz_fail("detection %lld reads back as another", (long long)i);
  }
  coco_dets_free(&t.back);
}

// ---------------------------------------------------------------- records
uint8_t *fuzz_record_value(const uint8_t *data, size_t size, void **block) {
  uint8_t *copy = malloc(size + 1);
  if (size) memcpy(copy + 1, data, size);
  if (size >= 16 && (data[8] & 1)) record_seal(copy + 1, size);
  *block = copy;
  return copy + 1;
}

void fuzz_read_record_fields(const Record *r) {
  float box[4];
  for (int32_t i = 0; i < r->box_count; i++) {
    record_box(r, i, box);
    (void)record_box_label(r, i);
  }
  for (int32_t s = 0; s < r->seq_count; s++) {
    int32_t *tokens = malloc(4 * (size_t)r->seq_len[s] + 1);  // (seq_len[s],)
    record_tokens(r, s, tokens);
    free(tokens);
  }
}
