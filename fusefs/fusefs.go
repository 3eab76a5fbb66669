//go:build linux

package fusefs

import (
	"context"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io"
	iofs "io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/layout"
)

// Options configure Mount.
type Options struct {
	// ReadOnly mounts read-only (the Volume may still be writable).
	ReadOnly bool
	// AllowOther lets users other than the mounting one use the mount.
	AllowOther bool
	// NoDefaultPermissions leaves permission checks to nobody: by default
	// the mount has default_permissions and the kernel checks them.
	NoDefaultPermissions bool
	// DirectIO makes every open bypass the kernel's page cache
	// (FOPEN_DIRECT_IO), as the direct_io mount option of libfuse does.
	DirectIO bool
	// NoWritebackCache turns off the kernel's write-back caching
	// (FUSE_WRITEBACK_CACHE), which is on by default: the kernel keeps
	// written data in its page cache and writes it back later, as for a
	// local file system, and keeps mtime and the size itself, sending them
	// in setattr. Without it every write(2) is a request to the server.
	NoWritebackCache bool
	// KeepCache keeps a file's pages in the kernel's page cache when it
	// is opened again (FOPEN_KEEP_CACHE, libfuse's kernel_cache): without
	// it every open drops them. Only this mount changes the image, so the
	// cache stays right.
	KeepCache bool
	// Debug logs every FUSE request.
	Debug bool
	// FsName is the source shown in /proc/mounts (default "ext4io").
	FsName string
	// Extra holds further -o options passed to the kernel as they are.
	Extra []string
	// EntryTimeout and AttrTimeout are how long the kernel caches names
	// and attributes (0: one second, as libfuse; negative: no caching).
	EntryTimeout, AttrTimeout time.Duration
}

// Server is a mounted Volume. It is safe for concurrent use.
type Server struct {
	v    *ext4io.Volume
	srv  *fuse.Server
	ro   bool
	dio  bool
	keep bool

	// renameMu orders path building against directory renames (see the
	// package doc): path operations hold it shared, directory renames
	// exclusively.
	renameMu sync.RWMutex
	// renames counts renames that returned in the last 50 ms, whose move
	// in go-fuse's tree may not be done yet; a path operation that found
	// nothing retries while it is not zero.
	renames atomic.Int32

	// polled is closed once go-fuse's poll hack has made the kernel stop
	// sending FUSE_POLL (see Mount); open and create wait for it.
	polled chan struct{}

	bsize uint32
}

// Mount serves v at dir. The caller keeps v and closes it after Wait
// returns (Close of a writable volume writes back, commits and marks the
// file system clean).
//
// The mount is visible before Mount returns. Code in the serving process
// must not use it until then (wait for Mount, not for /proc/self/mounts):
// an open of a file there before the kernel has learned that the server
// does not implement FUSE_POLL can hang the whole process (see the
// comment in Mount). Other processes may use it at any time.
func Mount(v *ext4io.Volume, dir string, o Options) (*Server, error) {
	// The mount point must be a directory. fusermount3 also mounts on a
	// regular file; go-fuse's first open of the mount then fails and
	// fs.Mount returns that error with the file system still mounted
	// over the file, and no Server to unmount it with.
	if err := mountPoint(dir); err != nil {
		return nil, err
	}
	// With auto_unmount fusermount3 stays running to unmount after the
	// server exits, and go-fuse waits for it to exit before it serves the
	// mount: the mount would be made and never answered.
	for _, opt := range o.Extra {
		if opt == "auto_unmount" {
			return nil, fmt.Errorf("fusefs: mount option auto_unmount: not supported (the mount would never be served): %w", errors.ErrUnsupported)
		}
	}
	s := &Server{v: v, ro: o.ReadOnly || !v.Writable(), dio: o.DirectIO, keep: o.KeepCache, bsize: uint32(v.BlockSize()), polled: make(chan struct{})}
	root := &node{s: s}
	sec := time.Second
	et, at := sec, sec
	if o.EntryTimeout != 0 {
		et = max(o.EntryTimeout, 0)
	}
	if o.AttrTimeout != 0 {
		at = max(o.AttrTimeout, 0)
	}
	name := o.FsName
	if name == "" {
		name = "ext4io"
	}
	mo := fuse.MountOptions{
		AllowOther: o.AllowOther,
		FsName:     name,
		Name:       "ext4io",
		Debug:      o.Debug,
		// Let many requests run at once (go-fuse serves each in its own
		// goroutine); the kernel's default of 12 background requests is
		// low for parallel I/O.
		MaxBackground: 64,
		MaxWrite:      1 << 20,
		// Copy replies instead of splicing them through a pipe: for the
		// 4 KiB reads that dominate random I/O the pipe's set-up costs
		// more than the copy (libfuse does not splice by default either;
		// measurements in docs/fuse.md).
		DisableSplice: true,
	}
	if !o.NoWritebackCache && !s.ro {
		mo.ExtraCapabilities |= fuse.CAP_WRITEBACK_CACHE
	}
	if !o.NoDefaultPermissions {
		mo.Options = append(mo.Options, "default_permissions")
	}
	if s.ro {
		mo.Options = append(mo.Options, "ro")
	}
	mo.Options = append(mo.Options, o.Extra...)
	fo := &fs.Options{
		MountOptions: mo,
		EntryTimeout: &et,
		AttrTimeout:  &at,
		// Mode 0 is a mode like any other (go-fuse would show 0644).
		NullPermissions: true,
	}
	fi, err := v.Lstat("/")
	if err != nil {
		return nil, err
	}
	fo.RootStableAttr = &fs.StableAttr{Ino: uint64(fi.Ino), Gen: uint64(fi.Generation), Mode: syscall.S_IFDIR}
	// fs.Mount returns once go-fuse has opened and polled a file of its
	// own on the mount, so that the kernel has learned (ENOSYS) that this
	// server does not implement FUSE_POLL. Until then an open of a regular
	// file by a Go program, which registers it with the runtime's epoll,
	// sends FUSE_POLL from a raw epoll_ctl that keeps its thread's P: in
	// this process, a garbage collection's stop-the-world then waits for
	// that thread while the goroutines that would answer are stopped, and
	// the process hangs for good. Open therefore replies only after
	// fs.Mount returned, and so does create outside the root directory. A
	// create in the root cannot wait: the kernel holds the root locked
	// while it waits for the reply, and go-fuse's lookup of its own file
	// there would wait for that lock. A program in this process must
	// still not create files in the mount's root before Mount returns.
	srv, err := fs.Mount(dir, root, fo)
	close(s.polled)
	if err != nil {
		return nil, err
	}
	s.srv = srv
	return s, nil
}

