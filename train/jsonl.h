/* Instruction data as JSON Lines, read one record at a time: each line is
 * one JSON object, either {"prompt": "...", "completion": "..."} or
 * {"messages": [{"role": "system"|"user"|"assistant", "content": "..."},
 * ...]} (other keys are ignored). Lines of only blanks are skipped. Every
 * refusal is FERRY_ERR_FORMAT naming the file and the line (1-based): a line
 * that is not valid UTF-8 (with the byte's column), that is not JSON or not
 * an object, a record with neither form or both, a field of the wrong type,
 * an empty "messages", a role outside the three, "\u0000" in a string (C
 * strings cannot hold it), a key given twice, or a file with no record.
 * Owns the open file and the record of the last line; rendering a record
 * into tokens is chat_template.h's. Not thread-safe. */
#ifndef FERRY_TRAIN_JSONL_H
#define FERRY_TRAIN_JSONL_H

#include <stdbool.h>
#include <stddef.h>

#include "ferry.h"

typedef enum tok_role { TOK_ROLE_SYSTEM = 0, TOK_ROLE_USER, TOK_ROLE_ASSISTANT } tok_role;

/* "system", "user", "assistant". */
const char *tok_role_name(tok_role r);

typedef struct tok_message {
    tok_role role;
    const char *content; /* UTF-8, no NUL inside; owned by the reader */
    size_t len;
} tok_message;

typedef enum tok_record_kind { TOK_RECORD_PROMPT = 0, TOK_RECORD_MESSAGES } tok_record_kind;

/* One line's record; its strings live until the next tok_jsonl_next. */
typedef struct tok_record {
    tok_record_kind kind;
    const char *prompt, *completion;  /* TOK_RECORD_PROMPT */
    size_t prompt_len, completion_len;
    const tok_message *messages;      /* TOK_RECORD_MESSAGES: at least one */
    size_t nmessages;
    size_t line;                      /* its line in the file, 1-based */
} tok_record;

typedef struct tok_jsonl tok_jsonl;

/* Opens `path` (a regular file: FERRY_ERR_IO otherwise, or if it cannot be
 * read). Release with tok_jsonl_close. */
ferry_status tok_jsonl_open(const char *path, tok_jsonl **out);
void tok_jsonl_close(tok_jsonl *r);

/* Reads the next record into *rec; at the end of the file *done is set and
 * *rec is untouched. A file that ends without any record is FERRY_ERR_FORMAT
 * ("holds no records"). */
ferry_status tok_jsonl_next(tok_jsonl *r, tok_record *rec, bool *done);

/* Parses one line (`line` is only for messages) the same way, into *rec
 * whose strings live in r until its next call: what the fuzzing harness
 * and the tests drive. */
ferry_status tok_jsonl_parse_line(tok_jsonl *r, const char *text, size_t len, size_t line, tok_record *rec);

/* A reader for tok_jsonl_parse_line alone, with no file; `name` stands for
 * the file in messages. */
ferry_status tok_jsonl_open_text(const char *name, tok_jsonl **out);

/* The length of the longest prefix of s[0..n) that is valid UTF-8 (no
 * overlong forms, no surrogates, nothing above U+10FFFF): n when all is. */
size_t tok_utf8_valid_prefix(const char *s, size_t n);

#endif
