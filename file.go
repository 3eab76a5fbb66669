package ext4io

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/internal/stripe"
	"github.com/ext4io/ext4io/layout"
)

// File is an open file on a Volume.
//
// ReadAt (and, on writable volumes, WriteAt, Truncate and Fallocate) are
// safe for concurrent use. Read, Write and Seek share one position, as an
// os.File's. Close may run concurrently with any of them: each
// either completes as if before Close or fails with ErrClosed. After Close
// every method that returns an error returns one matching ErrClosed (and
// fs.ErrClosed), an *fs.PathError naming the file; the zero File is not
// open, and its methods return ErrInvalid.
type File struct {
	v    *Volume
	n    *inode // shared by every File of this inode
	ino  uint32
	name string        // the path it was opened with, as given (Name); Stat takes its base
	flag int           // os.OpenFile flags (osfile.go); O_RDWR for internal Files
	in   *layout.Inode // == n.in; fields guarded by n.mu
	m    *mapper       // == n.m; nil for inline data
	inl  []byte        // inline data (inline-data files, fast symlinks)

	direct bool      // opened with O_DIRECT: I/O must be aligned
	dio    [2]dioOps // direct-write ops (exclusive, shared), set up by OpenFile

	mu  sync.Mutex // guards off, dir
	off int64
	dir *dirReader // ReadDir state for directories

	// closed is set by Close while it holds the inode lock (n.mu)
	// exclusively. An operation that reads it after taking n.mu, shared or
	// exclusive, therefore either runs wholly before Close returns or sees
	// it set: no write lands in an inode that Close then frees. Loads
	// before the lock are only an early exit.
	closed atomic.Bool

	ra readahead // buffered sequential reads (readahead.go)
}

// errNotOpen is the error of a method called on a zero (or nil) File or
// Volume: os.File's methods return ErrInvalid for a nil *os.File.
var errNotOpen = fmt.Errorf("ext4io: not opened by Open or Create: %w", ErrInvalid)

// checkOpen returns the *fs.PathError for op on a closed or zero File, or
// on a File of a closed Volume; nil while both are open. Operations that
// change or read the inode check f.closed again under the inode lock
// (closedLocked).
func (f *File) checkOpen(op string) error {
	if f.isOpen() {
		return nil
	}
	return f.openError(op)
}

// isOpen reports whether f and its Volume are open: checkOpen's nil case,
// inlined where each call counts (WriteAt).
func (f *File) isOpen() bool {
	return f != nil && f.v != nil && f.n != nil && !f.closed.Load() && f.v.sb != nil && !f.v.closed.Load()
}

// openError is checkOpen's error for a File that is not open (nil if it
// is).
func (f *File) openError(op string) error {
	if f == nil || f.v == nil || f.n == nil {
		return &fs.PathError{Op: op, Err: errNotOpen}
	}
	if f.closed.Load() {
		return &fs.PathError{Op: op, Path: f.name, Err: ErrClosed}
	}
	if err := f.v.checkOpen(); err != nil {
		return &fs.PathError{Op: op, Path: f.name, Err: err}
	}
	return nil
}

// closedLocked returns ErrClosed if f was closed; the caller holds the
// inode lock (any mode) and wraps the error in its *fs.PathError.
func (f *File) closedLocked() error {
	if f.closed.Load() {
		return ErrClosed
	}
	return nil
}

// newFile returns a File of inode n.
func newFile(v *Volume, n *inode, ino uint32, name string) *File {
	if n.inline.ever {
		return newInlineFile(v, n, ino, name) // inline.go
	}
	f := &File{v: v, n: n, ino: ino, name: name, flag: os.O_RDWR, in: n.in, m: n.m, inl: n.inl}
	f.dio = [2]dioOps{{f: f}, {f: f, shared: true}}
	return f
}

// openInode opens inode ino, whose number the caller found earlier: a new
// inode it made (its directory's lock held), or an entry it looked up
// without holding the directory's lock since (a directory a walk started
// from, an entry createOrLookup found). A free inode, or one evicted or
// unlinked since, fails with an error matching ErrNotFound, as if the
// open came after the removal. lookupOpen opens entries under their
// directory's lock.
func (v *Volume) openInode(ino uint32, name string) (*File, error) {
	n, err := v.getInode(ino)
	if err != nil {
		return nil, err
	}
	return v.fileOf(n, ino, name)
}