// mountPoint checks that dir is an existing directory, with an
// *fs.PathError of op "mount" naming dir when it is not.
func mountPoint(dir string) error {
	fi, err := os.Stat(dir)
	var pe *iofs.PathError
	switch {
	case errors.As(err, &pe):
		err = pe.Err
	case err == nil && !fi.IsDir():
		err = syscall.ENOTDIR
	}
	if err != nil {
		return &iofs.PathError{Op: "mount", Path: dir, Err: err}
	}
	return nil
}

// Wait blocks until the file system is unmounted (fusermount3 -u, umount
// or Unmount).
func (s *Server) Wait() { s.srv.Wait() }

// Unmount asks the kernel to unmount the file system.
func (s *Server) Unmount() error { return s.srv.Unmount() }

// node is one inode the kernel knows.
type node struct {
	fs.Inode
	s *Server

	// accessed is set once a read updated atime (or found no need to), and
	// cleared by writes and setattr: relatime updates atime once after
	// each change.
	accessed atomic.Bool

	// open holds the node's open handles, for fchmod and fchown of a file
	// whose last name is gone (the kernel sends them without a handle).
	openMu sync.Mutex
	open   map[*handle]struct{}
}

// opened records h as an open handle of n and returns it.
func (n *node) opened(h *handle) *handle {
	h.n = n
	n.openMu.Lock()
	if n.open == nil {
		n.open = map[*handle]struct{}{}
	}
	n.open[h] = struct{}{}
	n.openMu.Unlock()
	return h
}

var (
	_ fs.NodeLookuper      = (*node)(nil)
	_ fs.NodeGetattrer     = (*node)(nil)
	_ fs.NodeSetattrer     = (*node)(nil)
	_ fs.NodeReaddirer     = (*node)(nil)
	_ fs.NodeOpener        = (*node)(nil)
	_ fs.NodeCreater       = (*node)(nil)
	_ fs.NodeMkdirer       = (*node)(nil)
	_ fs.NodeMknoder       = (*node)(nil)
	_ fs.NodeRmdirer       = (*node)(nil)
	_ fs.NodeUnlinker      = (*node)(nil)
	_ fs.NodeRenamer       = (*node)(nil)
	_ fs.NodeLinker        = (*node)(nil)
	_ fs.NodeSymlinker     = (*node)(nil)
	_ fs.NodeReadlinker    = (*node)(nil)
	_ fs.NodeGetxattrer    = (*node)(nil)
	_ fs.NodeSetxattrer    = (*node)(nil)
	_ fs.NodeListxattrer   = (*node)(nil)
	_ fs.NodeRemovexattrer = (*node)(nil)
	_ fs.NodeStatfser      = (*node)(nil)
	_ fs.NodeFsyncer       = (*node)(nil)
	_ fs.NodeAllocater     = (*node)(nil)
	_ fs.NodeLseeker       = (*node)(nil)
)

func (n *node) ino() uint32 { return uint32(n.StableAttr().Ino) }

