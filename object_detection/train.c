// train.c: SSD (ResNet-34 backbone) on a COCO-layout LMDB data set to a box
// mAP target, MLPerf style. Reads top to bottom as the procedure:
//   init: flags, device, ranks, categories, model (optionally its backbone
//         from ResNet weights), optimizer, schedule
//   run:  epochs of SGD on randomly cropped, flipped and colour-jittered
//         images; after the epochs of the eval cadence, the whole val split
//         decoded (scores > 0.05, NMS 0.5, top 200) and scored with COCO's
//         mAP@[.5:.95] in process, until mAP >= target (run_stop success)
//         or the epoch limit (aborted)
//
//   ssd --config=object_detection/configs/small.conf --data_dir=data/ssd/small
//   mpirun -np 8 ssd --config=object_detection/configs/full_8gpu.conf --data_dir=data/ssd/full_8gpu
//       (the full configs start the backbone from DATA_DIR/resnet34.ckpt,
//       which prepare_data.sh full converts from torchvision's weights)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/config.h"
#include "core/file.h"
#include "core/progress.h"
#include "core/rng.h"
#include "data/lmdb_store.h"
#include "device/profile.h"
#include "ops/elementwise.h"
#include "object_detection/coco_eval.h"
#include "object_detection/coco_json.h"
#include "object_detection/ssd_config.h"
#include "object_detection/ssd_boxes.h"
#include "object_detection/ssd_data.h"
#include "object_detection/ssd_model.h"
#include "train/amp.h"
#include "train/ckpt.h"
#include "train/dist.h"
#include "train/optim.h"
#include "train/run.h"
#include "train/schedule.h"

#include <cJSON.h>

static const ConfigKey kKeys[] = {
    // Model.
    {"image_size", CFG_INT, "300", "side of the square network input", "[32, 4096]"},
    {"stages", CFG_STRING, "3,4,6", "backbone: basic blocks per ResNet stage (ResNet-34 to layer3)", NULL},
    {"stage_strides", CFG_STRING, "1,2,1", "backbone: stride of each stage's first block", NULL},
    {"width", CFG_INT, "64", "backbone: channels of the first stage", "[1, 4096]"},
    {"imagenet_stem", CFG_BOOL, "true", "backbone: 7x7/2 conv + max pool; false: one 3x3 conv", NULL},
    {"extra_blocks", CFG_STRING, "256:512:2:1,256:512:2:1,128:256:2:1,128:256:1:0,128:256:1:0",
     "one block per further feature map: 1x1 channels:3x3 channels:stride:padding", NULL},
    {"box_steps", CFG_STRING, "8,16,32,64,100,300", "default boxes: pixels between centres, per map", NULL},
    {"box_scales", CFG_STRING, "21,45,99,153,207,261,315",
     "default boxes: sizes in pixels, one more than maps", NULL},
    {"box_ratios", CFG_STRING, "2;2,3;2,3;2,3;2;2",
     "default boxes: aspect ratios per map (';' between maps): 2 + 2 per ratio boxes a location", NULL},
    {"backbone", CFG_STRING, "",
     "start the backbone from this ResNet checkpoint (the suite's, or converted by datasets/torch_to_ckpt.py; "
     "a relative path is under data_dir); empty: Kaiming's initialisation", NULL},
    // Data.
    {"max_samples", CFG_INT, "1", "random crop: candidates per mode (MLPerf: 1 or 50)", "[1, 50]"},
    {"loader_threads", CFG_INT, "8", "decode and augment threads per rank", "[1, 256]"},
    LOADER_LAST_BATCH_KEY,
    {"val_annotations", CFG_STRING, "",
     "COCO instances JSON of the val split; empty: DATA_DIR/raw/annotations/instances_val2017.json", NULL},
    {"detections_out", CFG_STRING, "", "write the last eval's detections as a COCO results JSON", NULL},
    {"synthetic", CFG_BOOL, "false", "random data on the device: throughput only, no eval", NULL},
    {"synthetic_steps", CFG_INT, "50", "timed steps of a synthetic run (after 10 warm-up)", "[1, inf)"},
    // Optimisation.
    {"batch_size", CFG_INT, "32", "global batch (all ranks together)", "[1, inf)"},
    {"base_lr", CFG_FLOAT, "2.5e-3", "learning rate after the warmup (the reference: 2.5e-3 x batch / 32)", "(0, inf)"},
    {"warmup_steps", CFG_INT, "300", "linear warmup from 0", "[1, inf)"},
    {"decay_epochs", CFG_STRING, "40,50", "learning rate x decay_factor at each of these epochs", NULL},
    {"decay_factor", CFG_FLOAT, "0.1", "learning-rate factor at each decay epoch", "(0, 1]"},
    {"momentum", CFG_FLOAT, "0.9", "SGD momentum", "[0, 1)"},
    {"weight_decay", CFG_FLOAT, "5e-4", "L2 weight decay", "[0, inf)"},
    {"decay_bn_and_bias", CFG_BOOL, "true",
     "weight decay on biases and batch-norm parameters too (the reference decays every tensor)", NULL},
};

