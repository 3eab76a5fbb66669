// Package esc is the extent-status cache: per inode, an in-memory set of
// non-overlapping logical block ranges, each with a status, so the mapping
// layer does not walk the on-disk extent tree on every I/O. It mirrors the
// kernel's fs/ext4/extents_status.c (struct extent_status) with three
// deliberate differences: whole on-disk extents and whole holes are cached
// (see Tree.Fill), memory is bounded by a byte budget across all inodes, and
// lookups run in parallel under a per-inode read lock.
//
// esc never reads the disk; callers pass callbacks (LookupFunc, WalkFunc)
// that do.
//
// # Filling
//
// The cache holds what its callers put there. Tree.Fill answers a miss
// with one LookupFunc call and caches the whole extent or hole it returns;
// with Options.SkipInRoot it does not cache answers from an extent root
// stored in the inode itself, which cost no block read to find again.
// Tree.Precache loads a small tree whole (up to Options.PrecacheLimit
// extents), for callers that want that, for example when they open a
// file. Neither happens on its own: the ext4io package fills on misses
// only, caches in-root answers too unless its
// Options.Tuning.ExtentCacheSkipInRoot is set, and does not call Precache.
//
// # Entry layout
//
// Each cached range is one 16-byte btree item (entry), ordered by lblk:
//
//	offset  size  field
//	0       4     lblk   first logical block
//	4       4     len    number of blocks, >= 1
//	8       8     pst    bits 0..59: physical block of lblk (Written,
//	                     Unwritten; 0 otherwise); bits 60..63: Status
//
// With btree degree 18 an entry costs 26 to 39 bytes including the tree's
// nodes (TestBytesPerEntry keeps it under 64).
//
// # Invariants (checked by Tree.check in tests)
//
//   - I1 sorted, non-overlapping: for consecutive entries a, b:
//     a.lblk+a.len <= b.lblk.
//   - I2 bounded: len >= 1 and lblk+len <= MaxBlocks (EXT_MAX_BLOCKS).
//   - I3 maximal: no two adjacent entries are mergeable (a.end == b.lblk,
//     same status, and for Written/Unwritten b.pblk == a.pblk+a.len), so a
//     file with one on-disk extent is one entry however it was filled.
//   - I4 counters: the per-tree delayed-block count equals the sum of the
//     lengths of Delayed entries; the cache-wide entry, byte and delayed
//     counters equal the sums over live trees.
//   - I5 delayed ranges are never dropped except by Remove, Insert over them,
//     or Cache.Forget: they carry state no disk structure has.
//
// Merged entries may be longer than any on-disk extent (32768 initialized or
// 32767 unwritten blocks): the cache records block mapping, not on-disk
// extent boundaries.
//
// # Locking
//
// Lock order: Tree.mu, then a map shard's mutex, then Cache.lru.mu. Each
// may also be taken alone. The lookup path takes only one shard read lock
// (in Cache.Inode) and one Tree read lock; it marks the inode referenced with
// an atomic store and never touches the LRU lock. Statistics are atomic
// counters.
package esc