// path returns the node's path from the root ("/" for the root) in
// go-fuse's tree, and false for a node no longer reachable (unlinked).
// The caller holds s.renameMu shared.
func (n *node) path() (string, bool) {
	var segs []string
	p := &n.Inode
	for !p.IsRoot() {
		name, parent := p.Parent()
		if parent == nil {
			return "", false
		}
		segs = append(segs, name)
		p = parent
	}
	var b strings.Builder
	for i := len(segs) - 1; i >= 0; i-- {
		b.WriteByte('/')
		b.WriteString(segs[i])
	}
	if b.Len() == 0 {
		return "/", true
	}
	return b.String(), true
}

// child returns the path of name in directory n.
func (n *node) child(name string) (string, bool) {
	p, ok := n.path()
	if !ok {
		return "", false
	}
	if p == "/" {
		return "/" + name, true
	}
	return p + "/" + name, true
}

// withPath runs fn with the path of name in n (n's own path for name ""),
// holding the rename lock shared. When fn finds nothing (ENOENT) just after
// a rename, the path may be stale (see Rename): if the directory the path
// names no longer is the expected one, the path is built again.
func (n *node) withPath(name string, fn func(p string) syscall.Errno) syscall.Errno {
	for try := 0; ; try++ {
		n.s.renameMu.RLock()
		var p string
		var ok bool
		if name == "" {
			p, ok = n.path()
		} else {
			p, ok = n.child(name)
		}
		var e syscall.Errno
		if !ok {
			e = syscall.ENOENT
		} else {
			e = fn(p)
		}
		stale := e == syscall.ENOENT && ok && n.s.renames.Load() != 0 && try < 100 && n.stale(name, p)
		n.s.renameMu.RUnlock()
		if !stale {
			return e
		}
		time.Sleep(time.Millisecond)
	}
}

// stale reports whether path p, built for name in n (n itself for name
// ""), no longer leads to the right directory: the parent for a name, the
// node itself otherwise.
func (n *node) stale(name, p string) bool {
	want := n.ino()
	if name == "" {
		p = p[:strings.LastIndexByte(p, '/')+1]
		_, parent := n.Parent()
		if parent == nil {
			return false
		}
		want = uint32(parent.StableAttr().Ino)
	} else {
		p = p[:strings.LastIndexByte(p, '/')+1]
	}
	fi, err := n.s.v.Lstat(p)
	return err != nil || fi.Ino != want
}

func (s *Server) writable() syscall.Errno {
	if s.ro {
		return syscall.EROFS
	}
	return 0
}

func checkName(name string) syscall.Errno {
	if len(name) > layout.MaxNameLen {
		return syscall.ENAMETOOLONG
	}
	return 0
}

// fill copies an inode's metadata into a FUSE attribute.
func (s *Server) fill(fi *ext4io.FileInfo, a *fuse.Attr) {
	a.Ino = uint64(fi.Ino)
	a.Size = uint64(fi.Size())
	a.Blocks = fi.Blocks
	a.Mode = uint32(fi.IMode)
	a.Nlink = uint32(fi.Nlink) // 1 for a dir_nlink directory past EXT4_LINK_MAX, as ext4
	a.Rdev = uint32(fi.Rdev)   // Linux's dev_t; FUSE takes its low 32 bits
	a.Owner = fuse.Owner{Uid: fi.UID, Gid: fi.GID}
	a.SetTimes(&fi.Atime, &fi.Mtime, &fi.Ctime)
	a.Blksize = s.bsize
}

func (s *Server) entry(fi *ext4io.FileInfo, out *fuse.EntryOut) {
	s.fill(fi, &out.Attr)
	out.Generation = uint64(fi.Generation)
}

func (n *node) newChild(ctx context.Context, fi *ext4io.FileInfo, out *fuse.EntryOut) *fs.Inode {
	n.s.entry(fi, out)
	st := fs.StableAttr{Mode: uint32(fi.IMode) & syscall.S_IFMT, Ino: uint64(fi.Ino), Gen: uint64(fi.Generation)}
	return n.NewInode(ctx, &node{s: n.s}, st)
}

// Lookup finds name in directory n.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := checkName(name); e != 0 {
		return nil, e
	}
	var fi *ext4io.FileInfo
	e := n.withPath(name, func(p string) syscall.Errno {
		var err error
		fi, err = n.s.v.Lstat(p)
		return errno(err)
	})
	if e != 0 {
		return nil, e
	}
	return n.newChild(ctx, fi, out), 0
}

