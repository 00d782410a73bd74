// json.h: a whole JSON file parsed with cJSON, for converters, scorers and
// checkpoint configs.
#pragma once
#include <cjson/cJSON.h>

#ifdef __cplusplus
extern "C" {
#endif

// The file at path parsed (free with cJSON_Delete). A missing file, or one
// that is not JSON (or is JSON followed by more than white space), is a
// one-line error naming it and the byte where it stops being JSON.
cJSON *json_read_file(const char *path);

#ifdef __cplusplus
}
#endif
