// Package ext4io is an ext4-compatible block-mapping and I/O engine: what
// the Linux kernel's ext4 does for block mapping and I/O, as a Go library,
// on real ext4 images that e2fsck accepts and Linux mounts.
//
// A [Volume] is an ext4 filesystem on a [blockdev.Device] (an image file, a
// block device, an O_DIRECT or mmap backend, memory). [Open] validates it
// and refuses, naming them, features it cannot handle; [OpenImage] opens
// one by path; [Format] creates one. Volume and [File] follow the os
// package ([Volume.OpenFile] takes os's flags and [O_DIRECT]); [Volume.FS]
// is an io/fs view, and [FileSystem] is the os-like surface as an
// interface, implemented on a host directory too by [OSFileSystem].
//
// Paths are slash-separated and relative to the volume's root, a leading
// slash allowed: "/" and "." name the root. An empty path names nothing,
// as on Linux: every call taking a path fails on "" with fs.ErrNotExist
// (RemoveAll("") does nothing, as os.RemoveAll), and the io/fs view
// refuses it with fs.ErrInvalid, as fs.ValidPath does.
//
// # Usage
//
// Open a volume writable, write a file and make it durable; Close commits,
// checkpoints and marks the image clean:
//
//	v, err := ext4io.OpenImage("disk.img", ext4io.Options{Writable: true})
//	if err != nil {
//		return err
//	}
//	defer v.Close()
//	f, err := v.OpenFile("app.log", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
//	if err != nil {
//		return err
//	}
//	defer f.Close()
//	if _, err := f.Write([]byte("hello\n")); err != nil {
//		return err
//	}
//	return f.Sync() // durable once Sync returns nil
//
// To start from nothing, [Format] a device (blockdev.CreateFile, or
// memdev.New in memory) and [Open] it. The zero [Options] open read-only.
// Aligned I/O on files opened with O_DIRECT goes to the device at once;
// other writes go through a bounded page cache, written back on Sync,
// after Options.WritebackAge, under memory pressure and at Close.
// [OpenContext], [Volume.SyncContext] and [FormatContext] give up when
// their context ends (during multiple mount protection's wait, a journal
// replay, a long write-back or a format), leaving the image consistent.
//
// # Guarantees
//
// Durability: when [File.Sync] returns nil the file's data and metadata
// are on stable storage ([File.Datasync]: its data and what reads it back);
// [Volume.Sync] and [Volume.Close] do this for every change so far.
//
// Crash consistency: on a filesystem with a journal, each operation's
// metadata changes commit together in one jbd2 transaction (at Sync, and in
// the background every Options.CommitInterval), and data reaches the device
// before the metadata that maps it. After a crash, Open, e2fsck or Linux
// replays the journal and finds the filesystem as a commit left it, never
// exposing blocks whose data was not written (an overwrite in place may be
// partly on disk, as on Linux). Without a journal, run e2fsck after a
// crash.
//
// Memory: a writable volume's caches are bounded as its [Options] say, and
// so are the journal's committed metadata copies waiting for a checkpoint
// (Options.MetaCacheBytes), whatever the size of the log.
//
// One writer: a writable Open and Format claim the device until Close and
// fail with ErrBusy while another Volume, process or Linux mount holds it
// (with the mmp feature, as Linux does, across nodes too). Read-only opens
// take no claim and may see a writer's changes half done. A Volume and its
// Files are safe for concurrent use.
//
// Errors match sentinels (ErrCorrupt, ErrNoSpace, ErrNotFound, ...) with
// errors.Is, and the syscall.Errno os would report, if any; File and
// namespace methods return an *fs.PathError, as os does. Images are
// untrusted: a crafted one gets ErrCorrupt (a *CorruptError names the structure, inode,
// block and offset), never a panic or a hang. After an I/O error or
// corruption in a metadata change nothing more commits (as Linux's
// errors=remount-ro) and writes fail with ErrReadOnly; after Close, with
// ErrClosed.
//
// # Packages and design
//
// The packages below this one are usable on their own: blockdev, layout,
// alloc, journal, extent, esc, iomap and fsprim; ext4iotest holds the test
// oracles. ext4's iomap ops are public as [File.NormalOps],
// [File.OverwriteOps] and [File.ReportOps] (with [File.LockIO]).
// docs/design.md in the repository describes the layers, the write paths
// and their fast paths, conversions, journaling and the lock order across
// all packages; docs/performance.md holds the measurements. Direct I/O
// blocks its goroutine in the system call: for N I/Os in flight, run with
// GOMAXPROCS of about N.
package ext4io