// stat returns n's metadata through fh when the kernel names an open file,
// else through a File opened by inode number.
func (n *node) stat(fh fs.FileHandle) (*ext4io.FileInfo, syscall.Errno) {
	if h, ok := fh.(*handle); ok {
		fi, err := h.f.Stat()
		if err != nil {
			return nil, errno(err)
		}
		return fi.(*ext4io.FileInfo), 0
	}
	f, err := n.s.v.OpenIno(n.ino())
	if err != nil {
		return nil, errno(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, errno(err)
	}
	return fi.(*ext4io.FileInfo), 0
}

// Getattr reports n's attributes.
func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	fi, e := n.stat(fh)
	if e != 0 {
		return e
	}
	n.s.fill(fi, &out.Attr)
	return 0
}

// fileMode converts i_mode's permission bits to an fs.FileMode as
// Volume.Chmod takes it.
func fileMode(m uint32) iofs.FileMode {
	fm := iofs.FileMode(m & 0o777)
	if m&syscall.S_ISUID != 0 {
		fm |= iofs.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		fm |= iofs.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		fm |= iofs.ModeSticky
	}
	return fm
}

// Setattr changes size, mode, owner and times, in that order, as
// notify_change applies them.
func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if e := n.s.writable(); e != 0 {
		return e
	}
	n.accessed.Store(false)
	if size, ok := in.GetSize(); ok {
		if int64(size) < 0 {
			return syscall.EFBIG
		}
		var f *ext4io.File
		if h, ok := fh.(*handle); ok {
			f = h.f
		} else {
			var err error
			if f, err = n.s.v.OpenIno(n.ino()); err != nil {
				return errno(err)
			}
			defer f.Close()
		}
		if n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR {
			return syscall.EISDIR
		}
		if err := f.Truncate(int64(size)); err != nil {
			return errno(err)
		}
	}
	_, setMode := in.GetMode()
	_, setUID := in.GetUID()
	_, setGID := in.GetGID()
	_, setA := in.GetATime()
	_, setM := in.GetMTime()
	if setMode || setUID || setGID || setA || setM {
		isLink := n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFLNK
		n.s.renameMu.RLock()
		_, linked := n.path()
		n.s.renameMu.RUnlock()
		if !linked {
			// fchmod, fchown or futimens of an open file without a name
			// (and the kernel's mtime update at its close with the
			// write-back cache): through the File, as ext4 changes the
			// orphan inode.
			fi, e := n.setattrOpen(fh, in)
			if e == 0 {
				n.s.fill(fi, &out.Attr)
			}
			return e
		}
		// A linked inode: through a File opened by number, which names
		// the same inode as the path would without resolving it. The
		// kernel holds the inode locked, so no unlink frees it meanwhile.
		if isLink && setMode {
			return syscall.EOPNOTSUPP
		}
		f, e := n.openIno()
		if e != 0 {
			return e
		}
		defer f.Close()
		if err := setAttrs(f, in); err != nil {
			return errno(err)
		}
	}
	fi, e := n.stat(fh)
	if e != 0 {
		return e
	}
	n.s.fill(fi, &out.Attr)
	return 0
}

// setattrOpen changes the owner and mode of n through its handle fh or
// another open handle, and returns the new attributes: ENOENT when it has
// no handle.
func (n *node) setattrOpen(fh fs.FileHandle, in *fuse.SetAttrIn) (*ext4io.FileInfo, syscall.Errno) {
	// Holding openMu keeps Release from closing the File meanwhile.
	n.openMu.Lock()
	defer n.openMu.Unlock()
	var f *ext4io.File
	if h, ok := fh.(*handle); ok {
		f = h.f
	} else {
		for h := range n.open {
			f = h.f
			break
		}
	}
	if f == nil {
		return nil, syscall.ENOENT
	}
	if err := setAttrs(f, in); err != nil {
		return nil, errno(err)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, errno(err)
	}
	return fi.(*ext4io.FileInfo), 0
}

// setAttrs applies the owner, mode and times that in sets to f: the
// owner, then the mode, then the times, each only when in sets it.
func setAttrs(f *ext4io.File, in *fuse.SetAttrIn) error {
	uid, setUID := in.GetUID()
	gid, setGID := in.GetGID()
	if setUID || setGID {
		u, g := -1, -1
		if setUID {
			u = int(uid)
		}
		if setGID {
			g = int(gid)
		}
		if err := f.Chown(u, g); err != nil {
			return err
		}
	}
	if mode, ok := in.GetMode(); ok {
		if err := f.Chmod(fileMode(mode)); err != nil {
			return err
		}
	}
	atime, setA := in.GetATime()
	mtime, setM := in.GetMTime()
	if setA || setM {
		var a, m time.Time
		if setA {
			a = atime
		}
		if setM {
			m = mtime
		}
		return f.Chtimes(a, m)
	}
	return nil
}

var ftMode = [...]uint32{
	layout.FtRegFile: syscall.S_IFREG,
	layout.FtDir:     syscall.S_IFDIR,
	layout.FtChrdev:  syscall.S_IFCHR,
	layout.FtBlkdev:  syscall.S_IFBLK,
	layout.FtFifo:    syscall.S_IFIFO,
	layout.FtSock:    syscall.S_IFSOCK,
	layout.FtSymlink: syscall.S_IFLNK,
}

