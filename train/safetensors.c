/* safetensors writer and checked reader (see safetensors.h). The header is
 * built and parsed with cJSON; the file is written through fileio.h's atomic
 * writer and read through one read-only mapping (the header), its tensors'
 * bytes and checksum through pread (a file cut short under the mapping
 * would be a SIGBUS). */
#include "train/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/crc32c.h"
#include "train/tok_map.h"

#define ST_MAX_HEADER (100u << 20) /* the spec's cap on the JSON header */
#define ST_MAX_INT (1ull << 53)    /* JSON numbers are doubles: exact up to here */

/* The format's names of the element types read and written here. */
static const struct {
    ferry_dtype type;
    const char *name;
} sft_types[] = {
    {FERRY_DTYPE_F32, "F32"}, {FERRY_DTYPE_F16, "F16"}, {FERRY_DTYPE_BF16, "BF16"},
    {FERRY_DTYPE_I32, "I32"}, {FERRY_DTYPE_I64, "I64"},
};
enum { ST_TYPES = sizeof sft_types / sizeof sft_types[0] };
/* Valid in the format but not handled here. */
static const char *const other_dtypes[] = {"F64", "F8_E4M3", "F8_E5M2", "I8", "I16", "U8", "U16",
                                           "U32", "U64", "BOOL", "C64", "F6_E2M3", "F6_E3M2", "F4", "E8M0"};

const char *sft_dtype_name(ferry_dtype d)
{
    for (int i = 0; i < ST_TYPES; i++)
        if (sft_types[i].type == d)
            return sft_types[i].name;
    return "?";
}

/* Bytes of an element of a type the format names here; 0 for any other. */
static size_t sft_size(ferry_dtype d) { return strcmp(sft_dtype_name(d), "?") ? dtype_size(d) : 0; }

/* product(shape) * element size; 0 and *ok = 0 on overflow or a bad shape. */
static uint64_t tensor_bytes(const sft_tensor *t, int *ok)
{
    uint64_t n = sft_size(t->dtype);
    *ok = n != 0 && t->ndim >= 0 && t->ndim <= ST_MAX_DIMS;
    for (int d = 0; *ok && d < t->ndim; d++) {
        if (t->shape[d] < 0 || (t->shape[d] > 0 && n > ST_MAX_INT / (uint64_t)t->shape[d]))
            *ok = 0;
        else
            n *= (uint64_t)t->shape[d];
    }
    return *ok ? n : 0;
}

/* ---- writer ------------------------------------------------------------------ */

struct sft_writer {
    fileio_atomic file;
    size_t n;
    uint64_t data_start;  /* 8 + header length */
    uint64_t *begin, *nbytes, *written;
};

void sft_writer_abort(sft_writer *w)
{
    if (!w)
        return;
    fileio_atomic_abort(&w->file);
    free(w->begin);
    free(w->nbytes);
    free(w->written);
    free(w);
}

static ferry_status check_tensors(const char *path, const sft_tensor *t, size_t n, uint64_t *nbytes)
{
    tok_map names;
    ferry_status st = tok_map_init(&names, n);
    for (size_t i = 0; st == FERRY_OK && i < n; i++) {
        int ok;
        uint64_t v;
        nbytes[i] = tensor_bytes(&t[i], &ok);
        if (!t[i].name || !t[i].name[0] || !strcmp(t[i].name, "__metadata__"))
            st = err_set(FERRY_ERR_INVALID_ARGUMENT, "safetensors '%s': tensor %zu has no usable name (\"%s\")", path, i,
                         t[i].name ? t[i].name : "(null)");
        else if (!ok)
            st = err_set(FERRY_ERR_INVALID_ARGUMENT, "safetensors '%s': tensor '%s' has a bad dtype (%d), ndim (%d) "
                         "or shape (negative or over 2^53 bytes)", path, t[i].name, (int)t[i].dtype, t[i].ndim);
        else if (tok_map_get(&names, t[i].name, strlen(t[i].name), &v))
            st = err_set(FERRY_ERR_INVALID_ARGUMENT, "safetensors '%s': tensor name '%s' is given twice (%llu and %zu)",
                         path, t[i].name, (unsigned long long)v, i);
        else
            st = tok_map_put(&names, t[i].name, strlen(t[i].name), i);
    }
    tok_map_free(&names);
    return st;
}

