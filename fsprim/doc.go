// Package fsprim is the glue between ext4io's lower packages for engines
// built on them without the root package: what the root package's Volume
// otherwise supplies.
//
//   - TreeAlloc is an extent.Allocator over an alloc.Allocator, counting
//     the blocks the tree adds to and removes from i_blocks.
//   - Lookup is an esc.LookupFunc over an extent.Tree: whole extents, and
//     holes bounded by the next extent and EXT_MAX_BLOCKS.
//   - JournalIO is an alloc.MetaIO and an extent.BlockIO over journal
//     handles: reads see the newest copy (running, committing or not yet
//     checkpointed transaction, then the device), writes go to the handle.
//     DirectIO is the same pair without a journal.
//   - FS holds the superblock and allocator and makes a file visible:
//     NewInode, WriteInode, ReadInode, Link (a name in a linear
//     directory), WriteSuperblock, and OpenJournal for the internal
//     journal.
//
// It sits beside iomap, above extent, esc, alloc, journal and layout, and
// never imports the root package. Locking is the caller's: the types here
// are thread-compatible unless they say otherwise, except TreeAlloc and
// DirectIO, which are safe for concurrent use when the allocator and
// device are.
//
// Not done: htree (dir_index) directories and growing a directory by a
// block (Link fails with ErrUnsupported and ErrNoSpace), inline data,
// orphan handling, and revoking freed tree blocks (TreeAlloc frees them at
// once: callers that journal must commit before those blocks are reused).
package fsprim
