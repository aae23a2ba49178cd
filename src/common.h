/* Helpers shared by every layer: error values, checked arithmetic, small allocation wrappers. */
#ifndef NC_COMMON_H
#define NC_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nucleus.h" /* nc_err */

/* Format a message into err (if not NULL) and return -1, so callers can write
 * `return nc_fail(err, "tensor '%s' at offset %llu: ...", ...);`. */
int nc_fail(nc_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefix an existing message: "context: old message". Returns -1. */
int nc_fail_prefix(nc_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Open path for reading, refusing anything but a regular file before a read could block on it: a
 * FIFO opened for reading waits for a writer, a device never ends. O_NONBLOCK lets the open of a
 * FIFO return at once; it is cleared again for the reads. The descriptor (O_CLOEXEC), or -1 with
 * err "PATH: cannot open: REASON" (errno is open's: ENOENT for a missing file) or "PATH: a FIFO,
 * not a regular file" (errno EINVAL). */
int nc_open_regular(const char *path, nc_err *err);

/* nc_chat_render (nucleus.h) that also ends soon after gone(user) says true, failing with "the
 * render was abandoned": gone (may be NULL) is asked on the rendering thread every 10 ms of the
 * render. A server passes "has the request's client left?". */
int nc_chat_render_watched(const nc_chat_template *t, const char *messages_json, const char *extra_json,
                           bool add_generation_prompt, bool (*gone)(void *user), void *user, char **text,
                           size_t *len, bool *add_bos, nc_err *err);

/* A long computation's look at whether its caller still wants it: gone(user) asked at most every
 * 10 ms (the clock read every 64 calls). The grammar compilers poll one per rule or schema, so
 * that a compilation whose client left, whose deadline passed or whose server stops ends. */
typedef struct nc_poll {
    bool (*gone)(void *user); /* NULL: never asked */
    void *user;
    uint32_t calls;
    double next;              /* CLOCK_MONOTONIC seconds of the next question */
    bool ended;               /* gone said true: every later call says so at once */
} nc_poll;
/* true once gone said so (p may be NULL). */
bool nc_poll_ended(nc_poll *p);

/* nc_json_schema_to_grammar and nc_grammar_check_model (nucleus.h), ending soon after gone(user)
 * says true with "the grammar compilation was abandoned". */
int nc_json_schema_to_grammar_watched(const char *schema_json, const char *root_name, bool (*gone)(void *user),
                                      void *user, char **gbnf, nc_err *err);
int nc_grammar_check_model_watched(const nc_model *m, const char *gbnf, bool (*gone)(void *user), void *user,
                                   nc_err *err);
#define NC_POLL_ABANDONED "the grammar compilation was abandoned"

/* The offset of the first \u0000 escape in a JSON text, or -1: cJSON's strings end at a NUL, so
 * the text after it would vanish without a word. A backslash escapes the character after it,
 * so "\\u0000" (an escaped backslash, then text) is not one. */
long nc_json_escaped_nul(const char *json, size_t len);

/* Overflow-checked size arithmetic: return false when the result does not fit. */
static inline bool nc_mul_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool nc_add_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }

/* A 64-bit hash of a byte stream, fed in pieces of any size (the result depends only on the
 * bytes): the checksum of saved KV caches and the fingerprint of a model. Each 8-byte word (read
 * little-endian) goes through a bijection of the state, so changing any one word always changes
 * the result; it is not a cryptographic hash. */
typedef struct nc_hasher {
    uint64_t h, len;
    uint8_t tail[8];  /* bytes of an incomplete word */
} nc_hasher;
void nc_hash_init(nc_hasher *s);
void nc_hash_update(nc_hasher *s, const void *data, size_t n);
uint64_t nc_hash_final(const nc_hasher *s);

#endif
