/* The pieces of a Hugging Face folder every family shares (see hf_json.h). */
#include "train/hf_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileio.h"

void hf_json_describe(const cJSON *v, char *buf, size_t cap)
{
    if (cJSON_IsString(v))
        snprintf(buf, cap, "the string \"%.40s\"", v->valuestring);
    else if (cJSON_IsNumber(v))
        snprintf(buf, cap, "%.15g", v->valuedouble);
    else
        snprintf(buf, cap, "%s", cJSON_IsBool(v) ? (cJSON_IsTrue(v) ? "true" : "false")
                                 : cJSON_IsNull(v) ? "null" : cJSON_IsArray(v) ? "an array" : "an object");
}

/* The first key that appears twice in an object, at any depth, or NULL:
 * cJSON keeps both, and which one a reader takes is anyone's guess. */
static const char *duplicate_key(const cJSON *j)
{
    for (const cJSON *a = j ? j->child : NULL; a; a = a->next) {
        if (cJSON_IsObject(j))
            for (const cJSON *b = a->next; b; b = b->next)
                if (a->string && b->string && strcmp(a->string, b->string) == 0)
                    return a->string;
        const char *inner = cJSON_IsObject(a) || cJSON_IsArray(a) ? duplicate_key(a) : NULL;
        if (inner)
            return inner;
    }
    return NULL;
}

static ferry_status parse_object(const char *path, const char *what, const char *example, const char *text,
                                 size_t len, cJSON **out)
{
    const char *end = NULL;
    *out = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        return err_set(FERRY_ERR_FORMAT, "%s '%s' is not valid JSON (at byte %zu of %zu): cut short, or edited by "
                       "hand? It should be one object, %s", what, path, at, len, example);
    }
    size_t at = end ? (size_t)(end - text) : len;
    while (at < len && (text[at] == ' ' || text[at] == '\t' || text[at] == '\n' || text[at] == '\r'))
        at++;
    const char *dup = duplicate_key(j);
    ferry_status st = FERRY_OK;
    if (!cJSON_IsObject(j))
        st = err_set(FERRY_ERR_FORMAT, "%s '%s' is not a JSON object: cut short, not JSON, or not {...} (it should "
                     "be %s)", what, path, example);
    else if (at < len)
        st = err_set(FERRY_ERR_FORMAT, "%s '%s' has %zu bytes after its JSON object (from byte %zu): two files run "
                     "together, or a bad edit; it should be one object", what, path, len - at, at);
    else if (dup)
        st = err_set(FERRY_ERR_FORMAT, "%s '%s' gives \"%s\" twice; which one is meant cannot be told: keep one",
                     what, path, dup);
    if (st != FERRY_OK) {
        cJSON_Delete(j);
        return st;
    }
    *out = j;
    return FERRY_OK;
}

ferry_status hf_json_read_object(const char *path, const char *what, const char *example, cJSON **out)
{
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    ferry_status st = fileio_read(path, what, &text, &len);
    if (st != FERRY_OK)
        return st;
    st = parse_object(path, what, example, text, len, out);
    free(text);
    return st;
}

bool hf_json_whole(const cJSON *v, double lo, double hi)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    return d >= lo && d <= hi && d == (double)(long long)d;
}

bool hf_is_run_id(const char *s)
{
    size_t n = 0;
    while (s[n] && strchr("0123456789abcdef", s[n]))
        n++;
    return n == 32 && !s[n];
}

ferry_status hf_json_read_ferry(const char *path, const cJSON *j, hf_ferry_info *out)
{
    out->run[0] = '\0';
    out->step = -1;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "ferry");
    if (!f)
        return FERRY_OK;
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(f, "run");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(f, "step");
    if (!cJSON_IsObject(f) || (run && !(cJSON_IsString(run) && hf_is_run_id(run->valuestring))) ||
        (step && !hf_json_whole(step, 0, 9.0e15)))
        return err_set(FERRY_ERR_FORMAT, "model config '%s': its \"ferry\" fields are damaged (a run is 32 hex "
                       "digits, a step a whole number >= 0): put back the config.json saved with the checkpoint",
                       path);
    if (run)
        snprintf(out->run, sizeof out->run, "%s", run->valuestring);
    if (step)
        out->step = (int64_t)step->valuedouble;
    return FERRY_OK;
}

void hf_json_add_ferry(cJSON *j, const hf_ferry_info *ferry)
{
    if (!ferry || (!ferry->run[0] && ferry->step < 0))
        return;
    cJSON *f = cJSON_AddObjectToObject(j, "ferry");
    if (ferry->run[0])
        cJSON_AddStringToObject(f, "run", ferry->run);
    if (ferry->step >= 0)
        cJSON_AddNumberToObject(f, "step", (double)ferry->step);
}

size_t hf_ferry_metadata(const hf_ferry_info *ferry, const char *producer, const char *meta[8], char step_buf[24])
{
    size_t n = 0;
    meta[2 * n] = "format";
    meta[2 * n++ + 1] = "pt";
    meta[2 * n] = "producer";
    meta[2 * n++ + 1] = producer;
    if (ferry && ferry->run[0]) {
        meta[2 * n] = "ferry_run";
        meta[2 * n++ + 1] = ferry->run;
    }
    if (ferry && ferry->step >= 0) {
        snprintf(step_buf, 24, "%lld", (long long)ferry->step);
        meta[2 * n] = "ferry_step";
        meta[2 * n++ + 1] = step_buf;
    }
    return n;
}

static const struct {
    const char *name;
    ferry_dtype dtype;
} torch_dtypes[] = {{"float32", FERRY_DTYPE_F32}, {"float16", FERRY_DTYPE_F16}, {"bfloat16", FERRY_DTYPE_BF16}};

bool hf_torch_dtype_parse(const char *name, ferry_dtype *out)
{
    for (size_t i = 0; name && i < sizeof torch_dtypes / sizeof torch_dtypes[0]; i++)
        if (strcmp(name, torch_dtypes[i].name) == 0) {
            *out = torch_dtypes[i].dtype;
            return true;
        }
    return false;
}

const char *hf_torch_dtype_name(ferry_dtype d)
{
    for (size_t i = 0; i < sizeof torch_dtypes / sizeof torch_dtypes[0]; i++)
        if (torch_dtypes[i].dtype == d)
            return torch_dtypes[i].name;
    return NULL;
}

ferry_status hf_path(char *buf, size_t cap, const char *dir, const char *name)
{
    int len = snprintf(buf, cap, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= cap)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "the folder name '%s' is too long", dir);
    return FERRY_OK;
}

ferry_status hf_json_write(const char *path, const cJSON *j)
{
    char *text = cJSON_Print(j);
    if (!text)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "writing '%s': out of memory", path);
    fileio_atomic a;
    ferry_status st = fileio_atomic_open(&a, path);
    if (st == FERRY_OK) {
        st = fileio_atomic_write(&a, text, strlen(text));
        if (st == FERRY_OK)
            st = fileio_atomic_commit(&a);
        else
            fileio_atomic_abort(&a);
    }
    free(text);
    return st;
}
