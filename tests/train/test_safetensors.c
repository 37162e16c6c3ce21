/* Tests of safetensors I/O (train/safetensors.c): round trip of every
 * dtype with hand-computed values, an outside reader (/usr/bin/python3 with
 * numpy and a few lines of its own) checking our bytes, our reader on a file
 * Python wrote, every corrupt header, API misuse, and a full disk that must
 * leave the old file whole. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/tap.h"
#include "tests/test_files.h"
#include "train/safetensors.h"

static char dir[] = "/tmp/ferry_st_XXXXXX";

static const char *path_in(const char *name) { return test_path(dir, name); }

static float f32v[24], bf16f[24], f16f[24], scalar = 1.5f;
static uint16_t bf16v[24];
static _Float16 f16v[24];
static int32_t i32v[24];
static int64_t i64v[24];

static void fill(void)
{
    for (int i = 0; i < 24; i++) {
        f32v[i] = (float)(i * 3 - 7) / 4.0f;
        bf16f[i] = (float)(i - 11) / 2.0f; /* exact in bf16: the top 16 bits are the value */
        uint32_t b;
        memcpy(&b, &bf16f[i], 4);
        bf16v[i] = (uint16_t)(b >> 16);
        f16f[i] = (float)(i - 5) / 8.0f;
        f16v[i] = (_Float16)f16f[i];
        i32v[i] = i * 1000 - 5;
        i64v[i] = (int64_t)i * (1ll << 40) - 3;
    }
}

/* An odd-sized BF16 tensor first, so the writer's alignment matters. */
static sft_tensor tensors[] = {
    {"w.bf16", FERRY_DTYPE_BF16, 2, {4, 6}, bf16v, 0},
    {"scalar", FERRY_DTYPE_F32, 0, {0}, &scalar, 0},
    {"w.f32", FERRY_DTYPE_F32, 3, {2, 3, 4}, f32v, 0},
    {"w.f16", FERRY_DTYPE_F16, 1, {24}, f16v, 0},
    {"w.i32", FERRY_DTYPE_I32, 2, {3, 8}, i32v, 0},
    {"empty", FERRY_DTYPE_F32, 2, {0, 3}, NULL, 0},
    {"w.i64", FERRY_DTYPE_I64, 2, {2, 12}, i64v, 0},
};
#define NT (sizeof tensors / sizeof *tensors)
static const char *meta[] = {"format", "pt", "step", "42"};

