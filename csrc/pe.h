/* pe.h -- the C core of pravega_embedded.
 *
 * This header is read verbatim into cffi's cdef (pravega_embedded/_native/_build.py), so it holds
 * no #include, no function-like macro and no conditional: only integer #defines, typedefs and
 * prototypes. Fixed-width integer types come from the including .c file (stdint.h).
 *
 * Conventions
 *   - Every function returns a status code (PE_OK or a negative PE_ERR_*); results go through
 *     out-parameters. Out-parameters are written only on PE_OK unless stated otherwise.
 *   - On PE_ERR_IO the failing OS call's errno is available to the caller (cffi: ffi.errno) and,
 *     for journal calls, also through pe_journal_status_get().
 *   - All integers on disk are little-endian. The byte layout is documented at the top of
 *     journal.c (journal files and records) and frames.c (event frames), and in docs/format.md.
 *
 * Status codes and what to do about them
 *   PE_OK               success.
 *   PE_ERR_INVAL        a bad argument (NULL pointer, size out of range, buffer too small). A
 *                       bug in the caller; nothing was written.
 *   PE_ERR_IO           an OS call failed (errno tells which: ENOSPC = disk full, EIO = device).
 *                       After a failed fdatasync or fsync the journal is FAILED for good (fsync
 *                       errors cannot be retried safely): close it and reopen the store to
 *                       recover. After a failed write() the partial record is cut off again,
 *                       nothing is acknowledged, and the append may be retried (e.g. once space
 *                       is freed); if cutting it off fails too, the journal is FAILED.
 *   PE_ERR_NOMEM        malloc failed.
 *   PE_ERR_CORRUPT      bytes from disk are damaged where they should be valid (bad CRC with
 *                       valid data after it, an impossible frame). Do not repair automatically.
 *   PE_ERR_FORMAT       a file has the wrong magic number or an unsupported format version.
 *   PE_ERR_TIMEOUT      pe_journal_sync: the position did not become durable within the timeout.
 *   PE_ERR_FAILED       the journal is in the FAILED state (see PE_ERR_IO, pe_journal_fail) or
 *                       closed; errno is the failure's errno (0 when closed).
 *   PE_ERR_TOOBIG       a record or event exceeds the format's limits.
 */

#define PE_OK 0
#define PE_ERR_INVAL -1
#define PE_ERR_IO -2
#define PE_ERR_NOMEM -3
#define PE_ERR_CORRUPT -4
#define PE_ERR_FORMAT -5
#define PE_ERR_TIMEOUT -6
#define PE_ERR_FAILED -7
#define PE_ERR_TOOBIG -8

/* Format constants (see journal.c / docs/format.md). Journal files of format 1 (sections with a
 * 24-byte header and no CRC of their own, no ROLL records, no durable marks) and of format 2
 * (BYTES records without a write time: data at PE_BYTES_DATA_OFFSET_V2) are still read. */
#define PE_FORMAT_VERSION 3
#define PE_FILE_HEADER_SIZE 32
#define PE_RECORD_HEADER_SIZE 24
#define PE_EVENTS_HEADER_SIZE 30
#define PE_SECTION_HEADER_SIZE 32
#define PE_SECTION_HEADER_SIZE_V1 24
#define PE_BYTES_DATA_OFFSET 64
#define PE_BYTES_DATA_OFFSET_V2 56
#define PE_FRAME_HEADER_SIZE 6
#define PE_NO_KEY 65535
#define PE_MAX_KEY_LEN 4096
#define PE_MAX_WRITER_ID_LEN 255
#define PE_MAX_RECORD_PAYLOAD 134217728
#define PE_RECORD_EVENTS 1
#define PE_RECORD_BYTES 2
#define PE_RECORD_MERGE 3
#define PE_RECORD_ROLL 4

/* Durability modes of a journal. */
#define PE_DURABILITY_FSYNC 0
#define PE_DURABILITY_OS 1
#define PE_DURABILITY_NONE 2

