package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/layout"
)

// mkfs -d and put copy a host tree into an image in two passes, like
// mkfs.ext4 -d but validating first. The walk (walkSource) stats every
// entry (without following symlinks), reads every directory, symlink and
// extended attribute, opens every regular file once, and checks what ext4 cannot hold (names over
// 255 bytes, symlink targets of a block or more, attribute sets no inode
// and block can hold, file types other than regular, directory, symlink,
// fifo, socket and device). Only a tree that passes is written (import):
// so mkfs -d refuses a bad tree before it formats anything. What can
// still fail while writing is what the walk cannot know: the image runs
// out of blocks, or the source changes meanwhile.
//
// Neither pass keeps the tree in memory: the walk keeps only its counts
// and the host inodes with more than one link, and the import reads each
// directory again as it copies it (in the same, sorted, order). The
// import lists extended attributes again only if the walk found some in
// the tree, reads the tree on a second goroutine ahead of its writes
// (srcStream, mkfsd_ahead.go: a few fixed buffers more), and creates each
// entry through a File of its image directory (File.CreateAt, MkdirAt)
// rather than by its path. Memory
// grows with the depth of the tree and the size of its largest directory
// listing, and with the number of hard-linked inodes, not with the tree.
//
// Fidelity, as mkfs.ext4 -d: hard links stay links (one inode per host
// (dev, ino), its link count the number of names in the tree); fifos,
// sockets and devices (with their device numbers) are made with Mknod;
// modes with setuid, setgid and sticky, owners, atime and mtime (to the
// nanosecond) and extended attributes are copied; regular files are
// copied by SEEK_DATA/SEEK_HOLE ranges, and blocks of zeroes inside them
// are left as holes too (mkfs.ext4 skips them the same way). Source files
// are read with O_NOATIME where the host allows, so the walk does not
// change the atimes it copies.

// fileID names a host inode.
type fileID struct{ dev, ino uint64 }

// srcEntry is one host entry found by the walk (in memory only).
type srcEntry struct {
	host   string // host path
	name   string // its name in its directory ("" for the top)
	fi     fs.FileInfo
	target string            // a symlink's target
	xattrs map[string][]byte // extended attributes
	rdev   uint64            // a device's number, as ext4io.Mkdev encodes it
	depth  int               // directories above it in the tree
	// A regular file opened by its listing (readDirEntries), fi its
	// fstat, or the error opening it; neither where the listing does not
	// open files.
	in      *srcFile
	openErr error
}

// closeIn closes the file e's listing opened, if it is still open.
func (e *srcEntry) closeIn() {
	if e.in != nil {
		e.in.Close()
		e.in = nil
	}
}

// hostCalls counts the host system calls of mkfs -d and put on host
// files, by kind (xattrPath: attribute listings by path), where the
// host's implementation counts them: tests pin how many each file costs.
var hostCalls struct{ open, stat, seek, xattrPath atomic.Int64 }

// srcTree is a validated source tree: its top entry and counts.
type srcTree struct {
	root   *srcEntry
	inodes int   // inodes to allocate (the top excluded)
	bytes  int64 // apparent size of the regular files, for messages
	xattrs bool  // some entry has extended attributes
}

// srcLimits are what the walk checks against.
type srcLimits struct {
	blockSize int    // bytes; symlink targets and attribute blocks
	inodeSize int    // bytes; the in-inode attribute space
	skip      fileID // the image itself, refused if found in the tree
	hasSkip   bool
	// imgDir is the directory a new image is to be created in (its name
	// imgName), refused if found in the tree: the copy would meet it.
	imgDir    fileID
	imgName   string
	hasImgDir bool
	mkfs      bool // the top is the image's root, which has a lost+found
}

// maxWalkProblems bounds how many problems the walk lists.
const maxWalkProblems = 20

type walker struct {
	lim      srcLimits
	links    map[fileID]struct{} // host inodes of more than one link seen
	problems []error
	more     int
	tree     *srcTree
}

func (w *walker) problem(err error) {
	if len(w.problems) < maxWalkProblems {
		w.problems = append(w.problems, err)
	} else {
		w.more++
	}
}

