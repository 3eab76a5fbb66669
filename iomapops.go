package ext4io

import (
	"fmt"
	"io/fs"

	"github.com/ext4io/ext4io/iomap"
)

// ext4's iomap ops as public values: the ops File's own direct I/O runs on,
// for callers that drive iomap's iterators (DirectWrite, DirectRead,
// Fiemap, SeekData, SeekHole) themselves.

// IomapKind names one of ext4's three iomap op variants.
type IomapKind uint8

const (
	// IomapNormal is ext4_iomap_ops (File.NormalOps).
	IomapNormal IomapKind = iota
	// IomapOverwrite is ext4_iomap_overwrite_ops (File.OverwriteOps).
	IomapOverwrite
	// IomapReport is ext4_iomap_report_ops (File.ReportOps).
	IomapReport
	// IomapBuffered is the buffered-I/O ops of the volume's page cache
	// (File.BufferedOps; ext4's delalloc write path).
	IomapBuffered
)

func (k IomapKind) String() string {
	switch k {
	case IomapNormal:
		return "normal"
	case IomapOverwrite:
		return "overwrite"
	case IomapReport:
		return "report"
	case IomapBuffered:
		return "buffered"
	}
	return fmt.Sprintf("IomapKind(%d)", uint8(k))
}

// IomapOps returns the file's ops of the given kind: NormalOps,
// OverwriteOps, ReportOps or BufferedOps (nil without a page cache).
func (f *File) IomapOps(kind IomapKind) iomap.Ops {
	switch kind {
	case IomapNormal:
		return f.NormalOps()
	case IomapOverwrite:
		return f.OverwriteOps()
	case IomapBuffered:
		ops, _ := f.BufferedOps()
		return ops
	}
	return f.ReportOps()
}

// PageCache returns the volume's page cache, the one File's buffered
// writes go through, or nil when the volume has none (read-only volumes,
// and Options that disable it). Files are keyed in it by
// File.BufferedOps' key.
func (v *Volume) PageCache() *iomap.PageCache { return v.pc }

// BufferedOps returns the ops of the file's buffered I/O, ext4's delalloc
// path on the volume's page cache (Volume.PageCache), and the file's key
// in that cache: the values File's own buffered writes hand to
// iomap.BufferedWrite and iomap.BufferedRead. ops is nil when the volume
// has no page cache. The ops are valid while the file is open.
//
// Maps: for reads (flags 0) written blocks as Mapped, preallocated blocks
// as Unwritten, blocks reserved by earlier buffered writes as Delalloc and
// holes as Hole; each mapping carries the extent change counter as its
// cookie (the ops implement iomap.Validator). Allocates: a buffered write
// (iomap.Write) into a hole reserves one block per page (no journal
// handle, no device I/O) and maps the range Delalloc; End releases the
// reservations of pages the write did not reach. The blocks are allocated
// and mapped at write-back (iomap.Writeback, driven by the page cache
// under the ops' iomap.WritebackLocker: one journal operation with the
// inode lock shared). Lock: the caller holds File.LockIO(IomapBuffered,
// ...) (the exclusive inode lock) across iomap.BufferedWrite, and passes
// IOLock.Size as size; IOLock.Unlock then grows the size in memory
// (the on-disk size follows at write-back). Cannot serve: the page cache
// full of dirty pages fails the call with iomap.ErrCacheFull; the caller
// unlocks, calls PageCache().WritebackOldest and goes on with the rest.
// Direct requests (iomap.Direct) are the normal and overwrite ops' and
// are not served here.
func (f *File) BufferedOps() (iomap.Ops, iomap.Key) {
	if f == nil || f.n == nil || f.n.bops == nil {
		return nil, 0
	}
	f.n.noReadahead.Store(true) // writes through them bypass inode.dataGen
	return f.n.bops, f.n.bops.key()
}

