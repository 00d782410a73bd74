// image.c: JPEG (TurboJPEG) and PNG (libpng) decoding and encoding (image.h).
#include "data/image.h"

#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "core/check.h"

struct ImageDecoder {
  tjhandle tj;
  uint8_t *convert;  // CMYK/YCCK JPEGs: (height, width, 4); 16-bit PNGs: (height, width, 3) u16
  size_t convert_bytes;
};

void image_free(Image *img) {
  free(img->pixels);
  memset(img, 0, sizeof *img);
}

static void image_reserve(Image *img, int32_t width, int32_t height) {
  size_t bytes = (size_t)width * (size_t)height * 3;
  if (bytes > img->capacity_bytes) {
    free(img->pixels);
    img->pixels = xmalloc(bytes);
    img->capacity_bytes = bytes;
  }
  img->width = width;
  img->height = height;
}

ImageFormat image_sniff(const uint8_t *bytes, size_t n_bytes) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n_bytes >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff)
    return IMAGE_FORMAT_JPEG;
  if (n_bytes >= 8 && memcmp(bytes, kPng, 8) == 0) return IMAGE_FORMAT_PNG;
  return IMAGE_FORMAT_NONE;
}

ImageDecoder *image_decoder_create(void) {
  ImageDecoder *d = xcalloc(1, sizeof *d);
  d->tj = tjInitDecompress();
  if (!d->tj) DIE("tjInitDecompress: %s", tjGetErrorStr2(NULL));
  return d;
}

void image_decoder_free(ImageDecoder *d) {
  if (!d) return;
  tjDestroy(d->tj);
  free(d->convert);
  free(d);
}

static ImageStatus not_an_image(const uint8_t *bytes, size_t n_bytes, char *msg,
                                size_t msg_bytes) {
  if (n_bytes == 0) {
    snprintf(msg, msg_bytes, "empty (0 bytes), not an image");
  } else {
    uint8_t head[4] = {0};
    memcpy(head, bytes, n_bytes < 4 ? n_bytes : 4);
    snprintf(msg, msg_bytes, "not a JPEG or PNG image (%zu bytes starting %02x %02x %02x %02x)",
             n_bytes, head[0], head[1], head[2], head[3]);
  }
  return IMAGE_ERROR;
}

// A failed TurboJPEG call: libjpeg's warnings (corrupt or truncated data,
// decoded anyway) are told apart from errors.
// TurboJPEG 2.1 leaves a handle mid-stream after a failure, which spoils the
// next image it reads, so the handle is replaced.
static ImageStatus tj_status(ImageDecoder *d, const char *what, char *msg, size_t msg_bytes) {
  snprintf(msg, msg_bytes, "%s: %s", what, tjGetErrorStr2(d->tj));
  ImageStatus status = tjGetErrorCode(d->tj) == TJERR_WARNING ? IMAGE_WARNING : IMAGE_ERROR;
  tjDestroy(d->tj);
  d->tj = tjInitDecompress();
  if (!d->tj) DIE("tjInitDecompress: %s", tjGetErrorStr2(NULL));
  return status;
}

// The JPEG header; a header cut short can "succeed" with a warning and no
// size, which counts as an error here.
typedef struct JpegHeader {
  int width, height, subsamp, colorspace;
} JpegHeader;

// Whether a header's size is within IMAGE_MAX_PIXELS; else the reason in msg.
static bool size_allowed(int64_t width, int64_t height, char *msg, size_t msg_bytes) {
  if (width * height <= IMAGE_MAX_PIXELS) return true;
  snprintf(msg, msg_bytes, "%lldx%lld pixels: over this suite's limit of %lld megapixels a decode "
           "(IMAGE_MAX_PIXELS)", (long long)width, (long long)height,
           (long long)(IMAGE_MAX_PIXELS >> 20));
  return false;
}

