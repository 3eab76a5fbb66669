package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/layout"
)

// ext4io get copies out of an image the way tar extracts an archive it
// does not trust. Every host operation is relative to the destination:
// each directory it creates is opened as an os.Root, and each entry is
// created in its directory's Root by one validated name, exclusively
// (Mkdir, O_CREATE|O_EXCL, Symlink all fail on an existing name), so a
// symlink or directory already on the host, or one this run made, is
// never followed or changed. Only what this run created is chmodded and
// has its times set. Names come from the image and are checked before
// use; a directory reached twice (a hard link to a directory) or nested
// deeper than maxGetDepth is refused.

// maxGetDepth bounds the directory nesting get follows (each level holds
// one open directory); tests lower it.
var maxGetDepth = 256

// exporter is the state of one get run.
type exporter struct {
	v        *ext4io.Volume
	preserve bool        // -p: keep setuid/setgid/sticky, ignore the umask
	owners   bool        // -p as root: keep owners too
	umask    fs.FileMode // applied to modes unless preserve
	seen     map[uint32]bool
	buf      []byte
	// top is the host directory the run's top entry is made in (the
	// destination's parent, or the destination when get fills an
	// existing directory), and links maps an image inode with more than
	// one name to the first copy's path in top, so further names become
	// hard links to it (top.Link: linkat without following a final
	// symlink, resolved inside top). Such a path starts at the top entry,
	// and each directory on it was made by this run, exclusively: a link
	// joins two names this run made, whatever the image holds. An inode
	// whose other names lie outside the copied tree is copied once.
	top     *os.Root
	links   map[uint32]string
	skipped []error // special files the host refused to make
	// unsearchable lists the directories whose mode denies their owner
	// search (x): they get it last, deepest first (as tar delays
	// directory modes), so that a later name of an inode copied into one
	// can still be linked to its first copy there.
	unsearchable []pendingMode
	// copied counts the data blocks this run copied out of regular
	// files, and capacity is the image's block count: ext4 shares no
	// block between files (hard links are made as links), so a run that
	// would copy more blocks than the image has is reading extents that
	// map the same blocks over and over, and stops before writing them.
	copied, capacity uint64
}

func cmdGet(args []string, w io.Writer) error {
	fs := newFlags("get")
	preserve := fs.Bool("p", false, "preserve like cp -p and tar -p: keep setuid, setgid and sticky bits, ignore the umask, copy every extended attribute (not only user.*), make device nodes, and as root keep owners")
	pos, err := parseArgs(fs, args, 3, 3)
	if err != nil {
		return err
	}
	v, err := openImage(pos[0])
	if err != nil {
		return err
	}
	defer v.Close()
	src, dst := pos[1], pos[2]
	e := &exporter{v: v, preserve: *preserve, owners: *preserve && os.Geteuid() == 0,
		seen: map[uint32]bool{}, links: map[uint32]string{}, buf: make([]byte, 1<<20),
		capacity: v.Superblock().BlocksCount}
	if !e.preserve {
		e.umask = umask()
	}
	// Into an existing directory: keep the source's base name, or for the
	// image's root, fill the directory itself (leaving its own mode and
	// times alone: this run did not create it).
	if di, err := os.Stat(dst); err == nil && di.IsDir() {
		base := path.Base(path.Clean("/" + src))
		if base == "/" {
			return e.into(dst, src)
		}
		dst = filepath.Join(dst, base)
	}
	parent, name := filepath.Split(filepath.Clean(dst))
	if parent == "" {
		parent = "."
	}
	r, err := os.OpenRoot(parent)
	if err != nil {
		return err
	}
	defer r.Close()
	e.top = r
	return e.done(e.export(r, src, name, name, 0))
}

// pendingMode is a directory's mode to set last, by its path in top.
type pendingMode struct {
	rel  string
	mode fs.FileMode
}

// done sets the modes left for last and adds the special files the host
// refused to make to err.
func (e *exporter) done(err error) error {
	if err != nil {
		return err
	}
	for _, p := range e.unsearchable {
		if err := e.top.Chmod(p.rel, p.mode); err != nil {
			return err
		}
	}
	if len(e.skipped) == 0 {
		return nil
	}
	listed := e.skipped
	if len(listed) > maxWalkProblems {
		listed = append(listed[:maxWalkProblems:maxWalkProblems], fmt.Errorf("and %d more", len(e.skipped)-maxWalkProblems))
	}
	return fmt.Errorf("%d special files not made (devices need -p and root):\n%w", len(e.skipped), errors.Join(listed...))
}

// into copies the entries of the image directory src into the existing
// host directory dst.
func (e *exporter) into(dst, src string) error {
	fi, err := e.v.Lstat(src)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: not a directory", src)
	}
	e.seen[fi.Ino] = true
	r, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer r.Close()
	e.top = r
	return e.done(e.fill(r, src, ".", 0))
}

// checkName rejects a directory entry name that is not one path element.
func checkName(dir, name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%s: bad name %q in directory: %w", dir, name, ext4io.ErrCorrupt)
	}
	return nil
}