// Readdir lists directory n, with "." and "..".
func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	var ents []ext4io.DirEntry
	e := n.withPath("", func(p string) syscall.Errno {
		var err error
		ents, err = n.s.v.DirEntries(p)
		return errno(err)
	})
	if e != 0 {
		return nil, e
	}
	list := make([]fuse.DirEntry, 0, len(ents)+2)
	list = append(list, fuse.DirEntry{Name: ".", Ino: uint64(n.ino()), Mode: syscall.S_IFDIR})
	pino := uint64(n.ino())
	if _, parent := n.Parent(); parent != nil {
		pino = parent.StableAttr().Ino
	}
	list = append(list, fuse.DirEntry{Name: "..", Ino: pino, Mode: syscall.S_IFDIR})
	for _, d := range ents {
		var m uint32
		if int(d.Type) < len(ftMode) {
			m = ftMode[d.Type]
		}
		list = append(list, fuse.DirEntry{Name: d.Name, Ino: uint64(d.Ino), Mode: m})
	}
	return fs.NewListDirStream(list), 0
}

// Readlink returns a symlink's target.
func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	var t string
	e := n.withPath("", func(p string) syscall.Errno {
		var err error
		t, err = n.s.v.Readlink(p)
		return errno(err)
	})
	if e != 0 {
		return nil, e
	}
	return []byte(t), 0
}

// owner sets the owner of a new inode f to the caller, and its group to
// the caller's or, in a setgid directory n, the directory's (as
// inode_init_owner does). It returns whether the group came from a setgid
// directory.
func (n *node) owner(ctx context.Context, f *ext4io.File) (sgid bool, e syscall.Errno) {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return false, 0
	}
	uid, gid := int(c.Uid), int(c.Gid)
	if di, e := n.stat(nil); e == 0 && di.IMode&syscall.S_ISGID != 0 {
		gid, sgid = int(di.GID), true
	}
	if uid == 0 && gid == 0 {
		return sgid, 0
	}
	return sgid, errno(f.Chown(uid, gid))
}

// created finishes a new inode in directory n: owner, then mode. f is the
// new inode, open, or nil to open the one at p. It works on the inode, not
// its path, so that the path is resolved once, by the operation that made
// it.
func (n *node) created(ctx context.Context, p string, f *ext4io.File, mode uint32, setMode bool) (*ext4io.FileInfo, syscall.Errno) {
	if f == nil {
		fi, err := n.s.v.Lstat(p)
		if err != nil {
			return nil, errno(err)
		}
		if f, err = n.s.v.OpenIno(fi.Ino); err != nil {
			return nil, errno(err)
		}
		defer f.Close()
	}
	sgid, e := n.owner(ctx, f)
	if e != 0 {
		return nil, e
	}
	st, err := f.Stat()
	if err != nil {
		return nil, errno(err)
	}
	fi := st.(*ext4io.FileInfo)
	if setMode {
		m := mode & 0o7777
		if sgid && mode&syscall.S_IFMT == syscall.S_IFDIR {
			m |= syscall.S_ISGID
		}
		// Most new inodes already have their mode (Mkdir takes it, Create
		// makes 0644): then the inode is complete in one transaction.
		if uint32(fi.IMode)&0o7777 != m {
			if err := f.Chmod(fileMode(m)); err != nil {
				return nil, errno(err)
			}
			if st, err = f.Stat(); err != nil {
				return nil, errno(err)
			}
			fi = st.(*ext4io.FileInfo)
		}
	}
	return fi, 0
}

// Create makes and opens a regular file.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if !n.IsRoot() {
		<-n.s.polled // see Mount
	}
	if e := n.s.writable(); e != 0 {
		return nil, nil, 0, e
	}
	if e := checkName(name); e != 0 {
		return nil, nil, 0, e
	}
	var fi *ext4io.FileInfo
	var f *ext4io.File
	e := n.withPath(name, func(p string) syscall.Errno {
		var err error
		if f, err = n.s.v.Create(p); err != nil {
			return errno(err)
		}
		var e syscall.Errno
		if fi, e = n.created(ctx, p, f, syscall.S_IFREG|mode, true); e != 0 {
			return e
		}
		if flags&syscall.O_DIRECT != 0 {
			f.Close()
			f, err = n.s.v.OpenFile(p, os.O_RDWR|ext4io.O_DIRECT, 0)
		}
		return errno(err)
	})
	if e != 0 {
		if f != nil {
			f.Close()
		}
		return nil, nil, 0, e
	}
	ch := n.newChild(ctx, fi, out)
	return ch, ch.Operations().(*node).opened(&handle{f: f}), n.s.openFlags(flags), 0
}

