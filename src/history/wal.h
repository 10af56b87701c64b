/* wal.h - the history write-ahead log: records in segment files, group commit, replay.
 *
 * The history writer appends batches of raw samples as opaque records, then makes them
 * durable with one wal_sync for many batches (group commit); only after wal_sync returns 0
 * may the producers of those records be acknowledged. Once the records of old segments are
 * in the store, wal_rotate + wal_drop_before delete them. At start, wal_replay hands every
 * intact record back, in append order. Format, guarantees and recovery rules:
 * docs/internals/history-wal.md.
 *
 * Threads: a struct wal is used by one thread at a time (the history writer); nothing here
 * touches a loop, and every call may block on disk I/O, so none runs on the loop thread.
 * Different directories are independent. One process at a time owns a directory: wal_open
 * and wal_replay lock it and fail with -EBUSY when another handle holds it, so in one
 * process call wal_replay before wal_open (or after wal_close).
 *
 * Errors: int functions return 0 or a negative errno code (-EINVAL, -ENOSPC, -EIO, ...).
 * A failed write or fdatasync is not retried, because after a failed fsync the kernel may
 * already have dropped the dirty pages and a second fsync could succeed without them: the
 * handle becomes "failed", and every later wal_append, wal_sync and wal_rotate returns the
 * code of that first failure until wal_recover succeeds (or the handle is closed and the
 * directory reopened). Records appended since the last successful wal_sync must then be
 * treated as not durable: wal_recover cuts them from the segment, so a replay never sees
 * them, and the caller appends again what it still wants logged. */
#ifndef OPSD_HISTORY_WAL_H
#define OPSD_HISTORY_WAL_H

#include <stddef.h>
#include <stdint.h>

#define WAL_RECORD_MAX (16u * 1024 * 1024) /* largest record payload, bytes */

struct wal;

/* What wal_replay found; every field counts over all segments of the directory. */
struct wal_replay_stats {
    uint64_t segments;      /* segment files read */
    uint64_t records;       /* intact records passed to fn */
    uint64_t bytes;         /* payload bytes passed to fn */
    uint64_t truncated;     /* segments whose tail was cut (torn or corrupt record) */
    uint64_t discarded;     /* bytes cut from those tails */
    uint64_t last_segment;  /* id of the last segment read; 0 when there was none */
    uint64_t retired;       /* segments left below the retirement mark: not read */
};

/* Opens the log in DIR, creating DIR (not its parents) when missing, removes leftovers of an
 * interrupted segment creation, notes the existing segments (for wal_bytes and
 * wal_drop_before) and starts a NEW segment for appends, with an id above every existing
 * one; an existing segment is never appended to. Replay (wal_replay) first: records in old
 * segments stay on disk until wal_drop_before deletes them.
 * On success *out is a handle the caller owns and frees with wal_close. On failure *out is
 * NULL, nothing is left open, and DIR holds no new segment (it may have been created):
 * -EBUSY another handle holds DIR; -ENOTDIR, -EACCES, -ENOSPC, ... from the file system. */
int wal_open(const char *dir, struct wal **out);

/* Writes and syncs what is still buffered (unless the handle has failed; a failure is
 * logged), closes the files, releases the lock and frees w. NULL is fine. */
void wal_close(struct wal *w);

/* Appends one record of len bytes (1 .. WAL_RECORD_MAX), copied before the call returns,
 * to the current segment. Not durable until wal_sync returns 0. Buffered data is written to
 * the file (without sync) when the buffer would pass its cap (4 MiB), so memory stays bounded
 * however much is appended between syncs.
 * -EINVAL when len is 0 or above WAL_RECORD_MAX, or rec is NULL: nothing changed, the
 * handle stays usable.
 * Any other code: writing the buffer failed (-ENOSPC, -EIO, -EFBIG, ...) or the handle had
 * already failed; the handle is failed and the record was not appended. */
int wal_append(struct wal *w, const void *rec, size_t len);

/* Writes what is buffered (coalesced, one write for the lot) and fdatasyncs the segment.
 * After 0, every record appended before the call survives kill -9 and power loss (as far
 * as the disk honours fdatasync). With nothing appended since the last sync it does no I/O.
 * On failure the handle is failed (see the top of this file) and returns that code. */
int wal_sync(struct wal *w);

/* Syncs, then starts a new segment and stores its id in *new_segment: the first segment
 * NOT covered by a checkpoint taken now. Once everything appended before the call is in
 * the store, wal_drop_before(w, *new_segment) deletes the older segments.
 * On failure *new_segment is 0: if the sync failed the handle is failed; if only creating
 * the new segment failed (-ENOSPC, ...), the current segment stays current and usable. */
