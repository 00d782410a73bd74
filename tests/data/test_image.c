// Image decoding (JPEG RGB/grey/CMYK, PNG, DCT scaling, bad input), the
// crop-resize and the normalisation (data/image.h, data/augment.h).
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/augment.h"
#include "data/image.h"
#include "tests/data/image_test_util.h"
#include "tests/harness/test.h"

static void jpeg_rgb(void) {
  uint8_t *src = pattern(97, 61, 3);
  size_t n;
  uint8_t *jpeg = image_encode_jpeg(src, 97, 61, 3, 95, &n);
  CHECK_EQ_INT(image_sniff(jpeg, n), IMAGE_FORMAT_JPEG);
  Image img = {0};
  char msg[512];
  REQUIRE(decode(jpeg, n, 0, 0, &img, msg) == IMAGE_OK);
  REQUIRE(img.width == 97 && img.height == 61);
  // Quality 95 with 4:2:0 chroma on a smooth pattern: a few levels at most.
  double err = mean_abs_diff(img.pixels, src, 97 * 61 * 3);
  CHECK_MSG(err < 3.0, "mean |error| %.2f", err);
  image_free(&img);
  free(jpeg);
  free(src);
}

static void jpeg_grey_becomes_rgb(void) {
  uint8_t *src = pattern(40, 30, 1);
  size_t n;
  uint8_t *jpeg = image_encode_jpeg(src, 40, 30, 1, 95, &n);
  Image img = {0};
  char msg[512];
  REQUIRE(decode(jpeg, n, 0, 0, &img, msg) == IMAGE_OK);
  REQUIRE(img.width == 40 && img.height == 30);
  int grey = 0;
  double err = 0;
  for (int i = 0; i < 40 * 30; i++) {
    const uint8_t *p = img.pixels + 3 * i;
    grey += p[0] == p[1] && p[1] == p[2];
    err += fabs((double)p[0] - src[i]);
  }
  CHECK_EQ_INT(grey, 40 * 30);
  CHECK_MSG(err / (40 * 30) < 2.0, "mean |error| %.2f", err / (40 * 30));
  image_free(&img);
  free(jpeg);
  free(src);
}

static void jpeg_cmyk_becomes_rgb(void) {
  enum { W = 64, H = 48 };
  uint8_t *rgb = pattern(W, H, 3), *cmyk = malloc(W * H * 4);
  // Inverted (Adobe) CMYK of the RGB pattern: K' = max channel, C' = R / K'.
  for (int i = 0; i < W * H; i++) {
    const uint8_t *p = rgb + 3 * i;
    int k = p[0] > p[1] ? p[0] : p[1];
    k = k > p[2] ? k : p[2];
    for (int c = 0; c < 3; c++) cmyk[4 * i + c] = (uint8_t)(k ? (p[c] * 255 + k / 2) / k : 0);
    cmyk[4 * i + 3] = (uint8_t)k;
  }
  size_t n;
  uint8_t *jpeg = image_encode_jpeg(cmyk, W, H, 4, 95, &n);
  Image img = {0};
  char msg[512];
  REQUIRE(decode(jpeg, n, 0, 0, &img, msg) == IMAGE_OK);
  REQUIRE(img.width == W && img.height == H);
  double err = mean_abs_diff(img.pixels, rgb, W * H * 3);
  CHECK_MSG(err < 4.0, "mean |error| %.2f against the RGB the CMYK was made from", err);
  image_free(&img);
  free(jpeg);
  free(cmyk);
  free(rgb);
}