// fileOf returns a File of inode n (number ino) found through a name: a
// freed or unlinked inode fails with an error matching ErrNotFound (the
// name went meanwhile), one with no valid file type as checkLinked.
func (v *Volume) fileOf(n *inode, ino uint32, name string) (*File, error) {
	n.mu.RLock()
	var err error
	if n.freed || n.in.LinksCount == 0 {
		err = &freeInodeError{ino: ino}
	} else {
		err = checkLinked(ino, n.in)
	}
	n.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	return newFile(v, n, ino, name), nil
}

// entryInode returns the inode that a directory entry names, for a caller
// holding the directory's lock (either mode) from the lookup of the entry
// on: the entry still names ino, so an inode without links is corruption
// (ext4_lookup's "deleted inode referenced"), not a race.
func (v *Volume) entryInode(ino uint32) (*inode, error) {
	n, err := v.getInode(ino)
	var fe *freeInodeError
	if errors.As(err, &fe) {
		return nil, &errs.CorruptError{What: "inode", Ino: ino, Off: -1, Msg: "unused inode referenced (links count 0)"}
	}
	return n, err
}

// OpenIno opens inode ino directly (no path, no link-count check): for
// servers that name files by inode number, as a FUSE server does
// (package fusefs opens its nodes this way), and for tools that read
// reserved inodes such as the journal (8). A system inode (systemInode:
// the journal, the orphan file, ...) opens read-only: the volume itself
// writes those, and no write through a File may race it. An inode still in use opens, an unlinked one still open
// elsewhere too; a number that is free (links count 0 on disk, or freed
// while being opened), 0 or past the superblock's inode count fails with
// an error matching fs.ErrNotExist, as Linux's ESTALE for a stale handle,
// and leaves nothing cached. So does an orphan (unlinked while open) whose
// Files are all closed: it is being freed, as an inode Linux is evicting.
// The File counts as open until it is closed, as OpenFile's: removing the
// inode's last name meanwhile leaves it an orphan. Errors are
// *fs.PathError.
func (v *Volume) OpenIno(ino uint32) (*File, error) {
	name := fmt.Sprintf("<%d>", ino)
	if err := v.checkOpen(); err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	if ino == 0 || ino > v.sb.InodesCount {
		// A number no inode has: a stale or made-up handle, not a
		// corrupt image (readInode's check is for numbers the image holds).
		return nil, &fs.PathError{Op: "open", Path: name,
			Err: fmt.Errorf("inode %d outside 1..%d: %w", ino, v.sb.InodesCount, ErrNotFound)}
	}
	n, err := v.getInode(ino)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	f := newFile(v, n, ino, name)
	if v.systemInode(ino, n) {
		f.flag = os.O_RDONLY
	}
	if !v.trackUnlessReaped(f) || !v.keptOpenIno(f) {
		// Cached when looked up, freed (or being freed) since.
		return nil, &fs.PathError{Op: "open", Path: name, Err: &freeInodeError{ino: ino}}
	}
	return f, nil
}

// specialIno reports whether number ino belongs to the filesystem: a
// reserved number other than the root's, the journal, the orphan file or
// a quota file, wherever they lie (Linux's is_special_ino, and the
// journal's inode). No directory entry names one, nothing puts one on the
// orphan list, and OpenIno opens one read-only.
func (v *Volume) specialIno(ino uint32) bool {
	if ino == layout.RootIno {
		return false
	}
	return ino < v.sb.FirstInode() || ino == v.sb.JournalInum || ino == v.sb.OrphanFileInum || v.sb.QuotaInode(ino)
}