/* Tail states reported by pe_scan. */
#define PE_TAIL_CLEAN 0
#define PE_TAIL_TORN 1
#define PE_TAIL_CORRUPT 2

/* Fault injection points (tests only). */
#define PE_FAULT_WRITE 1
#define PE_FAULT_SYNC 2

/* ---------------------------------------------------------------- checksums */

/* CRC32C (Castagnoli, reflected, init ~0, final ~0 -- the iSCSI/ext4 CRC). `seed` is a previous
 * result to continue a running checksum, or 0 to start. Uses SSE4.2 when the CPU has it.
 * pe_crc32c("123456789", 9, 0) == 0xE3069283. Errors: PE_ERR_INVAL (data NULL with len > 0). */
int pe_crc32c(const void *data, size_t len, uint32_t seed, uint32_t *out_crc);

/* The CRC32C of a || b from crc1 = CRC32C(a), crc2 = CRC32C(b) and len2 = len(b), without the
 * data. Errors: PE_ERR_INVAL (out_crc NULL). */
int pe_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2, uint32_t *out_crc);

/* Checks a section read back from a journal file of format 2: buf[0..len) must be one section
 * header (PE_SECTION_HEADER_SIZE bytes: segment uid, segment offset, events, n_bytes, CRC32C of
 * the data, reserved) followed by exactly n_bytes of data whose CRC32C matches. *out_n_bytes is
 * the header's n_bytes. Errors: PE_ERR_INVAL (NULL, len < header), PE_ERR_CORRUPT (length or
 * CRC mismatch). */
int pe_section_verify(const char *buf, uint64_t len, uint64_t *out_n_bytes);

/* ------------------------------------------------------------ file headers */

/* Writes the 32-byte header of a journal file whose first byte has global position `base`.
 * Errors: PE_ERR_INVAL. */
int pe_file_header_build(uint64_t base, char *out, size_t cap);

/* Checks a journal file header. Errors: PE_ERR_INVAL (len < 32), PE_ERR_FORMAT (wrong magic or
 * version outside 1..PE_FORMAT_VERSION), PE_ERR_CORRUPT (header CRC mismatch). */
int pe_file_header_parse(const char *buf, size_t len, uint64_t *out_base, uint32_t *out_version);

/* ------------------------------------------------------------------ scanning */

typedef struct pe_scan_result {
    uint64_t valid_end;      /* global position just after the last valid record */
    uint64_t n_records;      /* valid records found from the start position */
    int32_t tail_state;      /* PE_TAIL_CLEAN, PE_TAIL_TORN or PE_TAIL_CORRUPT */
    uint64_t bad_pos;        /* TORN/CORRUPT: global position of the first damaged byte */
    uint64_t next_valid_pos; /* CORRUPT: global position of a valid record after the damage */
    uint64_t durable_mark;   /* the highest position that a valid record found anywhere in
                                buf (before or after damage) says was durable before it was
                                appended (its durable lag, journal.c); 0 if none says */
} pe_scan_result;

/* Scans the records in buf[0..len), whose first byte has global position `buf_pos`, starting at
 * the record boundary `start_pos` (buf_pos <= start_pos <= buf_pos + len). A record is valid when
 * its header magic, its position field (== its own position), its type, its length
 * (<= PE_MAX_RECORD_PAYLOAD and within the buffer) and its CRC all check. The scan stops at the
 * first invalid record. If no valid record starts anywhere after that point (every later byte
 * offset is tried), the remainder is a torn tail: tail_state = PE_TAIL_TORN (or CLEAN if there was
 * no remainder). Otherwise tail_state = PE_TAIL_CORRUPT and next_valid_pos says where valid data
 * resumes. Never reads outside buf. Returns PE_OK in all three cases; PE_ERR_INVAL on bad
 * arguments. */
int pe_scan(const char *buf, uint64_t len, uint64_t buf_pos, uint64_t start_pos,
            pe_scan_result *out);

/* Reads one record header at buf[0..len) (a record at global position `pos`) without checking
 * the CRC: type, payload length and total size (header + payload). Errors: PE_ERR_CORRUPT
 * (magic/position/length invalid), PE_ERR_INVAL (len < PE_RECORD_HEADER_SIZE). */
