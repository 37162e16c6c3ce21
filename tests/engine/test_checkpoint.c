/* The engine's checkpoint: save then load gives bitwise the state and the
 * user blob back, and training continues exactly as without the break, in
 * every offload mode; a damaged, truncated or foreign file is refused with a
 * message and changes nothing; a failed save leaves the earlier file intact. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "engine/intree.h"
#include "common/dtype.h"
#include "engine_fixture.h"
#include "ref_crc32c.h"
#include "tap.h"
#include "test_files.h"
#include "test_dtype.h"

enum { GROUPS = 3 };
static const size_t numel[GROUPS] = {1000, 70001, 333};
static char dir[256];

static ferry_engine *make_engine(ferry_offload mode, int delayed, const size_t *sizes)
{
    ferry_engine_config cfg = efix_config(FERRY_BACKEND_HOST, mode, test_dtype(), 2);
    cfg.delayed_update = delayed;
    return efix_plain(&cfg, GROUPS, sizes, 99);
}

static ferry_engine *make(ferry_offload mode, const size_t *sizes) { return make_engine(mode, 0, sizes); }

/* One step of a quadratic loss sum (w - t)^2 / 2 with t_i = sin(i): grad = w - t. */
static ferry_status train_step(ferry_engine *e)
{
    ferry_status st = ferry_engine_begin_micro_batch(e, 0, 1);
    for (int g = 0; g < GROUPS && st == FERRY_OK; g++) {
        void *w, *dw;
        st = ferry_engine_fetch(e, g, FERRY_PHASE_BACKWARD, &w);
        if (st == FERRY_OK) st = ferry_engine_grads(e, g, &dw);
        if (st == FERRY_OK) st = ferry_engine_synchronize(e);
        ferry_dtype t = ferry_engine_dtype(e); /* f32, or bf16 under FERRY_TEST_DTYPE=bf16 */
        for (size_t i = 0; i < numel[g] && st == FERRY_OK; i++)
            dtype_store_f32(dw, t, i, dtype_load_f32(dw, t, i) + dtype_load_f32(w, t, i) - sinf((float)i));
        if (st == FERRY_OK) st = ferry_engine_release(e, g, FERRY_PHASE_BACKWARD);
    }
    ferry_step_options o = FERRY_STEP_OPTIONS_INIT;
    o.lr = 0.01f;
    o.weight_decay = 0.1f;
    return st == FERRY_OK ? ferry_engine_step(e, &o, NULL) : st;
}

static float *weights(ferry_engine *e) { return efix_plain_weights(e, GROUPS, numel); }

static size_t total_bytes(void) { return (numel[0] + numel[1] + numel[2]) * sizeof(float); }

/* The paths dir/NAME.ckpt (good) and dir/NAME-bad.ckpt (bad), and an engine
 * in `mode` that took `steps` steps and saved them to good with the blob
 * (the assertion `said`). */
static ferry_engine *saved_after(const char *name, ferry_offload mode, int steps, const char *blob, size_t blob_bytes,
                                 char good[300], char bad[300], const char *said)
{
    snprintf(good, 300, "%s/%s.ckpt", dir, name);
    snprintf(bad, 300, "%s/%s-bad.ckpt", dir, name);
    ferry_engine *e = make(mode, numel);
    for (int i = 0; i < steps; i++)
        train_step(e);
    TAP_IS_STATUS(ferry_engine_save(e, good, blob, blob_bytes), FERRY_OK, "%s", said);
    return e;
}