int wal_rotate(struct wal *w, uint64_t *new_segment);

/* Brings a failed handle back once the cause is gone (space freed, ...): cuts the current
 * segment back to the end of the last successful wal_sync (durably), then starts a new
 * segment as wal_rotate does and stores its id in *new_segment. After 0 the handle takes
 * records again; the records appended since that sync are gone (never durable), so a
 * caller that keeps state derived from the log writes what a replay needs first (the
 * history writer: a whole carry). On failure *new_segment is 0 and the handle stays failed
 * with its first code; call again later (cheap: a truncate and a file creation). On a handle
 * that has not failed it is wal_rotate. */
int wal_recover(struct wal *w, uint64_t *new_segment);

/* 0, or the code of the failure that broke the handle (see the top of this file). */
int wal_error(const struct wal *w);

/* Retires every segment with an id below `segment`: from the return of 0 on, no replay reads
 * them, although their files stay until wal_drop_before deletes them. A small file (the mark)
 * is written beside the segments, synced and renamed, so it costs two syncs, and nothing when
 * `segment` is not above the mark already. Deleting many segments takes long (at gigabytes,
 * the file system discards their blocks): the caller retires them all at once, then deletes
 * them a few at a time, and a crash in between never leaves a replay that begins in the
 * middle of what was retired. -EINVAL when `segment` is above the current id. Works on a
 * failed handle too. */
int wal_retire_before(struct wal *w, uint64_t segment);

/* Retires (wal_retire_before) and deletes every segment with an id below `segment` (their
 * content is in the store), then syncs the directory. The current segment is never deleted:
 * -EINVAL when `segment` is above the current id. Works on a failed handle too (it only
 * removes old files). When retiring fails nothing is deleted; on a later error the segments
 * already deleted stay deleted, the others stay listed (and retired). */
int wal_drop_before(struct wal *w, uint64_t segment);

/* Id of the oldest live segment (the current one when there is no other), and in *next the
 * id of the one after it (the current id + 1 when it is the current one): deleting the
 * segments before *next deletes that one only. Owner's thread. */
uint64_t wal_oldest(const struct wal *w, uint64_t *next);

/* Reads every segment of DIR in id order, except those below the retirement mark
 * (wal_retire_before), and calls fn(ud, rec, len) for each intact record
 * (rec is valid only during the call). A segment ends at its first torn or corrupt record
 * (short header, short payload, length 0 or above WAL_RECORD_MAX, CRC mismatch): that is
 * expected at the tail of the last segment after a crash, and of a segment abandoned after
 * a failed write. The rest of that segment is logged (segment, offset, bytes) and truncated
 * (durably), so no later reader or writer ever sees it, and replay goes on with the next
 * segment. Records are replayed at least once: a segment already in the store but not yet
 * dropped when the process stopped is replayed again, so fn must tolerate duplicates.
 * A missing DIR is an empty log. st may be NULL; it is filled even on failure.
 * Returns 0; the first negative code fn returned (replay stops there, nothing of that
 * segment is truncated); -EBADMSG when a segment's header is bad (checked for every
 * segment before fn is first called, so fn is not called at all; move the file out of DIR
 * to start without it); -EBUSY when a handle holds DIR; -EIO, ... on a read error (nothing
 * is truncated on a read error). */
int wal_replay(const char *dir, int (*fn)(void *ud, const void *rec, size_t len), void *ud,
               struct wal_replay_stats *st);

/* Bytes of the live segments (on disk, plus the current one's buffered bytes), for metrics.
 * Any thread may call it while w is open (the count is kept in an atomic). */
uint64_t wal_bytes(const struct wal *w);

/* Id of the current segment (the one appends go to). Owner's thread. */
uint64_t wal_segment(const struct wal *w);

/* CRC-32C (Castagnoli), the checksum of records and headers; crc is 0 to start, or the
 * result of a previous call to continue. Uses the SSE4.2 instruction when the CPU has it. */
uint32_t wal_crc32c(uint32_t crc, const void *p, size_t n);

/* Test hooks, not for production code: the portable CRC-32C, and the current segment's file
 * descriptor (so a test can replace it with /dev/full or a closed descriptor). */
uint32_t wal__crc32c_sw(uint32_t crc, const void *p, size_t n);
int wal__fd(const struct wal *w);

#endif
