/* files.c -- helpers for files outside the journal (the tier-2 copier's staged files).
 *
 * Nothing here writes bytes of its own: pe_start_writeback only asks the kernel to start
 * writing back pages a caller wrote (pe.h). */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sync_file_range (the build defines it already) */
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>

#include "pe.h"

int pe_start_writeback(int32_t fd) {
    if (fd < 0)
        return PE_ERR_INVAL;
#ifdef __linux__
    if (sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) != 0)
        return PE_ERR_IO;
#endif
    return PE_OK;
}
