// ckpt.c: writing and reading checkpoints (layout in ckpt.h).
#include "train/ckpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/check.h"
#include "core/file.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoints are written in the host's byte order, which must be little-endian"
#endif

static const char kMagic[8] = "MLSCKPT";  // with its terminating zero: 8 bytes

// A file with a running CRC-32 of everything that went through it: read
// from f (path names it in errors), or written through out.
typedef struct CkptFile {
  FILE *f;
  const char *path;
  uLong crc;
  AtomicFile *out;
} CkptFile;

static void put(CkptFile *w, const void *data, size_t bytes) {
  atomic_file_write(w->out, data, bytes);
  w->crc = crc32(w->crc, data, (uInt)bytes);
}

static void get(CkptFile *r, void *data, size_t bytes, const char *what) {
  if (fread(data, 1, bytes, r->f) != bytes)
    die_input(r->path, "truncated checkpoint: it ends inside %s", what);
  r->crc = crc32(r->crc, data, (uInt)bytes);
}

#define PUT(w, x) put((w), &(x), sizeof(x))
#define GET(r, x) get((r), &(x), sizeof(x), #x)

static uint32_t buffer_count(const ParamSet *buffers) { return buffers ? (uint32_t)buffers->count : 0; }

// The scalar header, in the order of ckpt.h.
static void put_meta(CkptFile *w, const ParamSet *ps, const ParamSet *buffers, const CkptMeta *m) {
  uint32_t version = CKPT_VERSION, count = (uint32_t)ps->count, n_state = (uint32_t)ps->n_state;
  uint32_t n_buffers = buffer_count(buffers);
  put(w, kMagic, sizeof kMagic);
  PUT(w, version), PUT(w, count), PUT(w, n_state), PUT(w, m->opt_kind);
  PUT(w, m->epoch), PUT(w, m->step), PUT(w, m->data_position);
  PUT(w, m->rng.seed), PUT(w, m->rng.stream), PUT(w, m->rng.counter);
  PUT(w, m->loss_scale), PUT(w, n_buffers), PUT(w, m->scaler_good_steps),
      PUT(w, m->scaler_skipped_steps);
  uint32_t config_len = (uint32_t)strnlen(m->run_config, sizeof m->run_config - 1);
  PUT(w, config_len);
  put(w, m->run_config, config_len);
}

// The header as written; the counts it gives are returned, not yet checked
// against any model.
typedef struct CkptCounts {
  uint32_t tensors, n_state, buffers;
} CkptCounts;

static CkptCounts get_meta(CkptFile *r, CkptMeta *m) {
  char magic[sizeof kMagic];
  uint32_t version;
  CkptCounts n;
  get(r, magic, sizeof magic, "the magic number");
  if (memcmp(magic, kMagic, sizeof kMagic) != 0)
    die_input(r->path, "not a checkpoint of this suite (bad magic number)");
  GET(r, version);
  if (version != CKPT_VERSION)
    die_input(r->path, "checkpoint version %u; this build reads version %d", version, CKPT_VERSION);
  GET(r, n.tensors), GET(r, n.n_state), GET(r, m->opt_kind);
  GET(r, m->epoch), GET(r, m->step), GET(r, m->data_position);
  GET(r, m->rng.seed), GET(r, m->rng.stream), GET(r, m->rng.counter);
  GET(r, m->loss_scale), GET(r, n.buffers), GET(r, m->scaler_good_steps),
      GET(r, m->scaler_skipped_steps);
  uint32_t config_len;
  GET(r, config_len);
  if (config_len >= sizeof m->run_config)
    die_input(r->path, "run config of %u bytes (corrupt file?)", config_len);
  get(r, m->run_config, config_len, "the run config");
  m->run_config[config_len] = 0;
  return n;
}

