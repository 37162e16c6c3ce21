/* Checkpoint folders of a run: see run_state.h. */
#include "train/run_state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/error.h"
#include "common/fileio.h"
#include "train/hf_checkpoint.h"
#include "train/hf_json.h"
#include "train/hf_llama.h"

ferry_status run_state_join(char *out, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(out, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "the path '%s/%s' is too long", dir, name);
    return FERRY_OK;
}

/* ---- the run state, field by field ---- */

#define RUN_STATE_MAGIC "FERRYRUN"
enum { RUN_STATE_U64S = 6, RUN_STATE_I32S = 9, RUN_STATE_SET_I32S = 5, RUN_STATE_SET_F32S = 7, RUN_STATE_LLAMA_I32S = 5 };
_Static_assert(RUN_STATE_V2_BYTES == 8 + 4 + 8 * RUN_STATE_U64S + 4 * RUN_STATE_I32S, "the documented layout");
_Static_assert(RUN_STATE_V3_BYTES == RUN_STATE_V2_BYTES + 16 + 8 + 4 * RUN_STATE_SET_I32S + 4 * RUN_STATE_SET_F32S,
               "the documented layout");
_Static_assert(RUN_STATE_BYTES == RUN_STATE_V3_BYTES + 8 + 4 + 4, "the documented layout");
_Static_assert(RUN_STATE_V5_BYTES == RUN_STATE_BYTES + 4 + 16 + 4 * RUN_STATE_LLAMA_I32S, "the documented layout");
_Static_assert(sizeof(((llama_config *)0)->model_type) == 16, "version 5 keeps model_type in 16 bytes");

void run_state_new_run(char out[33])
{
    unsigned char b[16];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t n = getrandom(b + got, sizeof b - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (got < sizeof b) { /* no getrandom: the clock and the process, mixed */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
        for (size_t i = 0; i < sizeof b; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            b[i] = (unsigned char)x;
        }
    }
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static unsigned char *put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
    return p + bytes;
}

static uint64_t get_le(const unsigned char **p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)(*p)[i] << (8 * i);
    *p += bytes;
    return v;
}

/* The six model fields every version has: layers, heads, width,
 * vocabulary, padded vocabulary and context, in either family. */
static void model_fields(const model_spec *s, int32_t out[6])
{
    const gpt2_config *g = &s->gpt2;
    const llama_config *l = &s->llama;
    bool llama = s->family == MODEL_FAMILY_LLAMA;
    const int32_t f[6] = {llama ? l->n_layer : g->n_layer,       llama ? l->n_head : g->n_head,
                          llama ? l->n_embd : g->n_embd,         llama ? l->vocab_size : g->vocab_size,
                          llama ? l->padded_vocab_size : g->padded_vocab_size,
                          llama ? l->max_seq_len : g->max_seq_len};
    memcpy(out, f, sizeof f);
}

size_t run_state_encode(const train_resume *r, unsigned char *out)
{
    bool llama = r->model.family == MODEL_FAMILY_LLAMA;
    int32_t m[6];
    model_fields(&r->model, m);
    const uint64_t u64s[RUN_STATE_U64S] = {(uint64_t)r->step, (uint64_t)r->engine_step, r->data.epoch,
                                           r->data.index, r->data.layout, r->sample_rng};
    const int32_t i32s[RUN_STATE_I32S] = {m[0], m[1], m[2], m[3], m[4], m[5], r->batch, r->seq, r->grad_accum};
    memcpy(out, RUN_STATE_MAGIC, 8);
    unsigned char *p = put_le(out + 8, llama ? RUN_STATE_VERSION : 4u, 4);
    for (int i = 0; i < RUN_STATE_U64S; i++)
        p = put_le(p, u64s[i], 8);
    for (int i = 0; i < RUN_STATE_I32S; i++)
        p = put_le(p, (uint32_t)i32s[i], 4);
    for (int i = 0; i < 16; i++) {
        unsigned v = 0;
        sscanf(r->run + 2 * i, "%2x", &v);
        *p++ = (unsigned char)v;
    }
    const train_settings *t = &r->settings;
    p = put_le(p, t->seed, 8);
    const int32_t set_i32s[RUN_STATE_SET_I32S] = {t->dtype, t->offload, t->delayed_update, t->warmup, t->steps};
    const float set_f32s[RUN_STATE_SET_F32S] = {t->lr, t->lr_min_frac, t->weight_decay, t->beta1, t->beta2, t->eps,
                                                t->clip};
    for (int i = 0; i < RUN_STATE_SET_I32S; i++)
        p = put_le(p, (uint32_t)set_i32s[i], 4);
    for (int i = 0; i < RUN_STATE_SET_F32S; i++)
        p = put_le(p, f32_bits(set_f32s[i]), 4);
    p = put_le(p, r->weights.bytes, 8);
    p = put_le(p, r->weights.crc32c, 4);
    p = put_le(p, (uint32_t)t->checkpoint_every, 4);
    if (!llama)
        return RUN_STATE_BYTES;
    const llama_config *l = &r->model.llama;
    p = put_le(p, MODEL_FAMILY_LLAMA, 4);
    memset(p, 0, 16);
    memcpy(p, l->model_type, strnlen(l->model_type, 16));
    p += 16;
    const int32_t shape[RUN_STATE_LLAMA_I32S] = {l->n_kv_head, l->head_dim, l->intermediate_size, l->qkv_bias,
                                                 l->tied_embeddings};
    for (int i = 0; i < RUN_STATE_LLAMA_I32S; i++)
        p = put_le(p, (uint32_t)shape[i], 4);
    return RUN_STATE_V5_BYTES;
}

/* A run's identity is 32 lowercase hex digits, not all zero. */
static bool run_ok(const char *run)
{
    size_t n = strspn(run, "0123456789abcdef");
    return n == 32 && !run[32] && strspn(run, "0") != 32;
}

/* The settings of a version-3 run state are ones a run can have. */
static ferry_status check_settings(const train_settings *t, const char *where)
{
    bool floats_ok = isfinite(t->lr) && t->lr >= 0 && isfinite(t->lr_min_frac) && t->lr_min_frac >= 0 &&
                     isfinite(t->weight_decay) && t->weight_decay >= 0 && t->beta1 >= 0 && t->beta1 < 1 &&
                     t->beta2 >= 0 && t->beta2 < 1 && isfinite(t->eps) && t->eps >= 0 && isfinite(t->clip) &&
                     t->clip >= 0;
    bool ints_ok = (t->dtype == FERRY_DTYPE_F32 || t->dtype == FERRY_DTYPE_BF16 || t->dtype == FERRY_DTYPE_F16) &&
                   strcmp(ferry_offload_name((ferry_offload)t->offload), "unknown") != 0 && /* any mode ferry has */
                   (t->delayed_update == 0 || t->delayed_update == 1) && t->warmup >= 0 && t->steps >= 1 &&
                   t->checkpoint_every >= -1;
    if (!floats_ok || !ints_ok)
        return err_set(FERRY_ERR_FORMAT, "'%s': the run state's settings (dtype %d, offload %d, delayed update %d, "
                                         "warmup %d, steps %d, lr %g, ...) are not ones a run can have: it is damaged",
                       where, t->dtype, t->offload, t->delayed_update, t->warmup, t->steps, (double)t->lr);
    return FERRY_OK;
}

/* The shape a version-5 run state records is one the Llama family can
 * have: checked as a config with it and the defaults of the rest. */
static ferry_status check_llama_shape(const llama_config *shape)
{
    llama_config c = *shape;
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.rope_scaling = (llama_rope_scaling){LLAMA_ROPE_DEFAULT, 0, 0, 0, 0};
    c.initializer_range = 0.02f;
    c.sliding_window = 0;
    bool known = strcmp(c.model_type, "llama") == 0 || strcmp(c.model_type, "mistral") == 0 ||
                 strcmp(c.model_type, "qwen2") == 0;
    if (!known)
        return err_set(FERRY_ERR_FORMAT, "its model_type '%.16s' is none of llama, mistral, qwen2", c.model_type);
    return llama_config_validate(&c);
}

