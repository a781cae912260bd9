/* journal_internal.h -- what append.c needs of journal.c (not part of the API; not read by cffi).
 *
 * pe__record_header: fills the 24-byte record header of a record of `type` with `payload_len`
 *   bytes of payload; the position, durable lag and CRC are filled in by pe__journal_commit.
 * pe__journal_commit: appends one record given as iovecs: iov[0] is the 24-byte header (type
 *   and payload length set; filled in under the journal's mutex), the rest the payload (`total`
 *   bytes in all, header included), body_crc the CRC32C of the payload. Rolls first if needed.
 *   Returns PE_OK with *out_pos, or PE_ERR_FAILED / PE_ERR_IO (errno set) as pe_journal_append_*.
 */
#ifndef PE_JOURNAL_INTERNAL_H
#define PE_JOURNAL_INTERNAL_H

#include <stdint.h>
#include <sys/uio.h>

#include "internal.h" /* pe.h has no include guard (cffi reads it): include it once, through here */

void pe__record_header(char *rec, uint32_t type, uint64_t payload_len);
int pe__journal_commit(pe_journal *j, struct iovec *iov, int n, uint64_t total, uint32_t body_crc,
                       uint64_t *out_pos);

#endif
