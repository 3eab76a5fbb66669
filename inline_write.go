package ext4io

import (
	"fmt"
	"io/fs"
	"slices"

	"github.com/ext4io/ext4io/layout"
)

// Inline data written in place (see inline.go for the conversions).
//
// On an inline_data volume a new regular file starts inline: no blocks,
// EXT4_INLINE_DATA_FL and an empty system.data attribute in the inode
// body, as mkfs.ext4 -d makes empty files. Writes and truncates of an
// inline file change it in place, in one operation (its inode), while the
// result fits i_block and the room system.data can take in the inode
// body (ext4_get_max_inline_size); a change that does not fit, a
// fallocate, direct I/O or LockIO converts the file to extents first.
// Directories are created extent-mapped.

// makeNewInline turns in, a new regular file's inode not yet written,
// into an empty inline one when the volume has inline_data and the inode
// body has room for system.data.
func (v *Volume) makeNewInline(in *layout.Inode) {
	if !v.sb.HasIncompat(layout.IncompatInlineData) || !v.sb.HasCompat(layout.CompatExtAttr) || !in.IsReg() {
		return
	}
	region := layout.XattrIbodyRegion(in)
	attrs := []layout.Xattr{{Index: layout.XattrIndexSystem, Name: layout.XattrInlineDataName, Value: []byte{}}}
	if region == nil || !layout.XattrIbodyFits(len(region), attrs) {
		return
	}
	layout.EncodeXattrIbody(region, attrs)
	in.Flags = in.Flags&^layout.InodeFlagExtents | layout.InodeFlagInlineData
	in.Block = [layout.InodeBlockSize]byte{}
}

// changeInline runs change on inline file f's data in place, in an
// operation of its own: ok is false, with nothing changed, when f is not
// (or no longer) an inline regular file, is direct, fails a check that
// writable reports, stores fewer bytes than its size (the rest read as
// zeroes, inode.go's inlineData), or the new data (change's result, at
// most maxInlineLen bytes) does not fit the inode. The caller holds no inode
// lock and is not in an operation.
func (f *File) changeInline(op string, maxLen int64, change func(old []byte) []byte) (bool, error) {
	if f == nil || f.v == nil || f.n == nil || !f.n.inline.live.Load() || f.direct || maxLen > int64(f.v.bs) {
		return false, nil
	}
	if f.checkOpen(op) != nil || f.v.alloc == nil || f.checkWriteMode(op) != nil || f.v.failed() != nil {
		return false, nil // writable reports it
	}
	if err := f.v.beginOp(); err != nil {
		return true, &fs.PathError{Op: op, Path: f.name, Err: err}
	}
	f.n.mu.Lock()
	ok, err := false, f.closedLocked()
	if err == nil && f.n.inline.live.Load() && !f.n.freed && f.in.IsReg() && uint64(len(f.n.inl)) == f.in.Size {
		ok, err = f.v.setInlineDataLocked(f, change(f.n.inl))
	}
	f.n.mu.Unlock()
	if err = f.v.endOpErr(err); err != nil {
		return true, &fs.PathError{Op: op, Path: f.name, Err: err}
	}
	return ok, nil
}

// setInlineDataLocked stores d as inline file f's data (f.n.mu held
// exclusively, in an operation): i_block, then system.data in the inode
// body. It reports false, changing nothing, when d does not fit.
func (v *Volume) setInlineDataLocked(f *File, d []byte) (bool, error) {
	n := f.n
	region := layout.XattrIbodyRegion(n.in)
	if region == nil || len(d) > v.bs {
		return false, nil
	}
	s, err := v.loadXattrsLocked(n)
	if err != nil {
		return false, err
	}
	old, inBlock := s.find(layout.XattrIndexSystem, layout.XattrInlineDataName)
	if old == nil || inBlock || old.ValueInum != 0 {
		return false, fmt.Errorf("inline inode %d has no system.data in its body: %w", n.ino, ErrCorrupt)
	}
	val := []byte{}
	if len(d) > layout.InodeBlockSize {
		val = slices.Clone(d[layout.InodeBlockSize:])
	}
	ibody := replaced(s.ibody, layout.Xattr{Index: layout.XattrIndexSystem, Name: layout.XattrInlineDataName, Value: val, ValueSize: uint32(len(val))})
	if !layout.XattrIbodyFits(len(region), ibody) {
		return false, nil
	}
	layout.EncodeXattrIbody(region, ibody)
	n.in.Block = [layout.InodeBlockSize]byte{}
	copy(n.in.Block[:], d)
	n.setSizeLocked(uint64(len(d)))
	f.touchLocked()
	if err := v.writeInodeLocked(n); err != nil {
		return true, err // endOpErr stops the volume
	}
	st := &n.inline
	st.mu.Lock()
	n.inl = d
	for _, p := range st.files {
		if g := p.Value(); g != nil {
			g.inl = d
		}
	}
	st.mu.Unlock()
	return true, nil
}

// maxInlineWrite bounds the writes writeInline tries: the largest inode
// (64 KiB blocks).
const maxInlineWrite = 1 << 16

// writeInline is pwrite for an inline file whose data still fits the
// inode after the write; ok false means pwrite goes on (and converts).
func (f *File) writeInline(p []byte, off int64) (int, bool, error) {
	if off < 0 || off > maxInlineWrite || int64(len(p)) > maxInlineWrite {
		return 0, false, nil // changeInline checks the block size
	}
	end := off + int64(len(p))
	ok, err := f.changeInline("write", end, func(old []byte) []byte {
		d := make([]byte, max(int64(len(old)), end))
		copy(d, old)
		copy(d[off:], p)
		return d
	})
	if !ok {
		return 0, false, nil
	}
	if err != nil {
		return 0, true, err
	}
	return len(p), true, nil
}

// truncateInline is Truncate for an inline file whose new size fits the
// inode; ok false means Truncate goes on (and converts).
func (f *File) truncateInline(size int64) (bool, error) {
	if size < 0 {
		return false, nil
	}
	return f.changeInline("truncate", size, func(old []byte) []byte {
		d := make([]byte, size)
		copy(d, old)
		return d
	})
}