static void test_round_trip(ferry_offload mode, int delayed)
{
    char path[300], name[64];
    snprintf(path, sizeof path, "%s/state-%d-%d.ckpt", dir, (int)mode, delayed);
    snprintf(name, sizeof name, "%s%s", ferry_offload_name(mode), delayed ? " + delayed update" : "");
    const char blob[] = "rng=42 data=17";
    ferry_engine *a = make_engine(mode, delayed, numel), *b = make_engine(mode, delayed, numel);
    ferry_status st = FERRY_OK;
    for (int i = 0; i < 3 && st == FERRY_OK; i++)
        st = train_step(a);
    TAP_IS_STATUS(ferry_engine_save(a, path, blob, sizeof blob), FERRY_OK, "%s: save after 3 steps",
                  name);
    for (int i = 0; i < 2; i++)
        train_step(a);
    char got[64] = {0};
    size_t got_bytes = 0;
    TAP_IS_STATUS(ferry_engine_load(b, path, got, sizeof got, &got_bytes), FERRY_OK, "%s: load",
                  name);
    tap_ok(got_bytes == sizeof blob && strcmp(got, blob) == 0, "%s: the user blob comes back ('%s')",
           name, got);
    for (int i = 0; i < 2; i++)
        train_step(b);
    float *wa = weights(a), *wb = weights(b);
    tap_ok(memcmp(wa, wb, total_bytes()) == 0,
           "%s: 3 steps + save + load + 2 steps == 5 steps, bitwise (moments and step count restored)",
           name);
    free(wa);
    free(wb);
    ferry_engine_destroy(a);
    ferry_engine_destroy(b);
}

static unsigned char *slurp(const char *path, long *size)
{
    FILE *in = fopen(path, "rb");
    fseek(in, 0, SEEK_END);
    *size = ftell(in);
    rewind(in);
    unsigned char *bytes = malloc((size_t)*size);
    if (fread(bytes, 1, (size_t)*size, in) != (size_t)*size)
        tap_diag("short read of %s", path);
    fclose(in);
    return bytes;
}

static void spit(const char *path, const unsigned char *bytes, long size)
{
    FILE *out = fopen(path, "wb");
    fwrite(bytes, 1, (size_t)size, out);
    fclose(out);
}

static void corrupt_copy(const char *from, const char *to, long flip_at, long truncate_to)
{
    long size;
    unsigned char *bytes = slurp(from, &size);
    if (flip_at >= 0 && flip_at < size)
        bytes[flip_at] ^= 0x10;
    spit(to, bytes, truncate_to >= 0 && truncate_to < size ? truncate_to : size);
    free(bytes);
}

static void test_bad_files(void)
{
    char good[300], bad[300];
    snprintf(good, sizeof good, "%s/good.ckpt", dir);
    snprintf(bad, sizeof bad, "%s/bad.ckpt", dir);
    ferry_engine *e = make(FERRY_OFFLOAD_OPTIMIZER, numel);
    train_step(e);
    ferry_engine_save(e, good, NULL, 0);
    train_step(e);
    float *before = weights(e);

    corrupt_copy(good, bad, 5000, -1);
    TAP_IS_STATUS(ferry_engine_load(e, bad, NULL, 0, NULL), FERRY_ERR_FORMAT, "a flipped bit is found");
    tap_ok(strstr(ferry_last_error(), "checksum") != NULL, "the message says the file is damaged: %s",
           ferry_last_error());
    corrupt_copy(good, bad, -1, 3000);
    TAP_IS_STATUS(ferry_engine_load(e, bad, NULL, 0, NULL), FERRY_ERR_FORMAT, "a truncated file is refused");
    tap_ok(strstr(ferry_last_error(), "truncated") != NULL, "the message says truncated: %s", ferry_last_error());
    corrupt_copy(good, bad, 0, -1);
    TAP_IS_STATUS(ferry_engine_load(e, bad, NULL, 0, NULL), FERRY_ERR_FORMAT, "a foreign file is refused");
    TAP_IS_STATUS(ferry_engine_load(e, "/nonexistent/x.ckpt", NULL, 0, NULL), FERRY_ERR_IO, "a missing file");
    float *after = weights(e);
    tap_ok(memcmp(before, after, total_bytes()) == 0, "no failed load changed the weights");
    free(after);

    size_t other[GROUPS] = {1000, 70000, 333};
    ferry_engine *f = make(FERRY_OFFLOAD_OPTIMIZER, other);
    TAP_IS_STATUS(ferry_engine_load(f, good, NULL, 0, NULL), FERRY_ERR_FORMAT, "another model's checkpoint is refused");
    tap_ok(strstr(ferry_last_error(), "group 1") && strstr(ferry_last_error(), "70001"),
           "naming the group and the sizes: %s", ferry_last_error());
    ferry_engine_destroy(f);

    TAP_IS_STATUS(ferry_engine_save(e, "/nonexistent-dir/x.ckpt", NULL, 0), FERRY_ERR_IO,
                  "saving into a missing directory fails with a status");
    ferry_engine *g = make(FERRY_OFFLOAD_OPTIMIZER, numel);
    TAP_IS_STATUS(ferry_engine_load(g, good, NULL, 0, NULL), FERRY_OK, "the earlier good file still loads");
    ferry_engine_destroy(g);
    free(before);
    ferry_engine_destroy(e);
}

