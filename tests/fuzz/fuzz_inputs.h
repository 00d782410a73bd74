// fuzz_inputs.h: what a harness and the seed generator (fuzz_seeds.c) must
// agree on, so that the seeds are inputs the harness accepts.
#pragma once
#include "core/config.h"
#include "device/tensor.h"
#include "train/amp.h"
#include "train/run.h"
#include "language/bert_model.h"
#include "language/squad_features.h"
#include "object_detection/coco_eval.h"

// fuzz_ckpt's model: a small conv net with Adam's two state buffers and
// batch-norm running statistics as model buffers.
static const ParamSpec kFuzzCkptParams[] = {
    {"conv1.weight", 4, {4, 3, 1, 1}, 0},
    {"bn1.weight", 1, {4}, PARAM_NO_DECAY},
    {"bn1.bias", 1, {4}, PARAM_NO_DECAY},
    {"fc.weight", 2, {2, 4}, 0},
};
static const ParamSpec kFuzzCkptBuffers[] = {
    {"bn1.running_mean", 1, {4}, 0},
    {"bn1.running_var", 1, {4}, 0},
};
#define FUZZ_CKPT_N_PARAMS ((int)(sizeof kFuzzCkptParams / sizeof kFuzzCkptParams[0]))
#define FUZZ_CKPT_N_BUFFERS ((int)(sizeof kFuzzCkptBuffers / sizeof kFuzzCkptBuffers[0]))
#define FUZZ_CKPT_N_STATE 2

// The keys every trainer has (run.h, amp.h), at their defaults: what
// fuzz_ckpt checks a checkpoint's run config against (the seed's is their
// snapshot), and the start of fuzz_config's table.
static inline void fuzz_trainer_config(Config *c) {
  config_init(c);
  config_add_keys(c, run_keys, run_key_count);
  config_add_keys(c, amp_config_keys, amp_config_key_count);
}

// fuzz_movielens_csv's split: fewer ratings per user and test negatives than
// MLPerf's 20 and 999, so that small inputs reach the split.
#define FUZZ_ML_MIN_RATINGS 3
#define FUZZ_ML_NEGATIVES 9

// fuzz_imagenet_val_csv's classes (train/'s folder names).
static const char *const kFuzzWnids[] = {"n01440764", "n01443537", "n01484850", "n01491361",
                                         "n01494475"};
#define FUZZ_N_WNIDS ((int)(sizeof kFuzzWnids / sizeof kFuzzWnids[0]))

// fuzz_coco_results' ground truth, which fuzz_seeds' results files score
// against: three images, categories with COCO's gaps, a crowd, an
// annotation of id 0 (pycocotools' "no match" quirk) and a box of no area.
static inline void fuzz_coco_gt(CocoGt *gt) {
  coco_gt_init(gt);
  coco_gt_add_image(gt, 1, 640, 480);
  coco_gt_add_image(gt, 5, 320, 200);
  coco_gt_add_image(gt, 139, 64, 64);
  coco_gt_add_category(gt, 1, "person");
  coco_gt_add_category(gt, 3, "car");
  coco_gt_add_category(gt, 90, "toothbrush");
  const CocoAnnotation anns[] = {
      {.id = 1, .image_id = 1, .category_id = 1, .bbox = {10, 10, 50, 40}, .area = 2000},
      {.id = 2, .image_id = 1, .category_id = 3, .bbox = {100, 80, 200, 150}, .area = 30000},
      {.id = 0, .image_id = 5, .category_id = 3, .bbox = {0, 0, 20, 20}, .area = 400},
      {.id = 4, .image_id = 5, .category_id = 90, .bbox = {5, 5, 100, 120}, .area = 12000,
       .iscrowd = true},
      {.id = 5, .image_id = 139, .category_id = 1, .bbox = {3, 4, 0, 7}, .area = 0},
  };
  for (size_t i = 0; i < sizeof anns / sizeof anns[0]; i++) coco_gt_add_annotation(gt, &anns[i]);
  coco_gt_index(gt, "fuzz_coco_gt");
}

// fuzz_squad_json's vocabulary (fuzz_seeds writes it as a fuzz_wordpiece
// seed too): the special tokens, words and pieces of the committed SQuAD
// seeds.
static const char *const kFuzzWpTokens[] = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "is", "of", "what", "who", "where",
    "cat", "sat", "on", "mat", "dog", "ran", "##s", "##ed", "##ing", "run", "cafe", "paris",
    "in", "city", "capital", "france", ".", ",", "?", "\"", "'", "(", ")", "1", "##9", "##0",
    "中", "国", "e", "##e", "c", "##a", "##f"};
#define FUZZ_WP_N_TOKENS ((int)(sizeof kFuzzWpTokens / sizeof kFuzzWpTokens[0]))

// fuzz_squad_json's windows: short, so that small contexts give several.
static const SquadFeatureConfig kFuzzSquadConfig = {
    .max_seq_length = 16, .doc_stride = 3, .max_query_length = 5};

// fuzz_safetensors' model: a BERT of one layer, width 4 and 8 words.
static inline BertShape fuzz_bert_shape(void) {
  return (BertShape){.vocab = 8, .d_model = 4, .d_ff = 8, .heads = 2, .layers = 1,
                     .max_positions = 8, .type_vocab = 2, .ln_eps = 1e-12f, .dtype = DT_F32,
                     .max_batch = 1, .max_len = 8};
}