static void png_rgb_and_grey_exact(void) {
  uint8_t *src = pattern(33, 21, 3), *grey = pattern(33, 21, 1);
  size_t n, n_grey;
  uint8_t *png = image_encode_png(src, 33, 21, 3, &n);
  uint8_t *png_grey = image_encode_png(grey, 33, 21, 1, &n_grey);
  CHECK_EQ_INT(image_sniff(png, n), IMAGE_FORMAT_PNG);
  Image img = {0};
  char msg[512];
  REQUIRE(decode(png, n, 0, 0, &img, msg) == IMAGE_OK);
  REQUIRE(img.width == 33 && img.height == 21);
  CHECK(memcmp(img.pixels, src, 33 * 21 * 3) == 0);
  // Decoding a smaller size is asked for, but PNG has no DCT scaling.
  REQUIRE(decode(png_grey, n_grey, 5, 5, &img, msg) == IMAGE_OK);
  REQUIRE(img.width == 33 && img.height == 21);
  int same = 0;
  for (int i = 0; i < 33 * 21; i++)
    same += img.pixels[3 * i] == grey[i] && img.pixels[3 * i + 1] == grey[i] &&
            img.pixels[3 * i + 2] == grey[i];
  CHECK_EQ_INT(same, 33 * 21);
  image_free(&img);
  free(png);
  free(png_grey);
  free(src);
  free(grey);
}

// A PNG of a format image_encode_png does not write; its size, 0 on failure.
static size_t write_png(const void *pixels, int w, int h, uint32_t format, uint8_t *png,
                        size_t capacity) {
  png_image img;
  memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = (png_uint_32)w;
  img.height = (png_uint_32)h;
  img.format = format;
  png_alloc_size_t n = capacity;
  return png_image_write_to_memory(&img, png, &n, 0, pixels, 0, NULL) ? n : 0;
}

// A 16-bit grey PNG keeps its values (scaled to 8 bits), not gamma-encoded.
static void png_16_bit_scaled(void) {
  enum { W = 7, H = 5 };
  uint16_t grey[W * H];
  for (int i = 0; i < W * H; i++) grey[i] = (uint16_t)(i * 1900);
  uint8_t png[4096];
  size_t n = write_png(grey, W, H, PNG_FORMAT_LINEAR_Y, png, sizeof png);
  REQUIRE(n > 0);
  Image out = {0};
  char msg[512];
  REQUIRE(decode(png, n, 0, 0, &out, msg) == IMAGE_OK);
  REQUIRE(out.width == W && out.height == H);
  int exact = 0;
  for (int i = 0; i < W * H; i++)
    exact += out.pixels[3 * i] == (grey[i] + 128) / 257 && out.pixels[3 * i + 2] == out.pixels[3 * i];
  CHECK_EQ_INT(exact, W * H);
  image_free(&out);
}

// An RGBA PNG: opaque pixels keep their colour, transparent ones turn black,
// whatever the output buffer held before.
static void png_alpha_onto_black(void) {
  enum { W = 4, H = 2 };
  uint8_t rgba[W * H * 4];
  for (int i = 0; i < W * H; i++) {
    rgba[4 * i] = 200, rgba[4 * i + 1] = 100, rgba[4 * i + 2] = 50;
    rgba[4 * i + 3] = i % 2 ? 255 : 0;
  }
  uint8_t png[4096];
  size_t n = write_png(rgba, W, H, PNG_FORMAT_RGBA, png, sizeof png);
  REQUIRE(n > 0);
  Image out = {.pixels = malloc(W * H * 3), .capacity_bytes = W * H * 3};
  memset(out.pixels, 0x77, W * H * 3);
  char msg[512];
  REQUIRE(decode(png, n, 0, 0, &out, msg) == IMAGE_OK);
  int right = 0;
  for (int i = 0; i < W * H; i++) {
    const uint8_t *p = out.pixels + 3 * i;
    right += i % 2 ? p[0] == 200 && p[1] == 100 && p[2] == 50 : p[0] == 0 && p[1] == 0 && p[2] == 0;
  }
  CHECK_EQ_INT(right, W * H);
  image_free(&out);
}

