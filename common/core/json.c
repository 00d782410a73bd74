// json.c: whole JSON files (json.h).
#include "core/json.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/check.h"
#include "core/file.h"

cJSON *json_read_file(const char *path) {
  size_t n_bytes;
  uint8_t *bytes = file_read(path, &n_bytes);
  const char *text = (const char *)bytes, *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, n_bytes, &end, false);
  size_t at = end ? (size_t)(end - text) : 0;
  while (root && at < n_bytes && isspace((unsigned char)text[at])) at++;
  if (!root || at < n_bytes) die_input(path, "not valid JSON (at byte %zu)", at);
  free(bytes);
  return root;
}