// A resume's file holds exactly this model's tables and optimizer state.
static void check_counts(const char *path, CkptCounts n, const ParamSet *ps, const ParamSet *buffers) {
  if (n.tensors != (uint32_t)ps->count)
    die_input(path, "checkpoint of a model with %u tensors; this model has %d", n.tensors, ps->count);
  if (n.n_state != (uint32_t)ps->n_state)
    die_input(path, "checkpoint holds %u optimizer state buffers; this run keeps %d", n.n_state,
              ps->n_state);
  if (n.buffers != buffer_count(buffers))
    die_input(path, "checkpoint holds %u model buffer tensors; this model has %u", n.buffers,
              buffer_count(buffers));
}

static void put_table(CkptFile *w, const ParamSet *ps) {
  for (int t = 0; t < ps->count; t++) {
    uint32_t len = (uint32_t)strlen(ps->specs[t].name);
    PUT(w, len);
    put(w, ps->specs[t].name, len);
    PUT(w, ps->numels[t]);
  }
}

// Where a table's rows go when read: row t into tensor dest of the model
// (-1: read for the checksum, then dropped).
typedef struct CkptRow {
  int64_t numel;
  int dest;
} CkptRow;

// The tensor of `to` called name, or -1.
static int find_in(CkptTensors to, const char *name) {
  for (int i = to.begin; to.set && i < to.end; i++)
    if (strcmp(to.set->specs[i].name, name) == 0) return i;
  return -1;
}

// Reads a table of count rows. In order (by_name false), row t must be
// tensor t of to.set, of the same name and size; by name, a row goes to the
// tensor of `to` that has its name (which must have its size), and every
// tensor of `to` must have a row.
static CkptRow *get_table(CkptFile *r, uint32_t count, CkptTensors to, bool by_name) {
  // Each row takes at least 12 bytes: a corrupt count cannot make a huge allocation.
  struct stat st;
  CHECK_FILE(fstat(fileno(r->f), &st) == 0, r->path);
  if ((uint64_t)count * 12 > (uint64_t)st.st_size)
    die_input(r->path, "a table of %u tensors in a file of %lld bytes (corrupt file?)", count,
              (long long)st.st_size);
  CkptRow *rows = xcalloc((size_t)count + 1, sizeof *rows);
  bool *found = xcalloc((size_t)(to.set ? to.end : 0) + 1, sizeof *found);
  for (uint32_t t = 0; t < count; t++) {
    char name[256];
    uint32_t len;
    int64_t numel;
    GET(r, len);
    if (len >= sizeof name) die_input(r->path, "tensor %u: name of %u bytes (corrupt file?)", t, len);
    get(r, name, len, "the tensor table");
    name[len] = 0;
    GET(r, numel);
    if (numel < 0) die_input(r->path, "tensor '%s': %lld elements (corrupt file?)", name, (long long)numel);
    int d = by_name ? find_in(to, name) : (int)t;
    if (!by_name && (strcmp(name, to.set->specs[t].name) != 0 || numel != to.set->numels[t]))
      die_input(r->path, "tensor %u is '%s' (%lld elements) in the checkpoint, '%s' (%lld) in this model",
                t, name, (long long)numel, to.set->specs[t].name, (long long)to.set->numels[t]);
    if (by_name && d >= 0 && numel != to.set->numels[d])
      die_input(r->path, "tensor '%s' has %lld elements in the checkpoint, %lld in this model", name,
                (long long)numel, (long long)to.set->numels[d]);
    if (by_name && d >= 0 && found[d]) die_input(r->path, "tensor '%s' twice in the checkpoint", name);
    if (d >= 0) found[d] = true;
    rows[t] = (CkptRow){numel, d};
  }
  for (int i = to.begin; by_name && to.set && i < to.end; i++)
    if (!found[i]) die_input(r->path, "no tensor '%s' in the checkpoint", to.set->specs[i].name);
  free(found);
  return rows;
}