static cJSON *build_header(const sft_tensor *t, size_t n, const uint64_t *begin, const uint64_t *nbytes,
                           const char *const *meta, size_t n_meta)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    int ok = 1;
    if (n_meta) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (size_t i = 0; ok && i < n_meta; i++)
            ok = m && meta[2 * i] && meta[2 * i + 1] && cJSON_AddStringToObject(m, meta[2 * i], meta[2 * i + 1]);
        ok = ok && m;
    }
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(root, t[i].name);
        cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
        cJSON *offs = e ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
        ok = e && shape && offs && cJSON_AddStringToObject(e, "dtype", sft_dtype_name(t[i].dtype));
        for (int d = 0; ok && d < t[i].ndim; d++)
            ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d]));
        ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)begin[i])) &&
             cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(begin[i] + nbytes[i])));
    }
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* Data order: larger elements first, so every tensor starts aligned to its
 * element size (the header end is padded to 8). */
static void layout(const sft_tensor *t, size_t n, const uint64_t *nbytes, uint64_t *begin)
{
    static const size_t sizes[] = {8, 4, 2, 1};
    uint64_t at = 0;
    for (size_t s = 0; s < 4; s++)
        for (size_t i = 0; i < n; i++)
            if (sft_size(t[i].dtype) == sizes[s]) {
                begin[i] = at;
                at += nbytes[i];
            }
}

ferry_status sft_writer_begin(const char *path, const sft_tensor *tensors, size_t n, const char *const *meta,
                             size_t n_meta, sft_writer **out)
{
    *out = NULL;
    if (!path || (n && !tensors) || (n_meta && !meta))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "sft_writer_begin: path, tensors or metadata missing");
    sft_writer *w = calloc(1, sizeof *w);
    if (w) {
        w->file.fd = -1;
        w->n = n;
        w->begin = calloc(n + 1, sizeof *w->begin);
        w->nbytes = calloc(n + 1, sizeof *w->nbytes);
        w->written = calloc(n + 1, sizeof *w->written);
    }
    if (!w || !w->begin || !w->nbytes || !w->written) {
        sft_writer_abort(w);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "safetensors '%s': cannot allocate the layout of %zu tensors", path, n);
    }
    ferry_status st = check_tensors(path, tensors, n, w->nbytes);
    if (st != FERRY_OK) {
        sft_writer_abort(w);
        return st;
    }
    layout(tensors, n, w->nbytes, w->begin);
    cJSON *root = build_header(tensors, n, w->begin, w->nbytes, meta, n_meta);
    char *json = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!json) {
        sft_writer_abort(w);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "safetensors '%s': cannot build the JSON header "
                       "(out of memory or a NULL metadata string)", path);
    }
    size_t jlen = strlen(json), padded = (jlen + 7) / 8 * 8;
    char *hdr = malloc(8 + padded);
    if (hdr) {
        uint64_t le = padded; /* little-endian hosts only, as the rest of ferry */
        memcpy(hdr, &le, 8);
        memcpy(hdr + 8, json, jlen);
        memset(hdr + 8 + jlen, ' ', padded - jlen);
    }
    free(json);
    w->data_start = 8 + padded;
    st = hdr ? fileio_atomic_open(&w->file, path)
             : err_set(FERRY_ERR_OUT_OF_MEMORY, "safetensors '%s': out of memory for its header", path);
    if (st == FERRY_OK)
        st = fileio_atomic_write(&w->file, hdr, 8 + padded);
    free(hdr);
    if (st != FERRY_OK) {
        sft_writer_abort(w);
        return st;
    }
    *out = w;
    return FERRY_OK;
}

ferry_status sft_writer_put(sft_writer *w, size_t i, uint64_t offset, const void *data, uint64_t len)
{
    if (!w || i >= w->n || offset > w->nbytes[i] || len > w->nbytes[i] - offset || (len && !data))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "sft_writer_put: tensor %zu bytes [%llu, +%llu) is outside it "
                       "(%llu bytes) or data is NULL", i, (unsigned long long)offset, (unsigned long long)len,
                       w && i < w->n ? (unsigned long long)w->nbytes[i] : 0ull);
    ferry_status st = fileio_atomic_pwrite(&w->file, data, len, w->data_start + w->begin[i] + offset);
    if (st == FERRY_OK)
        w->written[i] += len;
    return st;
}