int pe_record_header(const char *buf, uint64_t len, uint64_t pos, uint32_t *out_type,
                     uint32_t *out_payload_len, uint64_t *out_total);

/* ------------------------------------------------------------------ frames */

/* Parses event frames (u32 payload_len, u16 key_len or PE_NO_KEY, key, payload) in buf[0..len)
 * until max_events frames are read or the next frame does not fit. Per event i < *out_n:
 * frame_off[i] = offset of the frame in buf, payload_len[i], key_len[i] (-1: no key). The key
 * starts at frame_off+6, the payload at frame_off+6+max(key_len,0). *out_consumed = bytes of the
 * complete frames parsed. A truncated last frame is not an error (out_consumed < len); a frame
 * whose key_len exceeds PE_MAX_KEY_LEN (and is not PE_NO_KEY) is PE_ERR_CORRUPT, with out_n and
 * out_consumed still set to the frames before it. */
int pe_parse_frames(const char *buf, uint64_t len, uint32_t max_events, uint32_t *frame_off,
                    uint32_t *payload_len, int32_t *key_len, uint32_t *out_n,
                    uint64_t *out_consumed);

/* Copies the payloads of n parsed frames (as returned by pe_parse_frames on the same buf) into
 * out_data back to back and writes out_offsets[i] = offset_base + (bytes copied before event i)
 * for i in 0..n (n+1 entries), for an Arrow large_binary column. out_cap must hold the sum of
 * the payload lengths. Errors: PE_ERR_INVAL (too small, offsets outside buf). */
int pe_gather_payloads(const char *buf, uint64_t len, uint32_t n, const uint32_t *frame_off,
                       const uint32_t *payload_len, const int32_t *key_len, char *out_data,
                       uint64_t out_cap, int64_t offset_base, int64_t *out_offsets);

/* ------------------------------------------------------------------ journal */

typedef struct pe_journal pe_journal;

/* One section of an EVENTS record: the events of one segment. In: segment_uid, segment_offset
 * (the segment offset of the section's first frame), n_groups (how many consecutive entries of
 * the groups array belong to it). Out (set by pe_journal_append_events): n_events, n_bytes (framed
 * bytes), data_pos (global journal position of the section's first frame). */
typedef struct pe_section {
    uint64_t segment_uid;
    uint64_t segment_offset;
    uint32_t n_groups;
    uint32_t n_events;
    uint64_t n_bytes;
    uint64_t data_pos;
} pe_section;

/* A run of consecutive events sharing one routing key (key_len == PE_NO_KEY: no key). */
typedef struct pe_group {
    uint32_t key_len;
    uint32_t n_events;
} pe_group;

/* Positions and state of a journal (pe_journal_status_get). */
typedef struct pe_journal_status {
    uint64_t written;     /* end of the last appended record */
    uint64_t acked;       /* end of what the durability mode acknowledges: FSYNC: fdatasynced;
                             OS, NONE: written */
    uint64_t durable;     /* end of what is known fdatasynced (NONE: where the journal opened) */
    uint64_t file_base;   /* base of the file being appended to */
    int32_t failed_errno; /* 0 unless FAILED */
    int32_t syncs_in_flight; /* fdatasyncs of the journal running now (0..2) */
} pe_journal_status;

/* Opens the journal file `dir`/<base as 20 decimal digits>.pej for appending at global position
 * `pos` (base + PE_FILE_HEADER_SIZE <= pos). If the file exists its header is checked (it must
 * be of format PE_FORMAT_VERSION: a caller with an older newest file starts a new one at its
 * end), it is cut to `pos` (the caller found the valid end with pe_scan) and, unless the mode is
 * NONE, fdatasynced with the directory: recovered bytes count as durable only once they are. If
 * it does not exist it is created with its header (pos must then be base +
 * PE_FILE_HEADER_SIZE) and synced with the directory. When an append would take the file past
 * roll_bytes (and the file holds at least one record) the journal rolls: it creates the next
 * file (synced with the directory), then ends the current one with a ROLL record (synced), and
 * goes on in the new file, whose base is the ROLL record's end. In PE_DURABILITY_FSYNC mode a
 * background thread fdatasyncs whatever was written (group commit: one fdatasync covers every
 * record appended before it started); in OS and NONE mode written data is acknowledged at once
 * and OS mode fdatasyncs in pe_journal_make_durable. Errors: PE_ERR_INVAL, PE_ERR_IO,
 * PE_ERR_NOMEM, PE_ERR_FORMAT, PE_ERR_CORRUPT. */