static void test_round_trip(void)
{
    const char *p = path_in("model.safetensors");
    TAP_IS_STATUS(sft_write(p, tensors, NT, meta, 2), FERRY_OK, "write 7 tensors of 5 dtypes + metadata");
    sft_file *f = NULL;
    TAP_IS_STATUS(sft_open(p, &f), FERRY_OK, "read it back");
    if (!f)
        return;
    TAP_IS_INT(sft_count(f), NT, "tensor count");
    tap_ok(sft_metadata(f, "step") && !strcmp(sft_metadata(f, "step"), "42") && !sft_metadata(f, "nope"),
           "metadata step = 42, absent keys NULL");
    for (size_t i = 0; i < NT; i++) {
        const sft_tensor *t;
        ferry_status st = sft_expect(f, tensors[i].name, tensors[i].dtype, tensors[i].ndim, tensors[i].shape, &t);
        TAP_IS_STATUS(st, FERRY_OK, "'%s' has its dtype and shape", tensors[i].name);
        if (!t)
            continue;
        size_t esz = dtype_size(t->dtype);
        uint64_t want_bytes = esz;
        for (int d = 0; d < tensors[i].ndim; d++)
            want_bytes *= (uint64_t)tensors[i].shape[d];
        TAP_IS_INT(t->nbytes, want_bytes, "'%s' size", tensors[i].name);
        tap_ok(((uintptr_t)t->data % esz) == 0, "'%s' data aligned to %zu bytes", tensors[i].name, esz);
        tap_ok(!want_bytes || memcmp(t->data, tensors[i].data, want_bytes) == 0, "'%s' bytes as written",
               tensors[i].name);
    }
    const sft_tensor *t = sft_find(f, "w.f32");
    float v;
    memcpy(&v, (const char *)t->data + 5 * 4, 4);
    TAP_IS_CLOSE(v, 2.0, 0, 0, "w.f32[5] = (5*3-7)/4 = 2");
    const int64_t bad_shape[2] = {3, 8};
    TAP_IS_STATUS(sft_expect(f, "w.f32", FERRY_DTYPE_F32, 2, bad_shape, &t), FERRY_ERR_FORMAT, "wrong expected shape refused");
    tap_ok(strstr(ferry_last_error(), "shape [2, 3, 4], expected [3, 8]") != NULL, "message: %s", ferry_last_error());
    const int64_t flat[1] = {24};
    TAP_IS_STATUS(sft_expect(f, "w.f32", FERRY_DTYPE_F32, 1, flat, &t), FERRY_ERR_FORMAT, "a 3-D tensor where 1-D is expected");
    tap_ok(strstr(ferry_last_error(), "shape [2, 3, 4], expected [24]") != NULL, "message: %s", ferry_last_error());
    char sh[64];
    const int64_t five[5] = {1, 2, 3, 4, 5};
    tap_ok(!strcmp(sft_format_shape(five, 0, sh, sizeof sh), "[]"), "a scalar's shape reads [] (%s)", sh);
    tap_ok(!strcmp(sft_format_shape(five, 5, sh, sizeof sh), "[1, 2, 3, 4, 5]"), "a 5-D shape in full (%s)", sh);
    tap_ok(!strcmp(sft_format_shape(five, 5, sh, 7), "[1, 2,"), "cut to the buffer, NUL-terminated (%s)", sh);
    TAP_IS_STATUS(sft_expect(f, "lm_head.weight", FERRY_DTYPE_F32, -1, NULL, &t), FERRY_ERR_FORMAT, "missing tensor refused");
    tap_ok(strstr(ferry_last_error(), "lm_head.weight") != NULL, "message names it: %s", ferry_last_error());
    sft_close(f);
}

static int run_python(const char *args, int *rc_out)
{
    const char *py = getenv("FERRY_PYTHON") ? getenv("FERRY_PYTHON") : "/usr/bin/python3";
    const char *root = getenv("FERRY_SOURCE_ROOT") ? getenv("FERRY_SOURCE_ROOT") : ".";
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/train/st_check.py' %s", py, root, args);
    if (access(py, X_OK) != 0)
        return 0;
    int rc = system(cmd);
    *rc_out = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    return 1;
}

static void test_python(void)
{
    int rc;
    char args[600];
    snprintf(args, sizeof args, "'%s'", path_in("model.safetensors"));
    if (!run_python(args, &rc) || rc == 77) {
        tap_diag("python check skipped: no python/numpy at $FERRY_PYTHON or /usr/bin/python3");
        return;
    }
    TAP_IS_INT(rc, 0, "python reads our file with its own parser and gets the same values");
    snprintf(args, sizeof args, "--write '%s'", path_in("py.safetensors"));
    run_python(args, &rc);
    TAP_IS_INT(rc, 0, "python wrote a file (unpadded header, other order)");
    sft_file *f = NULL;
    TAP_IS_STATUS(sft_open(path_in("py.safetensors"), &f), FERRY_OK, "we read python's file");
    if (!f)
        return;
    const sft_tensor *a = sft_find(f, "a"), *b = sft_find(f, "b");
    float av[4] = {0};
    int64_t bv[3] = {0};
    if (a && b) {
        memcpy(av, a->data, sizeof av);
        memcpy(bv, b->data, sizeof bv);
    }
    tap_ok(a && b && av[0] == 1 && av[3] == 4 && bv[0] == 7 && bv[2] == 9 && a->ndim == 2 && b->shape[0] == 3,
           "values from python: a = [[1,2],[3,4]] F32, b = [7,8,9] I64");
    sft_close(f);
}