// systemInode reports whether inode ino (n) belongs to the filesystem
// rather than to a name: a special number (specialIno; mkfs puts the
// project quota file past the reserved ones) or an xattr value inode
// (EXT4_EA_INODE_FL).
func (v *Volume) systemInode(ino uint32, n *inode) bool {
	if v.specialIno(ino) {
		return true
	}
	if ino == layout.RootIno {
		return false
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	n.dataMu.Lock() // write-back changes in.Flags (i_blocks' huge_file bit) under the shared lock
	defer n.dataMu.Unlock()
	return n.in.Flags&layout.InodeFlagEAInode != 0
}

// trackUnlessReaped records f as open (trackFile) unless its inode is an
// in-memory orphan without an open File: releaseOrphans and stepOrphans
// free such an orphan after finding it unused (inodeInUse), without its
// lock, so no File may appear on it once that is so. The check and the
// record are one step under s.mu, which inodeInUse takes too.
func (v *Volume) trackUnlessReaped(f *File) bool {
	if v.alloc == nil || f.in.IsDir() {
		return true // never freed, or not tracked (trackFile)
	}
	s := v.ns()
	s.mu.Lock()
	defer s.mu.Unlock()
	open := pruneClosed(s.mu.open[f.ino])
	if _, orphan := s.mu.orphans[f.ino]; orphan && len(open) == 0 {
		delete(s.mu.open, f.ino)
		return false
	}
	s.mu.open[f.ino] = append(open, f)
	s.mu.tracked++
	return true
}

// keptOpenIno is keptOpen for OpenIno, which may find an inode with no
// links: an orphan (kept while it is one), or one being freed, which
// releaseOrphans took off the orphans before it took the inode's lock to
// free it.
func (v *Volume) keptOpenIno(f *File) bool {
	f.n.mu.RLock()
	gone := f.n.freed || f.n.in.LinksCount == 0 && f.ino >= v.sb.FirstInode() && !v.isOrphan(f.ino)
	f.n.mu.RUnlock()
	if gone {
		f.closed.Store(true)
	}
	return !gone
}

// Ino returns the file's inode number (0 for a zero File).
func (f *File) Ino() uint32 {
	if f == nil {
		return 0
	}
	return f.ino
}

// Size returns the file size in bytes: after Close, the size it had; 0
// for a zero File.
func (f *File) Size() int64 {
	if f == nil || f.n == nil {
		return 0
	}
	f.n.mu.RLock()
	defer f.n.mu.RUnlock()
	return int64(f.in.Size)
}

// ReadAt reads len(p) bytes at off. Holes and unwritten extents read as
// zeroes. At end of file it returns io.EOF, like io.ReaderAt.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if !f.isOpen() {
		return 0, f.openError("read")
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: fmt.Errorf("negative offset %d: %w", off, ErrInvalid)}
	}
	if len(p) == 0 {
		return 0, nil // as os.File's: no read, no error
	}
	if f.flag&accMode == os.O_WRONLY {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: ErrBadFile}
	}
	if !f.directAligned(p, off) {
		return 0, f.checkDirect("read", p, off)
	}
	if f.direct && f.mayHavePages() {
		// As O_DIRECT: the range's dirty pages go to the device first.
		if err := f.flushCache(off, off+int64(len(p))); err != nil {
			return 0, &fs.PathError{Op: "read", Path: f.name, Err: err}
		}
	}
	defer f.n.mu.RUnlockAt(f.n.mu.RLockAt(stripe.OfBuf(p)))
	if err := f.closedLocked(); err != nil {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: err}
	}
	if f.in.IsDir() {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: ErrIsDir}
	}
	size := int64(f.in.Size)
	if off >= size {
		return 0, io.EOF
	}
	want := len(p)
	if int64(want) > size-off {
		p = p[:size-off]
	}
	var n int
	var err error
	useCache := f.cached()
	switch {
	case useCache && f.direct:
		// Direct reads read the device unless a buffered write dirtied
		// the range again after the flush above.
		useCache = !f.cacheCleanLocked(off, off+int64(len(p)))
	case useCache && f.continuesRead(off, len(p)) && !f.v.pc.Has(f.n.bops.key(), off):
		// A sequential buffered read of bytes not in the cache drops
		// the clean pages of the read-ahead window's range and reads
		// ahead from the device if none is dirty (readahead.go).
		useCache = !f.cacheCleanLocked(off, off+readaheadBytes)
	}
	switch {
	case useCache:
		n, err = f.readBuffered(p, off)
	case f.direct:
		n, err = f.readAt(p, off) // no read-ahead (readSeq)
	default:
		n, err = f.readSeq(p, off) // readahead.go
	}
	if err == nil && n < want {
		err = io.EOF
	}
	return n, err
}

