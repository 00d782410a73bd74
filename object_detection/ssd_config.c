// ssd_config.c: SSD's network and default boxes from the trainer's flags
// (ssd_config.h).
#include "object_detection/ssd_config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"

// The whole numbers >= lo of a list key.
static void parse_ints(const Config *cfg, const char *key, int *out, int min_count, int max,
                       int lo) {
  double v[SSD_MAX_MAPS + 1];
  int n = config_numbers(cfg, key, v, min_count, max);
  char name[64];
  snprintf(name, sizeof name, "--%s", key);
  for (int i = 0; i < n; i++) {
    if (v[i] != floor(v[i]) || v[i] < lo || v[i] > 1 << 20)
      die_input(name, "item %d (%g) is not a whole number >= %d", i + 1, v[i], lo);
    out[i] = (int)v[i];
  }
}

SsdModelConfig ssd_model_config_from(const Config *cfg, int32_t num_classes) {
  SsdModelConfig m = ssd_model_config_300(num_classes);
  ResnetConfig *b = &m.backbone;
  if (!resnet_parse_stages(b, config_string(cfg, "stages")))
    die_input("--stages", "'%s' is not 1 to 4 comma-separated block counts", config_string(cfg, "stages"));
  double strides[RESNET_MAX_STAGES];
  int n = config_parse_numbers(config_string(cfg, "stage_strides"), ',', strides, RESNET_MAX_STAGES);
  if (n != b->stages)
    die_input("--stage_strides", "'%s' is not %d strides, one per stage of --stages",
              config_string(cfg, "stage_strides"), b->stages);
  for (int s = 0; s < n; s++) {
    if (strides[s] != 1 && strides[s] != 2)
      die_input("--stage_strides", "stride %g of stage %d is not 1 or 2", strides[s], s + 1);
    b->stage_stride[s] = (int)strides[s];
  }
  b->width = (int)config_int(cfg, "width");
  b->image_size = (int)config_int(cfg, "image_size");
  b->stem_7x7 = config_bool(cfg, "imagenet_stem");

  // Extra blocks "mid:out:stride:pad,...": one more feature map each.
  char text[512];
  snprintf(text, sizeof text, "%s", config_string(cfg, "extra_blocks"));
  m.n_maps = 1;
  for (char *save = NULL, *item = strtok_r(text, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    double v[4];
    int e = m.n_maps - 1;
    if (e >= SSD_MAX_MAPS - 1)
      die_input("--extra_blocks", "more than %d blocks", SSD_MAX_MAPS - 1);
    if (config_parse_numbers(item, ':', v, 4) != 4 || v[0] < 1 || v[1] < 1 || v[2] < 1 ||
        v[3] < 0 || v[0] != floor(v[0]) || v[1] != floor(v[1]) || v[2] != floor(v[2]) ||
        v[3] != floor(v[3]))
      die_input("--extra_blocks", "block %d '%s' is not mid:out:stride:padding (whole numbers)",
                e + 1, item);
    m.extra_mid[e] = (int)v[0], m.extra_out[e] = (int)v[1];
    m.extra_stride[e] = (int)v[2], m.extra_pad[e] = (int)v[3];
    m.n_maps++;
  }
  return m;
}

SsdBoxConfig ssd_box_config_from(const Config *cfg, SsdModelConfig *m) {
  SsdBoxConfig c = {.image_size = m->backbone.image_size, .n_maps = m->n_maps};
  int sizes[SSD_MAX_MAPS];
  int maps = ssd_model_map_sizes(m, sizes);
  if (maps < m->n_maps)
    die_input("--extra_blocks", "feature map %d (after extra block %d) is empty for a %d-pixel input",
              maps + 1, maps, m->backbone.image_size);
  int n_steps = config_numbers(cfg, "box_steps", (double[SSD_MAX_MAPS]){0}, 0, SSD_MAX_MAPS);
  if (n_steps != m->n_maps)
    die_input("--box_steps", "%d steps for %d feature maps (1 + the extra blocks)", n_steps, m->n_maps);
  parse_ints(cfg, "box_steps", c.step, m->n_maps, SSD_MAX_MAPS, 1);
  double scales[SSD_MAX_MAPS + 1];
  if (config_numbers(cfg, "box_scales", scales, 0, SSD_MAX_MAPS + 1) != m->n_maps + 1)
    die_input("--box_scales", "'%s' is not %d sizes (one more than the feature maps)",
              config_string(cfg, "box_scales"), m->n_maps + 1);
  for (int k = 0; k <= m->n_maps; k++) {
    if (!(scales[k] > 0)) die_input("--box_scales", "size %d (%g) is not positive", k + 1, scales[k]);
    c.scale[k] = scales[k];
  }
  char text[512];
  snprintf(text, sizeof text, "%s", config_string(cfg, "box_ratios"));
  int k = 0;
  for (char *save = NULL, *item = strtok_r(text, ";", &save); item; item = strtok_r(NULL, ";", &save), k++) {
    if (k == m->n_maps) break;
    double r[SSD_MAX_RATIOS];
    int n = config_parse_numbers(item, ',', r, SSD_MAX_RATIOS);
    if (n < 0) die_input("--box_ratios", "map %d: '%s' is not up to %d ratios", k + 1, item, SSD_MAX_RATIOS);
    for (int i = 0; i < n; i++) {
      if (!(r[i] > 0)) die_input("--box_ratios", "map %d: ratio %g is not positive", k + 1, r[i]);
      c.ratio[k][i] = r[i];
    }
    c.n_ratios[k] = n;
    m->boxes[k] = 2 + 2 * n;
  }
  if (k != m->n_maps)
    die_input("--box_ratios", "'%s' does not give one ratio list (';' between) per feature map (%d)",
              config_string(cfg, "box_ratios"), m->n_maps);
  for (int i = 0; i < m->n_maps; i++) c.feat_size[i] = sizes[i];
  ssd_box_config_check(&c);
  ssd_model_check_boxes(m, &c);
  return c;
}
