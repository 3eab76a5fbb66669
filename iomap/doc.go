// Package iomap is ext4io's generic mapping-based I/O engine, like Linux's
// fs/iomap: it knows mappings, not ext4. A filesystem supplies Ops (Begin
// and End, mirroring struct iomap_ops); iomap turns them into direct I/O,
// buffered I/O through a bounded write-back PageCache, fiemap, SEEK_DATA /
// SEEK_HOLE and zero range. ext4's normal, overwrite and report ops live
// above this package. iomap has no on-disk format of its own; a mapping
// relates file bytes to device bytes:
//
//	file   off ─────────────┬───────────── m.Offset+m.Length
//	       │ m.Offset       │ pos = off of this step
//	device ▼ m.Addr         ▼ m.Addr + (pos - m.Offset)   (Mapped, Unwritten)
//
// One step of every operation (Iter, mirroring iomap_iter):
//
//	m := Begin(pos, remaining, flags)   // M1-M4 checked, else ErrBadMapping
//	n := body(m, pos, min(m.End(), end) - pos)
//	End(pos, len, n, flags, m)          // always, with the bytes processed
//	pos += n                            // 0 without error: ErrNoProgress
//
// Invariants:
//   - I1 End follows every successful Begin, and sees only processed bytes.
//   - I2 Direct writes: EndIO (unwritten conversion) runs only for segments
//     whose data and zeroed partial blocks are on the device.
//   - I3 The PageCache never holds more than MaxPages pages; a dirty page
//     leaves the cache only after its write-back succeeded (or by
//     Invalidate/Forget/Close, which drop data on purpose).
//   - I4 Write-back copies a page and clears its dirty bit under the page's
//     content lock; a page re-dirtied during write-back is written again.
//   - I5 Pages under write-back are pinned: not evicted or invalidated until
//     End(Writeback) returned, so readers never see the device before the
//     end-of-writeback hook mapped it.
//
// Validity cookies: Ops that implement Validator get each buffered page
// operation's mapping checked under the page lock; a stale mapping (one
// changed by a concurrent write-back, including one this very operation
// triggered by evicting a dirty page) is dropped and Begin is called again.
// Without a Validator, callers must keep mappings stable for the duration
// of each call.
//
// Ops that implement Overwriter give DirectWrite and DirectRead a
// single-extent fast path: a request one flagless Mapped mapping covers
// is one device I/O, with no Begin or End call. DirectOverwrite is that
// path alone, for writes.
//
// The PageCache's metadata is sharded by file Key (see PageCache): I/O on
// different files takes different mutexes, and one atomic count keeps the
// page budget (I3) across the shards.
//
// Unfinished: COW (srcmap) and Unshare are not implemented; ZeroRange never
// uses the device's ZeroOut; write-back submits runs synchronously, one
// after another.
package iomap
