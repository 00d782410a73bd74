// ckpt.h: checkpoints. One file holds the parameters, the optimizer state,
// the loss scaler, the trainer's host RNG, the data position and the
// epoch/step counters, so that a resumed run continues exactly where the
// saved one stood.
//
// Layout (little-endian), version CKPT_VERSION:
//   "MLSCKPT\0", u32 version, u32 n_tensors, u32 n_state, i32 opt_kind,
//   i64 epoch, i64 step, i64 data_position, u64 rng seed, stream, counter,
//   f32 loss_scale, u32 n_buffer_tensors, i64 scaler good steps,
//   i64 scaler skipped steps, u32 run config length, the run config text,
//   per tensor: u32 name length, name, i64 numel,
//   the parameters tensor by tensor (unpadded fp32), then each state buffer
//   the same way,
//   when n_buffer_tensors > 0, the model's buffers (batch-norm running
//   statistics: state that is not trained) as a second table and its values,
//   then u32 CRC-32 (zlib) of every byte before it.
// A file is written to PATH.tmp, fsync'd and renamed over PATH, so PATH is
// always either the old checkpoint or the new one, whatever kills the writer.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "core/rng.h"
#include "device/device.h"
#include "device/tensor.h"
#include "train/amp.h"
#include "train/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_VERSION 3
#define CKPT_RUN_CONFIG_BYTES 8192

typedef struct CkptMeta {
  int64_t epoch;          // epochs completed
  int64_t step;           // optimizer updates applied (Optimizer.step)
  int64_t data_position;  // samples of the current epoch consumed, over all ranks
  Rng rng;                // the trainer's host generator
  int32_t opt_kind;       // the OptKind the state buffers belong to
  float loss_scale;
  int64_t scaler_good_steps;
  int64_t scaler_skipped_steps;
  // What shaped the run that wrote it (config_snapshot: "key = value"
  // lines), so a resume with another batch size, seed or learning rate is
  // refused by name rather than continued as a different run.
  char run_config[CKPT_RUN_CONFIG_BYTES];
} CkptMeta;

// The scalar state of opt and sc (sc may be NULL: scale 1) with the trainer's.
CkptMeta ckpt_meta_make(const Optimizer *opt, const LossScaler *sc, int64_t epoch,
                        int64_t data_position, Rng rng, const char *run_config);
// Puts the optimizer step and the scaler state back (the scaler's only when
// it is dynamic, i.e. fp16: other precisions keep a scale of 1); a
// checkpoint of another optimizer kind is refused (its state buffers mean
// something else).
void ckpt_meta_apply(const CkptMeta *m, const char *path, Optimizer *opt, LossScaler *sc);

// Writes ps->params, ps->state[0..n_state), buffers->params (the model's
// untrained state, or NULL when it has none) and meta. Waits for dev first,
// so the buffers hold the finished step. Called by rank 0 only.
void ckpt_write(const char *path, const Device *dev, const ParamSet *ps, const ParamSet *buffers,
                const CkptMeta *meta);
// Reads a checkpoint into ps, buffers and meta. A file that is not a
// checkpoint, of another version, of another model (tensor names or sizes,
// buffers included), truncated or failing its checksum is refused with a
// one-line error naming the file.
void ckpt_read(const char *path, const Device *dev, ParamSet *ps, ParamSet *buffers,
               CkptMeta *meta);

// Tensors [begin, end) of a table (set NULL: none).
typedef struct CkptTensors {
  ParamSet *set;
  int begin, end;
} CkptTensors;

// A warm start (not a resume): copies into each tensor of params (e.g. [0,
// n) of a detector's table, the backbone part) the checkpoint's parameter
// tensor of the same name, and into each tensor of buffers the checkpoint's
// buffer tensor (batch-norm running statistics) of the same name; order
// does not matter. Checkpoint tensors not asked for (a classifier) are
// ignored; the optimizer state, the scaler, the step, the epoch, the RNG and
// the run config are read (for the checksum) but not applied. A requested
// tensor that the file lacks or holds with another number of elements, and
// every fault that ckpt_read refuses (not a checkpoint, version, truncated,
// checksum), stop the program with a one-line error naming the file (and
// the tensor). The file may come from a trainer's --checkpoint or from
// datasets/torch_to_ckpt.py (a PyTorch state dict converted).
void ckpt_read_named(const char *path, const Device *dev, CkptTensors params, CkptTensors buffers);

// The whole training state: ckpt_meta_make + ckpt_write ...
void ckpt_save(const char *path, const Device *dev, const ParamSet *ps, const ParamSet *buffers,
               const Optimizer *opt, const LossScaler *sc, int64_t epoch, int64_t data_position,
               Rng rng, const char *run_config);
// ... and back: false (nothing changed) when path does not exist; otherwise
// ckpt_read + ckpt_meta_apply, with epoch, data position and RNG returned.
bool ckpt_resume(const char *path, const Device *dev, ParamSet *ps, ParamSet *buffers,
                 Optimizer *opt, LossScaler *sc, CkptMeta *meta);

#ifdef __cplusplus
}
#endif