// walkSource walks and validates the host tree at top: a directory (a
// symlink to one is followed), or with anyType any file (not followed).
func walkSource(top string, lim srcLimits, anyType bool) (*srcTree, error) {
	fi, err := os.Stat(top)
	if anyType {
		fi, err = os.Lstat(top)
	}
	if err != nil {
		return nil, err
	}
	if !anyType && !fi.IsDir() {
		return nil, fmt.Errorf("%s: not a directory", top)
	}
	w := &walker{lim: lim, links: map[fileID]struct{}{}, tree: &srcTree{}}
	root := &srcEntry{host: top, fi: fi}
	w.tree.root = root
	w.entry(root, true)
	if len(w.problems) > 0 {
		if w.more > 0 {
			w.problems = append(w.problems, fmt.Errorf("and %d more problems", w.more))
		}
		return nil, fmt.Errorf("source tree %s not copied, nothing written:\n%w", top, errors.Join(w.problems...))
	}
	return w.tree, nil
}

// entry checks e (stat'ed, not through a symlink) and, for a directory, walks its entries.
func (w *walker) entry(e *srcEntry, top bool) {
	defer e.closeIn()
	if !top && len(e.name) > layout.MaxNameLen {
		w.problem(fmt.Errorf("%s: name of %d bytes (ext4 holds at most %d): %w", e.host, len(e.name), layout.MaxNameLen, ext4io.ErrInvalid))
		return
	}
	id, nlink, _, ok := hostID(e.fi)
	if ok && w.lim.hasSkip && id == w.lim.skip {
		w.problem(fmt.Errorf("%s: the image itself is inside the source tree (it would copy itself): %w", e.host, ext4io.ErrInvalid))
		return
	}
	if ok && w.lim.hasImgDir && id == w.lim.imgDir && e.fi.IsDir() {
		w.problem(fmt.Errorf("%s: the image would be created inside the source tree (it would copy itself): %w",
			filepath.Join(e.host, w.lim.imgName), ext4io.ErrInvalid))
	}
	lostFound := w.lim.mkfs && e.name == "lost+found" && e.host == filepath.Join(w.tree.root.host, e.name)
	if lostFound && !e.fi.IsDir() {
		w.problem(fmt.Errorf("%s: not a directory, but the image's lost+found must be one: %w", e.host, ext4io.ErrInvalid))
		return
	}
	if !top && !lostFound {
		if ok && !e.fi.IsDir() && nlink > 1 {
			if _, seen := w.links[id]; seen {
				return // a further name of an inode already checked
			}
			w.links[id] = struct{}{}
		}
		w.tree.inodes++
	}
	if err := e.load(); err != nil {
		w.problem(err)
	} else if err := w.checkXattrs(e.host, e.xattrs); err != nil {
		w.problem(err)
	}
	if len(e.xattrs) > 0 {
		w.tree.xattrs = true
	}
	m := e.fi.Mode()
	switch {
	case m.IsDir():
		err := readDirEntries(e, func(k *srcEntry) bool {
			w.entry(k, false)
			return true
		})
		if err != nil {
			w.problem(err)
		}
	case m.IsRegular():
		if e.in == nil && e.openErr == nil { // not opened by its listing
			e.in, e.openErr = openSource(e.host)
		}
		if e.openErr != nil {
			w.problem(e.openErr)
			return
		}
		w.tree.bytes += e.fi.Size()
	case m&fs.ModeSymlink != 0:
		if max := min(w.lim.blockSize, 4096) - 1; len(e.target) > max {
			w.problem(fmt.Errorf("%s: symlink target of %d bytes (at most %d with %d-byte blocks): %w", e.host, len(e.target), max, w.lim.blockSize, ext4io.ErrInvalid))
		}
	case m&fs.ModeNamedPipe != 0, m&fs.ModeSocket != 0:
	case m&fs.ModeDevice != 0 && ok:
	default:
		w.problem(fmt.Errorf("%s: file type %v not supported: %w", e.host, m.Type(), ext4io.ErrUnsupported))
	}
}

// load reads what the entry e (stat'ed) holds besides its stat: its
// extended attributes, a symlink's target, a device's number.
func (e *srcEntry) load() error { return e.loadBut(true) }

// loadBut is load, reading the extended attributes only with xattrs
// (through e.in if its listing opened it).
func (e *srcEntry) loadBut(xattrs bool) error {
	var err error
	if xattrs {
		if e.in != nil {
			e.xattrs, err = hostXattrsOf(e.in, e.host)
		} else {
			e.xattrs, err = hostXattrs(e.host)
		}
		if err != nil {
			return err
		}
	}
	switch m := e.fi.Mode(); {
	case m&fs.ModeSymlink != 0:
		if e.target, err = os.Readlink(e.host); err != nil {
			return err
		}
	case m&fs.ModeDevice != 0:
		if _, _, rdev, ok := hostID(e.fi); ok {
			e.rdev = rdev
		}
	}
	return nil
}

