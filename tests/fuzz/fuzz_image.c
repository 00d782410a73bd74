// fuzz_image: image decoding and augmentation (image.c, augment.c,
// classify_augment_image) the way the ImageNet converter and the
// classification loader run them. The input's first byte picks the
// augmentation, the rest is the file (JPEG or PNG):
//   bit 0 train (random-resized crop and flip) or eval (resize, centre crop),
//   bits 1-2 the output side (224, 32, 7 or 1), bit 3 float output, bits 4-6
//   the seed, bit 7 the CRC-32 of each PNG chunk set right before decoding
//   (libpng refuses a critical chunk with a wrong one, so that mutated
//   headers and palettes get through to the suite's code).
// Each input goes through image_decode at the smallest DCT scale (the
// converter's check of every file, whatever its result), then
// classify_augment_image (which stops on an image that does not decode), then
// the CPU normalisation when float output is asked for.
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/augment.h"
#include "data/image.h"
#include "fuzz_util.h"
#include "image_classification/classify_data.h"

enum { kMaxSide = 224 };

typedef struct Case {
  const uint8_t *bytes;
  size_t n_bytes;
  ClassifyAugment augment;
} Case;

static ImageDecoder *g_decoder;
static ClassifyScratch g_scratch;
static Image g_checked;
static uint8_t g_pixels[kMaxSide * kMaxSide * 3];  // (out_side, out_side, 3)
static float g_normalized[kMaxSide * kMaxSide * 3];

static void decode(void *ctx) {
  const Case *c = ctx;
  char msg[512];
  (void)image_decode(g_decoder, c->bytes, c->n_bytes, 1, 1, &g_checked, msg, sizeof msg);
  const ClassifyAugment *a = &c->augment;
  classify_augment_image(g_decoder, &g_scratch, a, c->bytes, c->n_bytes, "fuzz image", 3, 17,
                         g_pixels);
  if (a->float_output)
    augment_normalize_cpu(g_pixels, g_normalized, (int64_t)a->out_side * a->out_side, a->mean,
                          a->std);
}

static ClassifyAugment augment_of(uint8_t options) {
  static const int32_t kSides[4] = {kMaxSide, 32, 7, 1};
  ClassifyAugment a = classify_augment_imagenet(options & 1, (options >> 4) & 7);
  a.out_side = kSides[(options >> 1) & 3];
  a.resize_side = (a.out_side * 8 + 6) / 7;  // 224 -> 256, as ImageNet's
  a.float_output = options & 8;
  return a;
}

static uint32_t big_endian_u32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// Sets the CRC of each whole chunk after the 8-byte PNG signature: length,
// type, data, CRC of type and data.
static void fix_png_crcs(uint8_t *png, size_t n_bytes) {
  for (size_t at = 8; at + 12 <= n_bytes;) {
    size_t length = big_endian_u32(png + at);
    if (length > n_bytes - at - 12) break;
    uint32_t crc = (uint32_t)crc32(crc32(0, NULL, 0), png + at + 4, (uInt)(4 + length));
    uint8_t *out = png + at + 8 + length;
    for (int k = 0; k < 4; k++) out[k] = (uint8_t)(crc >> (24 - 8 * k));
    at += 12 + length;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  if (!g_decoder) g_decoder = image_decoder_create();
  uint8_t *image = malloc(size);
  memcpy(image, data + 1, size - 1);
  if (data[0] & 0x80) fix_png_crcs(image, size - 1);
  Case c = {image, size - 1, augment_of(data[0])};
  fuzz_call(decode, &c, FUZZ_KEEP_LEFTOVERS);
  free(image);
  return 0;
}