// A resumed run may change, besides the common keys, how fast the input is
// read, what a benchmark run times and where detections go.
static const RunSpec kSpec = {
    .benchmark = "ssd", .metric = "mAP", .max_epochs = "80", .target = "0.23",
    .eval_every = "5", .keys = kKeys, .n_keys = (int)(sizeof kKeys / sizeof kKeys[0]),
    .resume_may_change = (const char *const[]){"loader_threads", "synthetic", "synthetic_steps",
                                                "val_annotations", "backbone", NULL},
    .outputs = (const char *const[]){"detections_out", NULL},
};

typedef struct SsdTrainer {
  Run run;
  SsdModel net;
  SsdBoxConfig box_cfg;
  SsdDefaultBoxes boxes;  // host: matching of the synthetic targets
  SsdDeviceBoxes dev_boxes;  // the eval's decode (ssd_detect)
  Optimizer opt;
  Schedule sched;
  int64_t global_batch, local_batch;
  int64_t train_samples, eval_samples, steps_per_epoch;
  int32_t num_classes;   // background included
  int64_t *category_id;  // (num_classes) label -> COCO category id; [0] unused
  Tensor images;         // (local_batch, S, S, 3) normalised input, compute dtype
  ChannelAffine affine;
  Tensor loss;           // (1) fp32 on the device
  Tensor dloc, dlogits;  // (local_batch, n_boxes, 4 | classes) fp32
  Arena loss_scratch;    // ssd_loss's, on the device
  Arena detect_scratch;  // ssd_detect's, on the device
  SsdDetection *dets;    // (local_batch, max_output) one eval batch's, host
  int32_t *det_counts;   // (local_batch)
  CocoGt gt;             // the val split's ground truth, read at the first eval
  bool gt_loaded;
  char lmdb[1100];       // DATA_DIR/lmdb: the splits and categories.json
  char backbone[1200];   // the checkpoint the backbone starts from; "" for none
  Loader *train;
} SsdTrainer;

// ---------------------------------------------------------------- data
// categories.json (datasets/coco_to_lmdb): the labels 1..N in order and the
// COCO category id of each, for the detections the eval scores.
static void read_categories(SsdTrainer *t) {
  char path[1200];
  snprintf(path, sizeof path, "%s/categories.json", t->lmdb);
  size_t bytes;
  uint8_t *text = file_read(path, &bytes);
  cJSON *root = cJSON_ParseWithLength((const char *)text, bytes);
  const cJSON *cats = root ? cJSON_GetObjectItemCaseSensitive(root, "categories") : NULL;
  int n = cJSON_IsArray(cats) ? cJSON_GetArraySize(cats) : 0;
  if (n < 1) die_input(path, "not a categories file of datasets/coco_to_lmdb (no \"categories\" list)");
  t->num_classes = n + 1;
  t->category_id = xcalloc((size_t)n + 1, sizeof(int64_t));
  for (int i = 0; i < n; i++) {
    const cJSON *c = cJSON_GetArrayItem(cats, i);
    const cJSON *label = cJSON_GetObjectItemCaseSensitive(c, "label");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    if (!cJSON_IsNumber(label) || label->valuedouble != i + 1 || !cJSON_IsNumber(id))
      die_input(path, "categories[%d]: not {\"label\": %d, \"id\": <COCO id>}", i, i + 1);
    t->category_id[i + 1] = (int64_t)id->valuedouble;
  }
  cJSON_Delete(root);
  free(text);
}

static void val_annotations_path(const SsdTrainer *t, char *buf, size_t buf_bytes) {
  const char *given = config_string(&t->run.cfg, "val_annotations");
  if (given[0]) snprintf(buf, buf_bytes, "%s", given);
  else snprintf(buf, buf_bytes, "%s/raw/annotations/instances_val2017.json", run_data_dir(&t->run));
}