// NormalOps returns the file's normal mapping ops, ext4's ext4_iomap_ops,
// for iomap.DirectWrite and iomap.DirectRead. The value is the one File's
// own direct writes use; it is valid while the file is open.
//
// Maps: written blocks as Mapped, preallocated blocks as Unwritten, and
// for reads (no iomap.Write) holes as Hole. Allocates: for a write into a
// hole Begin allocates a run of blocks (up to 32768, one extent) and
// returns it Mapped with iomap.MapNew; the completion hook (EndIO, the
// iomap.Completer DirectWrite calls) maps them in the extent tree once the
// data is on the device, and End frees the blocks no completed write
// reached. Unwritten blocks are split off for the write at Begin and
// converted at completion. Lock: the caller holds File.LockIO(IomapNormal,
// ...) across the whole iterator call (ext4's exclusive i_rwsem, inside a
// journal operation). Cannot serve: with iomap.OverwriteOnly a hole, or
// an unwritten block, gives iomap.ErrNeedNormal; with iomap.NoWait a hole
// gives iomap.ErrWouldBlock (allocation would start a journal handle), as
// do written blocks whose journalled write in place is still in flight
// (homewrite.go).
// Both NormalOps and OverwriteOps serve direct I/O (and Report) requests
// only: a buffered request (no iomap.Direct, as from an iomap.PageCache)
// fails with ErrUnsupported, for the file's page cache has ops of its own
// (delayed allocation, write-back): File.BufferedOps.
func (f *File) NormalOps() iomap.Ops {
	if f == nil || f.n == nil {
		return notOpenOps{}
	}
	f.n.noReadahead.Store(true) // writes through them bypass inode.dataGen
	return &f.dio[0]
}

// OverwriteOps returns the file's overwrite mapping ops, ext4's
// ext4_iomap_overwrite_ops, for iomap.DirectWrite and iomap.DirectRead:
// the shared-lock fast path of direct writes. The value is the one File's
// own shared-lock direct writes use; it is valid while the file is open.
//
// Maps: written blocks as Mapped and preallocated blocks as Unwritten
// (their conversion queued for the extent tree at completion, or made
// then under the inode's data lock), all inside the on-disk size.
// Allocates: nothing; it takes no journal handle for written blocks.
// Lock: the caller holds File.LockIO(IomapOverwrite, ...) (the shared
// inode lock, inside a journal operation) across the iterator call.
// Cannot serve: a hole, delayed blocks, a range past the on-disk size,
// and with iomap.OverwriteOnly an unwritten block, give
// iomap.ErrNeedNormal after the bytes already done: the caller unlocks,
// takes LockIO(IomapNormal, ...) and writes the rest with NormalOps.
func (f *File) OverwriteOps() iomap.Ops {
	if f == nil || f.n == nil {
		return notOpenOps{}
	}
	f.n.noReadahead.Store(true) // writes through them bypass inode.dataGen
	return &f.dio[1]
}

// notOpenOps are the normal and overwrite ops of a nil or zero File: every
// call fails with ErrInvalid.
type notOpenOps struct{}

func (notOpenOps) Begin(off, length int64, flags iomap.Flags) (iomap.Mapping, error) {
	return iomap.Mapping{}, &fs.PathError{Op: "map", Err: errNotOpen}
}

func (notOpenOps) End(off, length, written int64, flags iomap.Flags, m iomap.Mapping) error {
	return nil
}

// EndIO is the ops' direct-write completion hook (iomap.Completer):
// [off, off+n) of m is on the device.
func (o *dioOps) EndIO(off, n int64, m iomap.Mapping) error { return o.endIO(off, n, m) }

var _ iomap.Completer = (*dioOps)(nil)

// IOLock is what a File's iomap ops expect their caller to hold, taken by
// File.LockIO and released by Unlock. An IOLock is used by one goroutine.
type IOLock struct {
	f      *File
	kind   IomapKind
	stripe int // the inode-lock stripe of a shared lock
	op     int // the journal-operation stripe
}