static void write_custom(const char *name, const char *json, size_t data_len, long long force_len)
{
    FILE *f = fopen(path_in(name), "wb");
    uint64_t n = force_len >= 0 ? (uint64_t)force_len : strlen(json);
    fwrite(&n, 8, 1, f);
    fwrite(json, 1, strlen(json), f);
    for (size_t i = 0; i < data_len; i++)
        fputc(0, f);
    fclose(f);
}

static void expect_corrupt(const char *name, ferry_status want, const char *needle)
{
    sft_file *f = NULL;
    ferry_status st = sft_open(path_in(name), &f);
    TAP_IS_STATUS(st, want, "%s refused", name);
    const char *m = ferry_last_error();
    if (!tap_ok(!f && strstr(m, name) && strstr(m, needle), "%s: message names the file and says '%s'", name, needle))
        tap_diag("  message: %s", m);
    sft_close(f);
}

static void test_corrupt(void)
{
    const char *one = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    write_custom("good.st", one, 8, -1);
    sft_file *f = NULL;
    TAP_IS_STATUS(sft_open(path_in("good.st"), &f), FERRY_OK, "the hand-made base case is valid");
    sft_close(f);
    FILE *e = fopen(path_in("empty.st"), "wb");
    fclose(e);
    expect_corrupt("empty.st", FERRY_ERR_FORMAT, "shorter than the 8-byte header length");
    write_custom("badlen.st", one, 8, 1ll << 40);
    expect_corrupt("badlen.st", FERRY_ERR_FORMAT, "header length 1099511627776 does not fit");
    write_custom("truncated.st", one, 5, -1);
    expect_corrupt("truncated.st", FERRY_ERR_FORMAT, "tensor 'a': data_offsets [0, 8] run past the 5 bytes");
    write_custom("badjson.st", "{\"a\":{\"dtype\":\"F32\",", 8, -1);
    expect_corrupt("badjson.st", FERRY_ERR_FORMAT, "not valid JSON");
    write_custom("notobj.st", "[1, 2]  ", 0, -1);
    expect_corrupt("notobj.st", FERRY_ERR_FORMAT, "does not start with '{'");
    write_custom("dtype.st", "{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, -1);
    expect_corrupt("dtype.st", FERRY_ERR_FORMAT, "tensor 'a': unknown dtype \"Q7\"");
    write_custom("f64.st", "{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, -1);
    expect_corrupt("f64.st", FERRY_ERR_UNSUPPORTED, "dtype F64 is valid but not supported");
    write_custom("range.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 8, -1);
    expect_corrupt("range.st", FERRY_ERR_FORMAT, "run past the 8 bytes");
    write_custom("span.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, -1);
    expect_corrupt("span.st", FERRY_ERR_FORMAT, "span 8 bytes but shape x F32 needs 12");
    write_custom("overlap.st",
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, -1);
    expect_corrupt("overlap.st", FERRY_ERR_FORMAT, "tensor 'b': data_offsets [4, 12] overlap tensor 'a'");
    write_custom("hole.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, -1);
    expect_corrupt("hole.st", FERRY_ERR_FORMAT, "leaving a hole from 0");
    write_custom("extra.st", one, 12, -1);
    expect_corrupt("extra.st", FERRY_ERR_FORMAT, "cover 8 of the 12 data bytes");
    write_custom("dup.st",
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, -1);
    expect_corrupt("dup.st", FERRY_ERR_FORMAT, "tensor 'a': the name appears twice");
    write_custom("neg.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, -1);
    expect_corrupt("neg.st", FERRY_ERR_FORMAT, "not a non-negative integer");
    /* Found by tests/fuzz/fuzz_safetensors: two names that both read as ""
     * reached the name map with a NULL key store (UB); "" is refused now. */
    write_custom("noname.st", "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, -1);
    expect_corrupt("noname.st", FERRY_ERR_FORMAT, "a tensor has an empty name");
    write_custom("meta.st", "{\"__metadata__\":{\"k\":3}}", 0, -1);
    expect_corrupt("meta.st", FERRY_ERR_FORMAT, "value is not a string");
    sft_file *g = NULL;
    TAP_IS_STATUS(sft_open(path_in("nonexistent.st"), &g), FERRY_ERR_IO, "a missing file is an I/O error");
}

static void test_misuse(void)
{
    sft_tensor two[2] = {{"x", FERRY_DTYPE_F32, 1, {2}, f32v, 0}, {"x", FERRY_DTYPE_F32, 1, {2}, f32v, 0}};
    TAP_IS_STATUS(sft_write(path_in("dup_out.st"), two, 2, NULL, 0), FERRY_ERR_INVALID_ARGUMENT, "duplicate names refused");
    two[1].name = "y";
    two[1].dtype = (ferry_dtype)17;
    TAP_IS_STATUS(sft_write(path_in("dt_out.st"), two, 2, NULL, 0), FERRY_ERR_INVALID_ARGUMENT, "a bad dtype refused");
    two[1].dtype = FERRY_DTYPE_F32;
    sft_writer *w = NULL;
    TAP_IS_STATUS(sft_writer_begin(path_in("part.st"), two, 2, NULL, 0, &w), FERRY_OK, "writer begins");
    TAP_IS_STATUS(sft_writer_put(w, 0, 4, f32v, 8), FERRY_ERR_INVALID_ARGUMENT, "a write past a tensor is refused");
    TAP_IS_STATUS(sft_writer_put(w, 0, 4, f32v + 1, 4), FERRY_OK, "second half of x");
    TAP_IS_STATUS(sft_writer_put(w, 0, 0, f32v, 4), FERRY_OK, "first half of x");
    TAP_IS_STATUS(sft_writer_commit(w), FERRY_ERR_STATE, "commit with y unwritten is refused");
    tap_ok(access(path_in("part.st"), F_OK) != 0 && access(path_in(".part.st.tmp"), F_OK) != 0,
           "nothing left behind after a refused commit");
}

static void test_disk_full(void)
{
    const char *p = path_in("model.safetensors");
    sft_file *before = NULL;
    sft_open(p, &before);
    uint64_t n_before = before ? sft_count(before) : 0;
    sft_close(before);
    static float big[1 << 16];
    sft_tensor t = {"big", FERRY_DTYPE_F32, 1, {1 << 16}, big, 0};
    /* A file-size limit makes write() fail with EFBIG, as a full disk fails
     * with ENOSPC: the same path through the writer. */
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 64 * 1024;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    ferry_status st = sft_write(p, &t, 1, NULL, 0);
    setrlimit(RLIMIT_FSIZE, &old);
    TAP_IS_STATUS(st, FERRY_ERR_IO, "a write that runs out of room fails");
    tap_ok(strstr(ferry_last_error(), "disk full") && strstr(ferry_last_error(), "left as it was"),
           "message: %s", ferry_last_error());
    sft_file *after = NULL;
    TAP_IS_STATUS(sft_open(p, &after), FERRY_OK, "the old file still opens");
    TAP_IS_INT(after ? sft_count(after) : 0, n_before, "with its old tensors");
    sft_close(after);
    tap_ok(access(path_in(".model.safetensors.tmp"), F_OK) != 0, "no temporary left behind");
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    if (!mkdtemp(dir))
        tap_plan_skip("cannot create a temporary directory");
    tap_diag("working in %s", dir);
    fill();
    test_round_trip();
    test_python();
    test_corrupt();
    test_misuse();
    test_disk_full();
    test_dir_remove(dir);
    return tap_done();
}