// --backbone's file: a relative path is under data_dir, where
// prepare_data.sh full converts torchvision's ImageNet ResNet-34 for the
// full configs (backbone = resnet34.ckpt). A run told to start from it
// never falls back to random weights: a missing file stops it here,
// before run_start, saying how to make it.
static void find_backbone(SsdTrainer *t) {
  const char *given = config_string(&t->run.cfg, "backbone");
  if (!given[0] || given[0] == '/') snprintf(t->backbone, sizeof t->backbone, "%s", given);
  else snprintf(t->backbone, sizeof t->backbone, "%s/%s", run_data_dir(&t->run), given);
  if (t->backbone[0] && access(t->backbone, R_OK) != 0)
    die_input("--backbone", "%s does not exist: the ImageNet ResNet-34 the backbone starts from; "
              "object_detection/prepare_data.sh full converts torchvision's resnet34-333f7ec4.pth "
              "into it (object_detection/README.md), --backbone= starts from random weights",
              t->backbone);
}

static SsdAugment augment_config(const SsdTrainer *t, bool train) {
  const Config *cfg = &t->run.cfg;
  SsdAugment a = ssd_augment_mlperf(train, (uint64_t)config_int(cfg, "seed"));
  a.side = (int32_t)config_int(cfg, "image_size");
  a.max_tries = (int)config_int(cfg, "max_samples");
  a.float_output = false;  // bytes cross to the device; op_affine_u8 normalises there
  return a;
}

static Loader *open_loader(SsdTrainer *t, bool train, int64_t start_epoch) {
  char dir[1200];
  snprintf(dir, sizeof dir, "%s/%s", t->lmdb, train ? "train" : "val");
  SsdLoaderConfig lc = {
      .lmdb_dir = dir, .augment = augment_config(t, train), .boxes = &t->box_cfg,
      .num_classes = t->num_classes, .batch_size = t->local_batch,
      .threads = (int)config_int(&t->run.cfg, "loader_threads"), .ring_batches = 4,
      .rank = t->run.dist.rank, .world = t->run.dist.size, .start_epoch = start_epoch,
      .dev = &t->run.dev, .keep_last = train && loader_keeps_last(&t->run.cfg),
  };
  return ssd_loader_open(&lc, NULL);
}

// The training split's loader, from the run's first epoch on.
static void open_train_loader(void *trainer) {
  SsdTrainer *t = trainer;
  t->train = open_loader(t, true, t->run.first_epoch);
}

// A batch's images as network input: (n, S, S, 3) on the device, in the
// compute dtype.
static Tensor batch_images(SsdTrainer *t, const void *bytes, int64_t n) {
  const Device *dev = &t->run.dev;
  int64_t side = t->net.cfg.backbone.image_size;
  Tensor u8 = TENSOR((void *)bytes, DT_U8, dev->kind, n, side, side, 3);
  Tensor images = TENSOR(t->images.data, t->net.cfg.dtype, dev->kind, n, side, side, 3);
  op_affine_u8(dev, &u8, &t->affine, &images);
  return images;
}

static void setup_optimizer(SsdTrainer *t) {
  const Config *cfg = &t->run.cfg;
  if (config_bool(cfg, "decay_bn_and_bias"))
    for (int i = 0; i < t->net.n_params; i++) t->net.specs[i].flags &= ~PARAM_NO_DECAY;
  OptConfig oc = optim_defaults(OPT_SGD);
  oc.momentum = (float)config_float(cfg, "momentum");
  oc.weight_decay = (float)config_float(cfg, "weight_decay");
  optim_init(&t->opt, &oc, &t->net.params);

  t->sched = (Schedule){
      .kind = SCHED_STEP, .base_lr = config_float(cfg, "base_lr"),
      .warmup_steps = config_int(cfg, "warmup_steps"), .warmup_factor = 0,
      .steps_per_epoch = t->steps_per_epoch, .decay_factor = config_float(cfg, "decay_factor"),
  };
  t->sched.n_boundaries =
      run_epoch_list(&t->run, "decay_epochs", t->sched.boundary_epochs, SCHED_MAX_BOUNDARIES);
  schedule_check(&t->sched, "--warmup_steps, --decay_epochs");
  optim_log(&oc, &t->run.log);
  schedule_log(&t->sched, OPT_SGD, &t->run.log);
}