/* Every field of a decoded run state is one a run can have. */
static ferry_status check_resume(const train_resume *r, const char *where)
{
    if (r->step < 0 || r->step == INT64_MAX)
        return err_set(FERRY_ERR_FORMAT, "'%s': the run state's step %lld is outside 0..2^63-2: it is damaged", where,
                       (long long)r->step);
    if (r->engine_step < 0 || r->engine_step > r->step)
        return err_set(FERRY_ERR_FORMAT, "'%s': the run state records %lld optimizer steps in %lld steps (at most "
                                         "one per step): it is damaged",
                       where, (long long)r->engine_step, (long long)r->step);
    if (r->model.family == MODEL_FAMILY_GPT2 && gpt2_config_validate(&r->model.gpt2) != FERRY_OK)
        return err_wrap(FERRY_ERR_FORMAT, "'%s': the run state's model is damaged", where);
    if (r->model.family == MODEL_FAMILY_LLAMA && check_llama_shape(&r->model.llama) != FERRY_OK)
        return err_wrap(FERRY_ERR_FORMAT, "'%s': the run state's model is damaged", where);
    int context = model_spec_context(&r->model);
    if (r->batch < 1 || r->seq < 1 || r->grad_accum < 1 || r->seq > context)
        return err_set(FERRY_ERR_FORMAT, "'%s': the run state's batch %d, sequence %d and accumulation %d do not "
                                         "fit its model (context %d): it is damaged",
                       where, r->batch, r->seq, r->grad_accum, context);
    return FERRY_OK;
}

ferry_status run_state_decode(const unsigned char *in, size_t len, const char *where, train_resume *out)
{
    if (len < 12 || memcmp(in, RUN_STATE_MAGIC, 8) != 0)
        return err_set(FERRY_ERR_FORMAT, "'%s' holds no train_gpt2 run state (was it saved by another program?)",
                       where);
    const unsigned char *p = in + 8;
    uint32_t version = (uint32_t)get_le(&p, 4);
    if (version < 2 || version > RUN_STATE_VERSION)
        return err_set(FERRY_ERR_FORMAT, "'%s' holds run state version %u; this ferry reads versions 2 to %u",
                       where, version, RUN_STATE_VERSION);
    size_t want = version == 2   ? RUN_STATE_V2_BYTES
                  : version == 3 ? RUN_STATE_V3_BYTES
                  : version == 4 ? RUN_STATE_BYTES
                                 : RUN_STATE_V5_BYTES;
    if (len != want)
        return err_set(FERRY_ERR_FORMAT, "'%s' holds %zu bytes of run state; version %u has %zu: it is damaged", where,
                       len, version, want);
    uint64_t u64s[RUN_STATE_U64S];
    int32_t i32s[RUN_STATE_I32S];
    for (int i = 0; i < RUN_STATE_U64S; i++)
        u64s[i] = get_le(&p, 8);
    for (int i = 0; i < RUN_STATE_I32S; i++)
        i32s[i] = (int32_t)(uint32_t)get_le(&p, 4);
    train_resume r;
    memset(&r, 0, sizeof r);
    r.step = (int64_t)u64s[0];
    r.engine_step = (int64_t)u64s[1];
    r.data = (tok_loader_pos){u64s[2], u64s[3], u64s[4]};
    r.sample_rng = u64s[5];
    r.model.family = MODEL_FAMILY_GPT2;
    r.model.gpt2 = (gpt2_config){i32s[0], i32s[1], i32s[2], i32s[3], i32s[4], i32s[5]};
    r.batch = i32s[6], r.seq = i32s[7], r.grad_accum = i32s[8];
    if (version >= 5) {
        /* The family and the Llama shape close the state: read ahead, so
         * that the model is checked whole below. */
        const unsigned char *q = in + RUN_STATE_BYTES;
        uint32_t family = (uint32_t)get_le(&q, 4);
        if (family != MODEL_FAMILY_GPT2 && family != MODEL_FAMILY_LLAMA)
            return err_set(FERRY_ERR_FORMAT, "'%s': the run state's model family %u is none ferry trains (0 GPT-2, "
                                             "1 the Llama family): it is damaged", where, family);
        if (family == MODEL_FAMILY_LLAMA) {
            llama_config *l = &r.model.llama;
            r.model.family = MODEL_FAMILY_LLAMA;
            memset(&r.model.gpt2, 0, sizeof r.model.gpt2);
            memcpy(l->model_type, q, 16);
            l->model_type[15] = '\0';
            q += 16;
            l->n_layer = i32s[0], l->n_head = i32s[1], l->n_embd = i32s[2];
            l->vocab_size = i32s[3], l->padded_vocab_size = i32s[4], l->max_seq_len = i32s[5];
            int32_t shape[RUN_STATE_LLAMA_I32S];
            for (int i = 0; i < RUN_STATE_LLAMA_I32S; i++)
                shape[i] = (int32_t)(uint32_t)get_le(&q, 4);
            l->n_kv_head = shape[0], l->head_dim = shape[1], l->intermediate_size = shape[2];
            if ((shape[3] != 0 && shape[3] != 1) || (shape[4] != 0 && shape[4] != 1))
                return err_set(FERRY_ERR_FORMAT, "'%s': the run state's q/k/v bias %d and tied embeddings %d are "
                                                 "not 0 or 1: it is damaged", where, shape[3], shape[4]);
            l->qkv_bias = shape[3] == 1, l->tied_embeddings = shape[4] == 1;
        }
    }
    ferry_status st = check_resume(&r, where);
    if (st == FERRY_OK && version >= 3) {
        for (int i = 0; i < 16; i++)
            snprintf(r.run + 2 * i, 3, "%02x", *p++);
        train_settings *t = &r.settings;
        t->known = 1;
        t->seed = get_le(&p, 8);
        int32_t *ints[RUN_STATE_SET_I32S] = {&t->dtype, &t->offload, &t->delayed_update, &t->warmup, &t->steps};
        float *floats[RUN_STATE_SET_F32S] = {&t->lr, &t->lr_min_frac, &t->weight_decay, &t->beta1, &t->beta2, &t->eps,
                                             &t->clip};
        for (int i = 0; i < RUN_STATE_SET_I32S; i++)
            *ints[i] = (int32_t)(uint32_t)get_le(&p, 4);
        for (int i = 0; i < RUN_STATE_SET_F32S; i++)
            *floats[i] = bits_f32((uint32_t)get_le(&p, 4));
        t->checkpoint_every = -1;
        if (version >= 4) {
            r.weights_known = 1;
            r.weights.bytes = get_le(&p, 8);
            r.weights.crc32c = (uint32_t)get_le(&p, 4);
            t->checkpoint_every = (int32_t)(uint32_t)get_le(&p, 4);
        }
        if (version >= 4 && t->checkpoint_every < 0)
            st = err_set(FERRY_ERR_FORMAT, "'%s': the run state's --checkpoint-every %d is negative: it is damaged",
                         where, t->checkpoint_every);
        else if (!run_ok(r.run))
            st = err_set(FERRY_ERR_FORMAT, "'%s': the run state's run identity %s is not one a run gets: it is "
                                           "damaged", where, r.run);
        else
            st = check_settings(t, where);
    }
    if (st == FERRY_OK)
        *out = r;
    return st;
}

/* A model's family as a message names it. */
static const char *family_words(const model_spec *s)
{
    return s->family == MODEL_FAMILY_LLAMA ? "a model of the Llama family" : "GPT-2";
}

