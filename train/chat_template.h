/* Chat templates: a JSON Lines record (jsonl.h) rendered as the model saw
 * its conversations in training, then encoded into token ids with a flag per
 * token saying whether it is a training target (an answer's token) or only
 * context. Templates, token for token (docs/data.md shows each):
 *   plain    a prompt/completion record: BOS, prompt, completion, EOS
 *            (the tokenizer's BOS and EOS; GPT-2: <|endoftext|> both);
 *   llama3   <|begin_of_text|>, then per message <|start_header_id|> ROLE
 *            <|end_header_id|> "\n\n" CONTENT (trimmed) <|eot_id|>;
 *   chatml   per message <|im_start|> "ROLE\n" CONTENT <|im_end|> "\n"
 *            (Qwen2's, without its default system message);
 *   mistral  <s>, then per user/assistant pair [INST] USER [/INST]
 *            ASSISTANT </s>, each piece encoded on its own as Mistral's
 *            reference tokenizes (no system role, the roles alternate from
 *            user; [INST] and [/INST] are special tokens where the
 *            vocabulary has them, text otherwise).
 * A prompt/completion record under a chat template is one user message and
 * one assistant message. The targets are each assistant message's content
 * (a completion) and the token that closes it (<|eot_id|>, <|im_end|>,
 * </s>, plain's EOS); nothing else. Encoding works through any tokenizer
 * given as a tok_text_encoder (GPT-2's tok_bpe adapter is here). Owns
 * nothing but the segment list it grows; any thread, one list per thread. */
#ifndef FERRY_TRAIN_CHAT_TEMPLATE_H
#define FERRY_TRAIN_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "train/bpe.h"
#include "train/jsonl.h"

#define TOK_NO_TOKEN UINT32_MAX

/* A tokenizer, whatever its kind, as the templates use it. */
typedef struct tok_text_encoder {
    void *ctx;
    /* Appends the tokens of s[0..n) (UTF-8, special tokens' texts not
     * recognised) to *out. */
    ferry_status (*encode)(void *ctx, const char *s, size_t n, tok_ids *out);
    /* The id of the special token whose text is s[0..n) ("<|eot_id|>"), or
     * -1 if the tokenizer has no such special token. */
    int64_t (*special)(void *ctx, const char *s, size_t n);
    uint32_t bos, eos;    /* the tokenizer's BOS and EOS ids; TOK_NO_TOKEN: none */
    uint32_t vocab_size;  /* every id is below it */
} tok_text_encoder;

/* GPT-2's tokenizer (borrowed; it must outlive *out): encode is
 * tok_bpe_encode, the one special token <|endoftext|> (50256) is BOS and EOS. */
void tok_text_encoder_gpt2(tok_bpe *t, tok_text_encoder *out);
/* The same for any tokenizer train/tokenizer.h opens (a tokenizer.json or
 * GPT-2's two files): its BOS and EOS (TOK_NO_TOKEN where it has none), and
 * special tokens looked up by their text. */
typedef struct tok_tokenizer tok_tokenizer;
void tok_text_encoder_of(tok_tokenizer *t, tok_text_encoder *out);

typedef enum chat_template_id { CHAT_PLAIN = 0, CHAT_LLAMA3, CHAT_CHATML, CHAT_MISTRAL } chat_template_id;

/* "plain", "llama3", "chatml", "mistral" -> *out; FERRY_ERR_INVALID_ARGUMENT
 * naming the value and the four otherwise. */
ferry_status chat_template_parse(const char *name, chat_template_id *out);
const char *chat_template_name(chat_template_id t);

typedef enum chat_seg_kind {
    CHAT_SEG_TEXT = 0, /* text, encoded */
    CHAT_SEG_SPECIAL,  /* one special token named by its text; the tokenizer must have it */
    CHAT_SEG_MARKER,   /* a special token where the tokenizer has it, else text */
    CHAT_SEG_BOS,      /* the tokenizer's BOS (none: nothing) */
    CHAT_SEG_EOS,      /* the tokenizer's EOS (it must have one) */
} chat_seg_kind;

typedef struct chat_segment {
    chat_seg_kind kind;
    const char *text;  /* borrowed: the template's or the record's */
    size_t len;
    bool target;
} chat_segment;

typedef struct chat_segments {
    chat_segment *seg;
    size_t n, cap;
} chat_segments;

void chat_segments_free(chat_segments *s);

/* Renders rec with template t into *out (emptied first; its texts point into
 * rec and the template). FERRY_ERR_FORMAT naming `file` and rec->line for a
 * record the template cannot render: "messages" under plain, a role the
 * template does not know (mistral's system), roles out of the template's
 * order, or a conversation with no assistant message (nothing to learn). */
ferry_status chat_render(chat_template_id t, const tok_record *rec, const char *file, chat_segments *out);

/* A flag per token: 1 target, 0 context. Start from {0}. */
typedef struct tok_flags {
    uint8_t *v;
    size_t len, cap;
} tok_flags;

void tok_flags_free(tok_flags *f);

/* Appends the tokens of the segments to *ids and their flags to *flags.
 * Consecutive text with the same flag is encoded as one text, so a boundary
 * only falls where the flag changes or a special token stands; a marker the
 * tokenizer does not have is encoded as text on its own. FERRY_ERR_INVALID_ARGUMENT naming the token when a
 * special token or EOS the template needs is not the tokenizer's, or an id
 * the encoder gave is not below its vocabulary; on failure ids and flags
 * keep what they held before. */
ferry_status chat_encode(const tok_text_encoder *enc, const chat_segments *segs, tok_ids *ids, tok_flags *flags);

#endif
