/* crc32c.c -- CRC32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78).
 *
 * Two implementations that give identical results:
 *   - x86_64 with SSE4.2: the crc32 instruction (_mm_crc32_u64), 8 bytes per step;
 *   - everywhere else: slicing-by-8 over eight 256-entry tables built once at first use.
 * The hardware path is picked at run time with __builtin_cpu_supports("sse4.2").
 *
 * The running value is kept inverted: pe_crc32c(data, len, seed) starts from ~seed and returns
 * the final value inverted again, so a result can be passed back as `seed` to continue a
 * checksum over more data (crc(a || b) == crc(b, seed = crc(a))).
 */

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>

#include "pe.h"

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static int crc_have_hw;

static uint64_t load_u64le(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1u) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xFFu] ^ (c >> 8);
            crc_table[t][n] = c;
        }
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc_have_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    crc_have_hw = 0;
#endif
}

/* Software path: slicing-by-8. `crc` is the inverted running value. */
static uint32_t crc32c_sw(uint32_t crc, const unsigned char *p, size_t len)
{
    while (len > 0 && ((uintptr_t)p & 7u) != 0) {
        crc = crc_table[0][(crc ^ *p++) & 0xFFu] ^ (crc >> 8);
        len--;
    }
    while (len >= 8) {
        uint64_t v = load_u64le(p) ^ (uint64_t)crc;
        crc = crc_table[7][v & 0xFF] ^ crc_table[6][(v >> 8) & 0xFF] ^
              crc_table[5][(v >> 16) & 0xFF] ^ crc_table[4][(v >> 24) & 0xFF] ^
              crc_table[3][(v >> 32) & 0xFF] ^ crc_table[2][(v >> 40) & 0xFF] ^
              crc_table[1][(v >> 48) & 0xFF] ^ crc_table[0][(v >> 56) & 0xFF];
        p += 8;
        len -= 8;
    }
    while (len > 0) {
        crc = crc_table[0][(crc ^ *p++) & 0xFFu] ^ (crc >> 8);
        len--;
    }
    return crc;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

/* Hardware path: SSE4.2 crc32 instruction. `crc` is the inverted running value. */
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const unsigned char *p,
                                                            size_t len)
{
    while (len > 0 && ((uintptr_t)p & 7u) != 0) {
        crc = _mm_crc32_u8(crc, *p++);
        len--;
    }
    uint64_t c = crc;
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        len -= 8;
    }
    crc = (uint32_t)c;
    while (len > 0) {
        crc = _mm_crc32_u8(crc, *p++);
        len--;
    }
    return crc;
}
#endif

int pe_crc32c(const void *data, size_t len, uint32_t seed, uint32_t *out_crc)
{
    if ((data == NULL && len > 0) || out_crc == NULL)
        return PE_ERR_INVAL;
    pthread_once(&crc_once, crc_init);
    uint32_t crc = ~seed;
    const unsigned char *p = (const unsigned char *)data;
#if defined(__x86_64__)
    if (crc_have_hw)
        crc = crc32c_hw(crc, p, len);
    else
#endif
        crc = crc32c_sw(crc, p, len);
    *out_crc = ~crc;
    return PE_OK;
}