ferry_status run_state_check_model(const train_resume *r, const model_spec *spec, const char *config_json)
{
    if (spec->family != r->model.family)
        return err_set(FERRY_ERR_FORMAT, "'%s' describes %s (model_type %s), but the state.ferry beside it was "
                                         "trained with %s: config.json was replaced or comes from another "
                                         "checkpoint; put back the one saved with it",
                       config_json, family_words(spec), model_spec_type(spec), family_words(&r->model));
    if (spec->family == MODEL_FAMILY_LLAMA) {
        const llama_config *c = &spec->llama, *t = &r->model.llama;
        if (strcmp(c->model_type, t->model_type) != 0)
            return err_set(FERRY_ERR_FORMAT, "'%s' says model_type %s, but the state.ferry beside it was trained "
                                             "with model_type %s: config.json was edited or comes from another "
                                             "checkpoint; put back the one saved with it",
                           config_json, c->model_type, t->model_type);
        const struct { const char *name; int said, trained; } fields[] = {
            {"num_hidden_layers", c->n_layer, t->n_layer},
            {"num_attention_heads", c->n_head, t->n_head},
            {"num_key_value_heads", c->n_kv_head, t->n_kv_head},
            {"hidden_size", c->n_embd, t->n_embd},
            {"head_dim", c->head_dim, t->head_dim},
            {"intermediate_size", c->intermediate_size, t->intermediate_size},
            {"vocab_size", c->vocab_size, t->vocab_size},
            {"max_position_embeddings", c->max_seq_len, t->max_seq_len},
            {"padded vocabulary", c->padded_vocab_size, t->padded_vocab_size},
            {"q/k/v bias", c->qkv_bias, t->qkv_bias},
            {"tie_word_embeddings", c->tied_embeddings, t->tied_embeddings},
        };
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
            if (fields[i].said != fields[i].trained)
                return err_set(FERRY_ERR_FORMAT, "'%s' says %s %d, but the state.ferry beside it was trained with "
                                                 "%s %d: config.json was edited or comes from another checkpoint; "
                                                 "put back the one saved with it",
                               config_json, fields[i].name, fields[i].said, fields[i].name, fields[i].trained);
        return FERRY_OK;
    }
    static const struct { const char *name; size_t at; } fields[] = {
        {"n_layer", offsetof(gpt2_config, n_layer)},       {"n_head", offsetof(gpt2_config, n_head)},
        {"n_embd", offsetof(gpt2_config, n_embd)},         {"vocab_size", offsetof(gpt2_config, vocab_size)},
        {"n_positions", offsetof(gpt2_config, max_seq_len)}, {"padded vocabulary", offsetof(gpt2_config, padded_vocab_size)},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        int said, trained;
        memcpy(&said, (const char *)&spec->gpt2 + fields[i].at, sizeof said);
        memcpy(&trained, (const char *)&r->model.gpt2 + fields[i].at, sizeof trained);
        if (said != trained)
            return err_set(FERRY_ERR_FORMAT, "'%s' says %s %d, but the state.ferry beside it was trained with %s %d: "
                                             "config.json was edited or comes from another checkpoint; put back the "
                                             "one saved with it",
                           config_json, fields[i].name, said, fields[i].name, trained);
    }
    return FERRY_OK;
}

model_family run_state_folder_family(const char *dir)
{
    char path[PATH_MAX];
    cJSON *j = NULL;
    model_family f = MODEL_FAMILY_GPT2;
    if (run_state_join(path, sizeof path, dir, "config.json") != FERRY_OK || access(path, F_OK) != 0 ||
        hf_json_read_object(path, "model config", "{\"model_type\": ...}", &j) != FERRY_OK) {
        err_clear();
        return f;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (cJSON_IsString(type) && (strcmp(type->valuestring, "llama") == 0 || strcmp(type->valuestring, "mistral") == 0 ||
                                 strcmp(type->valuestring, "qwen2") == 0))
        f = MODEL_FAMILY_LLAMA;
    cJSON_Delete(j);
    return f;
}

/* A folder of the run's own (a step folder being filled): one that is there
 * already is fine. */
static ferry_status make_dir(const char *path)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return FERRY_OK;
    return err_set(FERRY_ERR_IO, "cannot create folder '%s': %s", path, strerror(errno));
}

/* Removes a checkpoint folder and every file in it, also the temporaries a
 * killed save left behind (".model.safetensors.tmp", ...), so that the name
 * can be used again. Never follows a symbolic link: a link with the name is
 * left as it is, and so is what it points at. Returns 0, or the errno of the
 * folder's removal. */
static int remove_tree(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return e;
    }
    for (struct dirent *ent; (ent = readdir(d)) != NULL;)
        if (strcmp(ent->d_name, ".") != 0 && strcmp(ent->d_name, "..") != 0)
            unlinkat(dirfd(d), ent->d_name, 0);
    closedir(d);
    return rmdir(dir) == 0 || errno == ENOENT ? 0 : errno;
}

/* Whether `path` is a real folder (not a link to one). */
static bool is_real_dir(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* ---- the run folder: lock, temporaries, retention ---- */

/* A save stopped between moving an earlier step_N aside and renaming the
 * new one in (killed, or both renames refused) leaves step_N missing and the
 * whole earlier save at ".step_N.old": puts it back. Whether it did. */
static bool restore_aside(const char *dir, const char *name, const char *aside)
{
    char step[64], final[PATH_MAX];
    size_t n = strlen(name);
    struct stat sb;
    if (strcmp(name + n - 4, ".old") != 0 || n - 5 >= sizeof step)
        return false;
    snprintf(step, sizeof step, "%.*s", (int)(n - 5), name + 1);
    return is_real_dir(aside) && run_state_join(final, sizeof final, dir, step) == FERRY_OK && lstat(final, &sb) != 0 && errno == ENOENT &&
           rename(aside, final) == 0;
}

/* Removes what killed saves and killed retention left (".step_N.tmp",
 * ".step_N.old" unless it is the only copy of step_N, ".step_N.del"); only
 * called with the folder's lock held, when no save can be under way. */
static void remove_temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    char path[PATH_MAX];
    for (struct dirent *ent; d && (ent = readdir(d)) != NULL;) {
        size_t n = strlen(ent->d_name);
        bool temp = strncmp(ent->d_name, ".step_", 6) == 0 && n > 4 &&
                    (strcmp(ent->d_name + n - 4, ".tmp") == 0 || strcmp(ent->d_name + n - 4, ".old") == 0 ||
                     strcmp(ent->d_name + n - 4, ".del") == 0);
        if (temp && run_state_join(path, sizeof path, dir, ent->d_name) == FERRY_OK &&
            !restore_aside(dir, ent->d_name, path))
            remove_tree(path);
    }
    if (d)
        closedir(d);
}

static void remove_incomplete(const char *dir);
static ferry_status peek(const char *state, train_resume *r);

/* Who holds the lock, as its file says ("" if unknown). */
static void lock_holder(int fd, char *out, size_t cap)
{
    char buf[32] = {0};
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    long pid = n > 0 ? strtol(buf, NULL, 10) : 0;
    if (pid > 0)
        snprintf(out, cap, " (process %ld)", pid);
    else
        out[0] = '\0';
}

/* DIR/latest is the link ferry swaps at each save: anything else with that
 * name (a folder, a file) would make the first save fail after the training
 * it was to keep, so it is refused before any work. */
static ferry_status check_latest(const char *dir)
{
    char link[PATH_MAX];
    struct stat sb;
    ferry_status st = run_state_join(link, sizeof link, dir, "latest");
    if (st == FERRY_OK && lstat(link, &sb) == 0 && !S_ISLNK(sb.st_mode))
        return err_set(FERRY_ERR_IO, "'%s' is %s, but it must be the symbolic link to the newest checkpoint that "
                                     "ferry keeps there; move it away, or give another --checkpoint-dir",
                       link, fileio_type_name(sb.st_mode));
    return st;
}