/* CRC-32 (zlib's), bit by bit: the independent reference for the header's. */
static uint32_t crc32_bitwise(uint32_t crc, const unsigned char *p, size_t n)
{
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int b = 0; b < 8; b++)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

/* The header's CRC as version 3 computes it (bytes 64..67: over bytes 0..63,
 * then 68..71, then the group table of GROUPS x 72 bytes), or version 2
 * (without bytes 68..71). */
static uint32_t header_crc(const unsigned char *bytes, int version)
{
    uint32_t crc = crc32_bitwise(0, bytes, 64);
    if (version >= 3)
        crc = crc32_bitwise(crc, bytes + 68, 4);
    return crc32_bitwise(crc, bytes + 72, GROUPS * 72);
}

/* A copy of `from` with `n` bytes at `at` replaced by `value` and, if `fix`,
 * the header's CRC made right again, as a forger would. */
static void forge_bytes(const char *from, const char *to, long at, const void *value, size_t n, int fix)
{
    long size;
    unsigned char *bytes = slurp(from, &size);
    memcpy(bytes + at, value, n);
    if (fix) {
        uint32_t version, crc;
        memcpy(&version, bytes + 8, 4);
        crc = header_crc(bytes, (int)version);
        memcpy(bytes + 64, &crc, 4);
    }
    spit(to, bytes, size);
    free(bytes);
}

static void forge_copy(const char *from, const char *to, long at, int64_t value, int fix)
{
    forge_bytes(from, to, at, &value, 8, fix);
}

/* Versions 2 and 3 checksum the payload and the blob with a 64-bit
 * multiply-xor hash (as the format said then): 8-byte words, then bytes,
 * continuing from h (0x51ED2701A3F9C4B5 to start). */
static uint64_t old_hash(uint64_t h, const unsigned char *p, size_t n)
{
    uint64_t w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * 0x100000001B3ull;
    return h;
}

/* A copy of a version 4 file `from` as version `version` (2 or 3) writes it:
 * the payload's and the blob's checksums in the old hash, the header's CRC
 * as that version computes it. */
static void forge_old_version(const char *from, const char *to, uint32_t version)
{
    long size;
    unsigned char *b = slurp(from, &size);
    uint64_t user, payload;
    memcpy(&user, b + 24, 8);
    memcpy(&payload, b + 32, 8);
    long start = 72 + GROUPS * 72, blob = start + (long)(payload - user), at = start;
    /* The writer hashed each array in pieces of 8 MiB, then the rest (the
     * loss scale section): a piece's last bytes short of a word go one by one. */
    uint64_t sum = 0x51ED2701A3F9C4B5ull, usum = old_hash(0x51ED2701A3F9C4B5ull, b + blob, (size_t)user);
    for (int g = 0; g < GROUPS; g++)
        for (int k = 0; k < 3; k++)
            for (size_t done = 0, bytes = numel[g] * 4; done < bytes; done += 8u << 20) {
                size_t n = bytes - done < (8u << 20) ? bytes - done : 8u << 20;
                sum = old_hash(sum, b + at, n);
                at += (long)n;
            }
    sum = old_hash(sum, b + at, (size_t)(blob - at));
    memcpy(b + 8, &version, 4);
    memcpy(b + 40, &sum, 8);
    memcpy(b + 48, &usum, 8);
    uint32_t crc = header_crc(b, (int)version);
    memcpy(b + 64, &crc, 4);
    spit(to, b, size);
    free(b);
}