func (s *Server) openFlags(flags uint32) uint32 {
	if s.dio || flags&syscall.O_DIRECT != 0 {
		return fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES
	}
	if s.keep {
		return fuse.FOPEN_KEEP_CACHE
	}
	return 0
}

// Mkdir makes a directory.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.s.writable(); e != 0 {
		return nil, e
	}
	if e := checkName(name); e != 0 {
		return nil, e
	}
	var fi *ext4io.FileInfo
	e := n.withPath(name, func(p string) syscall.Errno {
		if err := n.s.v.Mkdir(p, fileMode(mode)); err != nil {
			return errno(err)
		}
		var e syscall.Errno
		fi, e = n.created(ctx, p, nil, syscall.S_IFDIR|mode, true)
		return e
	})
	if e != 0 {
		return nil, e
	}
	return n.newChild(ctx, fi, out), 0
}

// Mknod makes a regular file, fifo, socket or device node.
func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.s.writable(); e != 0 {
		return nil, e
	}
	if e := checkName(name); e != 0 {
		return nil, e
	}
	typ := fileMode(mode)
	switch mode & syscall.S_IFMT {
	case 0, syscall.S_IFREG:
		mode |= syscall.S_IFREG
	case syscall.S_IFIFO:
		typ |= iofs.ModeNamedPipe
	case syscall.S_IFSOCK:
		typ |= iofs.ModeSocket
	case syscall.S_IFCHR:
		typ |= iofs.ModeDevice | iofs.ModeCharDevice
	case syscall.S_IFBLK:
		typ |= iofs.ModeDevice
	default:
		return nil, syscall.EINVAL
	}
	var fi *ext4io.FileInfo
	e := n.withPath(name, func(p string) syscall.Errno {
		rdev := ext4io.Mkdev(unix.Major(uint64(dev)), unix.Minor(uint64(dev)))
		if err := n.s.v.Mknod(p, typ, rdev); err != nil {
			return errno(err)
		}
		var e syscall.Errno
		fi, e = n.created(ctx, p, nil, mode, true)
		return e
	})
	if e != 0 {
		return nil, e
	}
	return n.newChild(ctx, fi, out), 0
}

// Symlink makes a symbolic link.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.s.writable(); e != 0 {
		return nil, e
	}
	if e := checkName(name); e != 0 {
		return nil, e
	}
	if len(target) >= int(n.s.bsize) {
		return nil, syscall.ENAMETOOLONG
	}
	var fi *ext4io.FileInfo
	e := n.withPath(name, func(p string) syscall.Errno {
		if err := n.s.v.Symlink(target, p); err != nil {
			return errno(err)
		}
		var e syscall.Errno
		fi, e = n.created(ctx, p, nil, syscall.S_IFLNK, false)
		return e
	})
	if e != 0 {
		return nil, e
	}
	return n.newChild(ctx, fi, out), 0
}

// Link makes name in n another name of target.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.s.writable(); e != 0 {
		return nil, e
	}
	if e := checkName(name); e != 0 {
		return nil, e
	}
	t := target.(*node)
	var fi *ext4io.FileInfo
	e := n.withPath(name, func(p string) syscall.Errno {
		old, ok := t.path()
		if !ok {
			return syscall.ENOENT // linkat of an unlinked file
		}
		if err := n.s.v.Link(old, p); err != nil {
			return errno(err)
		}
		var err error
		fi, err = n.s.v.Lstat(p)
		return errno(err)
	})
	if e != 0 {
		return nil, e
	}
	return n.newChild(ctx, fi, out), 0
}

// Unlink removes a non-directory's name.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if e := n.s.writable(); e != 0 {
		return e
	}
	if e := checkName(name); e != 0 {
		return e
	}
	return n.withPath(name, func(p string) syscall.Errno { return errno(n.s.v.Unlink(p)) })
}

// Rmdir removes an empty directory.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if e := n.s.writable(); e != 0 {
		return e
	}
	if e := checkName(name); e != 0 {
		return e
	}
	return n.withPath(name, func(p string) syscall.Errno { return errno(n.s.v.Rmdir(p)) })
}

// Rename flags (renameat2).
const (
	renameNoReplace = 1 << 0
	renameExchange  = 1 << 1
	renameWhiteout  = 1 << 2
)