ferry_status run_state_lock(const char *dir, int *fd)
{
    char path[PATH_MAX], holder[48], pid[32];
    *fd = -1;
    ferry_status st = fileio_make_dirs(dir);
    if (st == FERRY_OK)
        st = run_state_join(path, sizeof path, dir, ".lock");
    if (st == FERRY_OK)
        st = check_latest(dir);
    if (st != FERRY_OK)
        return st;
    /* The lock is truncated and written: never through a link, never a FIFO. */
    int lfd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (lfd < 0)
        return err_set(FERRY_ERR_IO, "cannot create the lock '%s' of the checkpoint folder: %s%s", path,
                       strerror(errno), errno == ELOOP ? " (it is a symbolic link; remove it)" : "");
    struct stat sb;
    if (fstat(lfd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(lfd);
        return err_set(FERRY_ERR_IO, "the lock '%s' of the checkpoint folder is %s, not a regular file; remove it",
                       path, fileio_type_name(sb.st_mode));
    }
    if (flock(lfd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        lock_holder(lfd, holder, sizeof holder);
        close(lfd);
        if (e == EWOULDBLOCK)
            return err_set(FERRY_ERR_STATE, "the checkpoint folder '%s' is in use by another run%s, which holds '%s'; "
                                            "wait for it to end, or give another --checkpoint-dir",
                           dir, holder, path);
        return err_set(FERRY_ERR_IO, "cannot lock '%s': %s", path, strerror(e));
    }
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(lfd, 0) != 0 || pwrite(lfd, pid, (size_t)n, 0) != n) {
        int e = errno;
        close(lfd);
        return err_set(FERRY_ERR_IO, "cannot write the lock '%s': %s", path, strerror(e));
    }
    *fd = lfd;
    return FERRY_OK;
}

void run_state_unlock(int fd)
{
    if (fd >= 0)
        close(fd);
}

/* A step folder's name, as run_state_save makes it. */
static void step_name(char *out, size_t cap, long long step) { snprintf(out, cap, "step_%08lld", step); }

/* The step of a folder named as run_state_save names them, or -1. */
static long long folder_step(const char *name)
{
    char canonical[64];
    if (strncmp(name, "step_", 5) != 0 || !name[5] || strspn(name + 5, "0123456789") != strlen(name + 5) ||
        strlen(name) > 24)
        return -1;
    long long step = strtoll(name + 5, NULL, 10);
    step_name(canonical, sizeof canonical, step);
    return strcmp(canonical, name) == 0 ? step : -1;
}

static int step_desc(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Every step folder of dir, newest first; *n of them (malloc'd). */
static ferry_status list_steps(const char *dir, long long **steps, size_t *n)
{
    DIR *d = opendir(dir);
    if (!d)
        return err_set(FERRY_ERR_IO, "cannot list the checkpoint folder '%s': %s", dir, strerror(errno));
    size_t cap = 0;
    *steps = NULL;
    *n = 0;
    for (struct dirent *ent; (ent = readdir(d)) != NULL;) {
        long long s = folder_step(ent->d_name);
        char path[PATH_MAX];
        if (s < 0 || run_state_join(path, sizeof path, dir, ent->d_name) != FERRY_OK || !is_real_dir(path))
            continue; /* a link or a file named like a step is not ours to prune */
        if (*n == cap) {
            long long *grown = realloc(*steps, (cap = cap ? 2 * cap : 64) * sizeof *grown);
            if (!grown) {
                closedir(d);
                return err_set(FERRY_ERR_OUT_OF_MEMORY, "listing '%s': out of memory", dir);
            }
            *steps = grown;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (*n > 1) /* qsort's array may not be NULL, even empty */
        qsort(*steps, *n, sizeof **steps, step_desc);
    return FERRY_OK;
}

/* The files every step folder a save puts in place holds, and its weights:
 * model.safetensors, or (the Llama family's shards) the index naming them. */
static const char *const step_files[] = {"config.json", "state.ferry"};
static const char *const weights_files[] = {"model.safetensors", "model.safetensors.index.json"};

static bool regular_in(const char *dir, const char *name)
{
    char file[PATH_MAX];
    struct stat sb;
    return run_state_join(file, sizeof file, dir, name) == FERRY_OK && lstat(file, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Whether a step folder holds every one of step_files and its weights, each a regular file. */
static bool folder_whole(const char *path)
{
    bool whole = regular_in(path, weights_files[0]) || regular_in(path, weights_files[1]);
    for (size_t k = 0; k < sizeof step_files / sizeof step_files[0]; k++)
        whole &= regular_in(path, step_files[k]);
    return whole;
}

/* The target `latest` names in dir ("" when there is none). */
static void read_latest(const char *dir, char *target, size_t cap)
{
    char link[PATH_MAX];
    ssize_t len = -1;
    if (run_state_join(link, sizeof link, dir, "latest") == FERRY_OK)
        len = readlink(link, target, cap - 1);
    target[len > 0 ? len : 0] = '\0';
}

ferry_status run_state_folder_run(const char *step_dir, char run[33])
{
    char state[PATH_MAX], conf[PATH_MAX], why[ERR_MESSAGE_MAX];
    train_resume r;
    hf_ferry_info f;
    gpt2_config c;
    llama_config l;
    run[0] = '\0';
    ferry_status st = run_state_join(state, sizeof state, step_dir, "state.ferry");
    if (st == FERRY_OK && (st = peek(state, &r)) == FERRY_OK) {
        snprintf(run, 33, "%s", r.run);
        return FERRY_OK;
    }
    snprintf(why, sizeof why, "%s", ferry_last_error());
    bool llama = run_state_folder_family(step_dir) == MODEL_FAMILY_LLAMA;
    if (run_state_join(conf, sizeof conf, step_dir, "config.json") == FERRY_OK &&
        (llama ? hf_llama_read_config_ferry(conf, &l, NULL, &f) : hf_read_config_ferry(conf, &c, &f)) == FERRY_OK) {
        snprintf(run, 33, "%s", f.run);
        err_clear();
        return FERRY_OK;
    }
    return err_set(st, "%s", why);
}

ferry_status run_state_claim(const char *dir, const char *run, bool resumed)
{
    char name[64], path[PATH_MAX], theirs[33], latest[PATH_MAX], why[ERR_MESSAGE_MAX];
    long long *steps = NULL;
    size_t n = 0;
    ferry_status st = list_steps(dir, &steps, &n);
    read_latest(dir, latest, sizeof latest);
    for (size_t i = 0; i < n && st == FERRY_OK; i++) {
        step_name(name, sizeof name, steps[i]);
        if (run_state_join(path, sizeof path, dir, name) != FERRY_OK)
            continue;
        if (run_state_folder_run(path, theirs) != FERRY_OK) {
            snprintf(why, sizeof why, "%s", ferry_last_error());
            err_clear();
            if (!folder_whole(path))
                continue; /* what a killed retention left: removed below */
            st = err_set(FERRY_ERR_STATE, "'%s' holds a checkpoint whose run cannot be told (%s): it may be another "
                                          "run's, and ferry writes nothing into a folder it would overwrite or "
                                          "prune; move it away, or give another --checkpoint-dir",
                         path, why);
        } else if (!resumed) {
            step_name(name, sizeof name, steps[0]); /* the newest */
            st = err_set(FERRY_ERR_STATE, "'%s' already holds checkpoints of run %s (the newest: %s%s); continue "
                                          "that run with --resume %s%s%s, or give a new --checkpoint-dir",
                         dir, theirs[0] ? theirs : "(one that recorded no identity)", name,
                         latest[0] ? "" : ", and no latest link", dir, latest[0] ? "" : "/", latest[0] ? "" : name);
        } else if (strcmp(theirs, run) != 0) {
            st = err_set(FERRY_ERR_STATE, "'%s' is a checkpoint of run %s, but the run resumed is %s: two runs in "
                                          "one folder would overwrite and prune each other's checkpoints; save the "
                                          "resumed run into a folder of its own (--checkpoint-dir)",
                         path, theirs[0] ? theirs : "(none recorded)", run[0] ? run : "(none recorded)");
        }
    }
    free(steps);
    if (st != FERRY_OK)
        return st;
    remove_temporaries(dir);
    remove_incomplete(dir);
    return FERRY_OK;
}

/* Removes step folders that lack one of step_files or their weights (a retention killed
 * midway, by a ferry from before retention renamed first), except the one
 * latest names; only with the lock held. A save never makes one: it fills a
 * temporary folder and renames it whole. */
static void remove_incomplete(const char *dir)
{
    char target[PATH_MAX], name[64], path[PATH_MAX];
    long long *steps = NULL;
    size_t n = 0;
    read_latest(dir, target, sizeof target);
    if (list_steps(dir, &steps, &n) != FERRY_OK)
        return;
    for (size_t i = 0; i < n; i++) {
        step_name(name, sizeof name, steps[i]);
        if (strcmp(name, target) == 0 || run_state_join(path, sizeof path, dir, name) != FERRY_OK)
            continue;
        if (!folder_whole(path))
            remove_tree(path);
    }
    free(steps);
}

/* Deletes a step folder so that a crash at any moment leaves either the
 * whole folder or a ".step_N.del" the next lock removes. */
static int delete_step(const char *dir, const char *name)
{
    char path[PATH_MAX], del[PATH_MAX], hidden[80];
    snprintf(hidden, sizeof hidden, ".%s.del", name);
    if (run_state_join(path, sizeof path, dir, name) != FERRY_OK ||
        run_state_join(del, sizeof del, dir, hidden) != FERRY_OK)
        return ENAMETOOLONG;
    remove_tree(del);
    if (rename(path, del) != 0)
        return errno;
    return remove_tree(del);
}

ferry_status run_state_prune(const char *dir, int keep, const char *run)
{
    char target[PATH_MAX], name[64], path[PATH_MAX], theirs[33];
    long long *steps = NULL;
    size_t n = 0;
    if (keep <= 0)
        return FERRY_OK;
    read_latest(dir, target, sizeof target);
    ferry_status st = list_steps(dir, &steps, &n);
    ferry_status failed = FERRY_OK;
    for (size_t i = (size_t)keep; st == FERRY_OK && i < n; i++) {
        step_name(name, sizeof name, steps[i]);
        if (strcmp(name, target) == 0 || run_state_join(path, sizeof path, dir, name) != FERRY_OK)
            continue;
        /* Only this run's checkpoints are its to delete (one copied in since
         * the run started, or of unknown run, is left and named). */
        if (run_state_folder_run(path, theirs) != FERRY_OK || strcmp(theirs, run) != 0) {
            if (failed == FERRY_OK)
                failed = err_set(FERRY_ERR_STATE, "keeping the last %d checkpoints: '%s' was left: it is not a "
                                                  "checkpoint of this run (%s) but of %s; move it away",
                                 keep, path, run, theirs[0] ? theirs : "a run that cannot be told");
            continue;
        }
        int e = delete_step(dir, name);
        if (e && failed == FERRY_OK)
            failed = err_set(FERRY_ERR_IO, "keeping the last %d checkpoints: could not remove '%s': %s", keep, path,
                             strerror(e));
    }
    free(steps);
    return st != FERRY_OK ? st : failed;
}

/* Room for the largest group of m, in fp32. */
static float *group_buffer(const lmodel *m)
{
    size_t most = 0;
    for (int g = 0; g < lmodel_num_groups(m); g++)
        most = lmodel_group_numel(m, g) > most ? lmodel_group_numel(m, g) : most;
    return malloc(most * sizeof(float));
}

/* GPT-2's weights in one file from every group at once (hf_save); the
 * Llama family's streamed a group at a time (hf_llama_save_group), as F32,
 * in shards of transformers' default size. Either way the groups are read
 * from the engine in order, as the other ranks take part (save_as_follower). */
static ferry_status save_weights(const char *tmp, ferry_engine *e, const lmodel *m, const hf_ferry_info *ferry)
{
    int G = lmodel_num_groups(m);
    if (lmodel_llama(m)) {
        hf_llama_writer *w = NULL;
        float *buf = group_buffer(m);
        ferry_status st = buf ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "saving: out of memory");
        if (st == FERRY_OK)
            st = hf_llama_save_begin(tmp, lmodel_llama(m), FERRY_DTYPE_F32, HF_LLAMA_SHARD_BYTES, ferry, &w);
        for (int g = 0; g < G && st == FERRY_OK; g++) {
            st = ferry_engine_get_weights(e, g, buf);
            if (st == FERRY_OK)
                st = hf_llama_save_group(w, g, buf);
        }
        free(buf);
        if (st != FERRY_OK) {
            hf_llama_save_abort(w);
            return st;
        }
        return hf_llama_save_commit(w);
    }
    float **groups = calloc((size_t)G, sizeof *groups);
    ferry_status st = groups ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "saving: out of memory");
    for (int g = 0; g < G && st == FERRY_OK; g++) {
        groups[g] = malloc(lmodel_group_numel(m, g) * sizeof(float));
        st = groups[g] ? ferry_engine_get_weights(e, g, groups[g])
                       : err_set(FERRY_ERR_OUT_OF_MEMORY, "saving: out of memory for group %d", g);
    }
    if (st == FERRY_OK)
        st = hf_save(tmp, lmodel_gpt2(m), groups, ferry);
    for (int g = 0; groups && g < G; g++)
        free(groups[g]);
    free(groups);
    return st;
}

/* The weights files of a Hugging Face folder, in the order their tensor
 * data is checksummed: DIR/model.safetensors when it is there (as readers
 * prefer it), else the files DIR/model.safetensors.index.json's weight_map
 * names, sorted by name (shards model-0000i-of-0000n sort in order). *n of
 * them in *paths (malloc'd, each and the array; free with free_paths). */
static ferry_status weights_paths(const char *dir, bool shards, char ***paths, int *n)
{
    char single[PATH_MAX], index[PATH_MAX];
    *paths = NULL;
    *n = 0;
    ferry_status st = run_state_join(single, sizeof single, dir, weights_files[0]);
    if (st == FERRY_OK)
        st = run_state_join(index, sizeof index, dir, weights_files[1]);
    if (st != FERRY_OK)
        return st;
    if (!shards || access(single, F_OK) == 0 || access(index, F_OK) != 0) { /* its reader says if it is missing */
        char **one = malloc(sizeof *one);
        if (!one || !(one[0] = strdup(single))) {
            free(one);
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "'%s': out of memory", dir);
        }
        *paths = one;
        *n = 1;
        return FERRY_OK;
    }
    cJSON *j = NULL;
    if ((st = hf_json_read_object(index, "weights index", "{\"weight_map\": {\"model.norm.weight\": "
                                  "\"model-00001-of-00002.safetensors\", ...}}", &j)) != FERRY_OK)
        return st;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "weight_map"), *v;
    int count = cJSON_IsObject(map) ? cJSON_GetArraySize(map) : 0;
    char **names = calloc((size_t)count + 1, sizeof *names);
    if (!cJSON_IsObject(map))
        st = err_set(FERRY_ERR_FORMAT, "'%s' has no \"weight_map\" object naming the file of each tensor", index);
    else if (!names)
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "'%s': out of memory", index);
    int k = 0;
    cJSON_ArrayForEach(v, map)
    {
        if (st != FERRY_OK)
            break;
        if (!cJSON_IsString(v) || !*v->valuestring || strchr(v->valuestring, '/')) {
            st = err_set(FERRY_ERR_FORMAT, "'%s': the file of '%s' is not a file name of the folder", index,
                         v->string ? v->string : "?");
            break;
        }
        bool seen = false;
        for (int i = 0; i < k && !seen; i++)
            seen = strcmp(names[i], v->valuestring) == 0;
        if (!seen)
            names[k++] = v->valuestring;
    }
    for (int i = 1; i < k; i++) /* a few names: insertion sort */
        for (int b = i; b > 0 && strcmp(names[b - 1], names[b]) > 0; b--) {
            char *tmp = names[b];
            names[b] = names[b - 1];
            names[b - 1] = tmp;
        }
    char **out = st == FERRY_OK ? calloc((size_t)k + 1, sizeof *out) : NULL;
    if (st == FERRY_OK && !out)
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "'%s': out of memory", index);
    for (int i = 0; i < k && st == FERRY_OK; i++) {
        char path[PATH_MAX];
        st = run_state_join(path, sizeof path, dir, names[i]);
        if (st == FERRY_OK && !(out[i] = strdup(path)))
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "'%s': out of memory", index);
    }
    if (st == FERRY_OK && k == 0)
        st = err_set(FERRY_ERR_FORMAT, "'%s' names no weights file", index);
    free(names);
    cJSON_Delete(j);
    if (st != FERRY_OK) {
        for (int i = 0; out && i < k; i++)
            free(out[i]);
        free(out);
        return st;
    }
    *paths = out;
    *n = k;
    return FERRY_OK;
}