// ---------------------------------------------------------------- training
// One step on a batch on the device (n of the step's global_count images
// over all ranks): forward, the loss with hard negative mining, backward
// (the all-reduce starting as gradients become final), update. The loss
// stays on the device. Its gradient is scaled by the batch's share of the
// step (loader_share over the ranks, which the all-reduce averages: 1 but
// in a kept short last step).
static void train_step(SsdTrainer *t, const Tensor *images, const int32_t *labels,
                       const float *offsets, int64_t global_count, int64_t step) {
  const Device *dev = &t->run.dev;
  int64_t n = images->shape[0], boxes = t->net.n_boxes, classes = t->num_classes;
  optim_grads_zero(dev, &t->net.params);
  const Tensor *loc, *logits;
  ssd_model_forward(&t->net, dev, images, true, &loc, &logits);
  Tensor dloc = tensor_rows(&t->dloc, 0, n), dlogits = tensor_rows(&t->dlogits, 0, n);
  arena_release(&t->loss_scratch, 0);
  ssd_loss(dev, n, boxes, classes, loc->data, logits->data, offsets, labels,
           amp_loss_scale(&t->run.scaler) * (float)loader_share(n, global_count, t->run.dist.size),
           &t->loss_scratch, t->loss.data, dloc.data, dlogits.data);
  run_add_loss(&t->run, &t->loss);
  ssd_model_backward(&t->net, dev, &dloc, &dlogits, dist_grad_hook(&t->run.dist));
  run_update(dev, &t->run.dist, &t->run.scaler, &t->opt, &t->net.params,
             (float)schedule_lr(&t->sched, step));
}

// Training step i of an epoch, on the training loader's next batch;
// returns the images it took over all ranks.
static int64_t train_batch(void *trainer, int64_t epoch, int64_t i) {
  SsdTrainer *t = trainer;
  const LoaderBatch *batch = loader_next(t->train);
  Tensor x = batch_images(t, batch->device[0], batch->count);
  // Every step counts in the schedule, skipped fp16 ones too.
  train_step(t, &x, batch->device[1], batch->device[2], batch->global_count,
             (epoch - 1) * t->steps_per_epoch + i);
  return batch->global_count;
}

