/* JSON Lines instruction records (see jsonl.h): a line read with getline,
 * checked for UTF-8 and NUL escapes, parsed by cJSON, and its record
 * checked field by field. */
#include "train/jsonl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "train/hf_json.h"

struct tok_jsonl {
    char *name;
    FILE *f;
    char *buf;          /* getline's */
    size_t cap;
    size_t line;        /* lines read */
    size_t records;     /* records returned */
    cJSON *json;        /* the last line's */
    tok_message *msgs;
    size_t msgs_cap;
};

static const char *const role_names[] = {"system", "user", "assistant"};

const char *tok_role_name(tok_role r) { return (unsigned)r < 3 ? role_names[r] : "?"; }

size_t tok_utf8_valid_prefix(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (len == 0 || i + len > n)
            return i;
        unsigned cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return i;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        static const unsigned min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_of[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += len;
    }
    return n;
}

static ferry_status reader_new(const char *name, tok_jsonl **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out || !((*out)->name = strdup(name))) {
        free(*out);
        *out = NULL;
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate a JSON Lines reader for '%s'", name);
    }
    return FERRY_OK;
}

ferry_status tok_jsonl_open_text(const char *name, tok_jsonl **out) { return reader_new(name, out); }

ferry_status tok_jsonl_open(const char *path, tok_jsonl **out)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return err_set(FERRY_ERR_IO, "cannot read JSON Lines file '%s': %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return err_set(FERRY_ERR_IO, "JSON Lines input '%s' is not a regular file (a folder, FIFO or device); give "
                       "a file of one JSON record per line", path);
    ferry_status st = reader_new(path, out);
    if (st != FERRY_OK)
        return st;
    if (!((*out)->f = fopen(path, "rb"))) {
        st = err_set(FERRY_ERR_IO, "cannot open JSON Lines file '%s': %s", path, strerror(errno));
        tok_jsonl_close(*out);
        *out = NULL;
    }
    return st;
}

void tok_jsonl_close(tok_jsonl *r)
{
    if (!r)
        return;
    if (r->f)
        fclose(r->f);
    cJSON_Delete(r->json);
    free(r->msgs);
    free(r->buf);
    free(r->name);
    free(r);
}

static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return 0;
    return 1;
}

/* Column (1-based) of a "\u0000" escape in a JSON text, or 0: cJSON would
 * cut the string there. A backslash escapes the next character, so the
 * escape counts only after an even run of backslashes. */
static size_t nul_escape(const char *s, size_t n)
{
    for (size_t i = 0; i + 6 <= n; i++) {
        if (s[i] != '\\')
            continue;
        if (s[i + 1] == 'u' && s[i + 2] == '0' && s[i + 3] == '0' && s[i + 4] == '0' && s[i + 5] == '0')
            return i + 1;
        i++; /* the escaped character */
    }
    return 0;
}

static ferry_status bad(const tok_jsonl *r, size_t line, const char *what)
{
    return err_set(FERRY_ERR_FORMAT, "'%s' line %zu: %s; each line must be one JSON object, {\"prompt\": \"...\", "
                   "\"completion\": \"...\"} or {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}, ...]}",
                   r->name, line, what);
}

/* A key of `o` given twice (cJSON keeps both; the first would win). */
static const char *repeated_key(const cJSON *o)
{
    for (const cJSON *a = o->child; a; a = a->next)
        for (const cJSON *b = a->next; b; b = b->next)
            if (a->string && b->string && strcmp(a->string, b->string) == 0)
                return a->string;
    return NULL;
}

/* A string field of `o` that must be there. */
static ferry_status string_field(const tok_jsonl *r, size_t line, const cJSON *o, const char *key, const char *where,
                                 const char **s, size_t *len)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    char msg[256], got[64];
    if (!v) {
        snprintf(msg, sizeof msg, "%s has no \"%s\"", where, key);
        return bad(r, line, msg);
    }
    if (!cJSON_IsString(v)) {
        hf_json_describe(v, got, sizeof got);
        snprintf(msg, sizeof msg, "%s's \"%s\" is %s, not a string", where, key, got);
        return bad(r, line, msg);
    }
    *s = v->valuestring;
    *len = strlen(v->valuestring);
    return FERRY_OK;
}

static ferry_status grow_msgs(tok_jsonl *r, size_t n)
{
    if (n <= r->msgs_cap)
        return FERRY_OK;
    tok_message *m = realloc(r->msgs, n * sizeof *m);
    if (!m)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot hold %zu messages of one record", n);
    r->msgs = m;
    r->msgs_cap = n;
    return FERRY_OK;
}

static ferry_status one_message(tok_jsonl *r, size_t line, const cJSON *m, size_t k, tok_message *out)
{
    char where[64], msg[512], got[64];
    snprintf(where, sizeof where, "message %zu", k);
    if (!cJSON_IsObject(m)) {
        hf_json_describe(m, got, sizeof got);
        snprintf(msg, sizeof msg, "message %zu of \"messages\" is %s, not an object {\"role\": ..., \"content\": ...}",
                 k, got);
        return bad(r, line, msg);
    }
    const char *dup = repeated_key(m);
    if (dup) {
        snprintf(msg, sizeof msg, "message %zu gives \"%.64s\" twice", k, dup);
        return bad(r, line, msg);
    }
    const char *role;
    size_t rlen;
    ferry_status st = string_field(r, line, m, "role", where, &role, &rlen);
    if (st == FERRY_OK)
        st = string_field(r, line, m, "content", where, &out->content, &out->len);
    if (st != FERRY_OK)
        return st;
    for (int i = 0; i < 3; i++)
        if (strcmp(role, role_names[i]) == 0) {
            out->role = (tok_role)i;
            return FERRY_OK;
        }
    snprintf(msg, sizeof msg, "message %zu has the role \"%.64s\"%s, not one of \"system\", \"user\", \"assistant\"",
             k, role, rlen > 64 ? "..." : "");
    return bad(r, line, msg);
}