static bool jpeg_header(ImageDecoder *d, const uint8_t *bytes, size_t n_bytes, JpegHeader *h,
                        char *msg, size_t msg_bytes) {
  h->width = h->height = 0;
  int rc = tjDecompressHeader3(d->tj, bytes, (unsigned long)n_bytes, &h->width, &h->height,
                               &h->subsamp, &h->colorspace);
  if (rc == 0 && h->width > 0 && h->height > 0) return size_allowed(h->width, h->height, msg, msg_bytes);
  tj_status(d, "bad JPEG header", msg, msg_bytes);
  return false;
}

// Reads the PNG header into img; false with the reason in msg.
static bool png_begin(png_image *img, const uint8_t *bytes, size_t n_bytes, char *msg,
                      size_t msg_bytes) {
  memset(img, 0, sizeof *img);
  img->version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_memory(img, bytes, n_bytes)) {
    if (size_allowed(img->width, img->height, msg, msg_bytes)) return true;
    png_image_free(img);
    return false;
  }
  snprintf(msg, msg_bytes, "bad PNG header: %s", img->message);
  return false;
}

// Planes the TurboJPEG YUV decoder can deliver: YCbCr or grey with a known
// subsampling.
static bool jpeg_planar(const JpegHeader *h) {
  return h->subsamp >= 0 && h->subsamp < TJ_NUMSAMP &&
         (h->colorspace == TJCS_YCbCr || h->colorspace == TJCS_GRAY);
}

ImageStatus image_header(ImageDecoder *d, const uint8_t *bytes, size_t n_bytes, ImageInfo *info,
                         char *msg, size_t msg_bytes) {
  memset(info, 0, sizeof *info);
  info->format = image_sniff(bytes, n_bytes);
  switch (info->format) {
    case IMAGE_FORMAT_JPEG: {
      JpegHeader h;
      if (!jpeg_header(d, bytes, n_bytes, &h, msg, msg_bytes)) return IMAGE_ERROR;
      info->width = h.width;
      info->height = h.height;
      info->planar = jpeg_planar(&h);
      return IMAGE_OK;
    }
    case IMAGE_FORMAT_PNG: {
      png_image img;
      if (!png_begin(&img, bytes, n_bytes, msg, msg_bytes)) return IMAGE_ERROR;
      info->width = (int32_t)img.width;
      info->height = (int32_t)img.height;
      png_image_free(&img);
      return IMAGE_OK;
    }
    case IMAGE_FORMAT_NONE: break;
  }
  return not_an_image(bytes, n_bytes, msg, msg_bytes);
}

void image_jpeg_scaled_size(int32_t width, int32_t height, int32_t min_width,
                            int32_t min_height, int32_t *scaled_width, int32_t *scaled_height) {
  int count;
  const tjscalingfactor *factors = tjGetScalingFactors(&count);
  *scaled_width = width;
  *scaled_height = height;
  if (min_width <= 0 && min_height <= 0) return;
  for (int i = 0; i < count; i++) {
    // 1/2, 1/4 and 1/8 only: libjpeg-turbo has SIMD code for those; the
    // others (3/8 .. 7/8) run scalar IDCTs and upsampling and measured slower
    // than the full-size decode (7/8: 1.4x, 3/4: 1.2x its time).
    if (factors[i].num != 1) continue;
    int32_t w = TJSCALED(width, factors[i]), h = TJSCALED(height, factors[i]);
    if (w >= min_width && h >= min_height && (int64_t)w * h < (int64_t)*scaled_width * *scaled_height) {
      *scaled_width = w;
      *scaled_height = h;
    }
  }
}

static uint8_t *convert_buffer(ImageDecoder *d, size_t bytes) {
  if (bytes > d->convert_bytes) {
    free(d->convert);
    d->convert = xmalloc(bytes);
    d->convert_bytes = bytes;
  }
  return d->convert;
}

