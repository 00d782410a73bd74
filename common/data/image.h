// image.h: image decoding and encoding. JPEG through the TurboJPEG API of
// libjpeg-turbo, with DCT-domain scaling when the caller needs much less than
// the full size; PNG through libpng. Whatever the input (RGB, grey, CMYK or
// YCCK JPEG; grey, palette, alpha (composited onto black) or 16-bit PNG) the
// output is 8-bit RGB,
// (height, width, 3). The format is taken from the bytes, never the file name.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/record.h"

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

// The largest image decoded: 64 megapixels (192 MiB of RGB), twice the
// largest photo of the suite's data sets (datasets/README.md). A header that claims more (a 20000x20000 PNG, a JPEG whose
// header says 65000x65000) is an error before any memory is taken.
#define IMAGE_MAX_PIXELS ((int64_t)64 << 20)

typedef enum {
  IMAGE_OK = 0,
  IMAGE_WARNING = 1,  // decoded, but libjpeg reported corrupt data (message says what)
  IMAGE_ERROR = 2,    // not decoded
} ImageStatus;

// One per thread: holds the TurboJPEG handle and a conversion buffer.
typedef struct ImageDecoder ImageDecoder;
ImageDecoder *image_decoder_create(void);
void image_decoder_free(ImageDecoder *d);

typedef struct ImageInfo {
  int32_t width, height;
  ImageFormat format;
  bool planar;  // a YCbCr or grey JPEG: image_decode_planes applies
} ImageInfo;

// Size and kind without decoding the pixels.
ImageStatus image_header(ImageDecoder *d, const uint8_t *bytes, size_t n_bytes, ImageInfo *info,
                         char *msg, size_t msg_bytes);

// Decodes into out (its buffer grows as needed and is reused). A JPEG is
// decoded at the smallest DCT scale (1/8, 1/4, 1/2, 1) whose output is at least
// min_width x min_height (0, 0: full size); a PNG always at full size. The
// reason for a warning or an error goes to msg.
ImageStatus image_decode(ImageDecoder *d, const uint8_t *bytes, size_t n_bytes,
                         int32_t min_width, int32_t min_height, Image *out, char *msg,
                         size_t msg_bytes);

// A JPEG's planes as stored, before chroma upsampling and colour conversion:
// Y alone (grey) or Y, Cb, Cr, the chroma planes possibly subsampled. When
// only a crop of the image is kept, resizing the planes and converting the
// crop to RGB afterwards (augment_crop_resize_planes) costs less than
// converting the whole image.
typedef struct ImagePlanes {
  int32_t width, height;  // of the Y plane
  int count;              // 1 or 3
  uint8_t *plane[3];      // (plane_height[p], plane_width[p])
  int32_t plane_width[3], plane_height[3];
  float scale_x[3], scale_y[3];  // plane pixels per Y pixel: 1, or 1/2 for subsampled chroma
  uint8_t *buffer;
  size_t capacity_bytes;
} ImagePlanes;

void image_planes_free(ImagePlanes *p);
// image_decode for planar JPEGs (ImageInfo.planar), with the same DCT scaling;
// anything else is an error.
ImageStatus image_decode_planes(ImageDecoder *d, const uint8_t *bytes, size_t n_bytes,
                                int32_t min_width, int32_t min_height, ImagePlanes *out,
                                char *msg, size_t msg_bytes);

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
