/* journal.c -- the write-ahead journal: file headers, records, scanning and appending.
 *
 * JOURNAL FILES
 *
 * The journal is a sequence of files in one directory. Every byte of the journal has a global
 * position; a file holds the positions [base, base + file size). A file is named
 *
 *     <base as 20 decimal digits, zero padded>.pej        e.g. 00000000000000000000.pej
 *
 * so the file offset of global position p is p - base. Each file starts with a 32-byte header,
 * so its first record is at base + 32. When a file would grow past the roll size the journal
 * continues in a new file whose base is the end position of the previous one (positions are
 * continuous across files).
 *
 * All multi-byte integers are little-endian.
 *
 * File header (32 bytes):
 *
 *   Offset  Size  Description
 *        0     8  Magic "PEJOURNL"
 *        8     4  Format version (1)
 *       12     4  Header size (32)
 *       16     8  Base: global journal position of the file's first byte
 *       24     4  Reserved (0)
 *       28     4  CRC32C of bytes 0..27
 *
 * Record header (24 bytes), followed by payload_len bytes of payload:
 *
 *   Offset  Size  Description
 *        0     4  CRC32C (seed 0) of bytes [4, 24 + payload_len) of the record, that is header
 *                 bytes 4..23 followed by the whole payload
 *        4     4  payload_len (at most PE_MAX_RECORD_PAYLOAD)
 *        8     8  Global position of this record (guards against stale data being read as valid)
 *       16     1  Type: 1 = EVENTS, 2 = BYTES, 3 = MERGE (their payloads are built and parsed in
 *                 Python: pravega_embedded/records.py, docs/format.md); 4..15 reserved for later
 *                 record types; 0 and 16..255 invalid
 *       17     1  Flags (0)
 *       18     2  Magic 0x4550 (the bytes 'P','E')
 *       20     4  Reserved (0)
 *
 * EVENTS payload (type 1):
 *
 *   Offset  Size  Description
 *        0     8  first_seq: writer sequence number of the first event batch in the record
 *        8     8  last_seq: writer sequence number of the last event batch in the record
 *       16     8  timestamp_ns: wall-clock time of the append (ns since the Unix epoch)
 *       24     4  n_sections
 *       28     2  writer_id_len (0..255)
 *       30     w  writer id bytes (w = writer_id_len)
 *     30+w     .  n_sections sections, back to back
 *
 * Section (24 bytes + frames): the events of one segment
 *
 *   Offset  Size  Description
 *        0     8  segment_uid
 *        8     8  segment_offset: segment offset of the section's first frame
 *       16     4  n_events
 *       20     4  n_bytes: length of the frames that follow
 *       24     .  n_events event frames (n_bytes bytes), layout in frames.c
 *
 * SCANNING AND RECOVERY
 *
 * A record is valid when its magic, position field, type (1..15), length (<=
 * PE_MAX_RECORD_PAYLOAD and inside the data) and CRC check. pe_scan walks valid records from a
 * record boundary; at the first invalid one it searches every later byte offset for a valid
 * record: none found -> a torn tail (a crash cut the last write); one found -> corruption.
 *
 * CONCURRENCY (pe_journal)
 *
 * One mutex (mu) serialises appends and guards every field of the journal. Records are built
 * and checksummed outside the mutex except for the position field and the CRC, which depend on
 * the position and are filled in under it. In FSYNC mode a sync thread does group commit: it
 * takes target = written and a reference to the current file under mu, fdatasyncs without mu,
 * then publishes synced = target. A file is closed only when it is retired (after a roll) and
 * no sync is using it (reference count), so the sync thread never fdatasyncs a closed or reused
 * descriptor. A roll (rare) runs under mu: fdatasync of the old file, creation of the new file
 * with its header, fdatasync of it and fsync of the directory.
 */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* Adaptive group commit (see gather_locked): how long and how much unsynced data the sync
 * thread lets gather when no flush is waiting. */
#define PE_SYNC_DELAY_NS 500000L
#define PE_SYNC_BATCH_BYTES (4u << 20)

/* ------------------------------------------------------------------ journal */

typedef struct pe_file {
    int fd;
    int refs;    /* syncs in progress using fd */
    int retired; /* no longer the current file: close when refs drops to 0 */
    uint64_t base;
} pe_file;