int pe_journal_open(const char *dir, uint64_t base, uint64_t pos, uint64_t roll_bytes,
                    int durability, pe_journal **out);

/* Frames one EVENTS record and appends it. Events are given grouped: groups[0..n_groups) in
 * order, sections[s] owning the next sections[s].n_groups groups; keys = the groups' keys back
 * to back (PE_NO_KEY groups contribute none); lens[i] = payload length of event i (events in
 * group order, n_events in all); payload = the payloads back to back (payload_len bytes).
 * The framed record is built in out_record (out_cap >= its size, which is
 * PE_RECORD_HEADER_SIZE + PE_EVENTS_HEADER_SIZE + writer_id_len
 * + n_sections * PE_SECTION_HEADER_SIZE + sum over groups of n_events * (PE_FRAME_HEADER_SIZE +
 * key bytes) + payload_len) so that the caller may keep it as an in-memory copy, then written
 * to the journal file. Out: *out_record_len, *out_pos (global position of the record), *out_end
 * (position after it), and the out fields of each section. Thread-safe: appends are serialised.
 * Errors: PE_ERR_INVAL (inconsistent counts, cap too small, key too long), PE_ERR_TOOBIG
 * (payload over PE_MAX_RECORD_PAYLOAD), PE_ERR_IO (write failed; nothing appended),
 * PE_ERR_FAILED. */
int pe_journal_append_events(pe_journal *j, const char *writer_id, uint32_t writer_id_len,
                             uint64_t first_seq, uint64_t last_seq, uint64_t timestamp_ns,
                             pe_section *sections, uint32_t n_sections, const pe_group *groups,
                             uint32_t n_groups, const char *keys, uint64_t keys_len,
                             const uint32_t *lens, uint32_t n_events, const char *payload,
                             uint64_t payload_len, char *out_record, uint64_t out_cap,
                             uint64_t *out_record_len, uint64_t *out_pos, uint64_t *out_end);

/* As pe_journal_append_events, but each event's payload is its own buffer (payloads[i], lens[i]
 * bytes) and is written from there (pwritev: no copy; the CRC is one read pass). Only the
 * headers, frame headers and keys are built, in out_head, whose capacity must be at least
 * PE_RECORD_HEADER_SIZE + PE_EVENTS_HEADER_SIZE + writer_id_len + n_sections *
 * PE_SECTION_HEADER_SIZE + sum over groups of n_events * (PE_FRAME_HEADER_SIZE + key bytes).
 * No in-memory copy of the record is made (for large events, read back from the page cache).
 * Errors as pe_journal_append_events. */
int pe_journal_append_events_v(pe_journal *j, const char *writer_id, uint32_t writer_id_len,
                               uint64_t first_seq, uint64_t last_seq, uint64_t timestamp_ns,
                               pe_section *sections, uint32_t n_sections, const pe_group *groups,
                               uint32_t n_groups, const char *keys, uint64_t keys_len,
                               const uint32_t *lens, const char *const *payloads,
                               uint32_t n_events, char *out_head, uint64_t out_head_cap,
                               uint64_t *out_pos, uint64_t *out_end);

/* Appends one record of type `type` (2..15: BYTES, MERGE and later types; not EVENTS, which is
 * built by pe_journal_append_events, nor ROLL, which the journal writes itself) with the given
 * payload. Errors as pe_journal_append_events. */
