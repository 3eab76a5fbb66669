package ext4io

import (
	"fmt"

	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/layout"
)

// Extended attributes: in the inode body after i_extra_isize, and in one
// external block (i_file_acl) that inodes with identical sets share with a
// reference count (layout/xattr.go draws both formats).
//
// Invariants kept by every operation:
//   - XA1: an inode's i_file_acl block counts once in its i_blocks.
//   - XA2: a block's h_refcount is the number of inodes naming it; freeing
//     an inode drops its reference and frees the block with the last one
//     (ext4_xattr_release_block).
//   - XA3: a block shared by several inodes (h_refcount > 1) is never
//     changed in place: a change copies it to a new block first.

// xattrBlockNr checks that the i_file_acl of inode ino names a block
// that may hold attributes.
func (v *Volume) xattrBlockNr(ino uint32, blk uint64) error {
	if blk <= uint64(v.sb.FirstDataBlock) || blk >= v.sb.BlocksCount {
		return &errs.CorruptError{What: "inode", Ino: ino, Off: -1,
			Msg: fmt.Sprintf("i_file_acl %d outside the filesystem (%d blocks)", blk, v.sb.BlocksCount)}
	}
	return nil
}

// readXattrBlock reads and checks the xattr block blk of inode ino (magic,
// h_blocks, checksum).
func (v *Volume) readXattrBlock(ino uint32, blk uint64) ([]byte, layout.XattrBlockHeader, error) {
	if err := v.xattrBlockNr(ino, blk); err != nil {
		return nil, layout.XattrBlockHeader{}, err
	}
	b := make([]byte, v.bs)
	if err := v.readBlock(blk, b); err != nil {
		return nil, layout.XattrBlockHeader{}, fmt.Errorf("ext4io: xattr block of inode %d: %w", ino, err)
	}
	h, err := layout.DecodeXattrBlockHeader(b, blk)
	if err == nil && v.csum && !v.opts.SkipChecksums {
		err = layout.VerifyXattrBlock(v.csumSeed, blk, b)
	}
	if err != nil {
		setCorruptIno(err, ino)
		return nil, h, err
	}
	return b, h, nil
}

// setCorruptIno names inode ino in a *CorruptError.
func setCorruptIno(err error, ino uint32) {
	if ce, ok := err.(*errs.CorruptError); ok && ce.Ino == 0 {
		ce.Ino = ino
	}
}

// releaseXattrBlockLocked drops inode n's reference to its external xattr
// block, as ext4_xattr_release_block does (n locked exclusively): the last
// reference frees the block (revoked, and reusable once the freeing
// transaction commits); otherwise h_refcount drops by one and the block is
// rewritten with its checksum, journaled like other metadata. i_file_acl
// and i_blocks are updated in memory; the caller writes the inode.
func (v *Volume) releaseXattrBlockLocked(n *inode) error {
	blk := n.in.FileACL
	if blk == 0 {
		return nil
	}
	if err := v.putXattrBlockRef(n.ino, blk); err != nil {
		return err
	}
	n.in.FileACL = 0
	return treeAlloc{v, n}.addBlocks(-1)
}

// putXattrBlockRef drops inode ino's reference to xattr block blk: frees
// the block at the last one, else rewrites its refcount. The block's
// stripe of v.blkLocks serializes refcount changes of inodes sharing it
// (Linux's lock_buffer on the xattr block).
func (v *Volume) putXattrBlockRef(ino uint32, blk uint64) error {
	if err := v.xattrBlockNr(ino, blk); err != nil {
		return err
	}
	mu := v.blkLocks.lock(blk)
	_, h, err := v.readXattrBlock(ino, blk)
	if err != nil {
		mu.Unlock()
		return err
	}
	if h.Refcount > 1 {
		err = v.setXattrRefcount(blk, h.Refcount-1)
		mu.Unlock()
		return err
	}
	mu.Unlock()
	// The last reference: nobody else reaches the block.
	if v.jm != nil {
		v.jm.revoke(blk)
	}
	return v.freeMapped(blk, 1)
}

// setXattrRefcount rewrites h_refcount of xattr block blk (and its
// checksum). The caller holds blk's stripe of v.blkLocks.
func (v *Volume) setXattrRefcount(blk uint64, refcount uint32) error {
	w, err := v.meta.GetWrite(blk)
	if err != nil {
		return err
	}
	layout.SetXattrBlockRefcount(w, refcount)
	if v.csum {
		layout.SetXattrBlockChecksum(v.csumSeed, blk, w)
	}
	v.stats.metaUpdates.Add(1)
	return v.meta.Dirty(blk, w)
}