// Adobe CMYK as libjpeg delivers it is inverted (255 = no ink), so each RGB
// channel is its inverted ink times the inverted black.
static void cmyk_to_rgb(const uint8_t *cmyk, uint8_t *rgb, size_t pixels) {
  for (size_t i = 0; i < pixels; i++, cmyk += 4, rgb += 3) {
    uint32_t k = cmyk[3];
    for (int c = 0; c < 3; c++) rgb[c] = (uint8_t)((cmyk[c] * k + 127) / 255);
  }
}

static ImageStatus decode_jpeg(ImageDecoder *d, const uint8_t *bytes, size_t n_bytes,
                               int32_t min_width, int32_t min_height, Image *out, char *msg,
                               size_t msg_bytes) {
  JpegHeader h;
  if (!jpeg_header(d, bytes, n_bytes, &h, msg, msg_bytes)) return IMAGE_ERROR;
  int32_t sw, sh;
  image_jpeg_scaled_size(h.width, h.height, min_width, min_height, &sw, &sh);
  image_reserve(out, sw, sh);
  bool cmyk = h.colorspace == TJCS_CMYK || h.colorspace == TJCS_YCCK;
  uint8_t *dst = out->pixels;
  if (cmyk) dst = convert_buffer(d, (size_t)sw * sh * 4);
  ImageStatus status = IMAGE_OK;
  if (tjDecompress2(d->tj, bytes, (unsigned long)n_bytes, dst, sw, 0, sh,
                    cmyk ? TJPF_CMYK : TJPF_RGB, 0) != 0)
    status = tj_status(d, "JPEG decode", msg, msg_bytes);
  if (cmyk && status != IMAGE_ERROR) cmyk_to_rgb(dst, out->pixels, (size_t)sw * sh);
  return status;
}

static ImageStatus decode_png(ImageDecoder *d, const uint8_t *bytes, size_t n_bytes, Image *out,
                              char *msg, size_t msg_bytes) {
  png_image img;
  if (!png_begin(&img, bytes, n_bytes, msg, msg_bytes)) return IMAGE_ERROR;
  // libpng takes 16-bit samples for linear light and would gamma-encode them
  // on the way to 8 bits; they are read as they are and scaled instead.
  bool wide = img.format & PNG_FORMAT_FLAG_LINEAR;
  img.format = wide ? PNG_FORMAT_LINEAR_RGB : PNG_FORMAT_RGB;  // grey, palette -> RGB
  image_reserve(out, (int32_t)img.width, (int32_t)img.height);
  size_t values = (size_t)img.width * img.height * 3;
  void *dst = wide ? convert_buffer(d, values * sizeof(uint16_t)) : out->pixels;
  // Transparency is composited onto black (without a background libpng would
  // composite onto whatever the buffer held).
  png_color black = {0, 0, 0};
  if (!png_image_finish_read(&img, &black, dst, 0, NULL)) {
    snprintf(msg, msg_bytes, "PNG decode: %s", img.message);
    png_image_free(&img);
    return IMAGE_ERROR;
  }
  const uint16_t *wide_values = dst;
  for (size_t i = 0; wide && i < values; i++) out->pixels[i] = (uint8_t)((wide_values[i] + 128u) / 257u);
  return IMAGE_OK;
}

ImageStatus image_decode(ImageDecoder *d, const uint8_t *bytes, size_t n_bytes,
                         int32_t min_width, int32_t min_height, Image *out, char *msg,
                         size_t msg_bytes) {
  switch (image_sniff(bytes, n_bytes)) {
    case IMAGE_FORMAT_JPEG:
      return decode_jpeg(d, bytes, n_bytes, min_width, min_height, out, msg, msg_bytes);
    case IMAGE_FORMAT_PNG: return decode_png(d, bytes, n_bytes, out, msg, msg_bytes);
    case IMAGE_FORMAT_NONE: break;
  }
  return not_an_image(bytes, n_bytes, msg, msg_bytes);
}

void image_planes_free(ImagePlanes *p) {
  free(p->buffer);
  memset(p, 0, sizeof *p);
}

