/* columns.c -- event frames into Arrow columns in one pass (Slice.to_arrow).
 *
 * Input: the arrays pe_parse_frames produced for a buffer of event frames (see frames.c for the
 * frame layout: u32 payload_len | u16 key_len (65535 = no key) | key | payload). Output: the
 * buffers of four Arrow arrays, which Python wraps without copying:
 *   event       large_binary  payload_offsets (int64, n+1) + payload_data
 *   routing_key large_string  key_validity (bitmap, LSB first) + key_offsets (int64, n+1) + key_data
 *   segment_id  int64
 *   offset      int64         base_offset + frame_off[i]
 * and back: pe_columns_to_frames rebuilds the frames of a tier-2 row group (binary/string
 * arrays with int32 offsets, as Parquet reads them) and checks the rows' offsets;
 * pe_rows_check only checks them.
 */
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#include "pe.h"

int pe_frames_sizes(uint32_t n, const uint32_t *payload_len, const int32_t *key_len,
                    uint64_t *out_payload_bytes, uint64_t *out_key_bytes, uint32_t *out_key_nulls)
{
    if (out_payload_bytes == NULL || out_key_bytes == NULL || out_key_nulls == NULL)
        return PE_ERR_INVAL;
    if (n > 0 && (payload_len == NULL || key_len == NULL))
        return PE_ERR_INVAL;
    uint64_t p = 0, k = 0;
    uint32_t nulls = 0;
    for (uint32_t i = 0; i < n; i++) {
        p += payload_len[i];
        if (key_len[i] < 0)
            nulls++;
        else
            k += (uint64_t)key_len[i];
    }
    *out_payload_bytes = p;
    *out_key_bytes = k;
    *out_key_nulls = nulls;
    return PE_OK;
}

int pe_frames_to_columns(const char *buf, uint64_t len, uint32_t n, const uint32_t *frame_off,
                         const uint32_t *payload_len, const int32_t *key_len, int64_t segment_id,
                         int64_t base_offset, char *payload_data, uint64_t payload_cap,
                         int64_t *payload_offsets, char *key_data, uint64_t key_cap,
                         int64_t *key_offsets, uint8_t *key_validity, int64_t *segment_ids,
                         int64_t *offsets)
{
    if (payload_offsets == NULL || key_offsets == NULL || segment_ids == NULL || offsets == NULL)
        return PE_ERR_INVAL;
    if (n > 0 && (buf == NULL || frame_off == NULL || payload_len == NULL || key_len == NULL))
        return PE_ERR_INVAL;
    uint64_t p = 0, k = 0;
    payload_offsets[0] = 0;
    key_offsets[0] = 0;
    if (key_validity != NULL)
        memset(key_validity, 0, ((size_t)n + 7) / 8);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t fo = frame_off[i];
        uint64_t kl = key_len[i] < 0 ? 0 : (uint64_t)key_len[i];
        uint64_t pl = payload_len[i];
        if (fo > len || len - fo < 6 || len - fo - 6 < kl || len - fo - 6 - kl < pl)
            return PE_ERR_INVAL;
        if (payload_cap - p < pl || key_cap - k < kl)
            return PE_ERR_INVAL;
        if (key_len[i] >= 0) {
            if (kl)
                memcpy(key_data + k, buf + fo + 6, (size_t)kl);
            k += kl;
            if (key_validity != NULL)
                key_validity[i >> 3] |= (uint8_t)(1u << (i & 7));
        } else if (key_validity == NULL) {
            return PE_ERR_INVAL;
        }
        if (pl)
            memcpy(payload_data + p, buf + fo + 6 + kl, (size_t)pl);
        p += pl;
        payload_offsets[i + 1] = (int64_t)p;
        key_offsets[i + 1] = (int64_t)k;
        segment_ids[i] = segment_id;
        offsets[i] = base_offset + (int64_t)fo;
    }
    return PE_OK;
}