// ---------------------------------------------------------------- evaluation
// COCO mAP@[.5:.95] over the whole val split: every rank decodes its shard,
// matches its images against the ground truth, and the matches of all ranks
// are gathered and accumulated on each (coco_eval.h), so every rank gets the
// same mAP. With --detections_out, rank 0 writes every rank's detections.
static double evaluate(void *trainer, char *more, size_t more_bytes) {
  SsdTrainer *t = trainer;
  const Device *dev = &t->run.dev;
  if (!t->gt_loaded) {  // the ground truth is data: read after run_start
    char path[1100];
    val_annotations_path(t, path, sizeof path);
    coco_gt_load_json(&t->gt, path);
    t->gt_loaded = true;
  }
  Loader *l = open_loader(t, false, 0);
  int64_t classes = t->num_classes;
  CocoDetections dets;
  coco_dets_init(&dets);
  int64_t n_images = 0, *image_ids = xmalloc((size_t)t->eval_samples * sizeof(int64_t));
  for (int64_t b = 0; b < loader_batches_per_epoch(l); b++) {
    const LoaderBatch *batch = loader_next(l);
    int64_t n = batch->count;
    Tensor x = batch_images(t, batch->device[0], n);
    const Tensor *loc, *logits;
    ssd_model_forward(&t->net, dev, &x, false, &loc, &logits);
    arena_release(&t->detect_scratch, 0);
    ssd_detect(dev, &t->dev_boxes, n, loc->data, logits->data, classes, &kSsdNms,
               &t->detect_scratch, t->dets, t->det_counts);  // to the host
    const int64_t *ids = batch->host[1];
    const int32_t *sizes = batch->host[2];  // (height, width)
    for (int64_t i = 0; i < n; i++) {
      if (n_images == t->eval_samples) DIE("eval: more images than the %lld of the val split", (long long)t->eval_samples);
      image_ids[n_images++] = ids[i];
      double h = sizes[2 * i], w = sizes[2 * i + 1];
      for (int d = 0; d < t->det_counts[i]; d++) {
        const SsdDetection *s = &t->dets[i * kSsdNms.max_output + d];
        CocoDetection c = {.image_id = ids[i], .category_id = t->category_id[s->label],
                           .bbox = {s->ltrb[0] * w, s->ltrb[1] * h, (s->ltrb[2] - s->ltrb[0]) * w,
                                    (s->ltrb[3] - s->ltrb[1]) * h},
                           .score = s->score};
        coco_dets_add(&dets, &c);
      }
    }
  }
  loader_close(l);

  CocoEvalMatches mine, all;
  coco_eval_matches_init(&mine);
  coco_eval_matches_init(&all);
  coco_eval_images(&t->gt, &dets, image_ids, n_images, &mine);
  size_t pack_bytes, all_bytes;
  uint8_t *pack = coco_eval_matches_pack(&mine, &pack_bytes);
  uint8_t *packs = dist_allgather_bytes(&t->run.dist, pack, pack_bytes, &all_bytes);
  coco_eval_matches_unpack(&all, packs, all_bytes);
  // Every val record scored once, and every image with a ground truth among
  // them (one left out would drop its misses from the mAP); images without
  // one may be left out, as the reference's eval set leaves them out.
  int64_t seen[2] = {n_images, coco_gt_annotated_images(&t->gt, image_ids, n_images)};
  dist_sum_i64(&t->run.dist, seen, 2);
  int64_t annotated = coco_gt_annotated_images(&t->gt, NULL, 0);
  if (seen[0] != t->eval_samples || seen[1] != annotated)
    die_input("--val_annotations", "the eval scored %lld images, %lld of them with annotations, where the val "
              "LMDB holds %lld and the annotations have %lld images with annotations", (long long)seen[0],
              (long long)seen[1], (long long)t->eval_samples, (long long)annotated);
  CocoEvalResult r;
  coco_eval_accumulate(&t->gt, &all, &r);
  double map = r.stats[0];
  snprintf(more, more_bytes, "AP50 %.4f, AP75 %.4f", r.stats[1], r.stats[2]);

  const char *out = config_string(&t->run.cfg, "detections_out");
  if (out[0]) {  // every rank's detections, as bytes, to rank 0
    size_t det_bytes;
    CocoDetection *every = dist_allgather_bytes(&t->run.dist, dets.dets, (size_t)dets.n * sizeof(CocoDetection),
                                                &det_bytes);
    if (t->run.rank == 0) {
      CocoDetections d = {.dets = every, .n = (int64_t)(det_bytes / sizeof(CocoDetection))};
      coco_dets_write_json(&d, out);
    }
    free(every);
  }
  coco_eval_result_free(&r);
  free(pack);
  free(packs);
  coco_eval_matches_free(&mine);
  coco_eval_matches_free(&all);
  coco_dets_free(&dets);
  free(image_ids);
  return map;
}

// ---------------------------------------------------------------- synthetic data
// Step i of the synthetic run (run_time_steps).
typedef struct SyntheticStep {
  SsdTrainer *t;
  const Tensor *x;
  const int32_t *labels;
  const float *offsets;
} SyntheticStep;

static void synthetic_step(void *ctx, int64_t i) {
  SyntheticStep *s = ctx;
  train_step(s->t, s->x, s->labels, s->offsets, s->t->global_batch, i);
}

