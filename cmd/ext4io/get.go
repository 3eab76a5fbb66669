package main

import (
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
	umask    fs.FileMode // applied to modes unless preserve
	seen     map[uint32]bool
	buf      []byte
}

func cmdGet(args []string, w io.Writer) error {
	fs := newFlags("get")
	preserve := fs.Bool("p", false, "preserve permissions like tar -p: keep setuid, setgid and sticky bits, ignore the umask, and copy every extended attribute (not only user.*)")
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
	e := &exporter{v: v, preserve: *preserve, seen: map[uint32]bool{}, buf: make([]byte, 1<<20)}
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
	return e.export(r, src, name, 0)
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
	return e.fill(r, src, 0)
}

// checkName rejects a directory entry name that is not one path element.
func checkName(dir, name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%s: bad name %q in directory: %w", dir, name, ext4io.ErrCorrupt)
	}
	return nil
}

// export copies the image's src (file, symlink or directory tree) to the
// new entry name in the host directory r. depth counts the directories
// above src in this run.
func (e *exporter) export(r *os.Root, src, name string, depth int) error {
	fi, err := e.v.Lstat(src)
	if err != nil {
		return err
	}
	mode := e.mode(fi.Mode())
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := e.v.Readlink(src)
		if err != nil {
			return err
		}
		return r.Symlink(t, name)
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
		err = e.fill(sub, src, depth+1)
		sub.Close()
		if err != nil {
			return err
		}
		if err := e.xattrsDir(r, src, name); err != nil {
			return err
		}
		if err := r.Chmod(name, mode); err != nil {
			return err
		}
		return r.Chtimes(name, fi.Atime, fi.Mtime)
	case fi.Mode().IsRegular():
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
	default:
		return fmt.Errorf("%s: file type %v not supported: %w", src, fi.Mode().Type(), ext4io.ErrUnsupported)
	}
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

// fill copies the entries of the image directory src into r.
func (e *exporter) fill(r *os.Root, src string, depth int) error {
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
		if err := e.export(r, path.Join(src, ent.Name), ent.Name, depth); err != nil {
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
// the host, then sets out's size. Inline-data files have no extents and
// are copied whole (the library bounds them by what the inode stores).
// Extents rather than SeekData: a crafted i_size of 1 TiB is then no
// longer a walk over 2^28 holes in the extent-status cache's regions.
func (e *exporter) copySparse(out *os.File, f *ext4io.File, fi *ext4io.FileInfo) error {
	size := fi.Size()
	if fi.Flags&layout.InodeFlagInlineData != 0 {
		if err := e.copyRange(out, f, 0, size); err != nil {
			return err
		}
		return out.Truncate(size)
	}
	exts, err := f.Extents()
	if err != nil {
		return err
	}
	bs := uint64(e.v.BlockSize())
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
