// Package blockdev is the bottom of ext4io: the Device interface every other
// package reads and writes through, and its backends.
//
// Backends, all safe for concurrent use:
//
//	File    OpenFile, CreateFile   pread/pwrite through the page cache, on a
//	                               regular file or a block device
//	Direct  OpenDirect             O_DIRECT; aligned I/O is zero-copy, the
//	                               rest goes through bounce buffers (Aligner)
//	Mmap    OpenMmap               a shared mapping of a file, block device
//	                               or device DAX; MAP_SYNC on persistent
//	                               memory, flushed with CLWB (Mmap.Mode)
//	memdev  memdev.New             sparse, in process, copy-on-write clones
//	overlay overlay.New            copy-on-write in memory over any Device,
//	                               which it never writes
//	errordev errordev.New          fault injection around any Device;
//	         errordev.NewCrashable crash images (durable state + torn writes)
//
// blockdevtest.Run is the conformance suite every backend passes.
//
// Invariants every backend keeps:
//   - Durability: a WriteAt that returned is visible to every later ReadAt,
//     but survives a crash only once a later Flush has returned nil. ZeroOut
//     and Discard follow the same rule. A WriteAtSync (SyncWriter: File and
//     Direct) is durable when it returns, like a FUA write, without making
//     earlier writes durable.
//   - Devices do not grow: Size is fixed at open; an operation reaching past
//     it fails with ErrInvalid and changes nothing. Reads past it return
//     io.EOF after the bytes that exist.
//   - Errors from the OS wrap ErrIO and name the operation, path and offset,
//     except a constructor's missing path or refused permission, which wrap
//     the host's cause (errors.Is with fs.ErrNotExist, fs.ErrPermission);
//     operations after Close wrap ErrClosed; modifications of a read-only
//     device wrap ErrReadOnly.
//   - Concurrent writes to disjoint byte ranges never disturb each other,
//     even inside one logical block.
package blockdev

import (
	"io"

	"github.com/ext4io/ext4io/internal/errs"
)

// Device is a block device or an image file. Offsets and lengths are in
// bytes. Implementations are safe for concurrent use; concurrent writes to
// overlapping ranges leave either write's bytes, per logical block.
type Device interface {
	// ReadAt reads len(p) bytes at off. Reading past Size returns io.EOF
	// with the bytes before it filled in, like io.ReaderAt.
	io.ReaderAt
	// WriteAt writes len(p) bytes at off. Writing past Size is an error
	// wrapping ErrInvalid: devices do not grow.
	io.WriterAt
	// Flush is a durability barrier: every write that completed before the
	// call is on stable storage when it returns nil.
	Flush() error
	// ZeroOut makes [off, off+n) read as zeroes. Like a write, it is durable
	// after the next Flush.
	ZeroOut(off, n int64) error
	// Discard tells the device the range [off, off+n) is unused. Afterwards
	// the range reads as zeroes or as its old contents (backends document
	// which); callers must not depend on either.
	Discard(off, n int64) error
	// Size returns the device size in bytes.
	Size() int64
	// LogicalBlockSize returns the smallest I/O unit the device addresses,
	// 512 for most devices and files.
	LogicalBlockSize() int
	// Close releases the device. Operations after Close return ErrClosed.
	Close() error
}

// Aligner is implemented by devices that need aligned buffers and offsets
// for efficient (or any) I/O, such as the O_DIRECT backend.
type Aligner interface {
	// Alignment returns the required memory alignment of buffers and the
	// required alignment of offsets and lengths, in bytes.
	Alignment() (mem, off int)
}

// Sentinel errors, shared with every ext4io package.
var (
	ErrIO       = errs.ErrIO
	ErrInvalid  = errs.ErrInvalid
	ErrClosed   = errs.ErrClosed
	ErrReadOnly = errs.ErrReadOnly
	// ErrUnsupported is returned when a backend cannot work on this
	// platform, or on this file (O_DIRECT refused by the filesystem).
	ErrUnsupported = errs.ErrUnsupported
	// ErrBusy is returned by Claim (and writable opens of block devices)
	// when another writer holds the device or Linux has it mounted.
	ErrBusy = errs.ErrBusy
)