int pe_journal_append_record(pe_journal *j, uint32_t type, const char *payload, uint64_t len,
                             uint64_t *out_pos, uint64_t *out_end);

/* As pe_journal_append_record with the payload given in two parts, head (head_len bytes)
 * followed by body (body_len bytes), so a caller need not join them first. Errors as
 * pe_journal_append_record (PE_ERR_TOOBIG if head_len + body_len > PE_MAX_RECORD_PAYLOAD). */
int pe_journal_append_record2(pe_journal *j, uint32_t type, const char *head, uint64_t head_len,
                              const char *body, uint64_t body_len, uint64_t *out_pos,
                              uint64_t *out_end);

/* Appends one BYTES record: the write time (timestamp_ns, ns since the Unix epoch), a section
 * header (segment_uid, segment_offset, n_events, len, the CRC32C of data) and data[0..len),
 * written from the caller's buffer (no copy). The data starts PE_BYTES_DATA_OFFSET bytes after
 * *out_pos. Errors as pe_journal_append_events. */
int pe_journal_append_section(pe_journal *j, uint64_t segment_uid, uint64_t segment_offset,
                              uint32_t n_events, uint64_t timestamp_ns, const char *data,
                              uint64_t len, uint64_t *out_pos, uint64_t *out_end);

/* Waits until everything appended before global position `pos` is acknowledged under the
 * journal's mode (FSYNC: fdatasync completed; OS/NONE: written). timeout_ns < 0 waits without
 * limit. Releases no lock the appenders need. Errors: PE_ERR_TIMEOUT, PE_ERR_FAILED. */
int pe_journal_sync(pe_journal *j, uint64_t pos, int64_t timeout_ns);

/* Makes everything appended before `pos` durable whatever the mode, before metadata that
 * refers to it is committed: FSYNC waits for group commit; OS fdatasyncs the current file here
 * (one call at a time; a failure makes the journal FAILED, as in FSYNC mode); NONE does nothing.
 * Errors: PE_ERR_TIMEOUT, PE_ERR_FAILED, PE_ERR_IO (the fdatasync failed: now FAILED). */
int pe_journal_make_durable(pe_journal *j, uint64_t pos, int64_t timeout_ns);

/* Positions and state now. Errors: PE_ERR_INVAL. */
int pe_journal_status_get(pe_journal *j, pe_journal_status *out);

/* Puts the journal in the FAILED state with errno `err` (a failed sync elsewhere in the store:
 * metadata, a directory), so it appends and acknowledges nothing more. The first failure's
 * errno is kept. Errors: PE_ERR_INVAL. */
int pe_journal_fail(pe_journal *j, int32_t err);

/* Makes the next `countdown`-th call of the given kind (PE_FAULT_WRITE: the write of a record,
 * PE_FAULT_SYNC: an fdatasync or directory fsync) fail with errno `err` (countdown 1 = the next
 * one). Tests only. */
int pe_journal_inject_fault(pe_journal *j, int32_t which, int32_t err, int32_t countdown);

/* Makes a faulted fdatasync of the current file (PE_FAULT_SYNC, by the sync thread or a caller
 * leading a group commit) wait `delay_ns` (0..60 s) without the journal's mutex before it fails,
 * so a test can run another fdatasync beside it. Tests only. Errors: PE_ERR_INVAL. */
int pe_journal_inject_sync_delay(pe_journal *j, int64_t delay_ns);

/* Syncs (except in NONE mode), stops the sync thread, closes the file and frees the journal.
 * Always frees; returns the first error met. Passing NULL is allowed (PE_OK). */
int pe_journal_close(pe_journal *j);

/* ------------------------------------------------------------------ Arrow columns */

/* Sizes for pe_frames_to_columns: *out_payload_bytes = sum of payload_len[0..n), *out_key_bytes
 * = sum of key_len[i] over events that have a key, *out_key_nulls = events without a key.
 * Errors: PE_ERR_INVAL (NULL arrays with n > 0). */
int pe_frames_sizes(uint32_t n, const uint32_t *payload_len, const int32_t *key_len,
                    uint64_t *out_payload_bytes, uint64_t *out_key_bytes, uint32_t *out_key_nulls);