// The data of a table's rows, n_copies times (the parameters, then each
// optimizer state buffer), each row into its tensor of the flat buffer
// dst[copy] of `set` (dropped where dst[copy] is NULL or the row has no
// tensor), through a host staging buffer so that device buffers work too.
// Chunks of a fixed size, so that a corrupt size cannot make a huge
// allocation (the file ends first).
static void get_data(CkptFile *r, const CkptRow *rows, uint32_t count, int n_copies,
                     const ParamSet *set, float *const *dst) {
  enum { CHUNK = 1 << 20 };
  float *host = xmalloc(CHUNK * sizeof(float));
  for (int b = 0; b < n_copies; b++)
    for (uint32_t t = 0; t < count; t++)
      for (int64_t done = 0; done < rows[t].numel; done += CHUNK) {
        int64_t n = rows[t].numel - done < CHUNK ? rows[t].numel - done : CHUNK;
        size_t bytes = (size_t)n * sizeof(float);
        get(r, host, bytes, b == 0 ? "the tensors" : "the optimizer state");
        if (dst[b] && rows[t].dest >= 0)
          device_copy(set->device, dst[b] + set->offsets[rows[t].dest] + done, DEVICE_CPU, host, bytes);
      }
  free(host);
}

// A table and its data (see get_table and get_data).
static void get_tensors(CkptFile *r, uint32_t count, int n_copies, CkptTensors to, bool by_name,
                        float *const *dst) {
  CkptRow *rows = get_table(r, count, to, by_name);
  get_data(r, rows, count, n_copies, to.set, dst);
  free(rows);
}

// The checksum of everything read, and the end of the file.
static void get_checksum(CkptFile *r) {
  uint32_t stored, computed = (uint32_t)r->crc;
  if (fread(&stored, sizeof stored, 1, r->f) != 1)
    die_input(r->path, "truncated checkpoint: it ends before the checksum");
  if (stored != computed)
    die_input(r->path, "checksum mismatch (stored %08x, computed %08x): the file is corrupt", stored,
              computed);
  if (fgetc(r->f) != EOF) die_input(r->path, "bytes after the checksum: not a file this build wrote");
  fclose(r->f);
}

static int64_t largest_tensor(const ParamSet *ps) {
  int64_t n = 0;
  for (int t = 0; t < ps->count; t++)
    if (ps->numels[t] > n) n = ps->numels[t];
  return n;
}

// The flat buffers to save: params, then each optimizer state buffer.
static int saved_buffers(const ParamSet *ps, float *bufs[1 + PARAM_MAX_STATE]) {
  bufs[0] = ps->params;
  for (int k = 0; k < ps->n_state; k++) bufs[1 + k] = ps->state[k];
  return 1 + ps->n_state;
}

// Tensor by tensor through a host staging buffer, so device buffers work too
// and the padding is not stored.
static void put_data(CkptFile *w, const ParamSet *ps) {
  float *bufs[1 + PARAM_MAX_STATE];
  int n_bufs = saved_buffers(ps, bufs);
  float *host = xmalloc((size_t)largest_tensor(ps) * sizeof(float));
  for (int b = 0; b < n_bufs; b++)
    for (int t = 0; t < ps->count; t++) {
      size_t bytes = (size_t)ps->numels[t] * sizeof(float);
      device_copy(DEVICE_CPU, host, ps->device, bufs[b] + ps->offsets[t], bytes);
      put(w, host, bytes);
    }
  free(host);
}

void ckpt_write(const char *path, const Device *dev, const ParamSet *ps, const ParamSet *buffers,
                const CkptMeta *meta) {
  device_sync(dev);
  AtomicFile out;
  atomic_file_begin(&out, path);
  CkptFile w = {.crc = crc32(0, NULL, 0), .out = &out};
  put_meta(&w, ps, buffers, meta);
  put_table(&w, ps);
  put_data(&w, ps);
  if (buffers) {
    put_table(&w, buffers);
    put_data(&w, buffers);
  }
  uint32_t crc = (uint32_t)w.crc;
  atomic_file_write(&out, &crc, sizeof crc);
  atomic_file_commit(&out);
}

static CkptFile open_checkpoint(const char *path, const Device *dev) {
  CkptFile r = {fopen(path, "rb"), path, crc32(0, NULL, 0), NULL};
  if (!r.f) die_input(path, "cannot open checkpoint: %s", strerror(errno));
  device_sync(dev);
  return r;
}

static CkptTensors whole(ParamSet *ps) { return (CkptTensors){ps, 0, ps->count}; }