static void dct_scaling_picks_smallest_enough(void) {
  int32_t w, h;
  image_jpeg_scaled_size(800, 600, 100, 75, &w, &h);
  CHECK(w == 100 && h == 75);  // 1/8
  image_jpeg_scaled_size(800, 600, 101, 10, &w, &h);
  CHECK(w == 200 && h == 150);  // 1/4
  image_jpeg_scaled_size(800, 600, 201, 10, &w, &h);
  CHECK(w == 400 && h == 300);  // 1/2: 3/8 would do, but is slow
  image_jpeg_scaled_size(800, 600, 10, 301, &w, &h);
  CHECK(w == 800 && h == 600);
  image_jpeg_scaled_size(800, 600, 0, 0, &w, &h);
  CHECK(w == 800 && h == 600);  // no minimum: full size
  uint8_t *src = pattern(320, 240, 3);
  size_t n;
  uint8_t *jpeg = image_encode_jpeg(src, 320, 240, 3, 95, &n);
  Image img = {0};
  char msg[512];
  REQUIRE(decode(jpeg, n, 150, 100, &img, msg) == IMAGE_OK);
  REQUIRE(img.width == 160 && img.height == 120);
  // Against a 2x2 box average of the source: the DCT scaling filters alike.
  double err = 0;
  for (int y = 0; y < 120; y++)
    for (int x = 0; x < 160; x++)
      for (int c = 0; c < 3; c++) {
        double box = 0;
        for (int dy = 0; dy < 2; dy++)
          for (int dx = 0; dx < 2; dx++) box += src[((2 * y + dy) * 320 + 2 * x + dx) * 3 + c];
        err += fabs(box / 4 - img.pixels[(y * 160 + x) * 3 + c]);
      }
  err /= 160 * 120 * 3;
  CHECK_MSG(err < 4.0, "mean |error| %.2f against the box-averaged source", err);
  image_free(&img);
  free(jpeg);
  free(src);
}

static void bad_images(void) {
  uint8_t *src = pattern(64, 64, 3);
  size_t n, n_png;
  uint8_t *jpeg = image_encode_jpeg(src, 64, 64, 3, 90, &n);
  uint8_t *png = image_encode_png(src, 64, 64, 3, &n_png);
  Image img = {0};
  char msg[512] = "";
  ImageDecoder *d = image_decoder_create();
  // A decoder that has failed on a bad header still decodes the next image.
  CHECK_EQ_INT(image_decode(d, jpeg, 40, 0, 0, &img, msg, sizeof msg), IMAGE_ERROR);
  CHECK_EQ_INT(image_decode(d, jpeg, 160, 0, 0, &img, msg, sizeof msg), IMAGE_ERROR);
  CHECK_EQ_INT(image_decode(d, jpeg, n, 0, 0, &img, msg, sizeof msg), IMAGE_OK);
  CHECK(img.width == 64 && img.height == 64);
  image_decoder_free(d);
  // Truncated JPEG: libjpeg fills the rest and warns.
  CHECK_EQ_INT(decode(jpeg, n / 2, 0, 0, &img, msg), IMAGE_WARNING);
  CHECK_CONTAINS(msg, "Premature end of JPEG file");
  // Cut inside the header: nothing to decode.
  CHECK_EQ_INT(decode(jpeg, 40, 0, 0, &img, msg), IMAGE_ERROR);
  CHECK_CONTAINS(msg, "bad JPEG header");
  CHECK_EQ_INT(decode(png, n_png / 2, 0, 0, &img, msg), IMAGE_ERROR);
  CHECK_CONTAINS(msg, "PNG decode");
  CHECK_EQ_INT(decode(jpeg, 0, 0, 0, &img, msg), IMAGE_ERROR);
  CHECK_CONTAINS(msg, "empty (0 bytes)");
  const char *text = "GIF89a not really";
  CHECK_EQ_INT(decode((const uint8_t *)text, strlen(text), 0, 0, &img, msg), IMAGE_ERROR);
  CHECK_CONTAINS(msg, "not a JPEG or PNG image (17 bytes starting 47 49 46 38)");
  image_free(&img);
  free(jpeg);
  free(png);
  free(src);
}

static void put_be(uint8_t *p, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
}