/* Header bytes 68..71 (the reserved word) are under the CRC since version 3;
 * version 4 checksums the payload and the blob with CRC-32C; version 2 and
 * 3 files still load. */
static void test_reserved_word(void)
{
    char good[300], bad[300];
    ferry_engine *e = saved_after("reserved", FERRY_OFFLOAD_OPTIMIZER, 1, NULL, 0, good, bad, "save");
    ferry_engine *f = make(FERRY_OFFLOAD_OPTIMIZER, numel);
    long size;
    unsigned char *b = slurp(good, &size);
    uint32_t version, crc;
    uint64_t sum, usum, user, payload;
    memcpy(&version, b + 8, 4);
    memcpy(&crc, b + 64, 4);
    memcpy(&user, b + 24, 8);
    memcpy(&payload, b + 32, 8);
    memcpy(&sum, b + 40, 8);
    memcpy(&usum, b + 48, 8);
    TAP_IS_INT(version, 4, "the file is version 4");
    TAP_IS_INT(crc, header_crc(b, 4), "its header CRC covers bytes 0..63, 68..71 and the group table");
    long start = 72 + GROUPS * 72;
    uint64_t want = ref_crc32c(0, b + start, (size_t)(payload - user));
    tap_ok(sum == want && usum == ref_crc32c(0, b + start + (long)(payload - user), (size_t)user),
           "its payload's checksum is the CRC-32C of the %llu bytes before the blob (0x%llx, the reference 0x%llx), "
           "the blob's that of the blob", (unsigned long long)(payload - user), (unsigned long long)sum,
           (unsigned long long)want);
    free(b);
    for (long at = 68; at < 72; at++) {
        unsigned char v = 0x40;
        forge_bytes(good, bad, at, &v, 1, 0);
        ferry_status st = ferry_engine_load(f, bad, NULL, 0, NULL);
        tap_ok(st == FERRY_ERR_FORMAT && strstr(ferry_last_error(), "damaged"), "header byte %ld changed: refused (%s)",
               at, ferry_last_error());
    }
    uint32_t nonzero = 7;
    forge_bytes(good, bad, 68, &nonzero, 4, 1);
    ferry_status st = ferry_engine_load(f, bad, NULL, 0, NULL);
    tap_ok(st == FERRY_ERR_FORMAT && strstr(ferry_last_error(), "reserved"),
           "a reserved word of 7 with a CRC made to match: refused (%s)", ferry_last_error());
    uint32_t three = 3;
    forge_bytes(good, bad, 8, &three, 4, 1);
    st = ferry_engine_load(f, bad, NULL, 0, NULL);
    tap_ok(st == FERRY_ERR_FORMAT && strstr(ferry_last_error(), "damaged"),
           "a version 4 file relabelled version 3 (its CRC-32C read as the old hash): refused (%s)", ferry_last_error());
    for (uint32_t v = 2; v <= 3; v++) {
        forge_old_version(good, bad, v);
        TAP_IS_STATUS(ferry_engine_load(f, bad, NULL, 0, NULL), FERRY_OK,
                      "a version %u file (the old hash%s) loads", v, v == 2 ? ", its header CRC without 68..71" : "");
        TAP_IS_INT(ferry_engine_steps(f), 1, "at its step");
    }
    ferry_engine_destroy(e);
    ferry_engine_destroy(f);
}

/* The step count (header bytes 16..23) is covered by the header's checksum;
 * a step that checks out but cannot be is refused all the same. */