// checkXattrs refuses attributes ext4 cannot store: a namespace it does
// not keep, a name or value over Linux's limits, or a set larger than the
// inode body and one block together (ea_inode values are not written).
func (w *walker) checkXattrs(host string, attrs map[string][]byte) error {
	ibody := w.lim.inodeSize - layout.GoodOldInodeSize - 32 - layout.XattrIbodyHeaderLen - 4
	block := w.lim.blockSize - layout.XattrHeaderLen - 4
	total := 0
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		index, short, ok := layout.XattrSplitName(name)
		if !ok || index == layout.XattrIndexSystem || index == layout.XattrIndexRichACL {
			return fmt.Errorf("%s: extended attribute %q: namespace ext4 does not store: %w", host, name, ext4io.ErrUnsupported)
		}
		size := layout.XattrEntrySize(len(short)) + layout.XattrValueSize(len(attrs[name]))
		if len(name) > layout.XattrMaxNameLen || len(attrs[name]) > layout.XattrMaxValueSize || size > max(ibody, block) {
			return fmt.Errorf("%s: extended attribute %q of %d bytes does not fit an inode or a %d-byte block: %w", host, name, len(attrs[name]), w.lim.blockSize, ext4io.ErrRange)
		}
		total += size
	}
	if total > max(ibody, 0)+block {
		return fmt.Errorf("%s: extended attributes of %d bytes do not fit an inode and a %d-byte block: %w", host, total, w.lim.blockSize, ext4io.ErrRange)
	}
	return nil
}

// importer writes a validated tree into a volume.
type importer struct {
	v         *ext4io.Volume
	lostFound bool // the tree's top-level lost+found is the image's own
	bs        int
	buf       []byte
	zero      []byte
	// links maps host inodes of more than one link to the image path of
	// their first name, for the later names.
	links map[fileID]string
	// noXattrs skips listing the extended attributes of each entry: the
	// walk found none in the tree.
	noXattrs bool
	src      *srcStream // the tree read ahead, while fill runs
	// ctx, if not nil, stops the import when done (an interrupt): it is
	// checked before each entry and each MiB of file data.
	ctx context.Context
}

// interrupted returns an error once im.ctx is done.
func (im *importer) interrupted() error {
	if im.ctx == nil || im.ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("interrupted: %w", context.Cause(im.ctx))
}

func newImporter(v *ext4io.Volume) *importer {
	bs := v.BlockSize()
	return &importer{v: v, bs: bs, buf: make([]byte, max(1<<20, bs)), zero: make([]byte, bs), links: map[fileID]string{}}
}

// dirRef is an image directory the import fills: its path, and a File
// of it, through which its entries are created without resolving its
// path each time (nil until needed).
type dirRef struct {
	path string
	f    *ext4io.File
}

// dir returns a File of the directory r.
func (im *importer) dir(r *dirRef) (*ext4io.File, error) {
	if r.f != nil {
		return r.f, nil
	}
	f, err := im.v.Open(r.path)
	if err != nil {
		return nil, err
	}
	r.f = f
	return f, nil
}

// closeDir closes r's File if it is open.
func (im *importer) closeDir(r *dirRef) error {
	f := r.f
	r.f = nil
	if f == nil {
		return nil
	}
	return f.Close()
}

// importTree copies the validated tree t into the volume's directory dst,
// which exists; with attrs, dst takes the attributes of t's top too.
func (im *importer) importTree(t *srcTree, dst string, attrs bool) error {
	im.noXattrs = !t.xattrs
	r := &dirRef{path: dst}
	err := im.fill(t.root, r)
	if err == nil && attrs {
		err = im.dirAttrs(t.root, r)
	}
	if cerr := im.closeDir(r); err == nil {
		err = cerr
	}
	return err
}

// fill creates the entries of the host directory e in the image
// directory r, from the tree read ahead (srcStream, started here for the
// top directory).
func (im *importer) fill(e *srcEntry, r *dirRef) error {
	if im.src == nil {
		im.src = newSrcStream(e, im.noXattrs)
		defer func() {
			im.src.stop()
			im.src = nil
		}()
	}
	for {
		it, ok := im.src.next()
		if !ok {
			return fmt.Errorf("%s: the host tree read ahead ended early", e.host)
		}
		if it.e == nil {
			return it.err // the end of e, and the errors listing it
		}
		err := it.err
		if err == nil {
			err = im.interrupted()
		}
		if err == nil {
			err = im.one(it.e, path.Join(r.path, it.e.name), r, &it)
		}
		im.src.release(&it)
		if err != nil {
			return fmt.Errorf("%s: %w", it.e.host, err)
		}
	}
}