static void free_paths(char **paths, int n)
{
    for (int i = 0; paths && i < n; i++)
        free(paths[i]);
    free(paths);
}

/* Adds the checksum of one file's tensor data to that of the files before it. */
static void sum_append(sft_checksum *all, const sft_checksum *next, bool first)
{
    all->crc32c = first ? next->crc32c : crc32c_combine(all->crc32c, next->crc32c, next->bytes);
    all->bytes = first ? next->bytes : all->bytes + next->bytes;
}

static ferry_status point_latest(const char *dir, const char *name)
{
    char link[PATH_MAX];
    ferry_status st = run_state_join(link, sizeof link, dir, "latest");
    return st == FERRY_OK ? fileio_replace_symlink(name, link) : st;
}

/* Moves the filled folder tmp to final. An earlier save of the same step
 * (latest may point at it) is swapped out in one atomic exchange, so at no
 * moment is final missing or half written; where the file system cannot
 * exchange, it is renamed aside first (a crash then may leave final missing
 * for an instant, and the aside copy behind, which the next run_state_lock
 * puts back); if the new one cannot be renamed in, the earlier goes back. */
static ferry_status install(const char *tmp, const char *final, const char *aside)
{
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
        remove_tree(tmp); /* now the old checkpoint */
        return FERRY_OK;
    }
    if (errno != ENOENT) { /* ENOENT: no earlier save of this step */
        remove_tree(aside);
        if (rename(final, aside) != 0 && errno != ENOENT)
            return err_set(FERRY_ERR_IO, "cannot move the earlier '%s' aside: %s", final, strerror(errno));
    }
    if (rename(tmp, final) != 0) {
        int e = errno;
        /* Put the earlier save back (ENOENT: there was none). */
        if (rename(aside, final) != 0 && errno != ENOENT)
            return err_set(FERRY_ERR_IO, "cannot rename '%s' to '%s' (%s), nor move the earlier '%s' back from '%s' "
                           "(%s): the next run on this folder puts it back", tmp, final, strerror(e), final,
                           aside, strerror(errno));
        return err_set(FERRY_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, final, strerror(e));
    }
    remove_tree(aside);
    return FERRY_OK;
}

