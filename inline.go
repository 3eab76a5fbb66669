package ext4io

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/layout"
)

// Writing on inline_data volumes: convert on modify.
//
// An inline-data inode (EXT4_INLINE_DATA_FL) keeps its bytes in i_block
// and in the value of the in-inode attribute system.data; an inline
// directory keeps the parent's inode number in the first 4 bytes of
// i_block and its entries (no "." or "..") after it and in system.data.
// ext4io reads both (inode.go, dir.go). A regular file's data changes in
// place while it fits the inode (inline_write.go); a directory's entries
// never do. Before a change that does not fit (or any change of a
// directory's entries, a fallocate, direct I/O, LockIO), an inline inode
// becomes an extent-mapped one, as ext4_convert_inline_data does when
// data outgrows the inode:
//
//   - a regular file gets one block holding its bytes (none when empty);
//   - a directory gets one block holding ".", ".." and its entries, with
//     the checksum tail as every directory block (dir.go);
//   - either way EXT4_INLINE_DATA_FL goes, EXT4_EXTENTS_FL comes, the
//     system.data attribute is removed from the inode body (as
//     ext4_destroy_inline_data), and i_block becomes the extent root.
//
// The block, the bitmaps and the inode change in one operation, hence one
// journal transaction; a regular file's data is written to the device
// before that transaction can commit, as every data write is (write.go).
// New regular files start inline (inline_write.go); new directories are
// extent-mapped (legal: Linux does the same for directories it cannot
// keep inline). Changes that leave the data alone (times, mode, owner,
// attributes, link counts, the ".." of a moved directory) keep an inode
// inline, and keep system.data as it is.
//
// Files opened before a conversion copy the inode's mapper and inline
// bytes (File.m, File.inl); the inode tracks them (weakly) while it is
// inline so that a conversion updates them under the inode lock, under
// which they read those fields.

// inlineState is the inline-data part of an inode's in-memory state.
type inlineState struct {
	// live: the inode is an inline-data regular file or directory that
	// has not been converted. Set before the inode is shared, cleared
	// under the inode lock held exclusively after the conversion.
	live atomic.Bool
	// ever: the inode was inline when read; immutable once it is shared.
	ever bool

	mu    sync.Mutex // guards files, and orders live's clearing; a leaf lock
	files []weak.Pointer[File]
}

// initInline marks n, just read, as inline if it is an inline-data
// regular file or directory.
func (n *inode) initInline() {
	if n.in.Flags&layout.InodeFlagInlineData != 0 && (n.in.IsReg() || n.in.IsDir()) {
		n.inline.live.Store(true)
		n.inline.ever = true
	}
}

// newInlineFile is newFile for an inode that was inline when read: it
// copies n.m and n.inl under n.inline.mu, under which a conversion changes
// them, and tracks the File while n is inline.
func newInlineFile(v *Volume, n *inode, ino uint32, name string) *File {
	s := &n.inline
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &File{v: v, n: n, ino: ino, name: name, flag: os.O_RDWR, in: n.in, m: n.m, inl: n.inl}
	f.dio = [2]dioOps{{f: f}, {f: f, shared: true}}
	if s.live.Load() {
		s.files = slices.DeleteFunc(s.files, func(p weak.Pointer[File]) bool { return p.Value() == nil })
		s.files = append(s.files, weak.Make(f))
	}
	return f
}

// setMapperLocked sets n.m (n.mu held exclusively) and, with m == nil
// (undoing a conversion), the m of n's tracked Files.
func (n *inode) setMapperLocked(m *mapper) {
	s := &n.inline
	s.mu.Lock()
	defer s.mu.Unlock()
	n.m = m
	if m == nil {
		for _, p := range s.files {
			if f := p.Value(); f != nil {
				f.m = nil
			}
		}
	}
}

// ensureNotInline converts f's inode if it is inline (see above), in an
// operation of its own: the caller holds no inode lock and is not in an
// operation.
func (f *File) ensureNotInline(op string) error {
	if !f.n.inline.live.Load() { // f is open (checkOpen)
		return nil // small enough to inline: the write paths pay one load
	}
	return f.convertInline(op)
}

// convertInline is ensureNotInline's conversion, as one operation (op:
// failing for space, it runs once more after a commit made the blocks
// freed by earlier operations allocatable, as the writes that need it do).
func (f *File) convertInline(op string) error {
	err := f.v.op(func() error {
		f.n.mu.Lock()
		defer f.n.mu.Unlock()
		err := f.closedLocked()
		if err == nil && f.n.in.IsReg() {
			// Directories convert when their entries change (parentOnly).
			err = f.v.convertInlineLocked(f.n)
		}
		return err
	})
	if err != nil {
		return &fs.PathError{Op: op, Path: f.name, Err: err}
	}
	return nil
}

// ensureDirNotInline converts directory d if it is inline; the caller is
// in an operation and holds no inode lock.
func (d *File) ensureDirNotInline() error {
	if !d.n.inline.live.Load() {
		return nil
	}
	d.n.mu.Lock()
	defer d.n.mu.Unlock()
	return d.v.convertInlineLocked(d.n)
}