// LockIO takes what the ops of kind expect for I/O on [off, off+length):
// it writes back dirty cached pages of the range first (direct I/O must
// not race the page cache), then enters a journal operation and takes
// the inode lock, exclusive for IomapNormal (and applies the conversions
// queued by earlier shared writes) or shared for IomapOverwrite. For
// IomapReport it takes nothing: ReportOps' Begin locks for itself. For
// IomapBuffered it takes the inode lock exclusively and no journal
// operation, as File's buffered writes do (BufferedOps). For
// the write kinds the file must be writable (an extent-mapped regular
// file on a writable volume); reads may also use IomapOverwrite's shared
// lock with either ops.
func (f *File) LockIO(kind IomapKind, off, length int64) (*IOLock, error) {
	if kind > IomapBuffered {
		return nil, &fs.PathError{Op: "lock", Path: f.Name(), Err: fmt.Errorf("ext4io: iomap kind %d: %w", kind, ErrInvalid)}
	}
	l := &IOLock{f: f, kind: kind}
	if kind == IomapReport {
		return l, nil
	}
	if err := f.writable("lock"); err != nil {
		return nil, err
	}
	if kind == IomapBuffered {
		if err := f.lockBuffered(off, length); err != nil {
			return nil, err
		}
		return l, nil
	}
	if err := f.checkRange("lock", off, length); err != nil {
		return nil, err
	}
	for {
		if err := f.flushCache(off, off+length); err != nil {
			return nil, &fs.PathError{Op: "lock", Path: f.name, Err: err}
		}
		var err error
		if l.op, err = f.v.beginOpAt(0); err != nil {
			return nil, &fs.PathError{Op: "lock", Path: f.name, Err: err}
		}
		if kind == IomapNormal {
			f.n.mu.Lock()
		} else {
			l.stripe = f.n.mu.RLockAt(0)
		}
		if f.cacheCleanLocked(off, off+length) {
			break
		}
		l.unlockInode() // a buffered write dirtied the range again
		if err := f.v.endOpErrAt(l.op, nil); err != nil {
			return nil, err
		}
	}
	if kind == IomapNormal {
		if err := f.v.applyConversionsLocked(f.n); err != nil {
			l.unlockInode()
			return nil, f.v.endOpErrAt(l.op, err)
		}
		f.v.stats.exclusive.Add(1)
	} else {
		f.v.touch.stamp(f.n) // the times, as a shared direct write sets them
	}
	return l, nil
}

// lockBuffered is LockIO(IomapBuffered): the exclusive inode lock, as
// File's buffered writes take it (writeBufferedOnce), and no journal
// operation (write-back takes its own).
func (f *File) lockBuffered(off, length int64) error {
	if f.n.bops == nil {
		return &fs.PathError{Op: "lock", Path: f.name, Err: fmt.Errorf("the volume has no page cache: %w", ErrUnsupported)}
	}
	if err := f.checkRange("lock", off, length); err != nil {
		return err
	}
	f.n.mu.Lock()
	if err := f.closedLocked(); err != nil {
		f.n.mu.Unlock()
		return &fs.PathError{Op: "lock", Path: f.name, Err: err}
	}
	// Checked under the inode lock, as writeBufferedOnce does: Close waits
	// for the lock's holder (Volume.drainInodeWriters), later ones fail.
	if f.v.closed.Load() {
		f.n.mu.Unlock()
		return &fs.PathError{Op: "lock", Path: f.name, Err: errVolumeClosed()}
	}
	f.v.stats.buffered.Add(1)
	f.n.mayCache.Store(true) // before any page is added: flushCache looks for pages by it
	return nil
}

// Size returns the file's size as the lock's holder sees it: the size
// to pass to iomap.BufferedWrite and BufferedRead under
// LockIO(IomapBuffered) (File.Size would wait for the lock).
func (l *IOLock) Size() int64 { return int64(l.f.n.in.Size) }

func (l *IOLock) unlockInode() {
	if l.kind == IomapNormal || l.kind == IomapBuffered {
		l.f.n.mu.Unlock()
	} else {
		l.f.n.mu.RUnlockAt(l.stripe)
	}
}

// Unlock releases the lock. off and n are the file range the caller
// wrote under it (n = 0 if it wrote nothing: reads, refused writes):
// under IomapNormal a write that ended past the file's size grows it, and
// the inode is written with the new size and times; under IomapBuffered
// the size grows and the times change in memory, and reach the disk
// with write-back. err is the I/O's
// error, returned with Unlock's own: an I/O or corruption error fails the
// volume as File.WriteAt's would.
func (l *IOLock) Unlock(off int64, n int, err error) error {
	f := l.f
	if l.kind == IomapReport {
		return err
	}
	if l.kind == IomapBuffered {
		if n > 0 {
			f.wroteBufferedLocked(off, n)
		}
		l.unlockInode()
		return err
	}
	if l.kind == IomapNormal && n > 0 {
		err = f.wroteLocked(off, n, err)
	}
	l.unlockInode()
	return f.v.endOpErrAt(l.op, err)
}