// export copies the image's src (any file type or a directory tree) to
// the new entry name in the host directory r, which is rel in e.top.
// depth counts the directories above src in this run.
func (e *exporter) export(r *os.Root, src, name, rel string, depth int) error {
	fi, err := e.v.Lstat(src)
	if err != nil {
		return err
	}
	linked := !fi.IsDir() && fi.Nlink > 1
	if first, ok := e.links[fi.Ino]; ok && linked {
		return e.top.Link(first, rel)
	}
	err = e.exportNew(r, src, name, rel, depth, fi)
	if err == nil && linked {
		e.links[fi.Ino] = rel
	}
	if errors.Is(err, errSkipped) {
		return nil
	}
	return err
}

// errSkipped reports a special file the host refused to make (listed in
// e.skipped).
var errSkipped = errors.New("skipped")

// exportNew is export for an inode not copied before in this run.
func (e *exporter) exportNew(r *os.Root, src, name, rel string, depth int, fi *ext4io.FileInfo) error {
	mode := e.mode(fi.Mode())
	switch m := fi.Mode(); {
	case m&fs.ModeSymlink != 0:
		t, err := e.v.Readlink(src)
		if err != nil {
			return err
		}
		if err := r.Symlink(t, name); err != nil {
			return err
		}
		if err := e.xattrsAt(r, src, name); err != nil {
			return err
		}
		if err := e.chown(r, name, fi); err != nil {
			return err
		}
		return hostLutimes(r, name, fi.Atime, fi.Mtime)
	case fi.IsDir():
		if depth >= maxGetDepth {
			return fmt.Errorf("%s: directories nested deeper than %d", src, maxGetDepth)
		}
		if e.seen[fi.Ino] {
			return fmt.Errorf("%s: directory inode %d reached twice (a directory cycle or hard link): %w", src, fi.Ino, ext4io.ErrCorrupt)
		}
		e.seen[fi.Ino] = true
		// Owner-only until it is filled; its own mode and times last.
		if err := r.Mkdir(name, 0o700); err != nil {
			return err
		}
		sub, err := r.OpenRoot(name)
		if err != nil {
			return err
		}
		err = e.fill(sub, src, rel, depth+1)
		sub.Close()
		if err != nil {
			return err
		}
		if err := e.xattrsDir(r, src, name); err != nil {
			return err
		}
		if err := e.chown(r, name, fi); err != nil {
			return err
		}
		if mode&0o100 == 0 {
			e.unsearchable = append(e.unsearchable, pendingMode{rel, mode})
			mode |= 0o700
		}
		if err := r.Chmod(name, mode); err != nil {
			return err
		}
		return r.Chtimes(name, fi.Atime, fi.Mtime)
	case m.IsRegular():
		f, err := e.v.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		out, err := r.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		err = e.copySparse(out, f, fi)
		if err == nil {
			err = e.xattrs(out, src)
		}
		if err == nil && e.owners {
			err = out.Chown(int(fi.UID), int(fi.GID))
		}
		if err == nil {
			err = out.Chmod(mode)
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		return r.Chtimes(name, fi.Atime, fi.Mtime)
	case m&(fs.ModeNamedPipe|fs.ModeSocket|fs.ModeDevice) != 0:
		if m&fs.ModeDevice != 0 && !e.preserve {
			// A device node from an untrusted image would hand its
			// readers the host's device: made only when asked for.
			e.skipped = append(e.skipped, fmt.Errorf("%s: device %v not made without -p", src, m.Type()))
			return errSkipped
		}
		if err := hostMknod(r, name, m.Type(), uint32(mode.Perm()), fi.Rdev); err != nil {
			if errors.Is(err, fs.ErrPermission) {
				e.skipped = append(e.skipped, fmt.Errorf("%s: %w", src, err))
				return errSkipped
			}
			return fmt.Errorf("%s: %w", src, err)
		}
		if err := e.xattrsAt(r, src, name); err != nil {
			return err
		}
		if err := e.chown(r, name, fi); err != nil {
			return err
		}
		// Permission bits as made less the umask: now exactly, and
		// setuid, setgid, sticky with -p. Not through a symlink: name
		// is the node just made (os.Root confines it anyway).
		if err := r.Chmod(name, mode); err != nil {
			return err
		}
		return hostLutimes(r, name, fi.Atime, fi.Mtime)
	default:
		return fmt.Errorf("%s: file type %v not supported: %w", src, fi.Mode().Type(), ext4io.ErrUnsupported)
	}
}

// chown gives name in r the owner of fi when -p runs as root (before
// chmod: a chown clears setuid and setgid).
func (e *exporter) chown(r *os.Root, name string, fi *ext4io.FileInfo) error {
	if !e.owners {
		return nil
	}
	return r.Lchown(name, int(fi.UID), int(fi.GID))
}

// xattrsAt is xattrs for the symlink or special file name this run made
// in r, which it does not open.
func (e *exporter) xattrsAt(r *os.Root, src, name string) error {
	names, err := e.v.Llistxattr(src)
	if err != nil {
		return err
	}
	for _, attr := range names {
		if !e.preserve && !strings.HasPrefix(attr, "user.") {
			continue
		}
		val, err := e.v.Lgetxattr(src, attr)
		if err != nil {
			return err
		}
		err = hostLsetxattr(r, name, attr, val)
		if errors.Is(err, fs.ErrPermission) && strings.HasPrefix(attr, "user.") {
			continue // Linux keeps user.* on regular files and directories only
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// xattrs copies the extended attributes of the image's src to the host
// file out: the user namespace, and with -p every namespace (trusted,
// security and POSIX ACLs, which need privileges to set, as tar
// --xattrs --acls).
func (e *exporter) xattrs(out *os.File, src string) error {
	names, err := e.v.Llistxattr(src)
	if err != nil {
		return err
	}
	for _, name := range names {
		if !e.preserve && !strings.HasPrefix(name, "user.") {
			continue
		}
		val, err := e.v.Lgetxattr(src, name)
		if err != nil {
			return err
		}
		if err := setHostXattr(out, name, val); err != nil {
			return err
		}
	}
	return nil
}

// xattrsDir is xattrs for the directory name this run created in r.
func (e *exporter) xattrsDir(r *os.Root, src, name string) error {
	d, err := r.Open(name)
	if err != nil {
		return err
	}
	defer d.Close()
	return e.xattrs(d, src)
}

// fill copies the entries of the image directory src into r, which is
// rel in e.top.
func (e *exporter) fill(r *os.Root, src, rel string, depth int) error {
	ents, err := e.v.DirEntries(src)
	if err != nil {
		return err
	}
	names := make(map[string]bool, len(ents))
	for _, ent := range ents {
		if err := checkName(src, ent.Name); err != nil {
			return err
		}
		if names[ent.Name] {
			return fmt.Errorf("%s: name %q twice in directory: %w", src, ent.Name, ext4io.ErrCorrupt)
		}
		names[ent.Name] = true
		if err := e.export(r, path.Join(src, ent.Name), ent.Name, path.Join(rel, ent.Name), depth); err != nil {
			return err
		}
	}
	return nil
}

// mode is the host mode for an image mode m: its permission bits less the
// umask, and setuid, setgid and sticky only with -p.
func (e *exporter) mode(m fs.FileMode) fs.FileMode {
	if e.preserve {
		return m & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	}
	return m.Perm() &^ e.umask
}

// copySparse copies f's size bytes to out: only its written extents, so
// that holes (and unwritten extents, which read as zeroes) stay holes on
// the host, then sets out's size. Inline-data files have no extents: the
// bytes an inode can store (less than a block) are copied, and the rest,
// which reads as zeroes, stays a hole.
// Extents rather than SeekData: a crafted i_size of 1 TiB is then no
// longer a walk over 2^28 holes in the extent-status cache's regions.
func (e *exporter) copySparse(out *os.File, f *ext4io.File, fi *ext4io.FileInfo) error {
	size := fi.Size()
	if fi.Flags&layout.InodeFlagInlineData != 0 {
		if err := e.copyRange(out, f, 0, min(size, int64(e.v.BlockSize()))); err != nil {
			return err
		}
		return out.Truncate(size)
	}
	exts, err := f.Extents()
	if err != nil {
		return err
	}
	bs := uint64(e.v.BlockSize())
	var blocks uint64
	for _, x := range exts {
		if x.Unwritten || x.Logical >= uint64(size)/bs+1 {
			continue
		}
		blocks += min(x.Logical+x.Length, uint64(size)/bs+1) - x.Logical
	}
	if e.copied+blocks > e.capacity {
		return fmt.Errorf("%d data blocks to copy after %d, more than the image's %d: extents map the same blocks more than once: %w",
			blocks, e.copied, e.capacity, ext4io.ErrCorrupt)
	}
	e.copied += blocks
	for _, x := range exts {
		if x.Unwritten || x.Logical >= uint64(size)/bs+1 {
			continue
		}
		start := int64(x.Logical * bs)
		end := min(size, int64(min(x.Logical+x.Length, uint64(size)/bs+1)*bs))
		if err := e.copyRange(out, f, start, end); err != nil {
			return err
		}
	}
	return out.Truncate(size)
}

// copyRange copies bytes [start, end) of f to the same offsets of out.
func (e *exporter) copyRange(out *os.File, f *ext4io.File, start, end int64) error {
	for p := start; p < end; {
		n, err := f.ReadAt(e.buf[:min(int64(len(e.buf)), end-p)], p)
		if n > 0 {
			if _, werr := out.WriteAt(e.buf[:n], p); werr != nil {
				return werr
			}
			p += int64(n)
		}
		switch {
		case err == io.EOF && p < end:
			return fmt.Errorf("read %d..%d: %w", p, end, io.ErrUnexpectedEOF)
		case err != nil && err != io.EOF:
			return err
		case n == 0 && err == nil:
			return io.ErrNoProgress
		}
	}
	return nil
}
