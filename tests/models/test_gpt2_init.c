/* GPT-2's initialisation on every core (models/gpt2_layout.c): the values do
 * not depend on the number of threads, every element of a group is written,
 * and the draws are the documented ones. A model 256 wide with GPT-2's
 * vocabulary, so that its tensors span many 65536-element chunks (wte: 197,
 * its padded rows included) and its blocks several.
 * - Filled with 1, 2 and 5 threads (FERRY_INIT_THREADS) into buffers
 *   poisoned with different bytes: the three are bitwise equal.
 * - Chunk k of a tensor draws from the stream s_k = s_0 for k = 0, else
 *   mix64(s_0 ^ mix64(k)), s_0 = mix64(mix64(seed) ^ (group << 20) ^ tensor),
 *   two unit normals per Box-Muller step: recomputed here for the first
 *   values of chunks 0 and 3 of c_attn.weight and chunk 196 of wte.
 * - Padded wte rows and the alignment gaps are 0; the std of a 4-chunk
 *   tensor is 0.02 within 2%. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt2.h"
#include "tests/tap.h"

#define CHUNK 65536u
#define SEED 7u

static uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The first normal of the stream of chunk k of tensor i of group g, times std. */
static float first_draw(int g, int i, uint64_t k, double std)
{
    uint64_t s = mix(mix(SEED) ^ ((uint64_t)g << 20) ^ (uint64_t)i);
    if (k)
        s = mix(s ^ mix(k));
    uint64_t a = mix(s), b = mix(a);
    double u1 = ((double)(a >> 11) + 1.0) * 0x1.0p-53, u2 = (double)(b >> 11) * 0x1.0p-53;
    return (float)(std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static float *fill(const gpt2_model *m, int g, const char *threads, int poison)
{
    size_t n = gpt2_group_numel(m, g);
    float *x = malloc(n * sizeof *x);
    memset(x, poison, n * sizeof *x);
    setenv("FERRY_INIT_THREADS", threads, 1);
    TAP_IS_STATUS(gpt2_init_group(m, g, SEED, x), FERRY_OK, "group %d filled on %s thread(s)", g, threads);
    return x;
}

static void same_for_any_thread_count(const gpt2_model *m, int g)
{
    size_t n = gpt2_group_numel(m, g);
    float *a = fill(m, g, "1", 0x7f), *b = fill(m, g, "2", 0x55), *c = fill(m, g, "5", 0xff);
    tap_ok(memcmp(a, b, n * 4) == 0 && memcmp(a, c, n * 4) == 0,
           "group %d (%zu elements): 1, 2 and 5 threads give the same bits over differently poisoned buffers", g, n);
    free(a), free(b), free(c);
}

static void documented_draws(const gpt2_model *m)
{
    gpt2_tensor_info t;
    float *blk = fill(m, 1, "3", 0);
    gpt2_group_tensor(m, 1, 2, &t); /* attn.c_attn.weight: 768 x 256, 3 chunks */
    TAP_IS_CLOSE(blk[t.offset], first_draw(1, 2, 0, 0.02), 0, 1e-6, "c_attn.weight chunk 0 starts with its stream");
    gpt2_group_tensor(m, 1, 8, &t); /* mlp.c_fc.weight: 1024 x 256, 4 chunks */
    TAP_IS_CLOSE(blk[t.offset + 3 * CHUNK], first_draw(1, 8, 3, 0.02), 0, 1e-6,
                 "c_fc.weight chunk 3 starts with its stream");
    double s = 0, q = 0;
    for (size_t i = 0; i < t.numel; i++)
        s += blk[t.offset + i], q += (double)blk[t.offset + i] * blk[t.offset + i];
    double sd = sqrt(q / t.numel - (s / t.numel) * (s / t.numel));
    TAP_IS_CLOSE(sd, 0.02, 0, 0.02, "c_fc.weight (4 chunks) has std 0.02");
    free(blk);
    float *emb = fill(m, 0, "3", 0x7f);
    gpt2_group_tensor(m, 0, 0, &t); /* wte: 50304 x 256 rows, 50257 real */
    TAP_IS_CLOSE(emb[196 * CHUNK], first_draw(0, 0, 196, 0.02), 0, 1e-6, "wte chunk 196 starts with its stream");
    int zeros = 1;
    for (size_t i = (size_t)50257 * 256; i < t.numel; i++)
        zeros &= emb[i] == 0.0f;
    tap_ok(zeros, "wte's padded rows are 0 (over a poisoned buffer)");
    free(emb);
}

int main(void)
{
    gpt2_config c;
    gpt2_model *m = NULL;
    gpt2_config_from_fields(2, 4, 256, 50257, 0, 1024, &c);
    if (!tap_is_status(gpt2_create(&c, &m), FERRY_OK, "model"))
        return tap_done();
    for (int g = 0; g < gpt2_num_groups(m); g++)
        same_for_any_thread_count(m, g);
    documented_draws(m);
    gpt2_destroy(m);
    return tap_done();
}