// Headers that claim more than IMAGE_MAX_PIXELS are refused before any
// memory is taken (a 20000x20000 PNG once took 1.2 GB a decode); one just
// under the limit is not refused for its size.
static void oversized_headers_refused(void) {
  uint8_t *src = pattern(16, 16, 3);
  size_t n, n_png;
  uint8_t *jpeg = image_encode_jpeg(src, 16, 16, 3, 90, &n);
  uint8_t *png = image_encode_png(src, 16, 16, 3, &n_png);
  ImageDecoder *d = image_decoder_create();
  ImageInfo info;
  char msg[512] = "";
  // The JPEG's frame header (SOF0: FF C0, length, precision, height, width).
  uint8_t *sof = NULL;
  for (size_t i = 2; i + 9 < n && !sof; i++)
    if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC0) sof = jpeg + i;
  REQUIRE(sof);
  put_be(sof + 5, 65000, 2);
  put_be(sof + 7, 65000, 2);
  CHECK_EQ_INT(image_header(d, jpeg, n, &info, msg, sizeof msg), IMAGE_ERROR);
  CHECK_STR(msg, "65000x65000 pixels: over this suite's limit of 64 megapixels a decode (IMAGE_MAX_PIXELS)");
  put_be(sof + 5, 8192, 2);  // 8192 x 8192 = the limit: allowed
  put_be(sof + 7, 8192, 2);
  CHECK_EQ_INT(image_header(d, jpeg, n, &info, msg, sizeof msg), IMAGE_OK);
  // The PNG's IHDR chunk after the 8-byte signature: length, "IHDR", width,
  // height, 5 more bytes, then the CRC of type and data.
  uint8_t *ihdr = png + 8;
  REQUIRE(memcmp(ihdr + 4, "IHDR", 4) == 0);
  put_be(ihdr + 8, 20000, 4);
  put_be(ihdr + 12, 20000, 4);
  put_be(ihdr + 21, (uint32_t)crc32(0, ihdr + 4, 17), 4);
  Image img = {0};
  CHECK_EQ_INT(image_decode(d, png, n_png, 0, 0, &img, msg, sizeof msg), IMAGE_ERROR);
  CHECK_STR(msg, "20000x20000 pixels: over this suite's limit of 64 megapixels a decode (IMAGE_MAX_PIXELS)");
  CHECK_EQ_INT(image_header(d, png, n_png, &info, msg, sizeof msg), IMAGE_ERROR);
  image_free(&img);
  image_decoder_free(d);
  free(jpeg);
  free(png);
  free(src);
}

static void crop_resize_identity_flip_ramp(void) {
  enum { W = 37, H = 23 };
  uint8_t *src = pattern(W, H, 3), *out = malloc(W * H * 3);
  augment_crop_resize(src, W, H, 0, 0, W, H, false, out, W, H);
  CHECK(memcmp(out, src, W * H * 3) == 0);
  augment_crop_resize(src, W, H, 0, 0, W, H, true, out, W, H);
  int mirrored = 0;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      mirrored += memcmp(out + (y * W + x) * 3, src + (y * W + W - 1 - x) * 3, 3) == 0;
  CHECK_EQ_INT(mirrored, W * H);
  // A horizontal ramp 0, 4, 8, ... halved: output pixel x samples source
  // position 2x + 0.5, i.e. value 8x + 2.
  uint8_t ramp[2 * 64 * 3], half[32 * 3];
  for (int x = 0; x < 64; x++)
    for (int c = 0; c < 3; c++) ramp[x * 3 + c] = ramp[(64 + x) * 3 + c] = (uint8_t)(4 * x);
  augment_crop_resize(ramp, 64, 2, 0, 0, 64, 2, false, half, 32, 1);
  int exact = 0;
  for (int x = 0; x < 32; x++) exact += half[x * 3] == 8 * x + 2 && half[x * 3 + 2] == 8 * x + 2;
  CHECK_EQ_INT(exact, 32);
  free(out);
  free(src);
}