// Rename moves name in n to newName in newParent, with
// RENAME_NOREPLACE and RENAME_EXCHANGE as Volume.Rename2 does them;
// RENAME_WHITEOUT (overlayfs) is not supported.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if e := n.s.writable(); e != 0 {
		return e
	}
	if e := checkName(newName); e != 0 {
		return e
	}
	if flags&^(renameNoReplace|renameExchange|renameWhiteout) != 0 {
		return syscall.EINVAL
	}
	if flags&renameWhiteout != 0 {
		return syscall.EOPNOTSUPP
	}
	np := newParent.(*node)
	// A directory's rename changes the paths of everything under it.
	ch := n.GetChild(name)
	isDir := ch == nil || ch.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR
	if flags&renameExchange != 0 {
		// The other side moves too, and may be a directory.
		other := np.GetChild(newName)
		isDir = isDir || other == nil || other.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR
	}
	if isDir {
		n.s.renameMu.Lock()
		defer n.s.renameMu.Unlock()
	} else {
		n.s.renameMu.RLock()
		defer n.s.renameMu.RUnlock()
	}
	op, ok1 := n.child(name)
	npth, ok2 := np.child(newName)
	if !ok1 || !ok2 {
		return syscall.ENOENT
	}
	if err := n.s.v.Rename2(op, npth, uint(flags&(renameNoReplace|renameExchange))); err != nil {
		return errno(err)
	}
	// go-fuse moves the child in its tree after this returns; until then
	// paths built from the tree are stale, and an operation that finds
	// nothing at one tries again (withPath). The kernel keeps both parents
	// locked until the reply, so no other entry can take the old name.
	n.s.renames.Add(1)
	time.AfterFunc(50*time.Millisecond, func() { n.s.renames.Add(-1) })
	return 0
}

// Statfs reports the file system's size and free space, as statfs(2)
// on a mounted ext4 does (Volume.Statfs).
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	st, err := n.s.v.Statfs()
	if err != nil {
		return errno(err)
	}
	out.Bsize = uint32(st.BlockSize)
	out.Frsize = uint32(st.BlockSize)
	out.NameLen = uint32(st.NameMax)
	out.Blocks = st.Blocks
	out.Bfree = st.BlocksFree
	out.Bavail = st.BlocksAvail
	out.Files = st.Files
	out.Ffree = st.FilesFree
	return 0
}

// openIno opens n by inode number for an operation without a handle.
func (n *node) openIno() (*ext4io.File, syscall.Errno) {
	f, err := n.s.v.OpenIno(n.ino())
	return f, errno(err)
}

// Getxattr reads an extended attribute.
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	f, e := n.openIno()
	if e != 0 {
		return 0, e
	}
	defer f.Close()
	val, err := f.Getxattr(attr)
	if err != nil {
		return 0, errno(err)
	}
	if len(dest) < len(val) {
		return uint32(len(val)), syscall.ERANGE
	}
	return uint32(copy(dest, val)), 0
}

// Listxattr lists extended attribute names, NUL-terminated.
func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	f, e := n.openIno()
	if e != 0 {
		return 0, e
	}
	defer f.Close()
	names, err := f.Listxattr()
	if err != nil {
		return 0, errno(err)
	}
	var b []byte
	for _, nm := range names {
		b = append(append(b, nm...), 0)
	}
	if len(dest) < len(b) {
		return uint32(len(b)), syscall.ERANGE
	}
	return uint32(copy(dest, b)), 0
}

// Setxattr sets an extended attribute (flags XATTR_CREATE, XATTR_REPLACE).
func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if e := n.s.writable(); e != 0 {
		return e
	}
	f, e := n.openIno()
	if e != 0 {
		return e
	}
	defer f.Close()
	err := f.Setxattr(attr, data, int(flags))
	if errors.Is(err, ext4io.ErrRange) && len(attr) <= layout.MaxNameLen {
		// A value that fits neither the inode nor a block: ext4 says
		// ENOSPC (the VFS refuses longer names and values over 64 KiB).
		return syscall.ENOSPC
	}
	return errno(err)
}

// Removexattr removes an extended attribute.
func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if e := n.s.writable(); e != 0 {
		return e
	}
	f, e := n.openIno()
	if e != 0 {
		return e
	}
	defer f.Close()
	return errno(f.Removexattr(attr))
}

// handle is an open file.
type handle struct {
	f *ext4io.File
	n *node
	// atime is whether reads update the access time (relatime): not
	// on a read-only mount or with O_NOATIME.
	atime bool
}

// relatime reports whether an access at now updates atime, by Linux's
// relatime rule (relatime_need_update): when atime is not after mtime or
// ctime, or is a day old.
func relatime(fi *ext4io.FileInfo, now time.Time) bool {
	return !fi.Atime.After(fi.Mtime) || !fi.Atime.After(fi.Ctime) || now.Sub(fi.Atime) >= 24*time.Hour
}

// touch updates f's atime after a read, as ext4 with relatime does. The
// kernel serves cached pages without asking, so only reads that reach
// the server count; the first one after a change is the one relatime
// needs.
func (h *handle) touch() {
	if !h.atime || h.n.accessed.Load() {
		return
	}
	fi, err := h.f.Stat()
	if err != nil {
		return
	}
	now := time.Now()
	if relatime(fi.(*ext4io.FileInfo), now) {
		h.f.Accessed(now)
	}
	// Until the file changes again, later reads would not update atime
	// (but for the rule of a day, which an open file's reads do not
	// apply).
	h.n.accessed.Store(true)
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
	_ fs.FileFsyncer  = (*handle)(nil)
)