/* The checksum of the tensors' bytes of the weights just written into the
 * folder `tmp` (every file, in order), into the run state saved beside it. */
static ferry_status weights_checksum(const char *tmp, train_resume *r)
{
    char **paths = NULL;
    int n = 0;
    ferry_status st = weights_paths(tmp, true, &paths, &n);
    for (int i = 0; i < n && st == FERRY_OK; i++) {
        sft_file *f = NULL;
        sft_checksum one;
        st = sft_open(paths[i], &f);
        if (st == FERRY_OK)
            st = sft_data_checksum(f, &one);
        sft_close(f);
        if (st == FERRY_OK)
            sum_append(&r->weights, &one, i == 0);
    }
    free_paths(paths, n);
    r->weights_known = st == FERRY_OK;
    return st != FERRY_OK ? err_wrap(st, "reading back the weights just written") : FERRY_OK;
}

/* What a failed save leaves a reader with: the folder's latest checkpoint,
 * whole, or none at all. */
static const char *describe_kept(const char *dir, char *buf, size_t cap)
{
    char target[PATH_MAX];
    read_latest(dir, target, sizeof target);
    if (target[0])
        snprintf(buf, cap, "the latest checkpoint, '%s/%s', is intact", dir, target);
    else
        snprintf(buf, cap, "'%s' holds no earlier checkpoint: nothing of this run is saved", dir);
    return buf;
}

/* Data parallelism: rank 0 writes the checkpoint; every other rank takes
 * part in the collectives that gather the state to it, in its order (the
 * weights of each group, then the engine's state), and writes nothing. */
static ferry_status save_as_follower(const char *dir, ferry_engine *e, const lmodel *m)
{
    float *buf = group_buffer(m);
    ferry_status st = buf ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "saving: out of memory");
    for (int g = 0; g < lmodel_num_groups(m) && st == FERRY_OK; g++)
        st = ferry_engine_get_weights(e, g, buf);
    free(buf);
    if (st == FERRY_OK)
        st = ferry_engine_save(e, dir, NULL, 0);
    return st;
}

/* files[0..n) copied into the folder `tmp` under their own names. */
static ferry_status copy_files(const char *tmp, const char *const *files, int n)
{
    ferry_status st = FERRY_OK;
    for (int i = 0; i < n && st == FERRY_OK; i++) {
        const char *base = strrchr(files[i], '/');
        base = base ? base + 1 : files[i];
        char dest[PATH_MAX], *data = NULL;
        size_t len = 0;
        fileio_atomic a = {0};
        st = run_state_join(dest, sizeof dest, tmp, base);
        if (st == FERRY_OK) st = fileio_read(files[i], "a file the checkpoint keeps", &data, &len);
        if (st == FERRY_OK) st = fileio_atomic_open(&a, dest);
        if (st == FERRY_OK) st = fileio_atomic_write(&a, data, len);
        if (st == FERRY_OK) st = fileio_atomic_commit(&a);
        else fileio_atomic_abort(&a);
        free(data);
    }
    return st;
}

ferry_status run_state_save(const char *dir, int64_t step, ferry_engine *e, const lmodel *m,
                            const train_resume *resume)
{
    return run_state_save_files(dir, step, e, m, resume, NULL, 0);
}