// Throughput on random images already on the device, with targets matched
// from three random boxes per image; no eval, no target. Returns images/s.
static double synthetic_run(void *trainer) {
  SsdTrainer *t = trainer;
  const Device *dev = &t->run.dev;
  int64_t n = t->local_batch, side = t->net.cfg.backbone.image_size, boxes = t->net.n_boxes;
  int64_t pixels = n * side * side * 3;
  uint8_t *x_host = xmalloc((size_t)pixels);
  for (int64_t i = 0; i < pixels; i++) x_host[i] = (uint8_t)(rng_u32(1, 0, (uint64_t)i) & 255);
  int32_t *labels = xmalloc((size_t)(n * boxes) * sizeof(int32_t));
  float *offsets = xmalloc((size_t)(n * boxes * 4) * sizeof(float));
  for (int64_t i = 0; i < n; i++) {
    float gt[3][4];
    int32_t gl[3];
    for (int g = 0; g < 3; g++) {
      float u[4];
      for (int j = 0; j < 4; j++) u[j] = (float)(rng_u32(2, (uint64_t)i, (uint64_t)(4 * g + j)) >> 8) / 16777216.0f;
      float w = 0.1f + 0.5f * u[0], h = 0.1f + 0.5f * u[1], l = u[2] * (1 - w), tp = u[3] * (1 - h);
      gt[g][0] = l, gt[g][1] = tp, gt[g][2] = l + w, gt[g][3] = tp + h;
      gl[g] = 1 + (int32_t)(rng_u32(3, (uint64_t)i, (uint64_t)g) % (uint32_t)(t->num_classes - 1));
    }
    ssd_match(&t->boxes, &gt[0][0], gl, 3, labels + i * boxes, offsets + i * boxes * 4);
  }
  void *x_dev = device_upload(dev->kind, x_host, (size_t)pixels);
  int32_t *labels_dev = device_upload(dev->kind, labels, (size_t)(n * boxes) * sizeof(int32_t));
  float *offsets_dev = device_upload(dev->kind, offsets, (size_t)(n * boxes * 4) * sizeof(float));
  free(x_host);
  free(labels);
  free(offsets);
  Tensor x = batch_images(t, x_dev, n);
  int64_t steps = config_int(&t->run.cfg, "synthetic_steps");
  SyntheticStep step = {t, &x, labels_dev, offsets_dev};  // schedule steps 0.., the first 10 untimed
  double seconds = run_time_steps(&t->run, 10, steps, synthetic_step, &step);
  if (t->run.rank == 0)
    printf("synthetic: %lld steps of %lld images: %.1f images/s (loss %.4f)\n", (long long)steps,
           (long long)t->global_batch, (double)(steps * t->global_batch) / seconds, loss_read(dev, &t->loss));
  device_free(dev->kind, x_dev);
  device_free(dev->kind, labels_dev);
  device_free(dev->kind, offsets_dev);
  return (double)(steps * t->global_batch) / seconds;
}

// ---------------------------------------------------------------- main
static void close_train_loader(void *trainer) {
  SsdTrainer *t = trainer;
  loader_close_report(t->train, t->run.rank == 0 ? stdout : NULL);
}

static const RunTraining kTraining = {.open_data = open_train_loader, .train_step = train_batch,
                                      .evaluate = evaluate, .close_data = close_train_loader};