// Open opens n. O_DIRECT opens use the library's direct I/O (the kernel
// passes aligned requests through; unaligned ones fail with EINVAL as
// ext4's do).
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	<-n.s.polled // see Mount
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		if e := n.s.writable(); e != 0 {
			return nil, 0, e
		}
	}
	// Files are opened by path: ext4io then counts them as open, and an
	// unlink of their last name leaves them readable until they close.
	direct := flags&syscall.O_DIRECT != 0 && n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFREG
	var f *ext4io.File
	e := n.withPath("", func(p string) syscall.Errno {
		var err error
		// The kernel checks each request against the open's access
		// mode; the File is read-write whenever the volume is, so
		// that write-back of the kernel's cache through any handle
		// of a regular file goes through.
		mode := os.O_RDONLY
		if n.s.v.Writable() && n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFREG {
			mode = os.O_RDWR
		}
		if direct {
			mode |= ext4io.O_DIRECT
		}
		f, err = n.s.v.OpenFile(p, mode, 0)
		return errno(err)
	})
	if e != 0 {
		return nil, 0, e
	}
	h := &handle{f: f, atime: !n.s.ro && flags&syscall.O_NOATIME == 0}
	return n.opened(h), n.s.openFlags(flags), 0
}

// Read reads file data.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	k, err := h.f.ReadAt(dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, errno(err)
	}
	h.touch()
	return fuse.ReadResultData(dest[:k]), 0
}

// Write writes file data.
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	k, err := h.f.WriteAt(data, off)
	if err != nil && k == 0 {
		return 0, errno(err)
	}
	h.n.accessed.Store(false)
	return uint32(k), 0
}

// Flush does nothing, as ext4's flush (close does not write back).
func (h *handle) Flush(ctx context.Context) syscall.Errno { return 0 }

// Fsync is fsync, or fdatasync with FUSE_FSYNC_FDATASYNC.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if flags&1 != 0 {
		return errno(h.f.Datasync())
	}
	return errno(h.f.Sync())
}

// Release closes the file; the last close of an unlinked file frees it.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.n.openMu.Lock()
	delete(h.n.open, h)
	h.n.openMu.Unlock()
	return errno(h.f.Close())
}

// Fsync on a node without a handle (fsyncdir and handle-less fsync).
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	if h, ok := fh.(*handle); ok {
		return h.Fsync(ctx, flags)
	}
	f, e := n.openIno()
	if e != 0 {
		return e
	}
	defer f.Close()
	if flags&1 != 0 {
		return errno(f.Datasync())
	}
	return errno(f.Sync())
}

// fallocate modes (linux/falloc.h).
const (
	fallocKeepSize      = 0x01
	fallocPunchHole     = 0x02
	fallocCollapseRange = 0x08
	fallocZeroRange     = 0x10
	fallocInsertRange   = 0x20
	fallocWriteZeroes   = 0x80
)

// Allocate is fallocate for the modes FUSE forwards.
func (n *node) Allocate(ctx context.Context, fh fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	if e := n.s.writable(); e != 0 {
		return e
	}
	var m ext4io.FallocMode
	switch mode {
	case 0:
		m = ext4io.FallocAllocate
	case fallocKeepSize:
		m = ext4io.FallocKeepSize
	case fallocPunchHole | fallocKeepSize:
		m = ext4io.FallocPunchHole
	case fallocZeroRange:
		m = ext4io.FallocZeroRange
	case fallocCollapseRange:
		m = ext4io.FallocCollapseRange
	case fallocInsertRange:
		m = ext4io.FallocInsertRange
	case fallocWriteZeroes:
		m = ext4io.FallocWriteZeroes
	default:
		return syscall.EOPNOTSUPP // zero-range with keep-size, among others
	}
	h, ok := fh.(*handle)
	if !ok {
		return syscall.EBADF
	}
	return errno(h.f.Fallocate(m, int64(off), int64(size)))
}

// Lseek serves SEEK_DATA and SEEK_HOLE (the kernel does the others).
func (n *node) Lseek(ctx context.Context, fh fs.FileHandle, off uint64, whence uint32) (uint64, syscall.Errno) {
	h, ok := fh.(*handle)
	if !ok {
		return 0, syscall.EBADF
	}
	if int64(off) < 0 || int64(off) >= h.f.Size() {
		return 0, syscall.ENXIO
	}
	var r int64
	var err error
	switch whence {
	case 3: // SEEK_DATA
		r, err = h.f.SeekData(int64(off))
	case 4: // SEEK_HOLE
		r, err = h.f.SeekHole(int64(off))
	default:
		return 0, syscall.EINVAL
	}
	if err != nil {
		return 0, errno(err)
	}
	return uint64(r), 0
}
