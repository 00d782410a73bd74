// ssd_config.h: SSD's network and default boxes from the trainer's flags
// (declared in object_detection/train.c): the backbone (--stages,
// --stage_strides, --width, --image_size, --imagenet_stem), one more feature
// map per --extra_blocks item, and the default boxes of each map
// (--box_steps, --box_scales, --box_ratios). A bad value is a one-line error
// naming its flag.
#pragma once
#include <stdint.h>

#include "core/config.h"
#include "object_detection/ssd_boxes.h"
#include "object_detection/ssd_model.h"

// The network for num_classes classes (background included).
SsdModelConfig ssd_model_config_from(const Config *cfg, int32_t num_classes);
// The default boxes from the box keys and m's map sizes, checked against m;
// sets m's boxes per location, which follow from the ratios.
SsdBoxConfig ssd_box_config_from(const Config *cfg, SsdModelConfig *m);