static ferry_status messages_record(tok_jsonl *r, size_t line, const cJSON *arr, tok_record *rec)
{
    char msg[128], got[64];
    if (!cJSON_IsArray(arr)) {
        hf_json_describe(arr, got, sizeof got);
        snprintf(msg, sizeof msg, "\"messages\" is %s, not an array", got);
        return bad(r, line, msg);
    }
    size_t n = (size_t)cJSON_GetArraySize(arr);
    if (n == 0)
        return bad(r, line, "\"messages\" is empty");
    ferry_status st = grow_msgs(r, n);
    size_t k = 0;
    for (const cJSON *m = arr->child; st == FERRY_OK && m; m = m->next, k++)
        st = one_message(r, line, m, k, &r->msgs[k]);
    if (st != FERRY_OK)
        return st;
    rec->kind = TOK_RECORD_MESSAGES;
    rec->messages = r->msgs;
    rec->nmessages = n;
    return FERRY_OK;
}

static ferry_status check_record(tok_jsonl *r, size_t line, const cJSON *j, tok_record *rec)
{
    char got[64], msg[160];
    if (!cJSON_IsObject(j)) {
        hf_json_describe(j, got, sizeof got);
        snprintf(msg, sizeof msg, "the line is %s, not a JSON object", got);
        return bad(r, line, msg);
    }
    const char *dup = repeated_key(j);
    if (dup) {
        snprintf(msg, sizeof msg, "the record gives \"%.64s\" twice", dup);
        return bad(r, line, msg);
    }
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(j, "messages");
    int has_pc = cJSON_GetObjectItemCaseSensitive(j, "prompt") || cJSON_GetObjectItemCaseSensitive(j, "completion");
    memset(rec, 0, sizeof *rec);
    rec->line = line;
    if (messages && has_pc)
        return bad(r, line, "the record has both \"messages\" and \"prompt\"/\"completion\"; give one form");
    if (messages)
        return messages_record(r, line, messages, rec);
    if (!has_pc)
        return bad(r, line, "the record has neither \"messages\" nor \"prompt\" and \"completion\"");
    ferry_status st = string_field(r, line, j, "prompt", "the record", &rec->prompt, &rec->prompt_len);
    if (st == FERRY_OK)
        st = string_field(r, line, j, "completion", "the record", &rec->completion, &rec->completion_len);
    rec->kind = TOK_RECORD_PROMPT;
    return st;
}

ferry_status tok_jsonl_parse_line(tok_jsonl *r, const char *text, size_t len, size_t line, tok_record *rec)
{
    cJSON_Delete(r->json);
    r->json = NULL;
    char msg[160];
    size_t ok = tok_utf8_valid_prefix(text, len);
    if (ok < len) {
        snprintf(msg, sizeof msg, "byte %zu (0x%02X) is not valid UTF-8", ok + 1, (unsigned char)text[ok]);
        return bad(r, line, msg);
    }
    const char *nul = memchr(text, '\0', len);
    if (nul) {
        snprintf(msg, sizeof msg, "byte %zu is a NUL", (size_t)(nul - text) + 1);
        return bad(r, line, msg);
    }
    size_t col = nul_escape(text, len);
    if (col) {
        snprintf(msg, sizeof msg, "column %zu holds \"\\u0000\", which a string of text cannot hold", col);
        return bad(r, line, msg);
    }
    const char *end = NULL;
    r->json = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!r->json) {
        size_t at = end && end >= text ? (size_t)(end - text) + 1 : 0;
        snprintf(msg, sizeof msg, "not valid JSON (near column %zu)", at);
        return bad(r, line, msg);
    }
    if (end && !is_blank(end, len - (size_t)(end - text))) {
        snprintf(msg, sizeof msg, "text after the JSON value at column %zu (one record per line)",
                 (size_t)(end - text) + 1);
        return bad(r, line, msg);
    }
    return check_record(r, line, r->json, rec);
}

ferry_status tok_jsonl_next(tok_jsonl *r, tok_record *rec, bool *done)
{
    *done = false;
    if (!r->f)
        return err_set(FERRY_ERR_STATE, "JSON Lines reader '%s' has no file", r->name);
    for (;;) {
        errno = 0;
        ssize_t n = getline(&r->buf, &r->cap, r->f);
        if (n < 0 && ferror(r->f))
            return err_set(FERRY_ERR_IO, "cannot read '%s' after line %zu: %s", r->name, r->line, strerror(errno));
        if (n < 0 && r->records == 0)
            return err_set(FERRY_ERR_FORMAT, "JSON Lines file '%s' holds no records (%zu line(s), all blank); give "
                           "one JSON object per line", r->name, r->line);
        if (n < 0) {
            *done = true;
            return FERRY_OK;
        }
        r->line++;
        if (is_blank(r->buf, (size_t)n) && !memchr(r->buf, '\0', (size_t)n))
            continue;
        ferry_status st = tok_jsonl_parse_line(r, r->buf, (size_t)n, r->line, rec);
        if (st == FERRY_OK)
            r->records++;
        return st;
    }
}