ImageStatus image_decode_planes(ImageDecoder *d, const uint8_t *bytes, size_t n_bytes,
                                int32_t min_width, int32_t min_height, ImagePlanes *out,
                                char *msg, size_t msg_bytes) {
  if (image_sniff(bytes, n_bytes) != IMAGE_FORMAT_JPEG) return not_an_image(bytes, n_bytes, msg, msg_bytes);
  JpegHeader h;
  if (!jpeg_header(d, bytes, n_bytes, &h, msg, msg_bytes)) return IMAGE_ERROR;
  if (!jpeg_planar(&h)) {
    snprintf(msg, msg_bytes, "not a YCbCr or grey JPEG (colour space %d)", h.colorspace);
    return IMAGE_ERROR;
  }
  image_jpeg_scaled_size(h.width, h.height, min_width, min_height, &out->width, &out->height);
  out->count = h.subsamp == TJSAMP_GRAY ? 1 : 3;
  size_t total = 0;
  for (int p = 0; p < out->count; p++) {
    out->plane_width[p] = tjPlaneWidth(p, out->width, h.subsamp);
    out->plane_height[p] = tjPlaneHeight(p, out->height, h.subsamp);
    out->scale_x[p] = p ? 8.0f / (float)tjMCUWidth[h.subsamp] : 1.0f;
    out->scale_y[p] = p ? 8.0f / (float)tjMCUHeight[h.subsamp] : 1.0f;
    total += (size_t)out->plane_width[p] * out->plane_height[p];
  }
  if (total > out->capacity_bytes) {
    free(out->buffer);
    out->buffer = xmalloc(total);
    out->capacity_bytes = total;
  }
  uint8_t *next = out->buffer;
  for (int p = 0; p < out->count; p++) {
    out->plane[p] = next;
    next += (size_t)out->plane_width[p] * out->plane_height[p];
  }
  if (tjDecompressToYUVPlanes(d->tj, bytes, (unsigned long)n_bytes, out->plane, out->width, NULL,
                              out->height, 0) != 0)
    return tj_status(d, "JPEG decode", msg, msg_bytes);
  return IMAGE_OK;
}

uint8_t *image_encode_jpeg(const uint8_t *pixels, int32_t width, int32_t height,
                           int channels, int quality, size_t *n_bytes) {
  int format = channels == 1 ? TJPF_GRAY : channels == 3 ? TJPF_RGB : TJPF_CMYK;
  if (channels != 1 && channels != 3 && channels != 4) DIE("JPEG with %d channels", channels);
  tjhandle tj = tjInitCompress();
  if (!tj) DIE("tjInitCompress: %s", tjGetErrorStr2(NULL));
  unsigned char *jpeg = NULL;
  unsigned long jpeg_bytes = 0;
  CHECK_TJ(tjCompress2(tj, pixels, width, 0, height, format, &jpeg, &jpeg_bytes,
                       channels == 1 ? TJSAMP_GRAY : TJSAMP_420, quality, 0), tj);
  uint8_t *copy = xmalloc(jpeg_bytes);
  memcpy(copy, jpeg, jpeg_bytes);
  *n_bytes = jpeg_bytes;
  tjFree(jpeg);
  tjDestroy(tj);
  return copy;
}

uint8_t *image_encode_png(const uint8_t *pixels, int32_t width, int32_t height, int channels,
                          size_t *n_bytes) {
  if (channels != 1 && channels != 3) DIE("PNG with %d channels", channels);
  png_image img;
  memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = (png_uint_32)width;
  img.height = (png_uint_32)height;
  img.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t bytes = 0;
  if (!png_image_write_to_memory(&img, NULL, &bytes, 0, pixels, 0, NULL))
    DIE("png_image_write_to_memory (size): %s", img.message);
  uint8_t *png = xmalloc(bytes);
  if (!png_image_write_to_memory(&img, png, &bytes, 0, pixels, 0, NULL))
    DIE("png_image_write_to_memory: %s", img.message);
  *n_bytes = bytes;
  return png;
}