/* Fills the columns of one Arrow record batch from n frames parsed by pe_parse_frames on buf:
 * payload_data/payload_offsets (large_binary: n+1 offsets from 0), key_data/key_offsets
 * (large_string) with key_validity (Arrow bitmap, (n+7)/8 bytes, bit set = has a key; may be
 * NULL when no event lacks a key), segment_ids[i] = segment_id, offsets[i] = base_offset +
 * frame_off[i]. Capacities must be at least what pe_frames_sizes returned. Never reads outside
 * buf. Errors: PE_ERR_INVAL (a frame outside buf, capacity too small, NULL output). */
int pe_frames_to_columns(const char *buf, uint64_t len, uint32_t n, const uint32_t *frame_off,
                         const uint32_t *payload_len, const int32_t *key_len, int64_t segment_id,
                         int64_t base_offset, char *payload_data, uint64_t payload_cap,
                         int64_t *payload_offsets, char *key_data, uint64_t key_cap,
                         int64_t *key_offsets, uint8_t *key_validity, int64_t *segment_ids,
                         int64_t *offsets);

/* The inverse, for tier-2 row groups read back: n rows given as Arrow arrays with int32 offsets
 * (binary payloads: payload_offsets[0..n] into payload_data; string keys: key_offsets[0..n]
 * into key_data, key_validity an Arrow bitmap whose bit key_bit0 + i is row i's, NULL when
 * every row has a key; row_offsets[0..n) the rows' segment offsets) become event frames back
 * to back in out (out_cap bytes): u32 payload_len | u16 key_len (65535 = no key) | key |
 * payload. Checks that the rows cover the segment from row_offsets[0] back to back:
 * row_offsets[i] = row_offsets[0] + the bytes of the frames before row i. *out_len = the bytes
 * written. Never writes outside out; reads only what the offsets point at.
 * Errors: PE_ERR_INVAL (NULL arrays, n = 0, decreasing array offsets, out_cap too small),
 * PE_ERR_CORRUPT (a key of 65535 bytes or more, a payload of 4 GiB or more, a row not where
 * the frame before it ends). The arrays are not bounds-checked against their buffers: they must
 * be valid Arrow arrays of these types (pyarrow's, from a file whose schema was checked). */
int pe_columns_to_frames(uint32_t n, const int32_t *payload_offsets, const char *payload_data,
                         const int32_t *key_offsets, const char *key_data,
                         const uint8_t *key_validity, uint64_t key_bit0, const int64_t *row_offsets,
                         char *out, uint64_t out_cap, uint64_t *out_len);

/* The check of pe_columns_to_frames without building the frames (tier-2 rows served to readers
 * straight from their columns): the same arguments but out and out_cap; *out_len = the bytes
 * the rows' frames cover from row_offsets[0]. Errors: PE_ERR_INVAL (NULL arrays, n = 0,
 * decreasing array offsets), PE_ERR_CORRUPT (as pe_columns_to_frames). The arrays must be
 * valid Arrow arrays of these types. */
int pe_rows_check(uint32_t n, const int32_t *payload_offsets, const int32_t *key_offsets,
                  const uint8_t *key_validity, uint64_t key_bit0, const int64_t *row_offsets,
                  uint64_t *out_len);

/* ------------------------------------------------------------------ parquet pages */

/* Nesting of Thrift structs, lists and maps a page header may have (parquetpages.c). */
#define PE_PARQUET_MAX_DEPTH 16
/* pe_parquet_read_pages reads this many bytes at a time and checks their pages at once. */
#define PE_PARQUET_READ_BLOCK 262144
/* A page header longer than this is damage (pyarrow writes a few hundred bytes at most:
 * statistics are capped at 4 KiB), so a header is parsed again at most four times. */
#define PE_PARQUET_MAX_HEADER 1048576

/* A row group as a Parquet footer describes it (pe_parquet_footer_groups): the offset
 * column's min and max (from its statistics' min_value and max_value, 8-byte int64; has_stats
 * 0 when either is missing or of another size). */