// one creates the entry e (loaded) at d, in the directory parent (nil
// for the top of put's tree, created by its path); it is e read ahead,
// nil for the top.
func (im *importer) one(e *srcEntry, d string, parent *dirRef, it *srcItem) error {
	m := e.fi.Mode()
	if id, nlink, _, ok := hostID(e.fi); ok && !m.IsDir() && nlink > 1 {
		if first, seen := im.links[id]; seen {
			return im.v.Link(first, d)
		}
		im.links[id] = d
	}
	switch {
	case m.IsDir():
		r := &dirRef{path: d}
		err := im.mkdir(parent, e.name, r)
		if err == nil {
			err = im.fill(e, r)
		}
		if err == nil {
			err = im.dirAttrs(e, r)
		}
		if cerr := im.closeDir(r); err == nil {
			err = cerr
		}
		return err
	case m.IsRegular():
		return im.copyFile(e, d, parent, it) // attributes and times set through the open file
	case m&fs.ModeSymlink != 0:
		if err := im.v.Symlink(e.target, d); err != nil {
			return err
		}
	default: // fifo, socket, device: checked by the walk
		if err := im.v.Mknod(d, m&(fs.ModeType|fs.ModeCharDevice|fs.ModePerm), e.rdev); err != nil {
			return err
		}
	}
	return im.attrs(e, d)
}

// mkdir makes the directory r (named name in parent, if not nil) and
// opens it.
func (im *importer) mkdir(parent *dirRef, name string, r *dirRef) error {
	var err error
	if parent != nil {
		var pf, f *ext4io.File
		if pf, err = im.dir(parent); err == nil {
			if f, err = pf.MkdirAt(name, 0o700); err == nil {
				r.f = f
			}
		}
	} else {
		err = im.v.Mkdir(r.path, 0o700)
	}
	if errors.Is(err, fs.ErrExist) && im.lostFound && r.path == "/lost+found" {
		err = nil // mkfs's own: filled and given the source's attributes, as mkfs.ext4 -d does
	}
	return err
}

