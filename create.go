package ext4io

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/layout"
)

func (v *Volume) create(name string, mode uint16) (*File, error) {
	if err := v.checkOpen(); err != nil {
		return nil, err
	}
	if v.alloc == nil {
		return nil, ErrReadOnly
	}
	dir, base, err := v.parentDir(name, opCreate) // the parent's errors before the name's, as Linux
	if err != nil {
		return nil, err
	}
	return v.createIn(dir, base, mode)
}

// createIn creates the regular file base in directory dir (checked by
// parentDir or dirAt), inside an operation.
func (v *Volume) createIn(dir *File, base string, mode uint16) (*File, error) {
	f, _, _, err := v.createOrLookup(dir, base, mode)
	if err == nil && f == nil {
		return nil, ErrExist
	}
	return f, err
}

// createOrLookup is createIn that, when base already names an entry,
// returns that entry's inode number and inode (f nil) instead of failing
// with ErrExist: the lookup and the create are one look at the directory,
// under its lock, and the inode is cached before the lock is released,
// as lookupOpen does.
func (v *Volume) createOrLookup(dir *File, base string, mode uint16) (f *File, ino uint32, existing *inode, err error) {
	dir.n.mu.Lock()
	defer dir.n.mu.Unlock()
	if dir.n.in.LinksCount == 0 {
		return nil, 0, nil, ErrNotFound // removed since resolved (Linux's IS_DEADDIR)
	}
	var hint insertHint
	defer hint.release()
	if e, err := dir.lookupForCreate(base, layout.DirRecLen(len(base)), &hint); err == nil {
		n, err := v.entryInode(e.Inode)
		if err == nil {
			err = v.checkDirParent(dir.ino, base, n)
		}
		return nil, e.Inode, n, err
	} else if !isNotExist(err) {
		return nil, 0, nil, err
	}
	f, err = v.createInLocked(dir, base, mode, &hint)
	return f, 0, nil, err
}

// createInLocked is createIn once the name is known to be free (dir's
// lock held), with the room its lookup found.
func (v *Volume) createInLocked(dir *File, base string, mode uint16, hint *insertHint) (*File, error) {
	ino, err := v.allocInode(dir.ino, false)
	if err != nil {
		return nil, err
	}
	in := v.newInode(mode)
	inheritGroup(dir, in)
	v.makeNewInline(in) // inline_write.go
	if err := v.writeNewInode(ino, in); err != nil {
		v.alloc.FreeInode(ino, false)
		return nil, err
	}
	if err := dir.addEntryHintLocked(base, ino, layout.FtRegFile, hint); err != nil {
		in.LinksCount, in.Dtime = 0, uint32(time.Now().Unix())
		v.writeInode(ino, in)
		v.alloc.FreeInode(ino, false)
		return nil, err
	}
	v.fcDentry(layout.FCTagCreat, dir.ino, ino, base)
	return v.openInode(ino, base)
}

// allocInode allocates an inode for a new file or directory in directory
// parent. The allocator checks the inode table's slot is free; an inode
// still cached here is live too (open, perhaps unlinked), and one the
// bitmap hands out anyway is corruption, as Linux's ext4_new_inode fails
// ("doubly allocated?") when the inode is still in its inode cache. The
// inode's bit stays set then: the inode is in use.
func (v *Volume) allocInode(parent uint32, dir bool) (uint32, error) {
	ino, err := v.alloc.AllocInode(parent, dir)
	if err != nil {
		return 0, err
	}
	if v.cachedInode(ino) != nil {
		return 0, &errs.CorruptError{What: "inode bitmap", Ino: ino, Off: -1, Msg: fmt.Sprintf("inode %d marked free but in use", ino)}
	}
	return ino, nil
}

// newInode returns a fresh extent-mapped inode with the given mode.
func (v *Volume) newInode(mode uint16) *layout.Inode {
	now := layout.TimestampOf(time.Now())
	var gen [4]byte
	rand.Read(gen[:])
	in := &layout.Inode{
		Mode: mode, LinksCount: 1, Flags: layout.InodeFlagExtents,
		Atime: now, Ctime: now, Mtime: now, Crtime: now,
		Generation: binary.LittleEndian.Uint32(gen[:]),
		Block:      extent.EmptyRoot(),
	}
	if isz := v.sb.InodeSizeBytes(); isz > layout.GoodOldInodeSize {
		in.ExtraIsize = 32
		if want := int(v.sb.WantExtraIsize); want >= 32 && layout.GoodOldInodeSize+want <= isz {
			in.ExtraIsize = uint16(want)
		}
	}
	in.Encode(v.sb.InodeSizeBytes())
	return in
}

// addEntryLocked inserts name -> ino into directory f (lock held): into
// the first block with room, or a new block appended to the directory.
func (f *File) addEntryLocked(name string, ino uint32, ft uint8) error {
	return f.addEntryHintLocked(name, ino, ft, nil)
}