void ckpt_read(const char *path, const Device *dev, ParamSet *ps, ParamSet *buffers,
               CkptMeta *meta) {
  CkptFile r = open_checkpoint(path, dev);
  CkptCounts n = get_meta(&r, meta);
  check_counts(path, n, ps, buffers);
  float *bufs[1 + PARAM_MAX_STATE];
  get_tensors(&r, n.tensors, saved_buffers(ps, bufs), whole(ps), false, bufs);
  if (buffers) get_tensors(&r, n.buffers, saved_buffers(buffers, bufs), whole(buffers), false, bufs);
  get_checksum(&r);
}

static void check_range(CkptTensors t) {
  if (t.set && (t.begin < 0 || t.begin > t.end || t.end > t.set->count))
    DIE("ckpt_read_named: tensors [%d, %d) of a table of %d", t.begin, t.end, t.set->count);
}

void ckpt_read_named(const char *path, const Device *dev, CkptTensors params, CkptTensors buffers) {
  check_range(params);
  check_range(buffers);
  CkptFile r = open_checkpoint(path, dev);
  CkptMeta ignored;  // a warm start takes no step, scaler, RNG or data position
  CkptCounts n = get_meta(&r, &ignored);
  if (n.n_state > PARAM_MAX_STATE)
    die_input(path, "checkpoint holds %u optimizer state buffers (corrupt file?)", n.n_state);
  // The parameters, then the optimizer state (read for the checksum, dropped).
  float *bufs[1 + PARAM_MAX_STATE] = {params.set ? params.set->params : NULL};
  get_tensors(&r, n.tensors, 1 + (int)n.n_state, params, true, bufs);
  bufs[0] = buffers.set ? buffers.set->params : NULL;
  get_tensors(&r, n.buffers, 1, buffers, true, bufs);
  get_checksum(&r);
}

CkptMeta ckpt_meta_make(const Optimizer *opt, const LossScaler *sc, int64_t epoch,
                        int64_t data_position, Rng rng, const char *run_config) {
  CkptMeta m = {.epoch = epoch, .step = opt->step, .data_position = data_position, .rng = rng,
                .opt_kind = (int32_t)opt->cfg.kind, .loss_scale = 1.0f};
  if (strlen(run_config) >= sizeof m.run_config)
    DIE("ckpt: a run config of %zu bytes", strlen(run_config));
  snprintf(m.run_config, sizeof m.run_config, "%s", run_config);
  if (sc) {
    m.loss_scale = sc->scale;
    m.scaler_good_steps = sc->good_steps;
    m.scaler_skipped_steps = sc->skipped_steps;
  }
  return m;
}

void ckpt_meta_apply(const CkptMeta *m, const char *path, Optimizer *opt, LossScaler *sc) {
  if (m->opt_kind != (int32_t)opt->cfg.kind)
    die_input(path, "checkpoint of optimizer kind %d; this run uses %s", (int)m->opt_kind,
              optim_kind_name(opt->cfg.kind));
  opt->step = m->step;
  // Only fp16 scales the loss: a run in another precision keeps its scale
  // of 1 whatever the checkpoint's run used.
  if (sc && sc->dynamic) {
    sc->scale = m->loss_scale;
    sc->good_steps = m->scaler_good_steps;
    sc->skipped_steps = m->scaler_skipped_steps;
  }
}

void ckpt_save(const char *path, const Device *dev, const ParamSet *ps, const ParamSet *buffers,
               const Optimizer *opt, const LossScaler *sc, int64_t epoch, int64_t data_position,
               Rng rng, const char *run_config) {
  CkptMeta m = ckpt_meta_make(opt, sc, epoch, data_position, rng, run_config);
  ckpt_write(path, dev, ps, buffers, &m);
}

bool ckpt_resume(const char *path, const Device *dev, ParamSet *ps, ParamSet *buffers,
                 Optimizer *opt, LossScaler *sc, CkptMeta *meta) {
  struct stat st;
  if (stat(path, &st) != 0) return false;
  ckpt_read(path, dev, ps, buffers, meta);
  ckpt_meta_apply(meta, path, opt, sc);
  return true;
}