ferry_status sft_writer_commit(sft_writer *w)
{
    if (!w)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "sft_writer_commit: no writer");
    ferry_status st = FERRY_OK;
    if (w->file.fd < 0)
        st = err_set(FERRY_ERR_STATE, "safetensors writer already failed; nothing was written");
    for (size_t i = 0; st == FERRY_OK && i < w->n; i++)
        if (w->written[i] != w->nbytes[i])
            st = err_set(FERRY_ERR_STATE, "safetensors '%s': tensor %zu got %llu of its %llu bytes before commit",
                         w->file.path, i, (unsigned long long)w->written[i], (unsigned long long)w->nbytes[i]);
    if (st == FERRY_OK)
        st = fileio_atomic_commit(&w->file);
    sft_writer_abort(w);
    return st;
}

ferry_status sft_write(const char *path, const sft_tensor *tensors, size_t n, const char *const *meta, size_t n_meta)
{
    sft_writer *w;
    ferry_status st = sft_writer_begin(path, tensors, n, meta, n_meta, &w);
    for (size_t i = 0; st == FERRY_OK && i < n; i++)
        st = sft_writer_put(w, i, 0, tensors[i].data, w->nbytes[i]);
    if (st != FERRY_OK) {
        sft_writer_abort(w);
        return st;
    }
    return sft_writer_commit(w);
}

/* ---- reader ------------------------------------------------------------------ */

struct sft_file {
    char *path;
    void *map;
    size_t map_len;
    sft_tensor *tensors;
    size_t n;
    tok_map names;        /* name -> index */
    char **meta;          /* key, value, key, value, ... */
    size_t n_meta;
    uint64_t data_off;    /* where the tensors' bytes start: 8 + the header's length */
    int fd;               /* the file, open for the checksum's reads (-1: none) */
};

static ferry_status fmt(const sft_file *f, const char *tensor, const char *what)
{
    if (tensor)
        return err_set(FERRY_ERR_FORMAT, "safetensors '%s', tensor '%s': %s", f->path, tensor, what);
    return err_set(FERRY_ERR_FORMAT, "safetensors '%s': %s", f->path, what);
}

/* A JSON number that is an integer in [0, 2^53]. */
static int json_uint(const cJSON *j, uint64_t *v)
{
    if (!cJSON_IsNumber(j) || !(j->valuedouble >= 0) || j->valuedouble > (double)ST_MAX_INT)
        return 0;
    *v = (uint64_t)j->valuedouble;
    return (double)*v == j->valuedouble;
}

static ferry_status parse_dtype(const sft_file *f, const char *name, const cJSON *j, ferry_dtype *out)
{
    if (!cJSON_IsString(j))
        return fmt(f, name, "\"dtype\" is missing or not a string");
    for (int d = 0; d < ST_TYPES; d++)
        if (!strcmp(j->valuestring, sft_types[d].name)) {
            *out = sft_types[d].type;
            return FERRY_OK;
        }
    for (size_t d = 0; d < sizeof other_dtypes / sizeof *other_dtypes; d++)
        if (!strcmp(j->valuestring, other_dtypes[d]))
            return err_set(FERRY_ERR_UNSUPPORTED, "safetensors '%s', tensor '%s': dtype %s is valid but not supported "
                           "here (F32, F16, BF16, I32, I64); convert the file", f->path, name, j->valuestring);
    return err_set(FERRY_ERR_FORMAT, "safetensors '%s', tensor '%s': unknown dtype \"%.32s\"", f->path, name,
                   j->valuestring);
}