func (f *File) readAt(p []byte, off int64) (int, error) {
	if f.m == nil {
		n := 0
		if off < int64(len(f.inl)) {
			n = copy(p, f.inl[off:])
		}
		if f.in.IsReg() {
			// Past the bytes stored inline, up to the size (to which
			// ReadAt bounds p), a regular file reads as zeroes.
			clear(p[n:])
			n = len(p)
		}
		return n, nil
	}
	bs := int64(f.v.bs)
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		lblk := uint64(pos / bs)
		inBlk := pos % bs
		m, err := f.m.lookupN(lblk, uint64((inBlk+int64(len(p)-done)+bs-1)/bs))
		if err != nil {
			return done, err
		}
		runBytes := int64(m.n)*bs - inBlk
		if m.n > uint64(1<<62/bs) {
			runBytes = 1 << 62
		}
		chunk := p[done:]
		if int64(len(chunk)) > runBytes {
			chunk = chunk[:runBytes]
		}
		switch m.kind {
		case mapWritten:
			if m.pblk+m.n > f.v.sb.BlocksCount {
				return done, &errs.CorruptError{What: "file mapping", Ino: f.ino, Block: m.pblk, Off: -1,
					Msg: fmt.Sprintf("%d blocks at %d run past the filesystem end %d", m.n, m.pblk, f.v.sb.BlocksCount)}
			}
			if _, err := readFull(f.v.dev, chunk, int64(m.pblk)*bs+inBlk); err != nil {
				return done, fmt.Errorf("ext4io: inode %d: %w", f.ino, err)
			}
		default:
			clear(chunk)
		}
		done += len(chunk)
	}
	return done, nil
}

// Read reads from the file's current offset.
func (f *File) Read(p []byte) (int, error) {
	if err := f.checkOpen("read"); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.readPos(p) // osfile.go
	f.off += int64(n)
	if errors.Is(err, io.EOF) && n > 0 {
		err = nil
	}
	return n, err
}

// Seek sets the offset for the next Read (io.Seeker). A whence other
// than io.SeekStart, io.SeekCurrent and io.SeekEnd, or an offset that
// would be negative, fails with ErrInvalid (EINVAL). On a directory,
// Seek(0, io.SeekStart) rewinds ReadDir to the first entry, as on an
// os.File.
func (f *File) Seek(offset int64, whence int) (int64, error) {
	if err := f.checkOpen("seek"); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch whence {
	case io.SeekStart:
		if offset == 0 && f.in.IsDir() {
			f.dir = nil
		}
	case io.SeekCurrent:
		offset += f.off
	case io.SeekEnd:
		offset += f.Size()
	default:
		return 0, &fs.PathError{Op: "seek", Path: f.name, Err: ErrInvalid}
	}
	if offset < 0 {
		return 0, &fs.PathError{Op: "seek", Path: f.name, Err: ErrInvalid}
	}
	f.off = offset
	return offset, nil
}

// Close closes the file; every later call of its methods fails with
// ErrClosed, a second Close included (as os.File's). Close waits for the
// operations on the file's inode that are running (it takes the inode
// lock). Closing the last File of an unlinked inode frees the inode.
// Closing a File after its Volume was closed returns nil.
func (f *File) Close() error {
	if f == nil || f.v == nil || f.n == nil {
		return &fs.PathError{Op: "close", Err: errNotOpen}
	}
	f.n.mu.Lock()
	was := f.closed.Swap(true)
	f.n.mu.Unlock()
	if was {
		return &fs.PathError{Op: "close", Path: f.name, Err: ErrClosed}
	}
	f.ra.release()
	// The file's journalled pages written in place in the background
	// (homewrite.go): a failure is reported here if no sync did.
	herr := f.v.home.h.waitIno(f.ino)
	f.v.untrackFile(f)
	if f.v.alloc != nil && !f.v.closed.Load() {
		// Free unlinked files whose last handle this was.
		if err := f.v.stepOrphans(false); err != nil {
			return &fs.PathError{Op: "close", Path: f.name, Err: err}
		}
		if err := f.v.beginInternalOp(); err != nil {
			return f.closeErr(herr) // Close released the orphans
		}
		if err := f.v.endOpErr(f.v.releaseOrphans(false)); err != nil {
			return err
		}
	}
	return f.closeErr(herr)
}

// closeErr is Close's error for err, a failed write in place, or nil.
func (f *File) closeErr(err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: "close", Path: f.name, Err: err}
}

// FileExtent is one mapped run of a file, as fiemap reports it.
type FileExtent struct {
	Logical   uint64 // first logical block
	Physical  uint64 // first physical block
	Length    uint64 // blocks
	Unwritten bool   // preallocated: reads as zeroes
}