int main(int argc, char **argv) {
  SsdTrainer t = {0};
  run_init(&t.run, &kSpec, &argc, &argv);
  const Config *cfg = &t.run.cfg;
  const Dist *dist = &t.run.dist;
  MLLog *log = &t.run.log;
  bool synthetic = config_bool(cfg, "synthetic");
  run_check_profile(&t.run, synthetic, "--synthetic");

  t.global_batch = config_int(cfg, "batch_size");
  t.local_batch = run_local_batch(&t.run, t.global_batch, "images");

  // The data set, checked before run_start (run.h): the record counts, the
  // categories, the val annotations' presence.
  if (synthetic) {
    t.train_samples = t.eval_samples = t.global_batch;
    t.num_classes = 81;
    t.category_id = xcalloc(81, sizeof(int64_t));
    if (config_string(cfg, "backbone")[0] && dist->rank == 0)
      printf("ssd: synthetic data: --backbone not read (the weights do not change a step's time)\n");
  } else {
    snprintf(t.lmdb, sizeof t.lmdb, "%s/lmdb", run_data_dir(&t.run));
    t.train_samples = lmdb_split_count(t.lmdb, "train");
    t.eval_samples = lmdb_split_count(t.lmdb, "val");
    read_categories(&t);
    char path[1100];
    val_annotations_path(&t, path, sizeof path);
    if (access(path, R_OK) != 0)
      die_input("--val_annotations", "%s does not exist (the COCO instances JSON of the val split)", path);
    find_backbone(&t);
  }
  t.steps_per_epoch = loader_train_steps(cfg, t.train_samples, dist->size, t.global_batch, "images");

  SsdModelConfig model = ssd_model_config_from(cfg, t.num_classes);
  t.box_cfg = ssd_box_config_from(cfg, &model);
  run_check(&t.run);
  model.dtype = amp_compute_dtype(t.run.amp.precision);
  ssd_model_init(&t.net, &model, t.local_batch, optim_state_count(OPT_SGD), t.run.dev.kind,
                 (uint64_t)config_int(cfg, "seed"));
  if (t.backbone[0])  // a warm start of the backbone's tensors and BN statistics, by name
    ckpt_read_named(t.backbone, &t.run.dev, (CkptTensors){&t.net.params, 0, t.net.first_own},
                    (CkptTensors){t.net.buffers, 0, t.net.buffers->count});
  if (t.backbone[0] && dist->rank == 0)
    printf("ssd: backbone from %s: %d tensors, %d buffers\n", t.backbone, t.net.first_own,
           t.net.buffers->count);
  dist_attach(&t.run.dist, &t.run.dev, &t.net.params, DIST_BUCKET_BYTES);
  dist_broadcast_params(&t.run.dist);
  t.boxes = ssd_default_boxes(&t.box_cfg);
  int64_t boxes = t.net.n_boxes, classes = t.num_classes, side = model.backbone.image_size;
  DeviceKind kind = t.run.dev.kind;
  t.loss = TENSOR(device_alloc(kind, sizeof(float)), DT_F32, kind, 1);
  t.dloc = TENSOR(device_alloc(kind, (size_t)(t.local_batch * boxes * 4) * sizeof(float)), DT_F32,
                  kind, t.local_batch, boxes, 4);
  t.dlogits = TENSOR(device_alloc(kind, (size_t)(t.local_batch * boxes * classes) * sizeof(float)),
                     DT_F32, kind, t.local_batch, boxes, classes);
  arena_init(&t.loss_scratch, "ssd loss", kind, ssd_loss_scratch_bytes(t.local_batch, boxes));
  t.dev_boxes = ssd_default_boxes_to_device(&t.run.dev, &t.boxes);
  arena_init(&t.detect_scratch, "ssd detect", kind,
             ssd_detect_batch_scratch_bytes(kind, t.local_batch, boxes, classes, &kSsdNms));
  t.dets = xmalloc((size_t)(t.local_batch * kSsdNms.max_output) * sizeof(SsdDetection));
  t.det_counts = xmalloc((size_t)t.local_batch * sizeof(int32_t));
  t.images = TENSOR(device_alloc(kind, (size_t)(t.local_batch * side * side * 3) * dtype_size(model.dtype)),
                    model.dtype, kind, t.local_batch, side, side, 3);
  {
    SsdAugment a = augment_config(&t, false);  // the loader's mean and std, applied on the device
    t.affine = channel_affine_normalize_u8(a.mean, a.std);
  }
  coco_gt_init(&t.gt);

  MLLOG_POINT(log, "global_batch_size", mlv_int(t.global_batch));
  MLLOG_POINT(log, "gradient_accumulation_steps", mlv_int(1));
  MLLOG_POINT(log, "model_bn_span", mlv_int(t.local_batch));
  MLLOG_POINT(log, "max_samples", mlv_int(config_int(cfg, "max_samples")));
  MLLOG_POINT(log, "train_samples", mlv_int(t.train_samples));
  MLLOG_POINT(log, "eval_samples", mlv_int(t.eval_samples));
  setup_optimizer(&t);
  run_resume(&t.run, &t.net.params, t.net.buffers, &t.opt);
  if (dist->rank == 0)
    printf("ssd: %lld parameters, %lld default boxes, %d classes, %s, %d rank(s), %lld images per "
           "rank per step, %lld steps per epoch\n",
           (long long)paramset_count_params(&t.net.params), (long long)boxes, (int)classes,
           amp_precision_name(t.run.amp.precision), dist->size, (long long)t.local_batch,
           (long long)t.steps_per_epoch);

  if (synthetic)
    run_benchmark(&t.run, "synthetic data", synthetic_run, &t, "images/s");
  else
    run_train(&t.run, &kTraining, &t,
              loader_keeps_last(cfg) ? t.train_samples : t.steps_per_epoch * t.global_batch,
              t.steps_per_epoch);

  coco_gt_free(&t.gt);
  device_free(kind, t.loss.data);
  device_free(kind, t.dloc.data);
  device_free(kind, t.dlogits.data);
  arena_free(&t.loss_scratch);
  arena_free(&t.detect_scratch);
  ssd_device_boxes_free(&t.dev_boxes);
  free(t.dets);
  free(t.det_counts);
  device_free(kind, t.images.data);
  free(t.category_id);
  ssd_default_boxes_free(&t.boxes);
  optim_free(&t.opt);
  dist_detach(&t.run.dist);
  ssd_model_free(&t.net);
  run_close(&t.run);
  return 0;
}