ferry_status run_state_save_files(const char *dir, int64_t step, ferry_engine *e, const lmodel *m,
                                  const train_resume *resume, const char *const *files, int nfiles)
{
    if (ferry_engine_rank(e) > 0)
        return save_as_follower(dir, e, m);
    char name[64], hidden[80], old[80], tmp[PATH_MAX], final[PATH_MAX], aside[PATH_MAX], state[PATH_MAX];
    unsigned char blob[RUN_STATE_MAX_BYTES];
    train_resume r = *resume;
    r.engine_step = ferry_engine_steps(e);
    if (step < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "checkpoint step %lld is negative", (long long)step);
    if (check_resume(&r, "the run state to save") != FERRY_OK ||
        (!run_ok(r.run) && err_set(FERRY_ERR_INVALID_ARGUMENT, "the run state to save has no run identity ('%s'): "
                                   "make one with run_state_new_run", r.run)) ||
        (!r.settings.known && err_set(FERRY_ERR_INVALID_ARGUMENT, "the run state to save has no settings")) ||
        check_settings(&r.settings, "the run state to save") != FERRY_OK)
        return err_wrap(FERRY_ERR_INVALID_ARGUMENT, "saving the checkpoint of step %lld", (long long)step);
    if (r.step != step)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "saving the checkpoint of step %lld with a run state of step %lld",
                       (long long)step, (long long)r.step);
    hf_ferry_info ferry;
    snprintf(ferry.run, sizeof ferry.run, "%s", r.run);
    ferry.step = step;
    step_name(name, sizeof name, (long long)step);
    snprintf(hidden, sizeof hidden, ".%s.tmp", name);
    snprintf(old, sizeof old, ".%s.old", name);
    ferry_status st = run_state_join(tmp, sizeof tmp, dir, hidden);
    if (st == FERRY_OK) st = run_state_join(final, sizeof final, dir, name);
    if (st == FERRY_OK) st = run_state_join(aside, sizeof aside, dir, old);
    if (st == FERRY_OK) st = run_state_join(state, sizeof state, tmp, "state.ferry");
    if (st == FERRY_OK) st = fileio_make_dirs(dir);
    if (st != FERRY_OK)
        return st;
    struct stat sb;
    char theirs[33];
    if (lstat(final, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return err_set(FERRY_ERR_IO, "saving the checkpoint of step %lld: '%s' is %s, not a step folder ferry "
                                     "saved; move it away (it is left as it is)",
                       (long long)step, final, fileio_type_name(sb.st_mode));
    if (lstat(final, &sb) == 0 && (run_state_folder_run(final, theirs) != FERRY_OK || strcmp(theirs, r.run) != 0))
        return err_set(FERRY_ERR_STATE, "saving the checkpoint of step %lld: '%s' already holds a checkpoint of %s%s, "
                                        "not of this run (%s); it is left as it is: move it away, or save into "
                                        "another --checkpoint-dir",
                       (long long)step, final, theirs[0] ? "run " : "", theirs[0] ? theirs : "a run that cannot be told",
                       r.run);
    remove_tree(tmp);
    if ((st = make_dir(tmp)) != FERRY_OK)
        return st;
    st = save_weights(tmp, e, m, &ferry);
    if (st == FERRY_OK)
        st = weights_checksum(tmp, &r);
    if (st == FERRY_OK)
        st = copy_files(tmp, files, nfiles);
    if (st == FERRY_OK) {
        size_t len = run_state_encode(&r, blob);
        st = ferry_engine_save(e, state, blob, len);
    }
    if (st == FERRY_OK)
        st = install(tmp, final, aside);
    if (st != FERRY_OK) {
        char kept[PATH_MAX + 96];
        remove_tree(tmp);
        return err_wrap(st, "saving the checkpoint of step %lld (%s)", (long long)step, describe_kept(dir, kept, sizeof kept));
    }
    return point_latest(dir, name);
}

ferry_status run_state_locate(const char *path, char *out, size_t cap)
{
    char probe[PATH_MAX];
    if (run_state_join(probe, sizeof probe, path, "state.ferry") == FERRY_OK && access(probe, R_OK) == 0)
        return run_state_join(out, cap, path, ".");
    /* The folder latest names now, not "latest": a later save may swap the
     * link while the caller still reads config.json and state.ferry. */
    char link[PATH_MAX], target[PATH_MAX];
    ssize_t n = -1;
    if (run_state_join(link, sizeof link, path, "latest") == FERRY_OK)
        n = readlink(link, target, sizeof target - 1);
    if (n > 0) {
        target[n] = '\0';
        ferry_status st = target[0] == '/' ? run_state_join(out, cap, "", target + 1)
                                           : run_state_join(out, cap, path, target);
        if (st == FERRY_OK && run_state_join(probe, sizeof probe, out, "state.ferry") == FERRY_OK &&
            access(probe, R_OK) == 0)
            return FERRY_OK;
        return err_set(FERRY_ERR_IO, "--resume '%s': %s points at '%s', which holds no state.ferry", path, link,
                       target);
    }
    return err_set(FERRY_ERR_IO,
                   "--resume '%s': no checkpoint there (neither %s/state.ferry nor %s/latest/state.ferry)", path,
                   path, path);
}

/* The run state of a checkpoint's state.ferry, read without an engine. */
static ferry_status peek(const char *state, train_resume *r)
{
    unsigned char blob[RUN_STATE_MAX_BYTES];
    size_t n = 0;
    ferry_status st = ferry_engine_load_user(state, blob, sizeof blob, &n);
    return st == FERRY_OK ? run_state_decode(blob, n, state, r) : st;
}

/* The step a checkpoint folder's name says ("step_00000005": 5), or -1 for
 * a folder named otherwise. */
static long long named_step(const char *ckpt_dir)
{
    char *real = realpath(ckpt_dir, NULL);
    const char *base = real ? strrchr(real, '/') : NULL;
    long long step = base ? folder_step(base + 1) : -1;
    free(real);
    return step;
}

/* One file's run and step against the run state's. */
static ferry_status check_binding(const char *file, const hf_ferry_info *f, const train_resume *r, const char *state)
{
    if (r->run[0] && strcmp(f->run, r->run) != 0)
        return err_set(FERRY_ERR_FORMAT, "'%s' belongs to run %s, but the state.ferry beside it ('%s') to run %s: the "
                                         "files of two runs were mixed; put back the ones saved together",
                       file, f->run[0] ? f->run : "(none recorded)", state, r->run);
    if (f->step >= 0 && f->step != r->step)
        return err_set(FERRY_ERR_FORMAT, "'%s' is of step %lld, but the state.ferry beside it ('%s') of step %lld: the "
                                         "files of two checkpoints were mixed; put back the ones saved together",
                       file, (long long)f->step, state, (long long)r->step);
    if (r->run[0] && f->step < 0)
        return err_set(FERRY_ERR_FORMAT, "'%s' records no step, but the state.ferry beside it ('%s') is step %lld of "
                                         "run %s: it is not the file saved with it",
                       file, state, (long long)r->step, r->run);
    return FERRY_OK;
}

/* A weights file's tensor bytes against the checksum the run state beside
 * it recorded when both were saved (a run state from before it was kept
 * records none). */
static ferry_status check_sum(const char *file, const sft_checksum *sum, const train_resume *r, const char *state)
{
    if (!r->weights_known || (sum->bytes == r->weights.bytes && sum->crc32c == r->weights.crc32c))
        return FERRY_OK;
    return err_set(FERRY_ERR_FORMAT, "'%s': its tensor data (%llu bytes, CRC-32C %08x) is not what was saved with the "
                                     "state.ferry beside it ('%s': %llu bytes, CRC-32C %08x): the weights were changed "
                                     "or damaged after the save; put back the model.safetensors saved with it, or "
                                     "resume from another checkpoint",
                   file, (unsigned long long)sum->bytes, (unsigned)sum->crc32c, state,
                   (unsigned long long)r->weights.bytes, (unsigned)r->weights.crc32c);
}

ferry_status run_state_check_weights(const char *weights)
{
    char dir[PATH_MAX], state[PATH_MAX];
    train_resume r;
    struct stat sb;
    bool folder = stat(weights, &sb) == 0 && S_ISDIR(sb.st_mode);
    snprintf(dir, sizeof dir, "%s", weights);
    char *slash = strrchr(dir, '/');
    if (folder)
        ;
    else if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    if (run_state_join(state, sizeof state, dir, "state.ferry") != FERRY_OK || access(state, F_OK) != 0)
        return FERRY_OK;
    char **paths = NULL, *one[1] = {(char *)weights};
    int n = 1;
    ferry_status st = folder ? weights_paths(dir, true, &paths, &n) : FERRY_OK;
    /* A state.ferry that is not a run state of ferry's, or of another run or
     * step than the files say they were saved with, says nothing of them. */
    bool ours = st == FERRY_OK && peek(state, &r) == FERRY_OK;
    sft_checksum sum = {0, 0};
    for (int i = 0; i < n && st == FERRY_OK && ours; i++) {
        hf_ferry_info meta;
        sft_checksum part;
        st = hf_read_weights_identity(folder ? paths[i] : one[0], &meta, &part, 0, 1);
        ours = st == FERRY_OK && meta.run[0] && strcmp(meta.run, r.run) == 0 && meta.step == r.step;
        if (ours)
            sum_append(&sum, &part, i == 0);
    }
    char label[PATH_MAX];
    snprintf(label, sizeof label, "%s", folder && n == 1 ? paths[0] : weights);
    free_paths(paths, folder ? n : 0);
    if (st != FERRY_OK)
        return st;
    if (!ours) {
        err_clear();
        return FERRY_OK;
    }
    return check_sum(label, &sum, &r, state);
}

/* A path as the user wrote it without trailing "/" and "/." (runs/x/step_5/. is runs/x/step_5). */
static void trim_path(char *p)
{
    for (size_t n = strlen(p); n > 1;) {
        if (p[n - 1] == '/')
            p[--n] = '\0';
        else if (n > 2 && p[n - 1] == '.' && p[n - 2] == '/')
            p[n -= 2] = '\0';
        else
            break;
    }
}

ferry_status run_state_run_folder(const char *resume, char *out, size_t cap)
{
    char link[PATH_MAX], path[PATH_MAX];
    struct stat sb;
    int n = snprintf(path, sizeof path, "%s", resume);
    if (n < 0 || (size_t)n >= sizeof path || (size_t)n >= cap)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "the path '%s' is too long", resume);
    trim_path(path);
    if (run_state_join(link, sizeof link, path, "latest") == FERRY_OK && lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode)) {
        snprintf(out, cap, "%s", path); /* a run folder itself */
        return FERRY_OK;
    }
    /* A step folder (or a run folder's latest, which names one): the folder above it. */
    char *real = realpath(path, NULL);
    char *base = real ? strrchr(real, '/') : NULL;
    bool step = base && folder_step(base + 1) >= 0;
    if (!step) {
        free(real);
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "'%s' is a checkpoint outside a run folder (neither a step_N "
                                                   "folder nor a folder with a latest link)", resume);
    }
    char *slash = strrchr(path, '/');
    const char *last = slash ? slash + 1 : path;
    if (strcmp(last, ".") == 0 || strcmp(last, "..") == 0) /* no name to strip: the real folder above */
        snprintf(out, cap, "%.*s", base == real ? 1 : (int)(base - real), real);
    else if (!slash)
        snprintf(out, cap, ".");
    else
        snprintf(out, cap, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    free(real);
    return FERRY_OK;
}