// Extents returns the file's mapped runs in logical order. Inline-data
// files and fast symlinks have none.
func (f *File) Extents() ([]FileExtent, error) {
	if err := f.checkOpen("extents"); err != nil {
		return nil, err
	}
	if f.n.conv.pending() {
		// Queued conversions go into the tree first, in an operation.
		if err := f.v.beginOp(); err != nil {
			return nil, &fs.PathError{Op: "extents", Path: f.name, Err: err}
		}
		f.n.mu.Lock()
		err := f.v.applyConversionsLocked(f.n)
		f.n.mu.Unlock()
		if err := f.v.endOpErr(err); err != nil {
			return nil, err
		}
	}
	f.n.mu.RLock()
	defer f.n.mu.RUnlock()
	if err := f.closedLocked(); err != nil {
		return nil, &fs.PathError{Op: "extents", Path: f.name, Err: err}
	}
	if f.m == nil {
		return nil, nil
	}
	var out []FileExtent
	err := f.m.walk(func(e extent.Extent) error {
		out = append(out, FileExtent{Logical: uint64(e.Lblk), Physical: e.Pblk, Length: uint64(e.Len), Unwritten: e.Unwritten})
		return nil
	})
	return out, err
}

// Stat returns the file's metadata.
func (f *File) Stat() (fs.FileInfo, error) {
	if err := f.checkOpen("stat"); err != nil {
		return nil, err
	}
	return f.info(), nil
}

// info returns the file's metadata as a *FileInfo.
func (f *File) info() *FileInfo {
	fi, _ := f.v.liveInfo(f.n, f.ino, path.Base(f.name), false)
	return fi
}

// liveInfo returns the FileInfo of n, an inode in memory, whose state may
// be newer than the disk's (a shared-lock write's pending time, a size not
// written back yet). With linked it fails as checkLinked does for an inode
// a directory entry must not name.
func (v *Volume) liveInfo(n *inode, ino uint32, name string, linked bool) (*FileInfo, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	n.dataMu.Lock()
	defer n.dataMu.Unlock()
	if linked {
		if err := checkLinked(ino, n.in); err != nil {
			return nil, err
		}
	}
	v.applyTouchLocked(n)
	return newFileInfo(v, name, ino, n.in), nil
}

// FileInfo describes an inode. It implements fs.FileInfo; Sys returns the
// *FileInfo itself.
type FileInfo struct {
	name       string
	Ino        uint32
	IMode      uint16 // raw i_mode
	Nlink      uint16
	UID        uint32
	GID        uint32
	size       int64
	Blocks     uint64 // 512-byte units
	Atime      time.Time
	Mtime      time.Time
	Ctime      time.Time
	Crtime     time.Time // zero when the inode has no crtime field
	Flags      uint32
	Generation uint32
	Rdev       uint64 // device number of a character or block device, as unix.Mkdev encodes it
}

func newFileInfo(v *Volume, name string, ino uint32, in *layout.Inode) *FileInfo {
	fi := &FileInfo{
		name: name, Ino: ino, IMode: in.Mode, Nlink: in.LinksCount, UID: in.UID, GID: in.GID,
		size: int64(in.Size), Blocks: in.Blocks(v.sb),
		Atime: in.Atime.Time(), Mtime: in.Mtime.Time(), Ctime: in.Ctime.Time(),
		Flags: in.Flags, Generation: in.Generation, Rdev: inodeRdev(in),
	}
	if in.ExtraIsize >= 24 {
		fi.Crtime = in.Crtime.Time()
	}
	return fi
}

func (fi *FileInfo) Name() string       { return fi.name }
func (fi *FileInfo) Size() int64        { return fi.size }
func (fi *FileInfo) ModTime() time.Time { return fi.Mtime }
func (fi *FileInfo) IsDir() bool        { return fi.IMode&layout.ModeFmt == layout.ModeDir }
func (fi *FileInfo) Sys() any           { return fi }

// Mode converts i_mode to an fs.FileMode.
func (fi *FileInfo) Mode() fs.FileMode {
	m := fs.FileMode(fi.IMode & 0o777)
	if fi.IMode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if fi.IMode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if fi.IMode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	switch fi.IMode & layout.ModeFmt {
	case layout.ModeDir:
		m |= fs.ModeDir
	case layout.ModeLnk:
		m |= fs.ModeSymlink
	case layout.ModeFIFO:
		m |= fs.ModeNamedPipe
	case layout.ModeSock:
		m |= fs.ModeSocket
	case layout.ModeChr:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case layout.ModeBlk:
		m |= fs.ModeDevice
	}
	return m
}
