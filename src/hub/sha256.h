/* SHA-256 (FIPS 180-4), fed in pieces: the hub names each large file by the SHA-256 of its bytes
 * (its LFS oid), which a download must match before it is taken into the cache. */
#ifndef NC_HUB_SHA256_H
#define NC_HUB_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct hub_sha256 {
    uint32_t h[8];
    uint64_t len;      /* bytes fed so far */
    uint8_t block[64]; /* bytes of an incomplete block */
} hub_sha256;

void hub_sha256_init(hub_sha256 *s);
void hub_sha256_update(hub_sha256 *s, const void *data, size_t n);
/* The digest as 64 lowercase hex digits and a NUL. */
void hub_sha256_hex(const hub_sha256 *s, char out[65]);

#endif
