// fuzz_inputs.h: what a harness and the seed generator (fuzz_seeds.c) must
// agree on, so that the seeds are inputs the harness accepts.
#pragma once
#include "core/config.h"
#include "device/tensor.h"
#include "train/amp.h"
#include "train/run.h"

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
