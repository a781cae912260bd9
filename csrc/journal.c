/* journal.c -- the write-ahead journal: file headers, records, appending, syncing, rolling.
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
 * ends it with a ROLL record and continues in a new file whose base is the ROLL record's end
 * (positions are continuous across files).
 *
 * All multi-byte integers are little-endian.
 *
 * File header (32 bytes):
 *
 *   Offset  Size  Description
 *        0     8  Magic "PEJOURNL"
 *        8     4  Format version (3; files of versions 1 and 2 are still read: append.c)
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
 *       16     1  Type: 1 = EVENTS, 2 = BYTES, 3 = MERGE (their payloads are parsed in Python:
 *                 pravega_embedded/records.py, docs/format.md), 4 = ROLL (no payload: the file
 *                 ends here, the journal goes on in the file whose base is this record's end);
 *                 5..15 reserved for later record types; 0 and 16..255 invalid
 *       17     1  Flags: bit 0 (PE_FLAG_DURABLE) = bytes 20..23 hold the durable lag; others 0
 *       18     2  Magic 0x4550 (the bytes 'P','E')
 *       20     4  Durable lag L (flag bit 0 set): when this record was appended, every journal
 *                 byte before position (this record's position - L) was durable (fdatasynced).
 *                 Flag clear (durability NONE, a lag over 2^32 - 1, or a format-1 file): 0.
 *
 * The payloads of EVENTS and BYTES records (and the section header they share) are built in
 * append.c, whose top comment documents their layout; MERGE payloads are built in Python
 * (pravega_embedded/records.py). docs/format.md has every byte.
 *
 * SCANNING AND RECOVERY (records.c, pravega_embedded/journal.py)
 *
 * A record is valid when its magic, position field, type (1..15), length (<=
 * PE_MAX_RECORD_PAYLOAD and inside the data) and CRC check. pe_scan walks valid records from a
 * record boundary; at the first invalid one it searches every later byte offset for valid
 * records. Damage is corruption only if it lies before a position known to have been durable:
 * the metadata's applied position, or the highest durable mark (position - lag) of any valid
 * record. Damage beyond that is a torn tail: writes that were never synced reached the disk
 * partly or out of order (a power cut), and nothing after it was acknowledged.
 *
 * CONCURRENCY (pe_journal)
 *
 * One mutex (mu) serialises appends and guards every field of the journal. Records are built
 * and the CRC of their payload computed outside the mutex; the position and durable lag depend
 * on the append order and are filled in under it, and the record CRC is finished there from the
 * payload's CRC by pe_crc32c_combine (O(log n), no pass over the data). In FSYNC mode a sync
 * thread does group commit: it takes target = written and a reference to the current file under
 * mu, fdatasyncs without mu, then publishes synced = target. In OS mode pe_journal_make_durable
 * does the same in the calling thread, one call at a time. A caller leading its own group commit
 * may fdatasync while the sync thread does: a success is published only once no fdatasync is in
 * flight and none failed (publish_locked), since the kernel reports a write-back error to one
 * fdatasync only. A file is closed only when it is
 * retired (after a roll) and no sync is using it (reference count), so no fdatasync ever hits a
 * closed or reused descriptor. A roll (rare) runs under mu: creation of the new file with its
 * header, fdatasync of it and fsync of the directory, then the ROLL record at the end of the old
 * file and fdatasync of it. A crash before the ROLL record is durable leaves a new file that
 * holds no record, which recovery removes.
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
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "journal_internal.h"

/* Adaptive group commit (see gather_locked): how long and how much unsynced data the sync
 * thread lets gather when no flush is waiting. */
#define PE_SYNC_DELAY_NS 500000L
#define PE_SYNC_BATCH_BYTES (4u << 20)
/* While callers lead their own group commits, the sync thread holds back for this long after the
 * last one: a leader will cover what is written meanwhile, and a background fdatasync running
 * beside a leader's makes the leader wait for two device flushes instead of one. */
#define PE_LEAD_DEFER_NS 2000000L
#define PE_MAX_IOV 1024 /* IOV_MAX on Linux: a longer list is written in several calls */

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
    uint64_t written; /* end of the last appended record */
    uint64_t synced;  /* end of what is known fdatasynced */
    int32_t failed_errno;
    int closing;
    int sync_state;   /* what the sync thread waits for on work_cv: a SYNC_* value */
    int sync_waiters; /* threads in pe_journal_sync waiting for synced to advance */
    int leading;      /* a caller's thread is in an fdatasync (a flush leading its group, or
                         OS mode's make_durable): at most one at a time */
    int64_t last_lead_ns; /* CLOCK_MONOTONIC end of the last leader's fdatasync, 0 if none */
    int have_thread;
    pthread_t thread;
    int syncs_in_flight; /* fdatasyncs running without mu (sync thread, leader): at most 2 */
    uint64_t sync_done;  /* highest target an fdatasync reached; published as synced only once no
                            other fdatasync is in flight and none failed (see publish_locked) */
    int32_t fault_countdown[3];
    int32_t fault_err[3];
    int64_t fault_delay_ns; /* tests: a faulted fdatasync waits this long before it fails */
};