static ferry_status parse_tensor(sft_file *f, const cJSON *e, uint64_t data_len, uint64_t *begin, sft_tensor *t)
{
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return fmt(f, name, "entry is not a JSON object");
    ferry_status st = parse_dtype(f, name, cJSON_GetObjectItemCaseSensitive(e, "dtype"), &t->dtype);
    if (st != FERRY_OK)
        return st;
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > ST_MAX_DIMS)
        return fmt(f, name, "\"shape\" is missing, not an array, or has more than 8 dimensions");
    t->ndim = cJSON_GetArraySize(shape);
    for (int d = 0; d < t->ndim; d++) {
        uint64_t v;
        if (!json_uint(cJSON_GetArrayItem(shape, d), &v))
            return fmt(f, name, "a \"shape\" entry is not a non-negative integer");
        t->shape[d] = (int64_t)v;
    }
    uint64_t b, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_uint(cJSON_GetArrayItem(offs, 0), &b) ||
        !json_uint(cJSON_GetArrayItem(offs, 1), &end) || b > end)
        return fmt(f, name, "\"data_offsets\" is not [begin, end] with integers 0 <= begin <= end");
    int ok;
    t->nbytes = tensor_bytes(t, &ok);
    char msg[256];
    if (!ok)
        return fmt(f, name, "shape is too large");
    if (end > data_len) {
        snprintf(msg, sizeof msg, "data_offsets [%llu, %llu] run past the %llu bytes of data (truncated file?)",
                 (unsigned long long)b, (unsigned long long)end, (unsigned long long)data_len);
        return fmt(f, name, msg);
    }
    if (end - b != t->nbytes) {
        snprintf(msg, sizeof msg, "data_offsets span %llu bytes but shape x %s needs %llu",
                 (unsigned long long)(end - b), sft_dtype_name(t->dtype), (unsigned long long)t->nbytes);
        return fmt(f, name, msg);
    }
    *begin = b;
    return FERRY_OK;
}

static ferry_status parse_metadata(sft_file *f, const cJSON *m)
{
    if (!cJSON_IsObject(m))
        return fmt(f, NULL, "\"__metadata__\" is not an object of strings");
    f->n_meta = (size_t)cJSON_GetArraySize(m);
    f->meta = calloc(2 * f->n_meta + 1, sizeof *f->meta);
    if (!f->meta)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "safetensors '%s': out of memory for its metadata", f->path);
    size_t i = 0;
    for (const cJSON *it = m->child; it; it = it->next, i++) {
        if (!cJSON_IsString(it))
            return fmt(f, NULL, "a \"__metadata__\" value is not a string");
        f->meta[2 * i] = strdup(it->string);
        f->meta[2 * i + 1] = strdup(it->valuestring);
        if (!f->meta[2 * i] || !f->meta[2 * i + 1])
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "safetensors '%s': out of memory for its metadata", f->path);
    }
    return FERRY_OK;
}

typedef struct span {
    uint64_t begin, end;
    size_t i;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* Sorted by begin, the spans must tile [0, data_len) exactly. */
static ferry_status check_spans(sft_file *f, span *s, size_t n, uint64_t data_len)
{
    qsort(s, n, sizeof *s, span_cmp);
    uint64_t at = 0;
    char msg[256];
    for (size_t k = 0; k < n; k++) {
        if (s[k].begin < at) {
            snprintf(msg, sizeof msg, "data_offsets [%llu, %llu] overlap tensor '%s'", (unsigned long long)s[k].begin,
                     (unsigned long long)s[k].end, f->tensors[s[k - 1].i].name);
            return fmt(f, f->tensors[s[k].i].name, msg);
        }
        if (s[k].begin > at) {
            snprintf(msg, sizeof msg, "data_offsets start at %llu, leaving a hole from %llu",
                     (unsigned long long)s[k].begin, (unsigned long long)at);
            return fmt(f, f->tensors[s[k].i].name, msg);
        }
        at = s[k].end;
    }
    if (at != data_len) {
        snprintf(msg, sizeof msg, "the tensors cover %llu of the %llu data bytes; the rest is unaccounted for",
                 (unsigned long long)at, (unsigned long long)data_len);
        return fmt(f, NULL, msg);
    }
    return FERRY_OK;
}

static ferry_status parse_header(sft_file *f, const char *json, size_t len, const char *data, uint64_t data_len)
{
    if (len == 0 || json[0] != '{')
        return fmt(f, NULL, "the header does not start with '{'");
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return fmt(f, NULL, "the header is not valid JSON (or not an object)");
    }
    size_t n = 0;
    for (const cJSON *it = root->child; it; it = it->next)
        n += strcmp(it->string, "__metadata__") != 0;
    f->tensors = calloc(n + 1, sizeof *f->tensors);
    span *spans = calloc(n + 1, sizeof *spans);
    ferry_status st = f->tensors && spans ? tok_map_init(&f->names, n)
                                          : err_set(FERRY_ERR_OUT_OF_MEMORY, "safetensors '%s': out of memory for "
                                                    "its %zu tensors", f->path, n);
    for (const cJSON *it = root->child; st == FERRY_OK && it; it = it->next) {
        uint64_t v, b = 0;
        if (!strcmp(it->string, "__metadata__")) {
            st = f->meta ? fmt(f, NULL, "\"__metadata__\" appears twice") : parse_metadata(f, it);
            continue;
        }
        sft_tensor *t = &f->tensors[f->n];
        if (!it->string[0]) { /* "" (or a name that starts with a NUL byte) */
            st = fmt(f, NULL, "a tensor has an empty name");
            break;
        }
        if (tok_map_get(&f->names, it->string, strlen(it->string), &v)) {
            st = fmt(f, it->string, "the name appears twice in the header");
            break;
        }
        st = parse_tensor(f, it, data_len, &b, t);
        if (st == FERRY_OK)
            st = tok_map_put(&f->names, it->string, strlen(it->string), f->n);
        if (st == FERRY_OK && !(t->name = strdup(it->string)))
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "safetensors '%s': out of memory for its tensor names", f->path);
        if (st == FERRY_OK) {
            t->data = data + b;
            spans[f->n] = (span){b, b + t->nbytes, f->n};
            f->n++;
        }
    }
    cJSON_Delete(root);
    if (st == FERRY_OK)
        st = check_spans(f, spans, f->n, data_len);
    free(spans);
    return st;
}

