/* crc32.c -- CRC-32 (the zlib / gzip / Parquet page CRC: polynomial 0x04C11DB7, reflected
 * 0xEDB88320, init ~0, final ~0).
 *
 * Two implementations that give identical results:
 *   - x86_64 with PCLMULQDQ and SSE4.1: carry-less multiplication folding 64 bytes per step in
 *     four independent 128-bit lanes, then a Barrett reduction to 32 bits (the method of Intel's
 *     "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction", for a
 *     reflected polynomial);
 *   - everywhere else, and for what is left after the last whole 16 bytes: slicing-by-8 over
 *     eight 256-entry tables built once at first use.
 * The hardware path is picked at run time with __builtin_cpu_supports.
 *
 * Why not zlib's crc32: the system zlib (1.2.x) computes about 3 GB/s here, and a tier-2 read
 * checks the CRC of every Parquet page it decodes (parquetpages.c); this path is several times
 * faster, so the check costs a few percent of the decoding instead of a third.
 *
 * The folding constants are x^k mod P(x) for the reflected polynomial, bit-reversed and shifted
 * left by one (so that a 64x64 carry-less product lands where the next fold expects it):
 *   fold by 4 x 128 bits: x^(4*128+32) and x^(4*128-32);  by 128 bits: x^(128+32), x^(128-32);
 *   64 -> 32: x^64;  Barrett: mu = floor(x^64 / P) and P itself.
 * The test suite compares every path with zlib.crc32 on random data, lengths and seeds.
 */

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>

#include "internal.h" /* pe.h, the slicing-by-8 tables and loop */

#define CRC32_POLY 0xEDB88320u

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static int crc_have_clmul;

static void crc_init(void)
{
    pe_crc_tables(crc_table, CRC32_POLY);
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc_have_clmul = (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")) ? 1 : 0;
#else
    crc_have_clmul = 0;
#endif
}

#if defined(__x86_64__)
#include <immintrin.h>

#define CLMUL_TARGET __attribute__((target("pclmul,sse4.1")))

/* a's low 64 bits times k's low, xor a's high times k's high: one 128-bit fold. */
CLMUL_TARGET static inline __m128i fold(__m128i a, __m128i k)
{
    return _mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11));
}

/* Hardware path over len bytes, len >= 64 and a multiple of 16. `crc` is the inverted running
 * value (not yet final-inverted); returns the same. */
CLMUL_TARGET static uint32_t crc32_clmul(uint32_t crc, const unsigned char *p, size_t len)
{
    const __m128i k1k2 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124LL);
    const __m128i poly_mu = _mm_set_epi64x(0x1f7011641LL, 0x1db710641LL);
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);

    __m128i x0 = _mm_loadu_si128((const __m128i *)p);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)crc));
    p += 64;
    len -= 64;
    while (len >= 64) {
        x0 = _mm_xor_si128(fold(x0, k1k2), _mm_loadu_si128((const __m128i *)p));
        x1 = _mm_xor_si128(fold(x1, k1k2), _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = _mm_xor_si128(fold(x2, k1k2), _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = _mm_xor_si128(fold(x3, k1k2), _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        len -= 64;
    }
    /* four lanes into one, then the remaining whole 16-byte blocks */
    x0 = _mm_xor_si128(fold(x0, k3k4), x1);
    x0 = _mm_xor_si128(fold(x0, k3k4), x2);
    x0 = _mm_xor_si128(fold(x0, k3k4), x3);
    while (len >= 16) {
        x0 = _mm_xor_si128(fold(x0, k3k4), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    /* 128 -> 64 bits (appending 32 zero bits), 64 -> 32, then Barrett */
    x0 = _mm_xor_si128(_mm_clmulepi64_si128(x0, k3k4, 0x10), _mm_srli_si128(x0, 8));
    x1 = _mm_srli_si128(x0, 4);
    x0 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x0, mask32), k5, 0x00), x1);
    x1 = x0;
    x0 = _mm_clmulepi64_si128(_mm_and_si128(x0, mask32), poly_mu, 0x10);
    x0 = _mm_clmulepi64_si128(_mm_and_si128(x0, mask32), poly_mu, 0x00);
    x0 = _mm_xor_si128(x0, x1);
    return (uint32_t)_mm_extract_epi32(x0, 1);
}
#endif

uint32_t pe_crc32_update(uint32_t seed, const void *data, size_t len)
{
    pthread_once(&crc_once, crc_init);
    const unsigned char *p = (const unsigned char *)data;
    uint32_t crc = ~seed;
#if defined(__x86_64__)
    if (crc_have_clmul && len >= 64) {
        size_t bulk = len & ~(size_t)15;
        crc = crc32_clmul(crc, p, bulk);
        p += bulk;
        len -= bulk;
    }
#endif
    return ~pe_crc_slice8(crc_table, crc, p, len);
}

int pe_crc32(const void *data, size_t len, uint32_t seed, uint32_t *out_crc)
{
    if ((data == NULL && len > 0) || out_crc == NULL)
        return PE_ERR_INVAL;
    *out_crc = pe_crc32_update(seed, data, len);
    return PE_OK;
}
