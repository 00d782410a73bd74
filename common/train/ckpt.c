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

// A file with a running CRC-32 of everything that went through it.
typedef struct CkptFile {
  FILE *f;
  const char *path;
  uLong crc;
} CkptFile;

static void put(CkptFile *w, const void *data, size_t bytes) {
  CHECK_FILE(fwrite(data, 1, bytes, w->f) == bytes, w->path);
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

static void get_meta(CkptFile *r, const ParamSet *ps, const ParamSet *buffers, CkptMeta *m) {
  char magic[sizeof kMagic];
  uint32_t version, count, n_state, n_buffers;
  get(r, magic, sizeof magic, "the magic number");
  if (memcmp(magic, kMagic, sizeof kMagic) != 0)
    die_input(r->path, "not a checkpoint of this suite (bad magic number)");
  GET(r, version);
  if (version != CKPT_VERSION)
    die_input(r->path, "checkpoint version %u; this build reads version %d", version, CKPT_VERSION);
  GET(r, count), GET(r, n_state), GET(r, m->opt_kind);
  if (count != (uint32_t)ps->count)
    die_input(r->path, "checkpoint of a model with %u tensors; this model has %d", count, ps->count);
  if (n_state != (uint32_t)ps->n_state)
    die_input(r->path, "checkpoint holds %u optimizer state buffers; this run keeps %d", n_state,
              ps->n_state);
  GET(r, m->epoch), GET(r, m->step), GET(r, m->data_position);
  GET(r, m->rng.seed), GET(r, m->rng.stream), GET(r, m->rng.counter);
  GET(r, m->loss_scale), GET(r, n_buffers), GET(r, m->scaler_good_steps),
      GET(r, m->scaler_skipped_steps);
  uint32_t config_len;
  GET(r, config_len);
  if (config_len >= sizeof m->run_config)
    die_input(r->path, "run config of %u bytes (corrupt file?)", config_len);
  get(r, m->run_config, config_len, "the run config");
  m->run_config[config_len] = 0;
  if (n_buffers != buffer_count(buffers))
    die_input(r->path, "checkpoint holds %u model buffer tensors; this model has %u", n_buffers,
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

static void get_table(CkptFile *r, const ParamSet *ps) {
  for (int t = 0; t < ps->count; t++) {
    char name[256];
    uint32_t len;
    int64_t numel;
    GET(r, len);
    if (len >= sizeof name) die_input(r->path, "tensor %d: name of %u bytes (corrupt file?)", t, len);
    get(r, name, len, "the tensor table");
    name[len] = 0;
    GET(r, numel);
    if (strcmp(name, ps->specs[t].name) != 0 || numel != ps->numels[t])
      die_input(r->path, "tensor %d is '%s' (%lld elements) in the checkpoint, '%s' (%lld) in this model",
                t, name, (long long)numel, ps->specs[t].name, (long long)ps->numels[t]);
  }
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
// and the padding is not stored; the same walk writes (w) or reads (r).
static void move_data(CkptFile *w, CkptFile *r, const ParamSet *ps) {
  float *bufs[1 + PARAM_MAX_STATE];
  int n_bufs = saved_buffers(ps, bufs);
  float *host = xmalloc((size_t)largest_tensor(ps) * sizeof(float));
  for (int b = 0; b < n_bufs; b++)
    for (int t = 0; t < ps->count; t++) {
      size_t bytes = (size_t)ps->numels[t] * sizeof(float);
      float *dev = bufs[b] + ps->offsets[t];
      if (w) {
        device_copy(DEVICE_CPU, host, ps->device, dev, bytes);
        put(w, host, bytes);
      } else {
        get(r, host, bytes, b == 0 ? "the tensors" : "the optimizer state");
        device_copy(ps->device, dev, DEVICE_CPU, host, bytes);
      }
    }
  free(host);
}

void ckpt_write(const char *path, const Device *dev, const ParamSet *ps, const ParamSet *buffers,
                const CkptMeta *meta) {
  device_sync(dev);
  AtomicFile out;
  atomic_file_begin(&out, path);
  CkptFile w = {out.f, out.tmp, crc32(0, NULL, 0)};
  put_meta(&w, ps, buffers, meta);
  put_table(&w, ps);
  move_data(&w, NULL, ps);
  if (buffers) {
    put_table(&w, buffers);
    move_data(&w, NULL, buffers);
  }
  uint32_t crc = (uint32_t)w.crc;
  CHECK_FILE(fwrite(&crc, sizeof crc, 1, w.f) == 1, out.tmp);
  atomic_file_commit(&out);
}

void ckpt_read(const char *path, const Device *dev, ParamSet *ps, ParamSet *buffers,
               CkptMeta *meta) {
  CkptFile r = {fopen(path, "rb"), path, crc32(0, NULL, 0)};
  if (!r.f) die_input(path, "cannot open checkpoint: %s", strerror(errno));
  device_sync(dev);
  get_meta(&r, ps, buffers, meta);
  get_table(&r, ps);
  move_data(NULL, &r, ps);
  if (buffers) {
    get_table(&r, buffers);
    move_data(NULL, &r, buffers);
  }
  uint32_t stored, computed = (uint32_t)r.crc;
  if (fread(&stored, sizeof stored, 1, r.f) != 1)
    die_input(path, "truncated checkpoint: it ends before the checksum");
  if (stored != computed)
    die_input(path, "checksum mismatch (stored %08x, computed %08x): the file is corrupt", stored,
              computed);
  if (fgetc(r.f) != EOF) die_input(path, "bytes after the checksum: not a file this build wrote");
  fclose(r.f);
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

void ckpt_check_writable(const char *path) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
    die_input("--checkpoint", "%s is not a file (a directory?)", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) die_input("--checkpoint", "cannot write %s: %s", tmp, strerror(errno));
  fclose(f);
  unlink(tmp);
}

bool ckpt_resume(const char *path, const Device *dev, ParamSet *ps, ParamSet *buffers,
                 Optimizer *opt, LossScaler *sc, CkptMeta *meta) {
  struct stat st;
  if (stat(path, &st) != 0) return false;
  ckpt_read(path, dev, ps, buffers, meta);
  ckpt_meta_apply(meta, path, opt, sc);
  return true;
}
