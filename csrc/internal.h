/* internal.h -- byte helpers shared by the C files (not part of the API; not read by cffi).
 * Little-endian loads/stores through memcpy-free byte arithmetic, and the record constants. */
#ifndef PE_INTERNAL_H
#define PE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pe.h"

#define PE_RECORD_MAGIC 0x4550u
#define PE_MAX_RECORD_TYPE 15u
/* Record header flag bit 0: bytes 20..23 hold the durable lag (journal.c, "RECORD HEADER"). */
#define PE_FLAG_DURABLE 1u
static const char pe_file_magic[8] = {'P', 'E', 'J', 'O', 'U', 'R', 'N', 'L'};

static inline uint16_t ld16(const char *p)
{
    unsigned char b[2];
    memcpy(b, p, 2);
    return (uint16_t)(b[0] | (b[1] << 8));
}

static inline uint32_t ld32(const char *p)
{
    unsigned char b[4];
    memcpy(b, p, 4);
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}

static inline uint64_t ld64(const char *p)
{
    return (uint64_t)ld32(p) | ((uint64_t)ld32(p + 4) << 32);
}

static inline void st16(char *p, uint16_t v)
{
    unsigned char b[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
    memcpy(p, b, 2);
}

static inline void st32(char *p, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    memcpy(p, b, 4);
}

static inline void st64(char *p, uint64_t v)
{
    st32(p, (uint32_t)v);
    st32(p + 4, (uint32_t)(v >> 32));
}

static inline uint32_t crc(const char *p, size_t len)
{
    uint32_t c = 0;
    pe_crc32c(p, len, 0, &c);
    return c;
}

/* crc32c continuing from `seed` (0 to start), as pe_crc32c. */
static inline uint32_t crc_more(uint32_t seed, const char *p, size_t len)
{
    uint32_t c = 0;
    pe_crc32c(p, len, seed, &c);
    return c;
}

/* crc(a || b) from crc(a), crc(b), len(b). */
static inline uint32_t crc_cat(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
    uint32_t c = 0;
    pe_crc32c_combine(crc_a, crc_b, len_b, &c);
    return c;
}

/* Copies len bytes from src to dst and returns the CRC32C of them continued from seed, in one
 * pass over the data (crc32c.c). */
uint32_t pe_crc32c_copy(void *dst, const void *src, size_t len, uint32_t seed);

/* The eight 256-entry tables of slicing-by-8 for the reflected polynomial `poly` (the
 * software CRCs of crc32c.c and crc32.c). */
static inline void pe_crc_tables(uint32_t table[8][256], uint32_t poly)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1u) ? (c >> 1) ^ poly : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = table[0][n];
        for (int t = 1; t < 8; t++) {
            c = table[0][c & 0xFFu] ^ (c >> 8);
            table[t][n] = c;
        }
    }
}

/* Slicing-by-8 over `table` (pe_crc_tables): `crc` is the inverted running value. */
static inline uint32_t pe_crc_slice8(const uint32_t table[8][256], uint32_t crc,
                                     const unsigned char *p, size_t len)
{
    while (len > 0 && ((uintptr_t)p & 7u) != 0) {
        crc = table[0][(crc ^ *p++) & 0xFFu] ^ (crc >> 8);
        len--;
    }
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap64(v);
#endif
        v ^= (uint64_t)crc;
        crc = table[7][v & 0xFF] ^ table[6][(v >> 8) & 0xFF] ^ table[5][(v >> 16) & 0xFF] ^
              table[4][(v >> 24) & 0xFF] ^ table[3][(v >> 32) & 0xFF] ^
              table[2][(v >> 40) & 0xFF] ^ table[1][(v >> 48) & 0xFF] ^ table[0][(v >> 56) & 0xFF];
        p += 8;
        len -= 8;
    }
    while (len > 0) {
        crc = table[0][(crc ^ *p++) & 0xFFu] ^ (crc >> 8);
        len--;
    }
    return crc;
}

/* zlib's crc32 continuing from `seed` (0 to start), as pe_crc32 (crc32.c). */
uint32_t pe_crc32_update(uint32_t seed, const void *data, size_t len);

#endif
