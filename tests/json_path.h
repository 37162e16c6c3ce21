/* A number in a parsed JSON document by its dotted path
 * ("device.total_bytes"), for the tests that read a program's --json
 * output (memprof's); -12345 where the path names no number. The parsing
 * and what a figure should be stay in each test. Header-only; the test
 * links cJSON. */
#ifndef FERRY_TESTS_JSON_PATH_H
#define FERRY_TESTS_JSON_PATH_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

static inline double json_num(const cJSON *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *cur = o;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ".", &save); tok && cur; tok = strtok_r(NULL, ".", &save))
        cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
    return cJSON_IsNumber(cur) ? cur->valuedouble : -12345.0;
}

#endif