/* With several ranks each checksums its part of the weights file
 * (sft_data_checksum_part), and the parts, exchanged, make the whole's on
 * every rank: the file is read once in all, not once per rank. Collective
 * when the world has several ranks, whatever `st` (a rank that failed
 * before says so here, and every rank fails); alone, *sum is already the
 * whole's. */
static ferry_status weights_sum_agreed(const char *file, ferry_status st, int part, int parts, sft_checksum *sum)
{
    if (parts == 1)
        return st;
    char mine[ERR_MESSAGE_MAX];
    snprintf(mine, sizeof mine, "%s", ferry_last_error());
    double *v = calloc(1 + 2 * (size_t)parts, sizeof *v); /* failed; each part's CRC; each part's length */
    if (!v) /* this rank cannot take part: the trainer's abort fails the others' exchange */
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "'%s': out of memory to agree on its checksum", file);
    v[0] = st != FERRY_OK;
    if (st == FERRY_OK) {
        v[1 + part] = sum->crc32c;
        v[1 + parts + part] = (double)sum->bytes;
    }
    ferry_status agreed = ferry_world_all_reduce(v, 1 + 2 * (size_t)parts);
    sum->crc32c = (uint32_t)v[1];
    sum->bytes = (uint64_t)v[1 + parts];
    for (int r = 1; r < parts; r++) {
        sum->crc32c = crc32c_combine(sum->crc32c, (uint32_t)v[1 + r], (uint64_t)v[1 + parts + r]);
        sum->bytes += (uint64_t)v[1 + parts + r];
    }
    double failed = v[0];
    free(v);
    if (agreed != FERRY_OK)
        return err_wrap(agreed, "checksumming '%s' with the other ranks", file);
    if (st != FERRY_OK)
        return err_set(st, "%s", mine);
    if (failed > 0)
        return err_set(FERRY_ERR_IO, "'%s': %.0f other rank%s could not read or check the checkpoint (see their "
                                     "messages); every rank must reach the same checkpoint",
                       file, failed, failed > 1 ? "s" : "");
    return FERRY_OK;
}

/* The Llama family's weights of a checkpoint, opened as a resume will read
 * them: every tensor in its file with its shape and type, and config.json's
 * torch_dtype the type they are stored in (hf_llama_open). */
static ferry_status check_llama_weights(const char *dir, const llama_config *cfg)
{
    llama_model *m = NULL;
    hf_llama_reader *rd = NULL;
    ferry_status st = llama_create(cfg, &m);
    if (st == FERRY_OK)
        st = hf_llama_open(dir, m, &rd);
    hf_llama_close(rd);
    llama_destroy(m);
    return st;
}

ferry_status run_state_inspect(const char *ckpt_dir, model_spec *out, train_resume *resume)
{
    char path[PATH_MAX], state[PATH_MAX], weights[PATH_MAX];
    train_resume r;
    hf_ferry_info conf;
    bool llama = run_state_folder_family(ckpt_dir) == MODEL_FAMILY_LLAMA;
    memset(out, 0, sizeof *out);
    out->family = llama ? MODEL_FAMILY_LLAMA : MODEL_FAMILY_GPT2;
    ferry_status st = run_state_join(path, sizeof path, ckpt_dir, "config.json");
    if (st == FERRY_OK) st = run_state_join(state, sizeof state, ckpt_dir, "state.ferry");
    if (st == FERRY_OK) st = run_state_join(weights, sizeof weights, ckpt_dir, "model.safetensors");
    if (st == FERRY_OK)
        st = llama ? hf_llama_read_config_ferry(path, &out->llama, NULL, &conf)
                   : hf_read_config_ferry(path, &out->gpt2, &conf);
    if (st == FERRY_OK) st = peek(state, &r);
    if (st == FERRY_OK) st = run_state_check_model(&r, out, path);
    if (st == FERRY_OK) st = check_binding(path, &conf, &r, state);
    ferry_world_info world = FERRY_WORLD_INFO_INIT;
    int part = 0, parts = 1;
    if (ferry_world_probe(&world) == FERRY_OK && world.joined && world.world_size > 1)
        part = world.rank, parts = world.world_size;
    /* Each weights file (GPT-2's one, the Llama family's one or shards):
     * its run and step, and its part of the checksum, agreed with the other
     * ranks (collective: one round per file, failed or not). */
    char **paths = NULL;
    int n = 0;
    if (st == FERRY_OK) st = weights_paths(ckpt_dir, llama, &paths, &n);
    sft_checksum sum = {0, 0};
    for (int i = 0; i < (n > 0 ? n : 1); i++) {
        const char *file = n > 0 ? paths[i] : weights;
        hf_ferry_info meta;
        sft_checksum one = {0, 0};
        if (st == FERRY_OK) st = hf_read_weights_identity(file, &meta, &one, part, parts);
        st = weights_sum_agreed(file, st, part, parts, &one);
        if (st == FERRY_OK) st = check_binding(file, &meta, &r, state);
        if (st == FERRY_OK) sum_append(&sum, &one, i == 0);
    }
    if (n > 1 && run_state_join(weights, sizeof weights, ckpt_dir, weights_files[1]) != FERRY_OK)
        snprintf(weights, sizeof weights, "%s", ckpt_dir);
    else if (n == 1)
        snprintf(weights, sizeof weights, "%s", paths[0]);
    free_paths(paths, n);
    if (st == FERRY_OK) st = check_sum(weights, &sum, &r, state);
    if (st == FERRY_OK) st = llama ? check_llama_weights(ckpt_dir, &out->llama) : hf_check_torch_dtype(path, weights);
    long long named = named_step(ckpt_dir);
    if (st == FERRY_OK && named >= 0 && named != r.step)
        st = err_set(FERRY_ERR_FORMAT, "'%s' holds the state of step %lld, but the folder is named for step %lld: a "
                                       "checkpoint was moved or copied into another's place; resume from the folder "
                                       "of its own step",
                     state, (long long)r.step, named);
    if (st == FERRY_OK && resume)
        *resume = r;
    return st;
}

ferry_status run_state_config(const char *ckpt_dir, model_spec *out)
{
    return run_state_inspect(ckpt_dir, out, NULL);
}

ferry_status run_state_load(const char *ckpt_dir, ferry_engine *e, train_resume *resume)
{
    char path[PATH_MAX];
    unsigned char blob[RUN_STATE_MAX_BYTES];
    size_t got = 0;
    ferry_status st = run_state_join(path, sizeof path, ckpt_dir, "state.ferry");
    if (st == FERRY_OK) st = ferry_engine_load(e, path, blob, sizeof blob, &got);
    if (st == FERRY_OK) st = run_state_decode(blob, got, path, resume);
    if (st == FERRY_OK && ferry_engine_steps(e) != resume->engine_step)
        return err_set(FERRY_ERR_FORMAT, "'%s': the engine state is at optimizer step %lld, but the run state "
                                         "beside it says %lld: the file was altered; resume from another checkpoint",
                       path, (long long)ferry_engine_steps(e), (long long)resume->engine_step);
    return st;
}