/* sync_state: who must signal work_cv. Appends wake an IDLE thread, and a GATHERING one once a
 * batch is full; a flush that waits wakes a GATHERING or DEFERRING one; close wakes any. */
enum { SYNC_RUNNING = 0, SYNC_IDLE, SYNC_GATHERING, SYNC_DEFERRING };

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

/* Writes the iovecs (modified as it goes) at file offset off, retrying short writes. */
static int pwritev_all(int fd, struct iovec *iov, int n, uint64_t off)
{
    while (n > 0) {
        ssize_t w = pwritev(fd, iov, n > PE_MAX_IOV ? PE_MAX_IOV : n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        off += (uint64_t)w;
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
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

/* Publishes that everything before `target` is fdatasynced. Linux reports a write-back error to
 * one fdatasync only: while another fdatasync of the journal runs, a success may hide that the
 * other one failed (and the pages it could not write were dropped), so a success is kept in
 * sync_done and becomes `synced` only when no fdatasync is in flight and the journal has not
 * failed. mu held. */
static void publish_locked(pe_journal *j, uint64_t target)
{
    if (target > j->sync_done)
        j->sync_done = target;
    if (j->failed_errno != 0 || j->syncs_in_flight > 0 || j->sync_done <= j->synced)
        return;
    j->synced = j->sync_done;
    pthread_cond_broadcast(&j->synced_cv);
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

/* fsync of the journal directory, with fault injection. mu held. */
static int sync_dir_locked(pe_journal *j)
{
    int e = fault_hit(j, PE_FAULT_SYNC);
    if (e) {
        errno = e;
        return -1;
    }
    return fsync(j->dir_fd);
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
        if (rc == 0)
            rc = sync_dir_locked(j);
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

static uint64_t acked_locked(const pe_journal *j)
{
    return j->durability == PE_DURABILITY_FSYNC ? j->synced : j->written;
}

void pe__record_header(char *rec, uint32_t type, uint64_t payload_len)
{
    memset(rec, 0, PE_RECORD_HEADER_SIZE);
    st32(rec + 4, (uint32_t)payload_len);
    rec[16] = (char)type;
    rec[17] = 0;
    st16(rec + 18, PE_RECORD_MAGIC);
}

/* Fills in the position, the durable lag and the CRC of the record header hdr[0..24) at `pos`,
 * given body_crc = CRC32C of the payload (payload_len bytes). mu held. */
static void seal_header_locked(const pe_journal *j, char *hdr, uint64_t pos, uint32_t body_crc)
{
    st64(hdr + 8, pos);
    uint64_t lag = pos - j->synced;
    if (j->durability != PE_DURABILITY_NONE && j->synced <= pos && lag <= UINT32_MAX) {
        hdr[17] = (char)PE_FLAG_DURABLE;
        st32(hdr + 20, (uint32_t)lag);
    } else {
        hdr[17] = 0;
        st32(hdr + 20, 0);
    }
    st32(hdr, crc_cat(crc(hdr + 4, PE_RECORD_HEADER_SIZE - 4), body_crc, ld32(hdr + 4)));
}

/* Rolls to a new file: creates it (base = the end of the ROLL record about to be written),
 * then writes the ROLL record at the end of the current file. mu held. */
static int roll_locked(pe_journal *j)
{
    pe_file *old = j->cur;
    uint64_t at = j->written;
    uint64_t nbase = at + PE_RECORD_HEADER_SIZE;
    int do_sync = j->durability != PE_DURABILITY_NONE;
    pe_file *nf = NULL;
    int sync_failed = 0;
    int rc = create_file(j, nbase, do_sync, &nf, &sync_failed);
    if (rc != PE_OK) {
        int e = errno;
        if (sync_failed)
            set_failed_locked(j, e);
        errno = e;
        return rc; /* otherwise stay on the old file; the next append retries the roll */
    }
    char roll[PE_RECORD_HEADER_SIZE];
    pe__record_header(roll, PE_RECORD_ROLL, 0);
    seal_header_locked(j, roll, at, 0);
    int e = fault_hit(j, PE_FAULT_WRITE);
    if (e == 0 && pwrite_all(old->fd, roll, sizeof roll, at - old->base) != 0)
        e = errno;
    if (e != 0) {
        /* Undo: the new file goes, the old one keeps its end. */
        char name[32];
        file_name(nbase, name);
        close(nf->fd);
        free(nf);
        if (unlinkat(j->dir_fd, name, 0) != 0 || (do_sync && sync_dir_locked(j) != 0) ||
            ftruncate(old->fd, (off_t)(at - old->base)) != 0)
            set_failed_locked(j, errno);
        errno = e;
        return PE_ERR_IO;
    }
    if (do_sync && sync_fd_locked(j, old->fd) != 0) {
        e = errno;
        set_failed_locked(j, e);
        errno = e;
        return PE_ERR_IO;
    }
    old->retired = 1;
    file_release(old);
    j->cur = nf;
    j->written = nbase + PE_FILE_HEADER_SIZE;
    if (do_sync) /* the old file is fdatasynced to its end, the new file's header too */
        publish_locked(j, j->written);
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
        j->sync_state = SYNC_GATHERING;
        int rc = pthread_cond_timedwait(&j->work_cv, &j->mu, &deadline);
        j->sync_state = SYNC_RUNNING;
        if (rc == ETIMEDOUT)
            break;
    }
}

/* One fdatasync of the current file up to what is written now, without mu during the call;
 * publishes synced on success, FAILED on failure. mu held; returns with mu held. */
static int sync_once_locked(pe_journal *j)
{
    uint64_t target = j->written;
    pe_file *f = j->cur;
    f->refs++;
    j->syncs_in_flight++;
    int e = fault_hit(j, PE_FAULT_SYNC);
    int64_t delay = e ? j->fault_delay_ns : 0;
    pthread_mutex_unlock(&j->mu);
    int rc;
    if (e) {
        if (delay > 0) {
            struct timespec d = {(time_t)(delay / 1000000000LL), (long)(delay % 1000000000LL)};
            nanosleep(&d, NULL);
        }
        rc = -1;
    } else {
        rc = fdatasync(f->fd);
        e = rc != 0 ? errno : 0;
    }
    pthread_mutex_lock(&j->mu);
    j->syncs_in_flight--;
    f->refs--;
    file_release(f);
    if (rc != 0) {
        set_failed_locked(j, e);
        errno = e;
        return -1;
    }
    if (j->failed_errno != 0) { /* another fdatasync failed meanwhile: this success proves nothing */
        errno = j->failed_errno;
        return -1;
    }
    publish_locked(j, target);
    return 0;
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Holds the sync thread back while flushing callers lead (see PE_LEAD_DEFER_NS): returns 1 after
 * waiting (the caller looks again), 0 when the sync thread should sync now. Nobody waiting in a
 * flush and not closing: a waiter or close ends the wait at once. mu held; returns with mu held. */
static int defer_to_leaders_locked(pe_journal *j)
{
    if (j->closing || j->sync_waiters > 0 || j->last_lead_ns == 0)
        return 0;
    int64_t until = j->last_lead_ns + PE_LEAD_DEFER_NS;
    if (now_ns() >= until)
        return 0;
    struct timespec deadline = {(time_t)(until / 1000000000LL), (long)(until % 1000000000LL)};
    j->sync_state = SYNC_DEFERRING;
    pthread_cond_timedwait(&j->work_cv, &j->mu, &deadline);
    j->sync_state = SYNC_RUNNING;
    return 1;
}

static void *sync_main(void *arg)
{
    pe_journal *j = arg;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        if (j->failed_errno != 0)
            break;
        if (defer_to_leaders_locked(j))
            continue; /* callers lead: appends meanwhile need not wake this thread */
        if (j->written <= j->synced) {
            if (j->closing)
                break; /* nothing left to sync */
            j->sync_state = SYNC_IDLE;
            pthread_cond_wait(&j->work_cv, &j->mu);
            j->sync_state = SYNC_RUNNING;
            continue;
        }
        gather_locked(j);
        if (j->failed_errno != 0)
            break;
        if (j->leading && !j->closing) {
            /* a flush is syncing in its own thread: do not flush the device twice; look again
             * when it is done */
            pthread_cond_wait(&j->synced_cv, &j->mu);
            continue;
        }
        if (j->written <= j->synced)
            continue; /* a leader synced it meanwhile: nothing to flush */
        if (sync_once_locked(j) != 0)
            break;
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

/* Opens the existing file `name` for appending at file offset `at`: checks its header (current
 * format only), cuts it to `at`, and unless do_sync is 0 makes it and the directory durable. */
static int reopen_file(pe_journal *j, int fd, uint64_t base, uint64_t at, int do_sync,
                       pe_file **out, int *err)
{
    char hdr[PE_FILE_HEADER_SIZE];
    uint64_t got = 0, hbase = 0;
    uint32_t version = 0;
    *err = 0;
    if (pread_all(fd, hdr, sizeof hdr, 0, &got) != 0) {
        *err = errno;
        return PE_ERR_IO;
    }
    if (got < sizeof hdr)
        return PE_ERR_CORRUPT; /* shorter than its header */
    int rc = pe_file_header_parse(hdr, sizeof hdr, &hbase, &version);
    if (rc != PE_OK)
        return rc;
    if (hbase != base)
        return PE_ERR_CORRUPT;
    if (version != PE_FORMAT_VERSION)
        return PE_ERR_FORMAT; /* never append to an older file (the caller starts a new one) */
    struct stat st;
    if (fstat(fd, &st) != 0) {
        *err = errno;
        return PE_ERR_IO;
    }
    if ((uint64_t)st.st_size < at)
        return PE_ERR_INVAL; /* pos lies past the end of the file */
    if ((uint64_t)st.st_size > at && ftruncate(fd, (off_t)at) != 0) {
        *err = errno;
        return PE_ERR_IO;
    }
    if (do_sync && (sync_fd_locked(j, fd) != 0 || sync_dir_locked(j) != 0)) {
        *err = errno;
        return PE_ERR_IO;
    }
    pe_file *f = calloc(1, sizeof *f);
    if (f == NULL)
        return PE_ERR_NOMEM;
    f->fd = fd;
    f->base = base;
    *out = f;
    return PE_OK;
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
    int do_sync = durability != PE_DURABILITY_NONE;

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
        rc = create_file(j, base, do_sync, &f, &sync_failed);
        if (rc != PE_OK) {
            e = errno;
            goto fail;
        }
    } else {
        rc = reopen_file(j, fd, base, pos - base, do_sync, &f, &e);
        if (rc != PE_OK)
            goto fail;
        fd = -1;
    }
    j->cur = f;
    j->written = pos;
    j->synced = pos; /* NONE: not really, but NONE never claims durability (no durable lag) */
    j->sync_done = pos;
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

int pe__journal_commit(pe_journal *j, struct iovec *iov, int n, uint64_t total,
                       uint32_t body_crc, uint64_t *out_pos)
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
    seal_header_locked(j, (char *)iov[0].iov_base, pos, body_crc);
    int e = fault_hit(j, PE_FAULT_WRITE);
    if (e == 0 && pwritev_all(j->cur->fd, iov, n, off) != 0) {
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
    if (j->sync_state == SYNC_IDLE ||
        (j->sync_state == SYNC_GATHERING && j->written - j->synced >= PE_SYNC_BATCH_BYTES))
        pthread_cond_signal(&j->work_cv);
    pthread_mutex_unlock(&j->mu);
    *out_pos = pos;
    return PE_OK;
}

/* The CLOCK_MONOTONIC deadline timeout_ns from now (timeout_ns > 0). */
static struct timespec deadline_in(int64_t timeout_ns)
{
    struct timespec d;
    clock_gettime(CLOCK_MONOTONIC, &d);
    int64_t sec = timeout_ns / 1000000000;
    int64_t nsec = d.tv_nsec + timeout_ns % 1000000000;
    if (nsec >= 1000000000) {
        nsec -= 1000000000;
        sec++;
    }
    d.tv_sec += (time_t)sec;
    d.tv_nsec = (long)nsec;
    return d;
}

/* Waits (mu held) until pos is acknowledged (durable = 0) or fdatasynced (durable = 1).
 *
 * Leader-based group commit: a waiter that may lead (FSYNC mode without a timeout, or an OS-mode
 * durable wait) and finds no other caller in an fdatasync does the fdatasync itself, in its own
 * thread, for everything written so far; the others wait for it and the next one leads if they
 * are still not covered. A leader does not wait for a background sync in flight: fdatasync makes
 * everything written before the call durable (pages under writeback included), so two in flight
 * each publish their own target, and the kernel may fold them into one journal commit. This
 * saves the two thread hand-overs of waking the sync thread and being woken by it. */
static int wait_locked(pe_journal *j, uint64_t pos, int64_t timeout_ns, int durable)
{
    struct timespec deadline = {0, 0};
    if (timeout_ns > 0)
        deadline = deadline_in(timeout_ns);
    int may_lead = (j->durability == PE_DURABILITY_FSYNC && timeout_ns < 0) ||
                   (j->durability == PE_DURABILITY_OS && durable);
    for (;;) {
        if (j->failed_errno != 0)
            return PE_ERR_FAILED;
        uint64_t have = durable ? j->synced : acked_locked(j);
        if (have >= pos)
            return PE_OK;
        if (j->closing)
            return PE_ERR_FAILED;
        /* an fdatasync that already covers pos and waits to be published needs no other */
        if (may_lead && !j->leading && j->sync_done < pos) {
            j->leading = 1;
            int rc = sync_once_locked(j);
            j->leading = 0;
            j->last_lead_ns = now_ns();
            pthread_cond_broadcast(&j->synced_cv); /* the sync thread may wait for leading = 0 */
            if (rc != 0)
                return PE_ERR_IO;
            continue;
        }
        if (timeout_ns == 0)
            return PE_ERR_TIMEOUT;
        j->sync_waiters++;
        if (j->sync_state == SYNC_GATHERING || j->sync_state == SYNC_DEFERRING)
            pthread_cond_signal(&j->work_cv); /* a flush is waiting: sync now */
        int timed_out = 0;
        if (timeout_ns < 0)
            pthread_cond_wait(&j->synced_cv, &j->mu);
        else
            timed_out = pthread_cond_timedwait(&j->synced_cv, &j->mu, &deadline) == ETIMEDOUT;
        j->sync_waiters--;
        if (timed_out) {
            have = durable ? j->synced : acked_locked(j);
            return j->failed_errno ? PE_ERR_FAILED : have >= pos ? PE_OK : PE_ERR_TIMEOUT;
        }
    }
}

static int journal_wait(pe_journal *j, uint64_t pos, int64_t timeout_ns, int durable)
{
    if (j == NULL)
        return PE_ERR_INVAL;
    pthread_mutex_lock(&j->mu);
    /* Only what was appended can become durable: never wait for future appends. */
    if (pos > j->written)
        pos = j->written;
    int rc = PE_OK;
    if (!(durable && j->durability == PE_DURABILITY_NONE))
        rc = wait_locked(j, pos, timeout_ns, durable);
    else if (j->failed_errno != 0)
        rc = PE_ERR_FAILED;
    int e = j->failed_errno;
    pthread_mutex_unlock(&j->mu);
    if (rc == PE_ERR_FAILED || rc == PE_ERR_IO)
        errno = e; /* 0 when closed */
    return rc;
}

int pe_journal_sync(pe_journal *j, uint64_t pos, int64_t timeout_ns)
{
    return journal_wait(j, pos, timeout_ns, 0);
}

int pe_journal_make_durable(pe_journal *j, uint64_t pos, int64_t timeout_ns)
{
    return journal_wait(j, pos, timeout_ns, 1);
}

int pe_journal_status_get(pe_journal *j, pe_journal_status *out)
{
    if (j == NULL || out == NULL)
        return PE_ERR_INVAL;
    pthread_mutex_lock(&j->mu);
    out->written = j->written;
    out->acked = acked_locked(j);
    out->durable = j->synced;
    out->file_base = j->cur->base;
    out->failed_errno = j->failed_errno;
    out->syncs_in_flight = j->syncs_in_flight;
    pthread_mutex_unlock(&j->mu);
    return PE_OK;
}

int pe_journal_fail(pe_journal *j, int32_t err)
{
    if (j == NULL)
        return PE_ERR_INVAL;
    pthread_mutex_lock(&j->mu);
    set_failed_locked(j, err > 0 ? err : EIO);
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

int pe_journal_inject_sync_delay(pe_journal *j, int64_t delay_ns)
{
    if (j == NULL || delay_ns < 0 || delay_ns > 60 * 1000000000LL)
        return PE_ERR_INVAL;
    pthread_mutex_lock(&j->mu);
    j->fault_delay_ns = delay_ns;
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
    while (j->leading) /* a caller's fdatasync still in flight */
        pthread_cond_wait(&j->synced_cv, &j->mu);
    if (was_failed) {
        rc = PE_ERR_FAILED;
        e = j->failed_errno;
    } else if (j->failed_errno != 0) {
        rc = PE_ERR_IO;
        e = j->failed_errno;
    } else if (j->durability == PE_DURABILITY_OS && j->written > j->synced) {
        if (sync_fd_locked(j, j->cur->fd) != 0) {
            rc = PE_ERR_IO;
            e = errno;
            j->failed_errno = e;
        } else {
            j->synced = j->written;
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