// copyFile copies the regular file e to a new file d (named e.name in
// parent, if not nil), from it (read ahead) or else the host file: its
// data ranges (SEEK_DATA) less whole blocks of zeroes, then its size.
func (im *importer) copyFile(e *srcEntry, d string, parent *dirRef, it *srcItem) error {
	if it == nil || it.data == nil && it.in == nil {
		in, err := openSource(e.host)
		if err != nil {
			return err
		}
		defer in.Close()
		size, same, err := in.same(e.fi)
		if err != nil {
			return err
		}
		if !same {
			return fmt.Errorf("changed since the walk: %w", ext4io.ErrInvalid)
		}
		it = &srcItem{in: in, size: size}
	}
	var err error
	var out *ext4io.File
	if parent != nil {
		var pf *ext4io.File
		if pf, err = im.dir(parent); err == nil {
			out, err = pf.CreateAt(e.name, 0o600)
		}
	} else {
		out, err = im.v.OpenFile(d, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if err != nil {
		return err
	}
	if it.data != nil {
		if err = im.writeNonZero(out, it.data, 0); err == nil {
			err = out.Truncate(it.size)
		}
	} else {
		err = im.copyData(out, it.in, it.size)
	}
	if err == nil {
		err = setAttrs(out, e)
	}
	if err == nil {
		err = out.Chtimes(hostAtime(e.fi), e.fi.ModTime())
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// errShrank is the error of a source file that ended before the size it
// had when it was opened: its copy would hold zeroes it never had.
var errShrank = fmt.Errorf("shrank while copied: %w", ext4io.ErrInvalid)

// copyData copies size bytes of in (its data ranges) to out, and fails
// with errShrank if in ends before that.
func (im *importer) copyData(out *ext4io.File, in *srcFile, size int64) error {
	ranges, err := dataRanges(in, size)
	if err != nil {
		return err
	}
	bs := int64(im.bs)
	for _, r := range ranges {
		// Whole image blocks, so that a zero block is recognised as one.
		for p := r[0] / bs * bs; p < r[1]; {
			if err := im.interrupted(); err != nil {
				return err
			}
			n, rerr := in.ReadAt(im.buf[:min(int64(len(im.buf)), r[1]-p)], p)
			if err := im.writeNonZero(out, im.buf[:n], p); err != nil {
				return err
			}
			p += int64(n)
			if rerr == io.EOF {
				return errShrank
			}
			if rerr != nil {
				return rerr
			}
		}
	}
	if err := checkNotShrunk(in, size); err != nil {
		return err
	}
	return out.Truncate(size)
}

// checkNotShrunk fails with errShrank if in is now shorter than size: the
// data ranges of a file truncated meanwhile end at its new end, which the
// reads then never pass.
func checkNotShrunk(in *srcFile, size int64) error {
	cur, err := in.size()
	if err != nil {
		return err
	}
	if cur < size {
		return errShrank
	}
	return nil
}

// writeNonZero writes b at off but for its whole blocks of zeroes (off is
// block-aligned).
func (im *importer) writeNonZero(out *ext4io.File, b []byte, off int64) error {
	start := -1 // start of the pending run of non-zero blocks
	for i := 0; i < len(b); i += im.bs {
		blk := b[i:min(i+im.bs, len(b))]
		zero := bytes.Equal(blk, im.zero[:len(blk)])
		switch {
		case !zero && start < 0:
			start = i
		case zero && start >= 0:
			if _, err := out.WriteAt(b[start:i], off+int64(start)); err != nil {
				return err
			}
			start = -1
		}
	}
	if start >= 0 {
		if _, err := out.WriteAt(b[start:], off+int64(start)); err != nil {
			return err
		}
	}
	return nil
}

// attrs sets the extended attributes, owner, mode and times of d from the
// host entry e, by d's path.
func (im *importer) attrs(e *srcEntry, d string) error {
	if err := setAttrs(pathTarget{im.v, d}, e); err != nil {
		return err
	}
	return im.times(e, d)
}

// times sets d's atime and mtime from e, last: writing and setting
// attributes change them.
func (im *importer) times(e *srcEntry, d string) error {
	return im.v.Lchtimes(d, hostAtime(e.fi), e.fi.ModTime())
}

// hostAtime returns fi's atime, or its mtime where the host has none.
func hostAtime(fi fs.FileInfo) time.Time {
	if at, _, _, ok := hostStat(fi); ok {
		return at
	}
	return fi.ModTime()
}

// dirAttrs sets the attributes and times of the filled directory r from
// e through its open File: one path lookup at most.
func (im *importer) dirAttrs(e *srcEntry, r *dirRef) error {
	f, err := im.dir(r)
	if err != nil {
		return err
	}
	if err := setAttrs(f, e); err != nil {
		return err
	}
	return f.Chtimes(hostAtime(e.fi), e.fi.ModTime())
}

// attrTarget is what setAttrs changes: an open *ext4io.File (no path
// lookups) or a path (pathTarget).
type attrTarget interface {
	Setxattr(attr string, value []byte, flags int) error
	Chown(uid, gid int) error
	Chmod(mode fs.FileMode) error
}

// pathTarget changes the file at a path, not following a final symlink.
type pathTarget struct {
	v    *ext4io.Volume
	name string
}

func (p pathTarget) Setxattr(attr string, value []byte, flags int) error {
	return p.v.Lsetxattr(p.name, attr, value, flags)
}
func (p pathTarget) Chown(uid, gid int) error     { return p.v.Lchown(p.name, uid, gid) }
func (p pathTarget) Chmod(mode fs.FileMode) error { return p.v.Chmod(p.name, mode) }

// setAttrs sets the extended attributes, owner and mode of t from the
// host entry e. Attributes come first: an ACL sets mode bits, which the
// host's mode then confirms; the owner before the mode, which a chown
// may strip of setuid. A symlink's mode is left as made.
func setAttrs(t attrTarget, e *srcEntry) error {
	for _, name := range slices.Sorted(maps.Keys(e.xattrs)) {
		if err := t.Setxattr(name, e.xattrs[name], 0); err != nil {
			return err
		}
	}
	fi := e.fi
	if _, uid, gid, ok := hostStat(fi); ok {
		if err := t.Chown(uid, gid); err != nil {
			return err
		}
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil
	}
	return t.Chmod(fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky))
}

// interruptible returns a context done at the first of stopSignals, for
// an import to stop at (the signals are caught until stop): the command
// then fails as for any import error, removing a new image.
func interruptible() (ctx context.Context, stop func()) {
	sigs := stopSignals()
	if len(sigs) == 0 {
		return context.WithCancel(context.Background()) // NotifyContext of none would catch every signal
	}
	return signal.NotifyContext(context.Background(), sigs...)
}

// stopSignals returns the signals a long-running command catches to stop
// cleanly: SIGINT, SIGTERM and SIGHUP, but for those the process started
// with ignored (nohup, a background job of a shell), which stay ignored,
// as libfuse installs its handlers only over the default action.
func stopSignals() []os.Signal {
	var sigs []os.Signal
	for _, s := range []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP} {
		if !signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	return sigs
}
