// image.h: image decoding and encoding. JPEG through the TurboJPEG API of
// libjpeg-turbo, with DCT-domain scaling when the caller needs much less than
// the full size; PNG through libpng. Whatever the input (RGB, grey, CMYK or
// YCCK JPEG; grey, palette, alpha or 16-bit PNG) the output is 8-bit RGB,
// (height, width, 3). The format is taken from the bytes, never the file name.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "record.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Image {
  int32_t width, height;
  uint8_t *pixels;  // (height, width, 3) RGB
  size_t capacity_bytes;
} Image;

void image_free(Image *img);

// JPEG, PNG, or IMAGE_FORMAT_NONE for anything else (empty input included).
ImageFormat image_sniff(const uint8_t *bytes, size_t n_bytes);

typedef enum {
  IMAGE_OK = 0,
  IMAGE_WARNING = 1,  // decoded, but libjpeg reported corrupt data (message says what)
  IMAGE_ERROR = 2,    // not decoded
} ImageStatus;

// One per thread: holds the TurboJPEG handle and a conversion buffer.
typedef struct ImageDecoder ImageDecoder;
ImageDecoder *image_decoder_create(void);
void image_decoder_free(ImageDecoder *d);

// Width and height without decoding the pixels.
ImageStatus image_header(ImageDecoder *d, const uint8_t *bytes, size_t n_bytes,
                         int32_t *width, int32_t *height, char *msg, size_t msg_bytes);

// Decodes into out (its buffer grows as needed and is reused). A JPEG is
// decoded at the smallest DCT scale (1/8, 1/4, 1/2, 1) whose output is at least
// min_width x min_height (0, 0: full size); a PNG always at full size. The
// reason for a warning or an error goes to msg.
ImageStatus image_decode(ImageDecoder *d, const uint8_t *bytes, size_t n_bytes,
                         int32_t min_width, int32_t min_height, Image *out, char *msg,
                         size_t msg_bytes);

// The DCT scale image_decode picks: the decoded size for a width x height JPEG.
void image_jpeg_scaled_size(int32_t width, int32_t height, int32_t min_width,
                            int32_t min_height, int32_t *scaled_width, int32_t *scaled_height);

// Encoders for converters and tests; the result is malloc'ed. channels: 1
// (grey), 3 (RGB), or 4 (CMYK, JPEG only, stored the Adobe way: inverted, as
// libjpeg reads it back).
uint8_t *image_encode_jpeg(const uint8_t *pixels, int32_t width, int32_t height,
                           int channels, int quality, size_t *n_bytes);
uint8_t *image_encode_png(const uint8_t *pixels, int32_t width, int32_t height,
                          int channels, size_t *n_bytes);

#ifdef __cplusplus
}
#endif