/* Row i of tier-2 columns (the arguments of pe_columns_to_frames): its payload and key lengths
 * (*has_key 0 for a null key), checked: the array offsets do not decrease (PE_ERR_INVAL), the
 * lengths fit a frame and the row starts `pos` bytes after row 0 (PE_ERR_CORRUPT). */
static int row_at(uint32_t i, const int32_t *payload_offsets, const int32_t *key_offsets,
                  const uint8_t *key_validity, uint64_t key_bit0, const int64_t *row_offsets,
                  uint64_t pos, uint64_t *pl, uint64_t *kl, int *has_key)
{
    int64_t p0 = payload_offsets[i], p1 = payload_offsets[i + 1];
    int64_t k0 = key_offsets[i], k1 = key_offsets[i + 1];
    if (p1 < p0 || k1 < k0)
        return PE_ERR_INVAL;
    uint64_t b = key_bit0 + i;
    *has_key = key_validity == NULL || (key_validity[b >> 3] >> (b & 7)) & 1;
    *pl = (uint64_t)(p1 - p0);
    *kl = *has_key ? (uint64_t)(k1 - k0) : 0;
    if (*pl > UINT32_MAX || *kl >= 65535)
        return PE_ERR_CORRUPT;
    if ((uint64_t)row_offsets[i] - (uint64_t)row_offsets[0] != pos)
        return PE_ERR_CORRUPT;
    return PE_OK;
}

int pe_columns_to_frames(uint32_t n, const int32_t *payload_offsets, const char *payload_data,
                         const int32_t *key_offsets, const char *key_data,
                         const uint8_t *key_validity, uint64_t key_bit0, const int64_t *row_offsets,
                         char *out, uint64_t out_cap, uint64_t *out_len)
{
    if (n == 0 || payload_offsets == NULL || key_offsets == NULL || row_offsets == NULL ||
        out == NULL || out_len == NULL)
        return PE_ERR_INVAL;
    uint64_t pos = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t pl, kl;
        int has_key;
        int rc = row_at(i, payload_offsets, key_offsets, key_validity, key_bit0, row_offsets, pos,
                        &pl, &kl, &has_key);
        if (rc != PE_OK)
            return rc;
        if ((pl && payload_data == NULL) || (kl && key_data == NULL))
            return PE_ERR_INVAL;
        uint64_t flen = 6 + kl + pl;
        if (out_cap - pos < flen)
            return PE_ERR_INVAL;
        uint32_t pl32 = (uint32_t)pl;
        uint16_t kl16 = has_key ? (uint16_t)kl : 65535;
        char *o = out + pos;
        o[0] = (char)(pl32 & 0xff); o[1] = (char)((pl32 >> 8) & 0xff);
        o[2] = (char)((pl32 >> 16) & 0xff); o[3] = (char)(pl32 >> 24);
        o[4] = (char)(kl16 & 0xff); o[5] = (char)(kl16 >> 8);
        if (kl)
            memcpy(o + 6, key_data + key_offsets[i], kl);
        if (pl)
            memcpy(o + 6 + kl, payload_data + payload_offsets[i], pl);
        pos += flen;
    }
    *out_len = pos;
    return PE_OK;
}

int pe_rows_check(uint32_t n, const int32_t *payload_offsets, const int32_t *key_offsets,
                  const uint8_t *key_validity, uint64_t key_bit0, const int64_t *row_offsets,
                  uint64_t *out_len)
{
    if (n == 0 || payload_offsets == NULL || key_offsets == NULL || row_offsets == NULL ||
        out_len == NULL)
        return PE_ERR_INVAL;
    uint64_t pos = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t pl, kl;
        int has_key;
        int rc = row_at(i, payload_offsets, key_offsets, key_validity, key_bit0, row_offsets, pos,
                        &pl, &kl, &has_key);
        if (rc != PE_OK)
            return rc;
        pos += 6 + kl + pl;
    }
    *out_len = pos;
    return PE_OK;
}