static ferry_status map_file(sft_file *f, uint64_t *size)
{
    int fd;
    struct stat sb;
    ferry_status st = fileio_open_input(f->path, "safetensors", &fd, &sb); /* a FIFO would block an open */
    if (st != FERRY_OK)
        return st;
    *size = (uint64_t)sb.st_size;
    if (*size < 8) {
        close(fd);
        char msg[96];
        snprintf(msg, sizeof msg, "%llu bytes, shorter than the 8-byte header length", (unsigned long long)*size);
        return fmt(f, NULL, msg);
    }
    f->map = mmap(NULL, (size_t)*size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    f->fd = fd; /* the checksum reads through it: a file cut short is an error there, not a SIGBUS */
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        return err_set(FERRY_ERR_IO, "cannot map safetensors '%s': %s", f->path, strerror(e));
    }
    f->map_len = (size_t)*size;
    return FERRY_OK;
}

ferry_status sft_open(const char *path, sft_file **out)
{
    *out = NULL;
    if (!path)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "sft_open: no path");
    sft_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate a safetensors reader for '%s'", path);
    }
    f->fd = -1;
    uint64_t size = 0, hlen = 0;
    ferry_status st = map_file(f, &size);
    if (st == FERRY_OK) {
        memcpy(&hlen, f->map, 8);
        char msg[160];
        snprintf(msg, sizeof msg, "header length %llu does not fit the file's %llu bytes (or exceeds the 100 MiB cap)",
                 (unsigned long long)hlen, (unsigned long long)size);
        if (hlen > size - 8 || hlen > ST_MAX_HEADER)
            st = fmt(f, NULL, msg);
    }
    if (st == FERRY_OK) {
        const char *base = f->map;
        f->data_off = 8 + hlen;
        st = parse_header(f, base + 8, (size_t)hlen, base + 8 + hlen, size - 8 - hlen);
    }
    if (st != FERRY_OK) {
        sft_close(f);
        return st;
    }
    *out = f;
    return FERRY_OK;
}

void sft_close(sft_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->map_len);
    if (f->fd >= 0)
        close(f->fd);
    for (size_t i = 0; i < f->n; i++)
        free((char *)f->tensors[i].name);
    free(f->tensors);
    for (size_t i = 0; f->meta && i < 2 * f->n_meta; i++)
        free(f->meta[i]);
    free(f->meta);
    tok_map_free(&f->names);
    free(f->path);
    free(f);
}

size_t sft_count(const sft_file *f) { return f->n; }

const sft_tensor *sft_tensor_at(const sft_file *f, size_t i) { return i < f->n ? &f->tensors[i] : NULL; }

const sft_tensor *sft_find(const sft_file *f, const char *name)
{
    uint64_t v;
    if (!name || !tok_map_get(&f->names, name, strlen(name), &v))
        return NULL;
    return &f->tensors[v];
}

