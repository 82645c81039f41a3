/* sftdata: instruction-tuning samples from JSONL into token ids and the
 * trained-token mask of a token file (tokens.h, version 3). Prefix sft_.
 *
 * One sample a line (blank lines skipped), each a JSON object in one of
 * the forms people fine-tune with:
 *   {"text": S}                          every token trained
 *   {"prompt": P, "completion": C}       SFT_TRAIN_COMPLETION: C and what
 *                                        ends the sample; SFT_TRAIN_ALL: all
 *   {"input_ids": [...], "labels": [...]} pre-tokenized, taken as given:
 *                                        a label -100 leaves its token
 *                                        untrained (transformers' rule),
 *                                        any other label must be its id;
 *                                        labels absent: all trained
 * Text is tokenized by the tokenizer (or byte by byte without one), each
 * piece on its own: a prompt and its completion are encoded separately,
 * then joined. A text sample is framed as the plain-text path frames a
 * document: the tokenizer's prefix (BOS) before, its suffix (EOS) after,
 * which separates it from the next sample; the prefix is trained when the
 * sample's first piece is, the suffix when its last piece is (so the EOS
 * after a completion is learnt). Pre-tokenized ids are written as given,
 * without framing. The first token of a pre-tokenized sample is never
 * trained: transformers shifts the labels, so labels[0] predicts nothing.
 *
 * A sample longer than max_tokens (after framing) is truncated to its
 * first max_tokens tokens or refused, as the options say.
 *
 *   {"messages": [{"role": R, "content": C, ...}, ...]}
 *                                        a conversation, rendered by the
 *                                        model's chat template (chattmpl.h)
 *                                        as transformers' apply_chat_template
 *                                        renders it, then tokenized whole,
 *                                        without framing (the template writes
 *                                        its own BOS), as apply_chat_template(
 *                                        tokenize=True) does; SFT_TRAIN_
 *                                        COMPLETION: the tokens of the
 *                                        assistant messages' ranges (their
 *                                        content and end-of-turn marker)
 * A conversation's roles are system, developer, user, assistant, tool and
 * ipython; other members of a message (tool_calls, reasoning_content, a
 * list-valued content) go to the template as the message's fields. Which
 * tokens an assistant range covers: the text is tokenized whole, then the
 * text before each range edge on its own; where that is a prefix of the
 * whole the edge is a token edge, else the token that straddles the edge
 * counts as inside the range (transformers' char_to_token rule for
 * return_assistant_tokens_mask).
 *
 * Errors: one line "PATH:LINE: what is wrong" in the caller's buffer; the
 * output arrays then hold a prefix of the samples and the caller writes
 * nothing. Nothing here prints or exits. */
#ifndef ZINF_SFTDATA_H
#define ZINF_SFTDATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bpe.h"
#include "chattmpl.h"
#include "hftok.h"
#include "progress.h"

/* What trains: every token, or the answers: the completion of a
 * prompt/completion sample, the assistant messages of a conversation
 * ("completion" and "assistant" are two names of it, as TRL's
 * completion_only_loss and assistant_only_loss). */
typedef enum SftTrainOn { SFT_TRAIN_ALL, SFT_TRAIN_COMPLETION } SftTrainOn;

typedef struct SftOptions {
    HfTok *tok;              /* NULL: byte-level, vocabulary 256 */
    const uint32_t *prefix;  /* framing of a text sample */
    size_t nprefix;
    const uint32_t *suffix;
    size_t nsuffix;
    SftTrainOn train_on;
    int64_t max_tokens;      /* 0: no limit */
    bool refuse_long;        /* a longer sample is an error, not truncated */
    const ChatTemplate *chat; /* renders {"messages": ...}; NULL: conversations refused */
    const ChatRenderOptions *chat_opts; /* NULL: no extra variables */
    Progress *progress;      /* sft_read_jsonl's bytes of the file read (base/progress.h); NULL: nobody listens */
} SftOptions;

typedef struct SftStats {
    int64_t samples, text, prompt_completion, pretokenized, conversations;
    int64_t truncated;       /* samples cut to max_tokens */
    int64_t tokens, trained; /* written */
} SftStats;

/* The samples' ids and mask: ids.v[i] and trained[i] (1 or 0), ids.n long. */
typedef struct SftOut {
    BpeIds ids;
    uint8_t *trained;        /* owned, ids.cap long */
    size_t trained_cap;
    size_t *ends;            /* owned: where each sample ends in ids (zinftok --pack cuts there) */
    size_t nends, ends_cap;
} SftOut;
void sft_out_free(SftOut *o);
/* Ends a sample at ids.n (a plain-text document, appended directly). 0,
 * or -1 when out of memory. */
int sft_out_end_sample(SftOut *o);
/* Marks ids.v[from..ids.n) trained (ids appended to out.ids directly, as
 * plain text is). 0, or -1 when out of memory. */
int sft_out_mark_trained(SftOut *o, size_t from);

/* A piece of a sample's text and whether its tokens are trained. */
typedef struct SftPiece {
    const char *text;
    size_t len;
    bool trained;
} SftPiece;

/* One sample of np pieces (each tokenized on its own, framed as above)
 * appended to out; `where` ("PATH:LINE") prefixes errors. 0, or -1 with err. */
int sft_add_pieces(const SftOptions *o, const SftPiece *p, size_t np, const char *where, SftOut *out, SftStats *st,
                   char *err, size_t errlen);

/* Every sample of the JSONL text[0..n) read from path, appended to out.
 * 0, or -1 with err. */
int sft_read_jsonl(const SftOptions *o, const char *path, const char *text, size_t n, SftOut *out, SftStats *st,
                   char *err, size_t errlen);

/* The chat template of conversations: `path` when given (a model
 * directory; a tokenizer_config.json, by its .json name: its
 * chat_template and special tokens; else a template's own text, a .jinja
 * file), else that of the directory of `tokenizer` (a tokenizer.json or a
 * model directory): its chat_template.jinja, else its
 * tokenizer_config.json's chat_template (chattmpl_load_dir); else none
 * (*out NULL, 0 returned: a conversation is then refused with the way out).
 * -1 with err for a template that does not load. */
int sft_chat_template_load(const char *path, const char *tokenizer, ChatTemplate **out, char *err, size_t errlen);

/* A conversation's "messages" (a JSON list of {role, content, ...}) as the
 * template renders it, roles and members checked as for a sample; `where`
 * prefixes errors. 0 with *out (chattmpl_render_free), or -1 with err. */
struct JsonValue;
int sft_chat_render(const ChatTemplate *t, const struct JsonValue *msgs, const ChatRenderOptions *ro, const char *where,
                    ChatRender *out, char *err, size_t errlen);

/* "all", "completion"; sft_parse_train_on: 0, or -1 for another word. */
int sft_parse_train_on(const char *s, SftTrainOn *t);

#endif