// The planar path (YCbCr planes resized, then converted) against the RGB
// path (whole image converted by libjpeg, then resized), for 4:2:0 and grey
// JPEGs, with and without DCT scaling and flip.
static void planes_match_rgb_path(void) {
  enum { W = 150, H = 110, S = 48 };
  uint8_t *rgb = pattern(W, H, 3), *grey = pattern(W, H, 1);
  size_t n420, ngrey;
  uint8_t *j420 = image_encode_jpeg(rgb, W, H, 3, 95, &n420);
  uint8_t *jgrey = image_encode_jpeg(grey, W, H, 1, 95, &ngrey);
  const struct {
    const uint8_t *jpeg;
    size_t n;
    int count;
  } cases[] = {{j420, n420, 3}, {jgrey, ngrey, 1}};
  ImageDecoder *d = image_decoder_create();
  Image full = {0};
  ImagePlanes planes = {0};
  uint8_t a[S * S * 3], b[S * S * 3];
  char msg[512];
  for (int c = 0; c < 2; c++) {
    ImageInfo info;
    REQUIRE(image_header(d, cases[c].jpeg, cases[c].n, &info, msg, sizeof msg) == IMAGE_OK);
    CHECK(info.planar && info.width == W && info.height == H && info.format == IMAGE_FORMAT_JPEG);
    for (int scaled = 0; scaled < 2; scaled++) {
      int32_t min = scaled ? 50 : 0;  // 50: 1/2 scale, 75x55
      REQUIRE(image_decode_planes(d, cases[c].jpeg, cases[c].n, min, min, &planes, msg, sizeof msg) == IMAGE_OK);
      REQUIRE(image_decode(d, cases[c].jpeg, cases[c].n, min, min, &full, msg, sizeof msg) == IMAGE_OK);
      REQUIRE(planes.count == cases[c].count && planes.width == full.width && planes.height == full.height);
      CHECK_EQ_INT(planes.width, scaled ? 75 : W);
      if (planes.count == 3) CHECK(planes.plane_width[1] == (planes.width + 1) / 2 && planes.scale_x[1] == 0.5f);
      float k = (float)full.width / W;
      augment_crop_resize_planes(&planes, 20 * k, 10 * k, 90 * k, 80 * k, scaled, a, S, S);
      augment_crop_resize(full.pixels, full.width, full.height, 20 * k, 10 * k, 90 * k, 80 * k, scaled, b, S, S);
      // Chroma upsampled by libjpeg (fancy, then resized) or only resized:
      // the same colours within a level or two on a smooth pattern.
      double err = mean_abs_diff(a, b, sizeof a);
      CHECK_MSG(err < 2.0, "case %d scaled %d: mean |planar - rgb| %.2f", c, scaled, err);
    }
  }
  const char *text = "not a jpeg";
  CHECK_EQ_INT(image_decode_planes(d, (const uint8_t *)text, 10, 0, 0, &planes, msg, sizeof msg), IMAGE_ERROR);
  image_planes_free(&planes);
  image_free(&full);
  image_decoder_free(d);
  free(j420);
  free(jgrey);
  free(rgb);
  free(grey);
}

static void normalize_cpu(void) {
  const uint8_t in[6] = {0, 128, 255, 51, 102, 153};
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  float out[6];
  augment_normalize_cpu(in, out, 2, mean, std);
  for (int i = 0; i < 6; i++)
    CHECK_NEAR(out[i], (in[i] / 255.0 - mean[i % 3]) / std[i % 3], 1e-5);
}

int main(void) {
  TEST_RUN(jpeg_rgb);
  TEST_RUN(jpeg_grey_becomes_rgb);
  TEST_RUN(jpeg_cmyk_becomes_rgb);
  TEST_RUN(png_rgb_and_grey_exact);
  TEST_RUN(png_16_bit_scaled);
  TEST_RUN(png_alpha_onto_black);
  TEST_RUN(dct_scaling_picks_smallest_enough);
  TEST_RUN(bad_images);
  TEST_RUN(oversized_headers_refused);
  TEST_RUN(crop_resize_identity_flip_ramp);
  TEST_RUN(planes_match_rgb_path);
  TEST_RUN(normalize_cpu);
  return test_finish();
}
