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
 *
 * pe_crc32c_combine gives crc(a || b) from crc(a), crc(b) and len(b) without reading the data
 * (zlib's method: multiply crc(a) by x^(8 len(b)) modulo the polynomial), so a record's CRC can
 * be finished from its payload's CRC under a lock in O(log len). pe_crc32c_copy copies and
 * checksums in one pass (internal.h).
 */

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>

#include "internal.h" /* pe.h, the slicing-by-8 tables and loop */

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static int crc_have_hw;

/* ------------------------------------------------------------------ combine */

/* a(x) * b(x) modulo p(x), polynomials reflected (bit 31 = x^0). */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = (uint32_t)1 << 31, p = 0;
    while (m != 0) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

static uint32_t x2n_table[32];

static void x2n_init(void)
{
    uint32_t p = (uint32_t)1 << 30; /* x^1 */
    x2n_table[0] = p;
    for (int n = 1; n < 32; n++)
        x2n_table[n] = p = multmodp(p, p);
}

/* x^(n * 2^k) modulo p(x). */
static uint32_t x2nmodp(uint64_t n, unsigned k)
{
    uint32_t p = (uint32_t)1 << 31; /* x^0 */
    while (n) {
        if (n & 1)
            p = multmodp(x2n_table[k & 31], p);
        n >>= 1;
        k++;
    }
    return p;
}

/* The 3-way hardware path's block, and x^(8 BLOCK), x^(16 BLOCK) mod P to join blocks. */
#define CRC_BLOCK 4096
static uint32_t crc_k1, crc_k2;

static void crc_init(void)
{
    pe_crc_tables(crc_table, CRC32C_POLY);
    x2n_init();
    crc_k1 = x2nmodp(CRC_BLOCK, 3);
    crc_k2 = x2nmodp(2 * CRC_BLOCK, 3);
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc_have_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    crc_have_hw = 0;
#endif
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
    /* Three blocks at a time, three independent chains (the crc32 instruction has a latency of
     * three cycles and a throughput of one), joined by multiplying out the later blocks'
     * lengths: f(c, A B C) = f(c, A) x^(16 BLOCK) + f(0, B) x^(8 BLOCK) + f(0, C) mod P. */
    while (len >= 3 * CRC_BLOCK) {
        uint64_t a = c, b = 0, d = 0;
        for (size_t i = 0; i < CRC_BLOCK; i += 8) {
            uint64_t va, vb, vd;
            memcpy(&va, p + i, 8);
            memcpy(&vb, p + CRC_BLOCK + i, 8);
            memcpy(&vd, p + 2 * CRC_BLOCK + i, 8);
            a = _mm_crc32_u64(a, va);
            b = _mm_crc32_u64(b, vb);
            d = _mm_crc32_u64(d, vd);
        }
        c = multmodp(crc_k2, (uint32_t)a) ^ multmodp(crc_k1, (uint32_t)b) ^ (uint32_t)d;
        p += 3 * CRC_BLOCK;
        len -= 3 * CRC_BLOCK;
    }
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
        crc = pe_crc_slice8(crc_table, crc, p, len);
    *out_crc = ~crc;
    return PE_OK;
}

int pe_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2, uint32_t *out_crc)
{
    if (out_crc == NULL)
        return PE_ERR_INVAL;
    pthread_once(&crc_once, crc_init);
    *out_crc = multmodp(x2nmodp(len2, 3), crc1) ^ crc2;
    return PE_OK;
}


/* ------------------------------------------------------------------ copy + checksum */

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t copy_hw(uint32_t crc, unsigned char *d,
                                                          const unsigned char *p, size_t len)
{
    uint64_t c = crc;
    while (len >= 32) {
        uint64_t v0, v1, v2, v3;
        memcpy(&v0, p, 8);
        memcpy(&v1, p + 8, 8);
        memcpy(&v2, p + 16, 8);
        memcpy(&v3, p + 24, 8);
        memcpy(d, p, 32);
        c = _mm_crc32_u64(c, v0);
        c = _mm_crc32_u64(c, v1);
        c = _mm_crc32_u64(c, v2);
        c = _mm_crc32_u64(c, v3);
        p += 32;
        d += 32;
        len -= 32;
    }
    crc = (uint32_t)c;
    while (len > 0) {
        *d++ = *p;
        crc = _mm_crc32_u8(crc, *p++);
        len--;
    }
    return crc;
}
#endif

uint32_t pe_crc32c_copy(void *dst, const void *src, size_t len, uint32_t seed)
{
    pthread_once(&crc_once, crc_init);
#if defined(__x86_64__)
    if (crc_have_hw)
        return ~copy_hw(~seed, (unsigned char *)dst, (const unsigned char *)src, len);
#endif
    memcpy(dst, src, len);
    return ~pe_crc_slice8(crc_table, ~seed, (const unsigned char *)dst, len);
}