// convertInlineLocked converts inline inode n to an extent-mapped one
// (n.mu held exclusively, inside an operation). It does nothing if n is
// no longer inline. On failure n is as it was.
func (v *Volume) convertInlineLocked(n *inode) error {
	if !n.inline.live.Load() || n.freed {
		return nil
	}
	if n.in.Flags&layout.InodeFlagInlineData == 0 || n.m != nil {
		return fmt.Errorf("inode %d: inline state out of step with its flags: %w", n.ino, ErrCorrupt)
	}
	if !v.sb.HasIncompat(layout.IncompatExtents) {
		return fmt.Errorf("inode %d: converting inline data needs the extent feature: %w", n.ino, ErrUnsupported)
	}
	var blk []byte // the block the data goes to; nil for an empty file
	if n.in.IsDir() {
		var err error
		if blk, err = v.inlineDirBlock(n); err != nil {
			return err
		}
	} else if len(n.inl) > 0 {
		if len(n.inl) > v.bs {
			return fmt.Errorf("inode %d: %d bytes of inline data exceed a block: %w", n.ino, len(n.inl), ErrCorrupt)
		}
		blk = make([]byte, v.bs)
		copy(blk, n.inl)
	}
	// The attributes without system.data, checked before anything
	// changes.
	s, err := v.loadXattrsLocked(n)
	if err != nil {
		return err
	}
	ibody := without(s.ibody, layout.XattrIndexSystem, layout.XattrInlineDataName)
	region := layout.XattrIbodyRegion(n.in)
	if region != nil && !layout.XattrIbodyFits(len(region), ibody) {
		return fmt.Errorf("inode %d: in-inode attributes do not fit: %w", n.ino, ErrCorrupt)
	}

	saved := *n.in
	saved.Raw = slices.Clone(n.in.Raw)
	undo := func() {
		raw := n.in.Raw
		*n.in = saved
		copy(raw, saved.Raw)
		n.in.Raw = raw
		n.setMapperLocked(nil)
	}
	n.in.Flags = n.in.Flags&^layout.InodeFlagInlineData | layout.InodeFlagExtents
	n.in.Block = extent.EmptyRoot()
	if region != nil {
		layout.EncodeXattrIbody(region, ibody)
	}
	m, err := v.newMapper(n)
	if err != nil {
		undo()
		return err
	}
	n.setMapperLocked(m)
	t := &File{v: v, n: n, ino: n.ino, name: fmt.Sprintf("<inode %d>", n.ino), flag: os.O_RDWR, in: n.in, m: n.m}
	if n.in.IsDir() {
		n.in.Size = 0
		if _, err := t.appendBlockLocked(blk); err != nil {
			undo()
			return err
		}
	} else {
		if blk != nil {
			start, got, err := t.allocRun(0, 1, 1)
			if err != nil {
				undo()
				return err
			}
			if _, err := v.dev.WriteAt(blk, int64(start)*int64(v.bs)); err != nil {
				v.alloc.Free(start, got)
				undo()
				return fmt.Errorf("ext4io: inode %d: write: %w", n.ino, wrapIO(err))
			}
			if err := t.mapRun(0, start, got, false); err != nil {
				// mapRun freed the run; the tree's root is still empty.
				undo()
				return err
			}
		}
		if err := v.writeInodeLocked(n); err != nil {
			return err // the transaction holds half a change: endOpErr stops the volume
		}
	}
	if v.pc != nil && n.in.IsReg() {
		n.bops = newBufOps(v, n)
	}
	s2 := &n.inline
	s2.mu.Lock()
	n.inl = nil
	for _, p := range s2.files {
		if f := p.Value(); f != nil {
			f.m, f.inl = n.m, nil
		}
	}
	s2.files = nil
	s2.live.Store(false)
	s2.mu.Unlock()
	return nil
}

// inlineDirBlock returns the directory block that holds inline directory
// n's entries: ".", "..", then the entries in stored order, the last one
// reaching the end of the block (or its checksum tail).
func (v *Volume) inlineDirBlock(n *inode) ([]byte, error) {
	d := &File{v: v, n: n, ino: n.ino, in: n.in, inl: n.inl}
	b := make([]byte, v.bs)
	end := v.bs
	if v.csum {
		end -= layout.DirTailLen
	}
	off, last := 0, -1
	err := d.scanInlineDir(func(e layout.DirEntry) error {
		name := e.Name
		if int(e.NameLen) < len(name) {
			name = name[:e.NameLen]
		}
		ft := e.FileType
		switch string(name) {
		case ".", "..":
			ft = v.entryType(layout.ModeDir)
		}
		rl := layout.DirRecLen(len(name))
		if off+rl > end {
			return fmt.Errorf("inline directory inode %d: entries exceed a block: %w", n.ino, ErrCorrupt)
		}
		layout.PutDirEntry(b, off, e.Inode, rl, ft, name)
		last = off
		off += rl
		return nil
	})
	if err != nil {
		return nil, err
	}
	layout.SetDirRecLen(b, last, end-last)
	if v.csum {
		layout.SetDirTail(layout.InodeSeed(v.csumSeed, n.ino, n.in.Generation), b)
	}
	return b, nil
}

// setInlineDotDotLocked points inline directory d's parent pointer (the
// first 4 bytes of i_block) at parent; d.n.mu is held exclusively and the
// caller writes the inode.
func (d *File) setInlineDotDotLocked(parent uint32) error {
	n := d.n
	if len(n.inl) < layout.InlineDirParentLen || n.in.Flags&layout.InodeFlagInlineData == 0 {
		return fmt.Errorf("directory inode %d: neither mapped nor inline: %w", d.ino, ErrCorrupt)
	}
	layout.SetInlineDirParent(n.in.Block[:], parent)
	// n.inl is shared by the inode's Files (the same array): they see the
	// new parent under the lock.
	layout.SetInlineDirParent(n.inl, parent)
	n.dotdot.Store(parent)
	return nil
}