static void test_header_fields(void)
{
    char good[300], bad[300];
    ferry_engine *e = saved_after("steps", FERRY_OFFLOAD_OPTIMIZER, 3, NULL, 0, good, bad, "save after 3 steps");
    ferry_engine *f = make(FERRY_OFFLOAD_OPTIMIZER, numel);
    forge_copy(good, bad, 16, 99, 0);
    TAP_IS_STATUS(ferry_engine_load(f, bad, NULL, 0, NULL), FERRY_ERR_FORMAT, "a step count changed to 99 is found");
    tap_ok(strstr(ferry_last_error(), "header") && strstr(ferry_last_error(), "damaged"),
           "the message says the header is damaged: %s", ferry_last_error());
    TAP_IS_INT(ferry_engine_steps(f), 0, "and the engine's step count is untouched");
    forge_copy(good, bad, 16, -5, 1);
    TAP_IS_STATUS(ferry_engine_load(f, bad, NULL, 0, NULL), FERRY_ERR_FORMAT,
                  "a negative step count with a valid checksum is refused");
    tap_ok(strstr(ferry_last_error(), "-5") && strstr(ferry_last_error(), "negative"), "naming it: %s",
           ferry_last_error());
    forge_copy(good, bad, 16, INT64_MAX, 1);
    TAP_IS_STATUS(ferry_engine_load(f, bad, NULL, 0, NULL), FERRY_ERR_FORMAT,
                  "step INT64_MAX (one more would overflow) is refused");
    tap_ok(strstr(ferry_last_error(), "overflow") != NULL, "saying why: %s", ferry_last_error());
    forge_copy(good, bad, 16, 7, 1);
    TAP_IS_STATUS(ferry_engine_load(f, bad, NULL, 0, NULL), FERRY_OK, "step 7 with a valid checksum loads");
    TAP_IS_INT(ferry_engine_steps(f), 7, "and sets the engine's step count to 7");
    TAP_IS_STATUS(ferry_engine_load(f, good, NULL, 0, NULL), FERRY_OK, "the real file loads");
    TAP_IS_INT(ferry_engine_steps(f), 3, "with the step count saved (3)");
    ferry_engine_destroy(f);
    ferry_engine_destroy(e);
}

/* The blob alone, without an engine, checked against its own checksum. */
static void test_load_user(void)
{
    char good[300], bad[300];
    const char blob[] = "data position 12345";
    ferry_engine_destroy(saved_after("user", FERRY_OFFLOAD_NONE, 1, blob, sizeof blob, good, bad, "save with a blob"));
    char got[64] = {0};
    size_t n = 0;
    TAP_IS_STATUS(ferry_engine_load_user(good, got, sizeof got, &n), FERRY_OK, "ferry_engine_load_user reads it");
    tap_ok(n == sizeof blob && strcmp(got, blob) == 0, "the blob comes back: '%s' (%zu bytes)", got, n);
    long size;
    free(slurp(good, &size));
    corrupt_copy(good, bad, size - 3, -1);
    TAP_IS_STATUS(ferry_engine_load_user(bad, got, sizeof got, &n), FERRY_ERR_FORMAT, "a flipped bit in the blob is found");
    tap_ok(strstr(ferry_last_error(), "user blob") != NULL, "the message names the blob: %s", ferry_last_error());
    corrupt_copy(good, bad, 30, -1);
    TAP_IS_STATUS(ferry_engine_load_user(bad, got, sizeof got, &n), FERRY_ERR_FORMAT,
                  "a flipped bit in the header's user_bytes is found");
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/ferry-ckpt-XXXXXX");
    if (!mkdtemp(dir)) {
        printf("Bail out! cannot make a temporary directory\n");
        return 1;
    }
    test_round_trip(FERRY_OFFLOAD_NONE, 0);
    test_round_trip(FERRY_OFFLOAD_OPTIMIZER, 0);
    test_round_trip(FERRY_OFFLOAD_PARAMS, 0);
    test_round_trip(FERRY_OFFLOAD_OPTIMIZER, 1);
    test_bad_files();
    test_header_fields();
    test_reserved_word();
    test_load_user();
    test_dir_remove(dir);
    return tap_done();
}