// addEntryHintLocked is addEntryLocked that takes the room hint found
// (lookupForCreate), if any, instead of looking again.
func (f *File) addEntryHintLocked(name string, ino uint32, ft uint8, hint *insertHint) error {
	v := f.v
	if hint != nil && hint.ok && v.isDxDir(f.in) {
		layout.InsertDirEntry(hint.buf, hint.slot, ino, ft, []byte(name))
		return f.writeDirBlock(hint.lblk, hint.buf)
	}
	if f.m == nil || f.m.tree == nil {
		return errBlockMappedDir(f.name, f.ino)
	}
	need := layout.DirRecLen(len(name))
	bs := uint64(v.bs)
	nblk := f.in.Size / bs
	if v.isDxDir(f.in) {
		return f.addDxEntryLocked(name, ino, ft, need)
	}
	buf := make([]byte, bs)
	err := f.dirBlocks(nblk, buf, func(lblk uint64) error {
		done, err := f.insertInBlock(lblk, buf, name, ino, ft, need)
		if done || err != nil {
			return cmp.Or(err, errStop)
		}
		if nblk == 1 && v.sb.HasCompat(layout.CompatDirIndex) {
			// The only block is full: index the directory, as
			// ext4_add_entry does with make_indexed_dir.
			if done, err := f.makeIndexedLocked(buf, name, ino, ft, need); done || err != nil {
				return cmp.Or(err, errStop)
			}
		}
		return nil
	})
	if errors.Is(err, errStop) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.appendDirBlockLocked(name, ino, ft)
}

// insertInBlock puts the entry into block b (logical lblk) if it has room
// and writes the block back.
func (f *File) insertInBlock(lblk uint64, b []byte, name string, ino uint32, ft uint8, need int) (bool, error) {
	v := f.v
	hasTail := v.csum && layout.HasDirTail(b)
	var slot layout.DirEntry
	found := false
	err := layout.DirBlock(b, f.physOf(lblk), f.ino, hasTail, v.sb.HasIncompat(layout.IncompatFiletype), lblk == 0, func(e layout.DirEntry) error {
		if layout.DirEntryRoom(e) >= need && !found {
			slot, found = e, true
		}
		return nil
	})
	if err != nil || !found {
		return false, err
	}
	layout.InsertDirEntry(b, slot, ino, ft, []byte(name))
	return true, f.writeDirBlock(lblk, b)
}

// writeDirBlock recomputes the checksum tail and writes a directory block.
func (f *File) writeDirBlock(lblk uint64, b []byte) error {
	v := f.v
	m, err := f.m.lookup(lblk)
	if err != nil {
		return err
	}
	if m.kind != mapWritten {
		return fmt.Errorf("directory inode %d block %d is not mapped: %w", f.ino, lblk, ErrCorrupt)
	}
	if v.csum && layout.HasDirTail(b) {
		layout.SetDirTail(layout.InodeSeed(v.csumSeed, f.ino, f.in.Generation), b)
	}
	v.fcDirWrite()
	if v.jm != nil {
		// The whole block is new: no need to read the old contents.
		if err := v.jm.Dirty(m.pblk, b); err != nil {
			return err
		}
	} else {
		w, err := v.meta.GetWrite(m.pblk)
		if err != nil {
			return err
		}
		copy(w, b)
		if err := v.meta.Dirty(m.pblk, w); err != nil {
			return err
		}
	}
	f.touchLocked()
	return v.writeInodeLocked(f.n)
}

// appendDirBlockLocked grows the directory by one block holding the entry.
func (f *File) appendDirBlockLocked(name string, ino uint32, ft uint8) error {
	v := f.v
	bs := uint64(v.bs)
	lblk := f.in.Size / bs
	if lblk >= maxFileBlocks {
		return fmt.Errorf("directory inode %d is full: %w", f.ino, ErrNoSpace)
	}
	b := make([]byte, bs)
	end := int(bs)
	if v.csum {
		end -= layout.DirTailLen
	}
	layout.PutDirEntry(b, 0, ino, end, ft, []byte(name))
	if v.csum {
		layout.SetDirTail(layout.InodeSeed(v.csumSeed, f.ino, f.in.Generation), b)
	}
	start, got, err := f.allocRun(lblk, 1, 1)
	if err != nil {
		return err
	}
	w, err := v.getNewMeta(start)
	if err != nil {
		v.alloc.Free(start, got)
		return err
	}
	copy(w, b)
	if err := v.meta.Dirty(start, w); err != nil {
		v.alloc.Free(start, got)
		return err
	}
	if err := f.mapRun(lblk, start, got, false); err != nil {
		return err
	}
	f.in.Size += bs
	f.touchLocked()
	return v.writeInodeLocked(f.n)
}
