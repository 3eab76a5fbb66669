// Package ext4io is an ext4-compatible block-mapping and I/O engine: what
// the Linux kernel's ext4 does for block mapping and I/O, as a Go library,
// on real ext4 images that e2fsck accepts and Linux mounts.
//
// A Volume is an ext4 filesystem on a [blockdev.Device] (an image file, a
// block device, an O_DIRECT or mmap backend, or memory). Open validates the
// superblock and group descriptors and refuses features it cannot handle,
// naming them. Files are opened by path; [File.ReadAt] reads through the
// extent tree (or the ext2/ext3 block map, or inline data), returning
// zeroes for holes and for unwritten (preallocated) extents. [Volume.FS]
// is an io/fs view, so fs.WalkDir, http.FS and testing/fstest work on an
// image. [Format] creates a new filesystem.
//
// Volume and File follow the os package: [Volume.OpenFile] takes os's
// flags (and [O_DIRECT]), [Volume.Create] truncates, Remove, RemoveAll,
// MkdirAll, ReadFile and WriteFile do what os's do, and a File has a
// position shared by Read, Write and Seek, ReadFrom and WriteTo for
// io.Copy, Name, Chmod and Chown. Errors are os's: an *fs.PathError with
// the op and the path as given, matching the syscall.Errno os would report
// (errors.Is(err, syscall.ENOTDIR), errors.Is(err, fs.ErrNotExist)).
// [FileSystem] is that surface as an interface, implemented by
// [Volume.FileSystem] and, on a host directory, by [OSFileSystem], so one
// test runs on both.
//
// # Basics
//
// The library is a stack of packages, each usable on its own:
//
//	blockdev            Device interface; file, O_DIRECT, mmap, memory backends;
//	                    fault injection and crash simulation (errordev)
//	layout              ext4 on-disk structures and checksums (no I/O)
//	alloc, journal      block/inode allocation on ext4 bitmaps; jbd2 journal
//	extent <-> esc      on-disk extent tree; in-memory extent-status cache
//	iomap               Begin/End mapping ops, direct and buffered I/O
//	fsprim              glue for engines built on the packages above
//	                    without this one (allocator, lookup, journal I/O,
//	                    inodes and directory entries)
//	ext4io (this)       Volume, File, Format: wires the layers together
//
// Lower packages never import higher ones. ext4's own iomap ops are
// public (File.NormalOps, File.OverwriteOps, File.ReportOps, with
// File.LockIO for the lock each expects), and ext4iotest holds the test
// oracles (e2fsck, debugfs, mount) and a crash-point sweep.
//
// # Caveats
//
// Writable volumes (Options.Writable) journal every metadata change
// through jbd2 (when the filesystem has a journal): an operation's changes
// commit together, File.Sync waits for the commit, and Close checkpoints.
// Data is written to the device before the metadata that maps it commits.
// Writes without Direct go through a bounded page cache with delayed
// allocation (Options.PageCacheBytes): they reserve blocks and change no
// metadata; write-back (File.Sync, Volume.Sync, a flusher after
// Options.WritebackAge, memory pressure) allocates, writes and maps them,
// and only then moves the on-disk size. Allocations of 16 blocks or more
// are placed on blocks aligned as their logical blocks (up to 1 MiB), and
// write-back cuts its runs at 1 MiB of the file, so large files reach the
// device in aligned runs. Direct I/O (Volume.OpenFile with
// O_DIRECT) goes to the device through iomap ops with ext4's fast paths:
// overwrites take the inode lock shared, no journal handle and not even
// the transaction gate (a device error fails such a write alone: no
// metadata changed, so the volume stays writable), and defer the mtime
// update to File.Sync or Volume.Close. Like ext4, which takes these times
// from the kernel's coarse clock, they do not read the clock per write: a
// write stamps its inode with an epoch that a ticker ends every 10 ms,
// and the time is the epoch's end, never before the write started and
// about 10 ms after it at most (touchclock.go). Writes
// into preallocated space convert exactly what they write, or with
// Options.Tuning.ZeroOutChunk zero and convert whole chunks so that later writes
// there are overwrites.
//
// Direct I/O is synchronous: each ReadAt or WriteAt blocks its goroutine
// in pread or pwrite, and a goroutine blocked in a system call keeps its P
// until the Go runtime retakes it. With GOMAXPROCS at a small CPU count,
// many goroutines therefore keep fewer I/Os in flight than they issue; a
// program that wants N concurrent I/Os on a fast device should run with
// GOMAXPROCS of about N (on a 2-CPU machine, 16 goroutines doing 4 KiB
// direct writes reach ~40k IOPS with GOMAXPROCS 2 and ~85k with 16; the
// same holds for raw pwrite).
// Extended attributes (Volume.Getxattr, Setxattr, Listxattr, Removexattr,
// their L- variants and the File methods) are stored as ext4 stores
// them: in the inode body when they fit, else in one external block that
// inodes with identical sets share with a reference count (xattr.go).
// POSIX ACLs are converted between ext4's form and the xattr ABI form.
//
// A volume whose journal needs recovery is replayed by Open (in memory for
// read-only opens) unless Options.NoRecovery is set; the fast commits Linux
// logged after the last full commit are replayed with it (fcreplay.go).
//
// On a filesystem with multiple mount protection (mmp), a writable or
// replaying Open runs the protocol of Linux and e2fsprogs first (at least
// 11 s; ErrBusy while someone else has it) and a goroutine updates the
// MMP block until Close (mmp.go). Read-only opens skip it, as Linux's ro
// mounts do, and may see another node's writes half done.
//
// One writer per image: a writable Open (or one with Replay) and Format
// claim the device (blockdev.Claim) until Close, and fail with ErrBusy
// while another Volume of the process, another process (flock; O_EXCL on
// block devices) or a Linux mount holds it. Read-only opens take no claim:
// beside a writer they may read stale or torn metadata.
//
// After Close, every File and Volume method that returns an error fails
// with ErrClosed (an *fs.PathError for Files); a File's Close waits for
// the operations running on its inode (File.closed is set under the
// inode lock, and the I/O paths read it again under that lock).
//
// Operations that change metadata hold the volume's transaction gate
// shared; they must not call each other (see beginOp in jmeta.go). Direct
// overwrites of written blocks (directOverwrite in dio.go) change none and
// take only the inode lock.
//
// # Lock order
//
// Outer to inner, across all packages (see each package for its locks):
//
//	Volume state, journal transaction gate (shared per operation;
//	striped: direct writes take the stripe of their buffer)
//	└─ inode lock (inode.mu, read/write: ext4's i_rwsem; on a file
//	   opened Direct, direct I/O takes one reader stripe and the
//	   exclusive side all of them: inodeLock in file.go)
//	   └─ page-cache page locks (iomap.PageCache; write-back takes the
//	      gate and then the inode lock shared before it pins pages, so a
//	      writer holding an inode lock never waits for write-back)
//	   └─ Volume.blkLocks stripe of one xattr block (its refcount and
//	      contents; one at a time) → Volume.xcache.mu (leaf)
//	   └─ inode.dataMu (ext4's i_data_sem: inode fields under a shared lock)
//	      └─ extent.Tree mutex
//	      └─ esc per-inode lock (one per stripe: escset.go)
//	         └─ the inode's conversion queue lock (conv.go)
//	         └─ alloc: prealloc window → group locks (ascending) → descriptor block
//	            └─ journal transaction state
//	      └─ Volume.convMu (inodes with queued conversions)
//	   └─ Volume.touch.mu (leaf: epoch lists of shared-write times)
//
// The bitmaps of blocks queued writes made written (convbits.go) take no
// lock: atomic words in a sync.Map, set by completions under the shared
// inode lock, cleared by the mapper's changes.
//
// A journal commit holds the gate exclusively and then takes each inode's
// dataMu to apply its queued conversions (no operation holds an inode
// lock then).
//
// No lock is held across device I/O unless the comment beside it says why.
//
// # Errors
//
// Errors wrap one of the sentinels ErrCorrupt, ErrNoSpace, ErrReadOnly,
// ErrUnsupported, ErrIO, ErrInvalid, ErrNotFound, ErrExist, ErrClosed,
// ErrNotDir, ErrIsDir, ErrNotEmpty, ErrNameTooLong, ErrPermission,
// ErrBadFile, ErrBusy and ErrNotExt4 (which also matches ErrCorrupt), and,
// for extended attributes, ErrNoAttr and ErrRange; corrupt metadata is
// reported as a *CorruptError naming the structure, inode, block and byte
// offset. The sentinels of conditions os reports with an errno match that
// syscall.Errno too, and carry its text ("no such file or directory"): the
// *fs.PathError around them names the operation, so a message has one
// prefix per layer ("open a/b: not a directory").
//
// Everything read from an image is untrusted: a crafted one gets
// ErrCorrupt, never a panic, a hang or a write outside the file asked for.
// Directory entry names are checked where they are decoded (layout
// invariant L7); a directory's i_size must not reach past its last mapped
// block, and its blocks are walked a mapped run at a time; mappings into
// file-system metadata are refused where extent trees and block maps are
// decoded (a system zone, as Linux's block_validity: zone.go); an inode
// the bitmap calls free but that is in use is never allocated.
package ext4io