typedef struct pe_parquet_group {
    int64_t first;
    int64_t last;
    uint32_t has_stats;
} pe_parquet_group;

/* Reads the row groups of a Parquet footer (FileMetaData in Thrift's compact protocol, len
 * bytes, nothing after it) without trusting it: each row group must have exactly n_cols
 * column chunks, each with its metadata; chunks[2 (i n_cols + j)] and [.. + 1] get column j
 * of group i's start (its dictionary page's offset when that comes first, else its first data
 * page's) and total_compressed_size, groups[i] column 0's statistics. *out_groups = the row
 * groups. Positions are not checked against the file (the caller knows its size). Errors:
 * PE_ERR_INVAL (NULL pointers, n_cols 0), PE_ERR_CORRUPT (a footer that does not parse, more
 * than groups_cap row groups, a group of another number of columns, negative sizes). */
int pe_parquet_footer_groups(const uint8_t *footer, uint64_t len, uint32_t n_cols,
                             pe_parquet_group *groups, uint32_t groups_cap, uint64_t *chunks,
                             uint32_t *out_groups);

/* CRC-32 (zlib's crc32, the Parquet page checksum: reflected 0xEDB88320, init ~0, final ~0).
 * `seed` is a previous result to continue a running checksum, or 0 to start. Uses PCLMULQDQ
 * when the CPU has it. pe_crc32("123456789", 9, 0) == 0xCBF43926. Errors: PE_ERR_INVAL (data
 * NULL with len > 0, out_crc NULL). */
int pe_crc32(const void *data, size_t len, uint32_t seed, uint32_t *out_crc);

/* Checks the pages of n_chunks Parquet column chunks in buf[0..buf_len): chunk i is the
 * chunks[2i + 1] bytes from position chunks[2i], pages back to back (PageHeader in Thrift's
 * compact protocol, then compressed_page_size bytes of data); every page must carry a crc
 * equal to the CRC-32 of its data and end within its chunk. *out_pages = the pages checked.
 * Errors: PE_ERR_INVAL (NULL pointers, a chunk outside buf), PE_ERR_CORRUPT (a page header
 * that does not parse, has no crc or overruns its chunk, or a CRC mismatch): *out_bad_pos is
 * then the position in buf of that page's header (written on PE_ERR_CORRUPT only). */
int pe_parquet_check_pages(const uint8_t *buf, uint64_t buf_len, const uint64_t *chunks,
                           uint32_t n_chunks, uint32_t *out_pages, uint64_t *out_bad_pos);

/* Reads bytes [lo, hi) of the file open as fd into buf[lo..hi) (buf_len >= hi; pread, so the
 * file position is untouched and threads may share fd), then checks the chunks' pages as
 * pe_parquet_check_pages (every chunk must lie within [lo, hi)). One call, so a Python caller
 * gives up the GIL once. Errors: PE_ERR_INVAL (bad arguments), PE_ERR_IO (pread failed; errno
 * set), PE_ERR_CORRUPT (as pe_parquet_check_pages, or the file ends before hi: *out_bad_pos
 * is then where it ends). */
int pe_parquet_read_pages(int32_t fd, uint8_t *buf, uint64_t buf_len, uint64_t lo, uint64_t hi,
                          const uint64_t *chunks, uint32_t n_chunks, uint32_t *out_pages,
                          uint64_t *out_bad_pos);

/* ------------------------------------------------------------------ files */

/* Starts writing back the dirty pages of the file open as fd, without waiting for them (Linux:
 * sync_file_range(SYNC_FILE_RANGE_WRITE) over the whole file; elsewhere it does nothing), so
 * that a later fsync of a file written in pieces has only its last piece left to wait for.
 * It makes nothing durable (only fsync does) and an error it reports is reported again by that
 * fsync. Errors: PE_ERR_INVAL (fd < 0), PE_ERR_IO (errno set: EBADF, EIO, ...). */
int pe_start_writeback(int32_t fd);