struct pe_journal {
    pthread_mutex_t mu;
    pthread_cond_t work_cv;   /* sync thread: written > synced or closing */
    pthread_cond_t synced_cv; /* CLOCK_MONOTONIC: synced advanced or failed */
    int dir_fd;
    int durability;
    uint64_t roll_bytes;
    pe_file *cur;
    uint64_t written;
    uint64_t synced;
    int32_t failed_errno;
    int closing;
    int sync_idle;    /* the sync thread is waiting on work_cv */
    int sync_waiters; /* threads in pe_journal_sync waiting for synced to advance */
    int have_thread;
    pthread_t thread;
    int32_t fault_countdown[3];
    int32_t fault_err[3];
};

static void file_name(uint64_t base, char out[32])
{
    snprintf(out, 32, "%020llu.pej", (unsigned long long)base);
}

static int pwrite_all(int fd, const char *p, uint64_t len, uint64_t off)
{
    while (len > 0) {
        size_t chunk = len > (uint64_t)1 << 30 ? (size_t)1 << 30 : (size_t)len;
        ssize_t w = pwrite(fd, p, chunk, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        p += w;
        len -= (uint64_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

static int pread_all(int fd, char *p, uint64_t len, uint64_t off, uint64_t *got)
{
    uint64_t done = 0;
    while (done < len) {
        ssize_t r = pread(fd, p + done, (size_t)(len - done), (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        done += (uint64_t)r;
    }
    *got = done;
    return 0;
}

/* Fault injection; called with mu held (or before the journal is shared). Returns the errno
 * to fake, or 0. */
static int fault_hit(pe_journal *j, int which)
{
    if (j->fault_countdown[which] > 0 && --j->fault_countdown[which] == 0)
        return j->fault_err[which];
    return 0;
}

/* fdatasync with fault injection. Must be called with mu held (for the fault counter). */
static int sync_fd_locked(pe_journal *j, int fd)
{
    int e = fault_hit(j, PE_FAULT_SYNC);
    if (e) {
        errno = e;
        return -1;
    }
    return fdatasync(fd);
}

static void file_release(pe_file *f)
{
    if (f->retired && f->refs == 0) {
        close(f->fd);
        free(f);
    }
}

/* Creates the file for `base` with its header. If do_sync, fdatasyncs it and fsyncs the
 * directory. On failure returns PE_ERR_IO (errno set, *sync_failed = 1 if an fsync failed)
 * and removes the file if it was created. */
static int create_file(pe_journal *j, uint64_t base, int do_sync, pe_file **out, int *sync_failed)
{
    char name[32], hdr[PE_FILE_HEADER_SIZE];
    file_name(base, name);
    *sync_failed = 0;
    pe_file *f = calloc(1, sizeof *f);
    if (f == NULL)
        return PE_ERR_NOMEM;
    int fd = openat(j->dir_fd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        free(f);
        errno = e;
        return PE_ERR_IO;
    }
    pe_file_header_build(base, hdr, sizeof hdr);
    int rc = pwrite_all(fd, hdr, sizeof hdr, 0);
    if (rc == 0 && do_sync) {
        rc = sync_fd_locked(j, fd);
        if (rc == 0) {
            int e = fault_hit(j, PE_FAULT_SYNC);
            if (e) {
                errno = e;
                rc = -1;
            } else {
                rc = fsync(j->dir_fd);
            }
        }
        if (rc != 0)
            *sync_failed = 1;
    }
    if (rc != 0) {
        int e = errno;
        close(fd);
        unlinkat(j->dir_fd, name, 0);
        free(f);
        errno = e;
        return PE_ERR_IO;
    }
    f->fd = fd;
    f->base = base;
    *out = f;
    return PE_OK;
}

static void set_failed_locked(pe_journal *j, int e)
{
    if (j->failed_errno == 0)
        j->failed_errno = e ? e : EIO;
    pthread_cond_broadcast(&j->synced_cv);
    pthread_cond_broadcast(&j->work_cv);
}

/* Rolls to a new file whose base is the current end. mu held. */
static int roll_locked(pe_journal *j)
{
    pe_file *old = j->cur;
    uint64_t end = j->written;
    if (j->durability != PE_DURABILITY_NONE) {
        if (sync_fd_locked(j, old->fd) != 0) {
            int e = errno;
            set_failed_locked(j, e);
            errno = e;
            return PE_ERR_IO;
        }
        if (end > j->synced) {
            j->synced = end;
            pthread_cond_broadcast(&j->synced_cv);
        }
    }
    pe_file *nf = NULL;
    int sync_failed = 0;
    int rc = create_file(j, end, j->durability != PE_DURABILITY_NONE, &nf, &sync_failed);
    if (rc != PE_OK) {
        int e = errno;
        if (sync_failed)
            set_failed_locked(j, e);
        errno = e;
        return rc; /* otherwise stay on the old file; the next append retries the roll */
    }
    old->retired = 1;
    file_release(old);
    j->cur = nf;
    /* The new file's first record goes after its header. The header is durable already (FSYNC
     * and OS: fdatasynced with the directory), and in NONE mode written counts as synced. */
    j->written = end + PE_FILE_HEADER_SIZE;
    j->synced = j->written;
    pthread_cond_broadcast(&j->synced_cv);
    return PE_OK;
}

/* Adaptive group commit. When nobody waits in pe_journal_sync (no flush is pending), let
 * unsynced data gather for up to PE_SYNC_DELAY_NS or PE_SYNC_BATCH_BYTES before the next
 * fdatasync: a stream of large appends then costs one device flush per few MiB instead of one
 * per record, while a waiting flush() is served at once. mu held; returns with mu held. */
static void gather_locked(pe_journal *j)
{
    if (j->sync_waiters > 0 || j->closing || j->written - j->synced >= PE_SYNC_BATCH_BYTES)
        return;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_nsec += PE_SYNC_DELAY_NS;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_nsec -= 1000000000L;
        deadline.tv_sec += 1;
    }
    while (j->sync_waiters == 0 && !j->closing && j->failed_errno == 0 &&
           j->written - j->synced < PE_SYNC_BATCH_BYTES) {
        j->sync_idle = 1;
        int rc = pthread_cond_timedwait(&j->work_cv, &j->mu, &deadline);
        j->sync_idle = 0;
        if (rc == ETIMEDOUT)
            break;
    }
}

static void *sync_main(void *arg)
{
    pe_journal *j = arg;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (j->failed_errno == 0 && j->written <= j->synced && !j->closing) {
            j->sync_idle = 1;
            pthread_cond_wait(&j->work_cv, &j->mu);
            j->sync_idle = 0;
        }
        if (j->failed_errno != 0 || j->written <= j->synced)
            break; /* failed, or closing with nothing left to sync */
        gather_locked(j);
        if (j->failed_errno != 0)
            break;
        uint64_t target = j->written;
        pe_file *f = j->cur;
        f->refs++;
        int e = fault_hit(j, PE_FAULT_SYNC);
        pthread_mutex_unlock(&j->mu);
        int rc;
        if (e) {
            rc = -1;
        } else {
            rc = fdatasync(f->fd);
            e = rc != 0 ? errno : 0;
        }
        pthread_mutex_lock(&j->mu);
        f->refs--;
        file_release(f);
        if (rc != 0) {
            set_failed_locked(j, e);
            break;
        }
        if (target > j->synced)
            j->synced = target;
        pthread_cond_broadcast(&j->synced_cv);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* Releases what pe_journal_open allocated besides the files: the directory fd (if open), the
 * condition variables, the mutex and the struct. */
static void journal_free(pe_journal *j)
{
    if (j->dir_fd >= 0)
        close(j->dir_fd);
    pthread_cond_destroy(&j->work_cv);
    pthread_cond_destroy(&j->synced_cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

int pe_journal_open(const char *dir, uint64_t base, uint64_t pos, uint64_t roll_bytes,
                    int durability, pe_journal **out)
{
    if (dir == NULL || out == NULL || roll_bytes == 0)
        return PE_ERR_INVAL;
    if (durability != PE_DURABILITY_FSYNC && durability != PE_DURABILITY_OS &&
        durability != PE_DURABILITY_NONE)
        return PE_ERR_INVAL;
    if (UINT64_MAX - base < PE_FILE_HEADER_SIZE || pos < base + PE_FILE_HEADER_SIZE)
        return PE_ERR_INVAL;

    pe_journal *j = calloc(1, sizeof *j);
    if (j == NULL)
        return PE_ERR_NOMEM;
    j->dir_fd = -1;
    j->durability = durability;
    j->roll_bytes = roll_bytes;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->work_cv, &ca);
    pthread_cond_init(&j->synced_cv, &ca);
    pthread_condattr_destroy(&ca);

    int rc = PE_OK, e = 0;
    pe_file *f = NULL;
    int fd = -1;

    j->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (j->dir_fd < 0) {
        rc = PE_ERR_IO;
        e = errno;
        goto fail;
    }
    char name[32];
    file_name(base, name);
    fd = openat(j->dir_fd, name, O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT) {
        rc = PE_ERR_IO;
        e = errno;
        goto fail;
    }
    if (fd < 0) {
        /* A new file: pos must be its first record. */
        if (pos != base + PE_FILE_HEADER_SIZE) {
            rc = PE_ERR_INVAL;
            goto fail;
        }
        int sync_failed = 0;
        rc = create_file(j, base, durability != PE_DURABILITY_NONE, &f, &sync_failed);
        if (rc != PE_OK) {
            e = errno;
            goto fail;
        }
    } else {
        char hdr[PE_FILE_HEADER_SIZE];
        uint64_t got = 0, hbase = 0;
        uint32_t version = 0;
        if (pread_all(fd, hdr, sizeof hdr, 0, &got) != 0) {
            rc = PE_ERR_IO;
            e = errno;
            goto fail;
        }
        if (got < sizeof hdr) {
            rc = PE_ERR_CORRUPT; /* shorter than its header */
            goto fail;
        }
        rc = pe_file_header_parse(hdr, sizeof hdr, &hbase, &version);
        if (rc != PE_OK)
            goto fail;
        if (hbase != base) {
            rc = PE_ERR_CORRUPT;
            goto fail;
        }
        struct stat st;
        if (fstat(fd, &st) != 0) {
            rc = PE_ERR_IO;
            e = errno;
            goto fail;
        }
        if ((uint64_t)st.st_size < pos - base) {
            rc = PE_ERR_INVAL; /* pos lies past the end of the file */
            goto fail;
        }
        if ((uint64_t)st.st_size > pos - base && ftruncate(fd, (off_t)(pos - base)) != 0) {
            rc = PE_ERR_IO;
            e = errno;
            goto fail;
        }
        f = calloc(1, sizeof *f);
        if (f == NULL) {
            rc = PE_ERR_NOMEM;
            goto fail;
        }
        f->fd = fd;
        f->base = base;
        fd = -1;
    }
    j->cur = f;
    j->written = pos;
    j->synced = pos;
    if (durability == PE_DURABILITY_FSYNC) {
        if (pthread_create(&j->thread, NULL, sync_main, j) != 0) {
            rc = PE_ERR_NOMEM;
            goto fail;
        }
        j->have_thread = 1;
    }
    *out = j;
    return PE_OK;

fail:
    if (fd >= 0)
        close(fd);
    if (f != NULL) {
        close(f->fd);
        free(f);
    }
    journal_free(j);
    errno = e;
    return rc;
}

/* Appends the record rec[0..total) (header filled in except position and CRC). Fills in the
 * position and CRC under the mutex, rolls if needed, writes. */
static int journal_commit(pe_journal *j, char *rec, uint64_t total, uint64_t *out_pos)
{
    pthread_mutex_lock(&j->mu);
    if (j->failed_errno != 0 || j->closing) {
        int e = j->failed_errno;
        pthread_mutex_unlock(&j->mu);
        errno = e;
        return PE_ERR_FAILED;
    }
    uint64_t size = j->written - j->cur->base;
    if (size > PE_FILE_HEADER_SIZE && (total > j->roll_bytes || size > j->roll_bytes - total)) {
        int rc = roll_locked(j);
        if (rc != PE_OK) {
            int e = errno;
            pthread_mutex_unlock(&j->mu);
            errno = e;
            return rc;
        }
    }
    uint64_t pos = j->written;
    uint64_t off = pos - j->cur->base;
    st64(rec + 8, pos);
    st32(rec, crc(rec + 4, (size_t)(total - 4)));
    int e = fault_hit(j, PE_FAULT_WRITE);
    if (e == 0 && pwrite_all(j->cur->fd, rec, total, off) != 0) {
        e = errno;
        if (ftruncate(j->cur->fd, (off_t)off) != 0)
            set_failed_locked(j, errno); /* the file's tail is unknown now */
    }
    if (e != 0) {
        pthread_mutex_unlock(&j->mu);
        errno = e;
        return PE_ERR_IO;
    }
    j->written = pos + total;
    if (j->durability == PE_DURABILITY_FSYNC) {
        if (j->sync_idle)
            pthread_cond_signal(&j->work_cv);
    } else {
        j->synced = j->written;
    }
    pthread_mutex_unlock(&j->mu);
    *out_pos = pos;
    return PE_OK;
}

static void record_header(char *rec, uint32_t type, uint64_t payload_len)
{
    memset(rec, 0, PE_RECORD_HEADER_SIZE);
    st32(rec + 4, (uint32_t)payload_len);
    rec[16] = (char)type;
    rec[17] = 0;
    st16(rec + 18, PE_RECORD_MAGIC);
}

int pe_journal_append_events(pe_journal *j, const char *writer_id, uint32_t writer_id_len,
                             uint64_t first_seq, uint64_t last_seq, uint64_t timestamp_ns,
                             pe_section *sections, uint32_t n_sections, const pe_group *groups,
                             uint32_t n_groups, const char *keys, uint64_t keys_len,
                             const uint32_t *lens, uint32_t n_events, const char *payload,
                             uint64_t payload_len, char *out_record, uint64_t out_cap,
                             uint64_t *out_record_len, uint64_t *out_pos, uint64_t *out_end)
{
    if (j == NULL || out_record_len == NULL || out_pos == NULL || out_end == NULL)
        return PE_ERR_INVAL;
    if ((writer_id == NULL && writer_id_len > 0) || (sections == NULL && n_sections > 0) ||
        (groups == NULL && n_groups > 0) || (keys == NULL && keys_len > 0) ||
        (lens == NULL && n_events > 0) || (payload == NULL && payload_len > 0) ||
        out_record == NULL)
        return PE_ERR_INVAL;
    if (writer_id_len > PE_MAX_WRITER_ID_LEN)
        return PE_ERR_INVAL;

    /* Validate the counts and compute the size of every section. */
    uint64_t rec_payload = (uint64_t)PE_EVENTS_HEADER_SIZE + writer_id_len;
    uint64_t g = 0, ev = 0, key_total = 0, len_total = 0;
    for (uint32_t s = 0; s < n_sections; s++) {
        if ((uint64_t)sections[s].n_groups > (uint64_t)n_groups - g)
            return PE_ERR_INVAL;
        uint64_t sec_events = 0, sec_bytes = 0;
        for (uint64_t ge = g + sections[s].n_groups; g < ge; g++) {
            uint32_t klen = groups[g].key_len;
            if (klen > PE_MAX_KEY_LEN && klen != PE_NO_KEY)
                return PE_ERR_INVAL;
            uint64_t kb = klen == PE_NO_KEY ? 0 : klen;
            key_total += kb;
            if ((uint64_t)groups[g].n_events > (uint64_t)n_events - ev)
                return PE_ERR_INVAL;
            for (uint64_t ee = ev + groups[g].n_events; ev < ee; ev++) {
                len_total += lens[ev];
                sec_bytes += PE_FRAME_HEADER_SIZE + kb + lens[ev];
                if (sec_bytes > PE_MAX_RECORD_PAYLOAD)
                    return PE_ERR_TOOBIG; /* also keeps the sums from overflowing */
            }
            sec_events += groups[g].n_events;
        }
        if (sec_events > UINT32_MAX)
            return PE_ERR_TOOBIG;
        rec_payload += PE_SECTION_HEADER_SIZE + sec_bytes;
        if (rec_payload > PE_MAX_RECORD_PAYLOAD)
            return PE_ERR_TOOBIG;
    }
    if (g != n_groups || ev != n_events || key_total != keys_len || len_total != payload_len)
        return PE_ERR_INVAL;
    if (payload_len > PE_MAX_RECORD_PAYLOAD || rec_payload > PE_MAX_RECORD_PAYLOAD)
        return PE_ERR_TOOBIG;
    uint64_t total = PE_RECORD_HEADER_SIZE + rec_payload;
    if (out_cap < total)
        return PE_ERR_INVAL;

    /* Build the record. */
    char *p = out_record;
    record_header(p, PE_RECORD_EVENTS, rec_payload);
    p += PE_RECORD_HEADER_SIZE;
    st64(p, first_seq);
    st64(p + 8, last_seq);
    st64(p + 16, timestamp_ns);
    st32(p + 24, n_sections);
    st16(p + 28, (uint16_t)writer_id_len);
    if (writer_id_len > 0)
        memcpy(p + 30, writer_id, writer_id_len);
    p += PE_EVENTS_HEADER_SIZE + writer_id_len;

    const char *kp = keys, *pp = payload;
    g = 0;
    ev = 0;
    for (uint32_t s = 0; s < n_sections; s++) {
        char *sh = p;
        char *fp = p + PE_SECTION_HEADER_SIZE;
        uint64_t sec_events = 0;
        for (uint64_t ge = g + sections[s].n_groups; g < ge; g++) {
            uint32_t klen = groups[g].key_len;
            uint32_t kb = klen == PE_NO_KEY ? 0 : klen;
            for (uint64_t ee = ev + groups[g].n_events; ev < ee; ev++) {
                uint32_t n = lens[ev];
                st32(fp, n);
                st16(fp + 4, (uint16_t)klen);
                fp += PE_FRAME_HEADER_SIZE;
                if (kb > 0) {
                    memcpy(fp, kp, kb);
                    fp += kb;
                }
                if (n > 0) {
                    memcpy(fp, pp, n);
                    fp += n;
                    pp += n;
                }
            }
            sec_events += groups[g].n_events;
            kp += kb;
        }
        uint64_t nb = (uint64_t)(fp - sh) - PE_SECTION_HEADER_SIZE;
        st64(sh, sections[s].segment_uid);
        st64(sh + 8, sections[s].segment_offset);
        st32(sh + 16, (uint32_t)sec_events);
        st32(sh + 20, (uint32_t)nb);
        p = fp;
    }

    uint64_t pos = 0;
    int rc = journal_commit(j, out_record, total, &pos);
    if (rc != PE_OK)
        return rc;

    /* Out fields of the sections. */
    uint64_t at = pos + PE_RECORD_HEADER_SIZE + PE_EVENTS_HEADER_SIZE + writer_id_len;
    for (uint32_t s = 0; s < n_sections; s++) {
        const char *sh = out_record + (at - pos);
        uint32_t nb = ld32(sh + 20);
        sections[s].n_events = ld32(sh + 16);
        sections[s].n_bytes = nb;
        sections[s].data_pos = at + PE_SECTION_HEADER_SIZE;
        at += PE_SECTION_HEADER_SIZE + (uint64_t)nb;
    }
    *out_record_len = total;
    *out_pos = pos;
    *out_end = pos + total;
    return PE_OK;
}

int pe_journal_append_record(pe_journal *j, uint32_t type, const char *payload, uint64_t len,
                             uint64_t *out_pos, uint64_t *out_end)
{
    return pe_journal_append_record2(j, type, payload, len, NULL, 0, out_pos, out_end);
}

int pe_journal_append_record2(pe_journal *j, uint32_t type, const char *head, uint64_t head_len,
                              const char *body, uint64_t body_len, uint64_t *out_pos,
                              uint64_t *out_end)
{
    if (j == NULL || out_pos == NULL || out_end == NULL || (head == NULL && head_len > 0) ||
        (body == NULL && body_len > 0))
        return PE_ERR_INVAL;
    if (type < 2 || type > PE_MAX_RECORD_TYPE)
        return PE_ERR_INVAL;
    if (head_len > PE_MAX_RECORD_PAYLOAD || body_len > PE_MAX_RECORD_PAYLOAD - head_len)
        return PE_ERR_TOOBIG;
    uint64_t len = head_len + body_len;
    uint64_t total = PE_RECORD_HEADER_SIZE + len;
    char *rec = malloc((size_t)total);
    if (rec == NULL)
        return PE_ERR_NOMEM;
    record_header(rec, type, len);
    if (head_len > 0)
        memcpy(rec + PE_RECORD_HEADER_SIZE, head, (size_t)head_len);
    if (body_len > 0)
        memcpy(rec + PE_RECORD_HEADER_SIZE + head_len, body, (size_t)body_len);
    uint64_t pos = 0;
    int rc = journal_commit(j, rec, total, &pos);
    int e = errno;
    free(rec);
    if (rc != PE_OK) {
        errno = e;
        return rc;
    }
    *out_pos = pos;
    *out_end = pos + total;
    return PE_OK;
}

int pe_journal_sync(pe_journal *j, uint64_t pos, int64_t timeout_ns)
{
    if (j == NULL)
        return PE_ERR_INVAL;
    struct timespec deadline = {0, 0};
    if (timeout_ns > 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        int64_t sec = timeout_ns / 1000000000;
        int64_t nsec = deadline.tv_nsec + timeout_ns % 1000000000;
        if (nsec >= 1000000000) {
            nsec -= 1000000000;
            sec++;
        }
        deadline.tv_sec += (time_t)sec;
        deadline.tv_nsec = (long)nsec;
    }
    pthread_mutex_lock(&j->mu);
    /* Only what was appended can become durable: never wait for future appends. */
    if (pos > j->written)
        pos = j->written;
    int rc;
    for (;;) {
        if (j->failed_errno != 0) {
            rc = PE_ERR_FAILED;
            break;
        }
        if (j->synced >= pos) {
            rc = PE_OK;
            break;
        }
        if (j->closing) {
            rc = PE_ERR_FAILED;
            break;
        }
        if (timeout_ns == 0) {
            rc = PE_ERR_TIMEOUT;
            break;
        }
        j->sync_waiters++;
        if (j->sync_idle)
            pthread_cond_signal(&j->work_cv); /* a flush is waiting: stop gathering */
        int timed_out = 0;
        if (timeout_ns < 0)
            pthread_cond_wait(&j->synced_cv, &j->mu);
        else
            timed_out = pthread_cond_timedwait(&j->synced_cv, &j->mu, &deadline) == ETIMEDOUT;
        j->sync_waiters--;
        if (timed_out) {
            rc = j->failed_errno ? PE_ERR_FAILED : j->synced >= pos ? PE_OK : PE_ERR_TIMEOUT;
            break;
        }
    }
    int e = j->failed_errno;
    pthread_mutex_unlock(&j->mu);
    if (rc == PE_ERR_FAILED)
        errno = e; /* 0 when closed */
    return rc;
}

int pe_journal_state(pe_journal *j, uint64_t *out_written, uint64_t *out_synced,
                     uint64_t *out_file_base, int32_t *out_failed_errno)
{
    if (j == NULL)
        return PE_ERR_INVAL;
    pthread_mutex_lock(&j->mu);
    if (out_written)
        *out_written = j->written;
    if (out_synced)
        *out_synced = j->synced;
    if (out_file_base)
        *out_file_base = j->cur->base;
    if (out_failed_errno)
        *out_failed_errno = j->failed_errno;
    pthread_mutex_unlock(&j->mu);
    return PE_OK;
}

int pe_journal_inject_fault(pe_journal *j, int32_t which, int32_t err, int32_t countdown)
{
    if (j == NULL || (which != PE_FAULT_WRITE && which != PE_FAULT_SYNC))
        return PE_ERR_INVAL;
    if (countdown > 0 && err <= 0)
        return PE_ERR_INVAL;
    pthread_mutex_lock(&j->mu);
    j->fault_countdown[which] = countdown > 0 ? countdown : 0; /* countdown <= 0: disarm */
    j->fault_err[which] = err;
    pthread_mutex_unlock(&j->mu);
    return PE_OK;
}

int pe_journal_close(pe_journal *j)
{
    if (j == NULL)
        return PE_OK;
    int rc = PE_OK, e = 0;
    pthread_mutex_lock(&j->mu);
    int was_failed = j->failed_errno != 0;
    j->closing = 1;
    pthread_cond_broadcast(&j->work_cv);
    pthread_cond_broadcast(&j->synced_cv);
    pthread_mutex_unlock(&j->mu);
    /* FSYNC: the sync thread makes a last fdatasync of everything written, then exits. */
    if (j->have_thread)
        pthread_join(j->thread, NULL);

    pthread_mutex_lock(&j->mu);
    if (was_failed) {
        rc = PE_ERR_FAILED;
        e = j->failed_errno;
    } else if (j->failed_errno != 0) {
        rc = PE_ERR_IO;
        e = j->failed_errno;
    } else if (j->durability == PE_DURABILITY_OS) {
        if (sync_fd_locked(j, j->cur->fd) != 0) {
            rc = PE_ERR_IO;
            e = errno;
            j->failed_errno = e;
        }
    }
    pe_file *f = j->cur;
    j->cur = NULL;
    f->retired = 1;
    file_release(f); /* no sync in progress any more: refs == 0 */
    pthread_mutex_unlock(&j->mu);

    journal_free(j);
    errno = e;
    return rc;
}
