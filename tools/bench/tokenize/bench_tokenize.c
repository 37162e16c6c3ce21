/* tools/bench/tokenize/bench_tokenize.c: the C tokenizer's encoding speed
 * against the family's npm reference encoder run by node on the same text
 * in the same run (bench_ref.js). Each round encodes the whole text with a
 * freshly opened tokenizer (a cold word cache, as the references start
 * each call); medians of --rounds rounds. Times are CPU seconds (the C
 * thread's; node's process, its collector's threads included), so that the
 * waits of a machine shared with other work do not count. Prints MB/s of
 * both, the token counts (they must agree) and the ratio C / JS.
 * Usage: bench_tokenize --tokenizer tokenizer.json --family gpt2|llama3|llama2
 *                       [--rounds N] [--node-modules DIR] TEXT_FILE
 * (--family names the reference; the default node_modules is
 * build-deps/npm/node_modules under the current folder.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/fileio.h"
#include "train/tokenizer.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_tokenize --tokenizer tokenizer.json --family gpt2|llama3|llama2 [--rounds N] "
            "[--node-modules DIR] TEXT_FILE\n");
    return 2;
}

/* Median seconds of the C encoder; *tokens its count. -1 on failure. */
static double bench_c(const char *json, const char *text, size_t len, int rounds, size_t *tokens)
{
    double *s = calloc((size_t)rounds, sizeof *s);
    for (int r = 0; s && r < rounds; r++) {
        tok_tokenizer *t = NULL;
        if (tok_open(json, NULL, &t) != FERRY_OK) {
            fprintf(stderr, "bench_tokenize: %s\n", ferry_last_error());
            free(s);
            return -1;
        }
        tok_ids ids = {0};
        double t0 = cpu_s();
        ferry_status st = tok_encode(t, text, len, &ids);
        s[r] = cpu_s() - t0;
        *tokens = ids.len;
        tok_ids_free(&ids);
        tok_close(t);
        if (st != FERRY_OK) {
            fprintf(stderr, "bench_tokenize: %s\n", ferry_last_error());
            free(s);
            return -1;
        }
    }
    qsort(s, (size_t)rounds, sizeof *s, cmp_double);
    double m = s ? s[rounds / 2] : -1;
    free(s);
    return m;
}

/* Median seconds of the node reference; *tokens its count. -1 on failure. */
static double bench_js(const char *family, const char *mods, const char *file, int rounds, size_t *tokens)
{
    const char *root = getenv("FERRY_SOURCE_ROOT");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "node '%s/tools/bench/tokenize/bench_ref.js' '%s' '%s' '%s' %d", root ? root : ".",
             family, mods, file, rounds);
    FILE *p = popen(cmd, "r");
    double s[64];
    int n = 0;
    while (p && n < rounds && n < 64 && fscanf(p, "%lf %zu", &s[n], tokens) == 2)
        n++;
    int rc = p ? pclose(p) : -1;
    if (rc != 0 || n == 0) {
        fprintf(stderr, "bench_tokenize: node's reference encoder failed (%s)\n", cmd);
        return -1;
    }
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return s[n / 2];
}

int main(int argc, char **argv)
{
    const char *json = NULL, *family = NULL, *file = NULL, *mods = "build-deps/npm/node_modules";
    int rounds = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--family") && i + 1 < argc)
            family = argv[++i];
        else if (!strcmp(argv[i], "--node-modules") && i + 1 < argc)
            mods = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc && atoi(argv[i + 1]) >= 1 && atoi(argv[i + 1]) <= 64)
            rounds = atoi(argv[++i]);
        else if (argv[i][0] != '-' && !file)
            file = argv[i];
        else
            return usage();
    }
    if (!json || !family || !file)
        return usage();
    char *text;
    size_t len;
    if (fileio_read(file, "text", &text, &len) != FERRY_OK) {
        fprintf(stderr, "bench_tokenize: %s\n", ferry_last_error());
        return 1;
    }
    size_t nc = 0, nj = 0;
    double c = bench_c(json, text, len, rounds, &nc);
    double j = c > 0 ? bench_js(family, mods, file, rounds, &nj) : -1;
    free(text);
    if (c <= 0 || j <= 0)
        return 1;
    double mb = (double)len / 1e6;
    printf("text: %s, %.2f MB; %d rounds, medians of CPU time\n", file, mb, rounds);
    printf("C  (%s): %.1f MB/s, %zu tokens\n", json, mb / c, nc);
    printf("JS (%s reference): %.2f MB/s, %zu tokens%s\n", family, mb / j, nj,
           nc == nj ? "" : " (the counts differ: the tokenizer.json is not this family's)");
    printf("tokenize %s: C %.1f MB/s = %.1fx the JS reference (%.2f MB/s)\n", family, mb / c, j / c, mb / j);
    return nc == nj ? 0 : 1;
}