ferry_status sft_expect(const sft_file *f, const char *name, ferry_dtype dtype, int ndim, const int64_t *shape,
                       const sft_tensor **out)
{
    const sft_tensor *t = sft_find(f, name);
    *out = NULL;
    if (!t)
        return err_set(FERRY_ERR_FORMAT, "safetensors '%s' has no tensor '%s'", f->path, name ? name : "(null)");
    if (t->dtype != dtype)
        return err_set(FERRY_ERR_FORMAT, "safetensors '%s', tensor '%s': dtype %s, expected %s", f->path, name,
                       sft_dtype_name(t->dtype), sft_dtype_name(dtype));
    int same = ndim < 0 || t->ndim == ndim;
    for (int d = 0; same && ndim > 0 && d < ndim; d++)
        same = t->shape[d] == shape[d];
    if (!same) {
        char got[160], want[160];
        return err_set(FERRY_ERR_FORMAT, "safetensors '%s', tensor '%s': shape %s, expected %s", f->path, name,
                       sft_format_shape(t->shape, t->ndim, got, sizeof got),
                       sft_format_shape(shape, ndim, want, sizeof want));
    }
    *out = t;
    return FERRY_OK;
}

/* Part `part` of `parts` of n bytes: [n part / parts, n (part + 1) / parts). */
static uint64_t part_start(uint64_t n, int part, int parts)
{
    return n / (uint64_t)parts * (uint64_t)part + n % (uint64_t)parts * (uint64_t)part / (uint64_t)parts;
}

/* n bytes of the tensors' data from `at` into buf, through pread; `tensor`
 * (may be NULL) names what is read in messages. */
static ferry_status read_data(const sft_file *f, const char *tensor, char *buf, size_t n, uint64_t at)
{
    for (size_t done = 0; done < n;) {
        ssize_t r = pread(f->fd, buf + done, n - done, (off_t)(f->data_off + at + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return err_set(r < 0 ? FERRY_ERR_IO : FERRY_ERR_FORMAT, "reading safetensors '%s'%s%s%s: %s", f->path,
                           tensor ? ", tensor '" : "", tensor ? tensor : "", tensor ? "'" : "",
                           r < 0 ? strerror(errno) : "it became shorter while it was read");
        done += (size_t)r;
    }
    return FERRY_OK;
}

ferry_status sft_data_checksum_part(const sft_file *f, int part, int parts, sft_checksum *out)
{
    enum { CHUNK = 1 << 20 };
    uint64_t all = f->map_len - f->data_off, lo = part_start(all, part, parts), hi = part_start(all, part + 1, parts);
    out->bytes = hi - lo;
    out->crc32c = 0;
    char *buf = malloc(CHUNK);
    if (!buf)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "checksumming safetensors '%s': out of host memory", f->path);
    ferry_status st = FERRY_OK;
    for (uint64_t at = lo; at < hi && st == FERRY_OK;) {
        size_t n = hi - at < CHUNK ? (size_t)(hi - at) : CHUNK;
        if ((st = read_data(f, NULL, buf, n, at)) == FERRY_OK) {
            out->crc32c = crc32c(out->crc32c, buf, n);
            at += n;
        }
    }
    free(buf);
    return st;
}

ferry_status sft_read(const sft_file *f, const sft_tensor *t, uint64_t offset, void *buf, uint64_t len)
{
    if (!f || !t || t < f->tensors || t >= f->tensors + f->n || offset > t->nbytes || len > t->nbytes - offset ||
        (len && !buf))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "sft_read: bytes [%llu, +%llu) of a tensor that is not the "
                       "file's, outside it, or into no buffer", (unsigned long long)offset, (unsigned long long)len);
    uint64_t begin = (uint64_t)((const char *)t->data - (const char *)f->map) - f->data_off;
    return read_data(f, t->name, buf, (size_t)len, begin + offset);
}

ferry_status sft_data_checksum(const sft_file *f, sft_checksum *out) { return sft_data_checksum_part(f, 0, 1, out); }

const char *sft_metadata(const sft_file *f, const char *key)
{
    for (size_t i = 0; key && i < f->n_meta; i++)
        if (f->meta[2 * i] && !strcmp(f->meta[2 * i], key))
            return f->meta[2 * i + 1];
    return NULL;
}

char *sft_format_shape(const int64_t *shape, int ndim, char *buf, size_t cap)
{
    if (!cap)
        return buf;
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at < cap)
        snprintf(buf + at, cap - at, "]");
    return buf;
}
