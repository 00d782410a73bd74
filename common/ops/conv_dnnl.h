// conv_dnnl.h: the CPU convolutions' fast path, oneDNN (Debian libdnnl),
// behind op_conv2d_*_cpu (conv.c). Internal to the op library.
//
// A primitive convolves a chunk of images on the thread that runs it: conv.c
// cuts the batch into chunks fixed by the shapes alone and shares them among
// the team, as it does for its own im2col + GEMM path, so the results do not
// depend on the number of threads. oneDNN is told it has one thread when a
// primitive is made and when it runs.
//
// Built with HAVE_DNNL=1 (make DNNL=1, the default where dnnl.h is
// installed); otherwise conv_dnnl_get always answers NULL and conv.c keeps to
// its plain path, which is also the reference the tests hold oneDNN to.
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "ops/conv.h"

typedef enum { CONV_DNNL_FWD, CONV_DNNL_BWD_DATA, CONV_DNNL_BWD_FILTER } ConvDnnlKind;

typedef struct ConvDnnl ConvDnnl;

// The primitive for `images` images of geometry g (its n ignored), made once
// and kept; NULL where oneDNN is off (op_conv2d_cpu_library) or has none.
// Call it outside parallel regions.
const ConvDnnl *conv_dnnl_get(ConvDnnlKind kind, const ConvGeometry *g, const ConvParams *p,
                              int64_t images, bool bias);
// The scratch one run needs (its own, per thread).
size_t conv_dnnl_scratch_bytes(const ConvDnnl *c);
// The kernel's filters are in a layout of its choosing (blocked by channels),
// of this many bytes: FWD and BWD_DATA read w converted into it, BWD_FILTER
// writes its dw in it. Primitives for different chunk sizes may differ.
size_t conv_dnnl_filter_bytes(const ConvDnnl *c);
bool conv_dnnl_same_filter_layout(const ConvDnnl *a, const ConvDnnl *b);
// FWD, BWD_DATA: from = w (KRSC), to = the kernel's layout; BWD_FILTER: from
// = a dw in the kernel's layout, to = KRSC. On the calling thread.
void conv_dnnl_filter(const ConvDnnl *c, const float *from, float *to);
// One run, on the calling thread. FWD: in = x, other = w (kernel's layout),
// out = y, bias or NULL; BWD_DATA: in = dy, other = w (kernel's layout), out =
// dx; BWD_FILTER: in = x, other = dy, out = dw (kernel's layout, overwritten).
void conv_dnnl_run(const ConvDnnl *c, const float *in, const float *other, const float *bias,
                   float *out, void *scratch);
