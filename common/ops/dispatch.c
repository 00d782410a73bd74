// dispatch.c: every op's dispatcher, op_x(dev, ...) calling op_x_cpu or
// op_x_cuda by dev->kind, generated from the families' lists (ops.h,
// "declaring ops"). A new family adds its list here.
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/conv.h"
#include "ops/dense.h"
#include "ops/elementwise.h"
#include "ops/layout.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops/reduce.h"

OPS_DEFINE_DISPATCHERS(OPS_ELEMENTWISE)
OPS_DEFINE_DISPATCHERS(OPS_LAYOUT)
OPS_DEFINE_DISPATCHERS(OPS_REDUCE)
OPS_DEFINE_DISPATCHERS(OPS_ACTIVATION)
OPS_DEFINE_DISPATCHERS(OPS_NORM)
OPS_DEFINE_DISPATCHERS(OPS_ATTENTION)
OPS_DEFINE_DISPATCHERS(OPS_DENSE)
OPS_DEFINE_DISPATCHERS(OPS_CONV)
OPS_DEFINE_DISPATCHERS(OPS_POOL)
OPS_DEFINE_DISPATCHERS(OPS_LOSS)
