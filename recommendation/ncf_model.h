// ncf_model.h: NeuMF (He et al. 2017, the MLPerf NCF model) over the op
// library: a GMF branch (user and item embeddings of mf_dim, multiplied) and
// an MLP branch (user and item embeddings of layers[0] / 2, concatenated,
// then Linear + ReLU to each of layers[1..]), concatenated into one Linear
// to a logit. Initialised as the MLPerf reference: embeddings N(0, 0.01),
// MLP weights Glorot-uniform, the final weight LeCun-uniform, biases
// PyTorch's default U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
#pragma once
#include <stdint.h>

#include "device/device.h"
#include "device/tensor.h"

#define NCF_MAX_LAYERS 8

typedef struct NcfShape {
  int64_t n_users, n_items;
  int64_t mf_dim;
  int n_layers;                     // layers[0] is the MLP input width
  int64_t layers[NCF_MAX_LAYERS];   // e.g. 256, 256, 128, 64
  DType dtype;                      // compute dtype of the linear layers: DT_F32,
                                    // or DT_F16 / DT_BF16 on CUDA (see below)
} NcfShape;

// Precision (shape.dtype). fp32: everything fp32. fp16 / bf16 (CUDA only),
// as PyTorch's autocast does it: the embedding tables, their lookups and the
// GMF product stay fp32; the linear layers read a low-precision copy of their
// weights (cast at every forward) and compute in the low dtype from the MLP
// input on (cast once), through the ReLUs, to the concatenation; the logits,
// the loss and every parameter gradient are fp32.
//
// Activations of one batch of up to max_rows (user, item) pairs, carved from
// one arena at init: a step allocates nothing. "lowp" below means the
// compute dtype; in fp32 the *_lowp tensors are the fp32 ones themselves.
typedef struct NcfActs {
  Tensor users, items, labels;  // (R) int32, int32, fp32
  Tensor gmf_u, gmf_i, gmf;     // (R, mf) fp32
  Tensor gmf_lowp;              // (R, mf) gmf in lowp
  Tensor mlp_u, mlp_i;          // (R, layers[0] / 2) fp32
  Tensor mlp_in;                // (R, layers[0]) fp32
  Tensor mlp_in_lowp;           // (R, layers[0]) lowp
  Tensor act[NCF_MAX_LAYERS];   // (R, layers[k]) for k >= 1: ReLU outputs, lowp
  Tensor cat;                   // (R, mf + layers[last]) lowp
  Tensor logits;                // (R, 1) fp32
  Tensor loss;                  // (1) fp32
  Tensor dlogits;               // (R, 1) fp32
  Tensor dlogits_lowp;          // (R, 1) lowp
  Tensor dcat;                  // (R, mf + layers[last]) lowp
  Tensor dgmf_lowp;             // (R, mf) lowp
  Tensor dgmf, dgmf_u, dgmf_i;  // (R, mf) fp32
  Tensor dact[2];               // (R, max layers) ping-pong, lowp
  Tensor dmlp_in;               // (R, layers[0]) lowp
  Tensor dmlp_u, dmlp_i;        // (R, layers[0] / 2) lowp
} NcfActs;

typedef struct NcfModel {
  NcfShape shape;
  ParamSpec specs[4 + 2 * NCF_MAX_LAYERS + 2];
  char names[4 + 2 * NCF_MAX_LAYERS + 2][16];
  ParamSet ps;
  int64_t max_rows;
  Arena arena;
  NcfActs a;
  void *lowp_weights;  // lowp only: the linear layers' weights, from tensor
                       // NCF_FIRST_LINEAR on (the tables are not copied)
} NcfModel;

// Parameter order: the four embedding tables, then (weight, bias) of each
// MLP layer, then the final layer's.
enum { NCF_MF_USER, NCF_MF_ITEM, NCF_MLP_USER, NCF_MLP_ITEM, NCF_FIRST_LINEAR };
static inline int ncf_w(int layer) { return NCF_FIRST_LINEAR + 2 * (layer - 1); }  // layer >= 1
static inline int ncf_final_w(const NcfShape *s) { return ncf_w(s->n_layers); }

// Parses "256,256,128,64" into shape->layers; a bad list is an input error
// naming the key.
void ncf_parse_layers(const char *key, const char *text, NcfShape *shape);

// Builds the parameter table (n_state optimizer buffers), initialises the
// weights from seed (on the host, so CPU and GPU start from the same bits)
// and sizes the activations for max_rows pairs.
void ncf_model_init(NcfModel *m, const NcfShape *shape, int n_state, int64_t max_rows,
                    uint64_t seed, DeviceKind device);
void ncf_model_free(NcfModel *m);

// Logits (rows, 1) into m->a.logits for the pairs in m->a.users / m->a.items.
void ncf_model_forward(NcfModel *m, const Device *dev, int64_t rows);
// After ncf_model_forward: BCE-with-logits against m->a.labels into
// m->a.loss (the mean over the rows), and every parameter gradient into
// m->ps.grads, overwritten, or with accumulate added to what is there (a
// later micro-batch of the same batch). grad_scale multiplies the gradients:
// the AMP loss scale (1, or fp16's dynamic one: amp.h), times this
// micro-batch's share of the batch's rows. hook hears of each tensor as its
// gradient is final, last tensor first.
void ncf_model_backward(NcfModel *m, const Device *dev, int64_t rows, float grad_scale,
                        bool accumulate, GradHook hook);
