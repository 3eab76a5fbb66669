package ext4io

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/ext4io/ext4io/alloc"
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

// xattrRefcountMax is EXT4_XATTR_REFCOUNT_MAX: a block shared this many
// times takes no more sharers.
const xattrRefcountMax = 1024

// xattrCache mirrors ext4's mbcache of xattr blocks: the blocks a writable
// volume has read or written, by h_hash, so that an inode given a set
// another inode's block already holds shares that block, as Linux does.
// An entry is a hint: a sharer re-reads and compares the block under its
// v.blkLocks stripe, and a block leaves the cache under that stripe
// before it is freed or rewritten in place. Safe for concurrent use; mu
// is a leaf lock.
type xattrCache struct {
	mu     sync.Mutex
	byHash map[uint32][]uint64 // guarded by mu
	hashOf map[uint64]uint32   // guarded by mu
}

// xattrCacheMax bounds the cache (mbcache's shrinker bounds Linux's).
const xattrCacheMax = 1 << 14

func (c *xattrCache) insert(hash uint32, blk uint64) {
	if hash == 0 {
		return // ext4_xattr_rehash: 0 marks a block not to share
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hashOf == nil {
		c.byHash, c.hashOf = map[uint32][]uint64{}, map[uint64]uint32{}
	}
	if _, ok := c.hashOf[blk]; ok {
		c.removeLocked(blk)
	}
	if len(c.hashOf) >= xattrCacheMax {
		for b := range c.hashOf { // drop an arbitrary entry
			c.removeLocked(b)
			break
		}
	}
	c.hashOf[blk] = hash
	c.byHash[hash] = append(c.byHash[hash], blk)
}

func (c *xattrCache) remove(blk uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(blk)
}

func (c *xattrCache) removeLocked(blk uint64) {
	h, ok := c.hashOf[blk]
	if !ok {
		return
	}
	delete(c.hashOf, blk)
	l := slices.DeleteFunc(c.byHash[h], func(b uint64) bool { return b == blk })
	if len(l) == 0 {
		delete(c.byHash, h)
	} else {
		c.byHash[h] = l
	}
}

func (c *xattrCache) has(blk uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.hashOf[blk]
	return ok
}

func (c *xattrCache) candidates(hash uint32) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.byHash[hash])
}

// xattrBlockNr checks that the i_file_acl of inode ino names a block
// that may hold attributes: inside the filesystem and outside its
// metadata (the system zone), so that neither a read leaks metadata nor
// a refcount update or free overwrites it.
func (v *Volume) xattrBlockNr(ino uint32, blk uint64) error {
	if blk <= uint64(v.sb.FirstDataBlock) || blk >= v.sb.BlocksCount {
		return &errs.CorruptError{What: "inode", Ino: ino, Off: -1,
			Msg: fmt.Sprintf("i_file_acl %d outside the filesystem (%d blocks)", blk, v.sb.BlocksCount)}
	}
	if v.zone.overlaps(0, blk, 1) {
		return &errs.CorruptError{What: "inode", Ino: ino, Off: -1,
			Msg: fmt.Sprintf("i_file_acl %d is file-system metadata", blk)}
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
	// Neither the free nor the refcount is in any fast-commit tag: an
	// inode freed with its xattr block (unlink, orphan release) would
	// leave the block allocated after a replay.
	v.fcIneligible("xattr block reference dropped")
	mu := v.blkLocks.lock(blk)
	_, h, err := v.readXattrBlock(ino, blk)
	if err != nil {
		mu.Unlock()
		return err
	}
	if h.Refcount > 1 {
		err = v.setXattrRefcount(blk, h.Refcount-1)
		if h.Refcount-1 < xattrRefcountMax {
			v.xcache.insert(h.Hash, blk) // may take sharers again
		}
		mu.Unlock()
		return err
	}
	v.xcache.remove(blk)
	mu.Unlock()
	// The last reference: out of the cache, nobody else reaches the block.
	v.forgetMeta(blk)
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

// Flags of Setxattr, as setxattr(2) takes them.
const (
	// XATTR_CREATE fails with ErrExist if the attribute exists.
	XATTR_CREATE = 0x1
	// XATTR_REPLACE fails with ErrNoAttr if the attribute does not exist.
	XATTR_REPLACE = 0x2
)

// Errors of the xattr operations, in addition to the package sentinels
// (ErrExist for XATTR_CREATE of an existing attribute, ErrNoSpace when the
// set does not fit the inode body and one block, ErrUnsupported for a
// namespace ext4 does not store or Linux does not show).
var (
	// ErrNoAttr: no such attribute. It matches syscall.ENODATA, as Linux
	// reports it (ENOATTR on FreeBSD and OpenBSD, which have no ENODATA).
	ErrNoAttr error = &errs.Errno{Msg: "ext4io: no such attribute", Errno: errnoNoAttr}
	// ErrRange: a value or name too large for any attribute ext4io can
	// store: a value over 64 KiB (which also matches syscall.E2BIG) or
	// one that fits neither the inode body nor an empty block (ea_inode
	// values are not written), a name empty or over 255 bytes (which also
	// matches syscall.ERANGE), as Linux's setxattr(2) reports them.
	ErrRange = errors.New("ext4io: xattr value too large")
)

// The xattr errors that carry Linux's errno besides the sentinel callers
// test for: a name the system calls refuse before looking at it, a value
// over XATTR_SIZE_MAX, a namespace ext4 has no handler for.
var (
	errXattrName      error = &errs.Errno{Msg: "ext4io: xattr name out of range", Errno: syscall.ERANGE, Also: ErrRange}
	errXattrTooBig    error = &errs.Errno{Msg: "ext4io: xattr value too large", Errno: syscall.E2BIG, Also: ErrRange}
	errXattrNamespace error = &errs.Errno{Msg: "ext4: unsupported", Errno: syscall.EOPNOTSUPP, Also: ErrUnsupported}
)

// xattrSet is the attribute set of one inode as stored: the inode body's
// and the external block's entries (in memory only).
type xattrSet struct {
	ibody    []layout.Xattr
	block    []layout.Xattr
	blk      uint64 // i_file_acl, 0 for none
	refcount uint32 // the block's h_refcount
	// ibodyLen is the size of the inode body region for attributes (the
	// bytes after 128+i_extra_isize), 0 when the inode has none.
	ibodyLen int
}

// loadXattrsLocked decodes n's attributes (n.mu held, either mode).
func (v *Volume) loadXattrsLocked(n *inode) (*xattrSet, error) {
	s := &xattrSet{}
	// Under a shared n.mu, writers holding n.dataMu may re-encode n.in
	// (a direct write's times, a commit's conversions): copy what is
	// needed under dataMu.
	n.dataMu.Lock()
	r := slices.Clone(layout.XattrIbodyRegion(n.in))
	fileACL := n.in.FileACL
	n.dataMu.Unlock()
	if r != nil {
		s.ibodyLen = len(r)
		attrs, err := layout.DecodeXattrIbody(r)
		if err != nil {
			setCorruptIno(err, n.ino)
			return nil, err
		}
		s.ibody = attrs
	}
	if blk := fileACL; blk != 0 {
		b, h, err := v.readXattrBlock(n.ino, blk)
		if err != nil {
			return nil, err
		}
		_, attrs, err := layout.DecodeXattrBlock(b, blk)
		if err != nil {
			setCorruptIno(err, n.ino)
			return nil, err
		}
		s.blk, s.refcount, s.block = blk, h.Refcount, attrs
		if v.alloc != nil && h.Refcount < xattrRefcountMax {
			v.xcache.insert(h.Hash, blk) // ext4_xattr_block_cache_insert
		}
	}
	return s, nil
}

// find returns the attribute (index, name) and whether it is in the block.
func (s *xattrSet) find(index uint8, name string) (*layout.Xattr, bool) {
	for i := range s.ibody {
		if s.ibody[i].Index == index && s.ibody[i].Name == name {
			return &s.ibody[i], false
		}
	}
	for i := range s.block {
		if s.block[i].Index == index && s.block[i].Name == name {
			return &s.block[i], true
		}
	}
	return nil, false
}

// without returns attrs less (index, name), in a new slice.
func without(attrs []layout.Xattr, index uint8, name string) []layout.Xattr {
	out := make([]layout.Xattr, 0, len(attrs))
	for _, x := range attrs {
		if x.Index != index || x.Name != name {
			out = append(out, x)
		}
	}
	return out
}

// visibleXattr reports whether Linux's ext4 lists and serves attributes
// of namespace index (ext4_xattr_handler_map): system.data and richacl are
// not.
func visibleXattr(index uint8) bool {
	switch index {
	case layout.XattrIndexUser, layout.XattrIndexPosixACL, layout.XattrIndexPosixACLDef,
		layout.XattrIndexTrusted, layout.XattrIndexSecurity:
		return true
	}
	return false
}

// parseXattrName splits a full attribute name and checks it as
// setxattr(2) and ext4's handlers do: a name empty or over 255 bytes
// first (import_xattr_name), then its namespace (xattr_resolve_name).
func parseXattrName(attr string) (uint8, string, error) {
	if attr == "" || len(attr) > layout.XattrMaxNameLen {
		return 0, "", fmt.Errorf("attribute name of %d bytes (1 to %d): %w", len(attr), layout.XattrMaxNameLen, errXattrName)
	}
	index, name, ok := layout.XattrSplitName(attr)
	if !ok || !visibleXattr(index) {
		return 0, "", fmt.Errorf("attribute %q: namespace not supported: %w", attr, errXattrNamespace)
	}
	switch index {
	case layout.XattrIndexPosixACL, layout.XattrIndexPosixACLDef:
	default:
		if name == "" {
			return 0, "", fmt.Errorf("attribute %q: empty name: %w", attr, ErrInvalid)
		}
	}
	if strings.IndexByte(attr, 0) >= 0 {
		return 0, "", fmt.Errorf("attribute name holds a NUL byte: %w", ErrInvalid)
	}
	return index, name, nil
}

// valueOf returns x's value as the system calls show it: from its EA
// inode if it has one, and ACLs in the xattr ABI form.
func (v *Volume) valueOf(ino uint32, x *layout.Xattr) ([]byte, error) {
	val := x.Value
	if x.ValueInum != 0 {
		var err error
		if val, err = v.eaInodeValue(ino, x); err != nil {
			return nil, err
		}
	}
	switch x.Index {
	case layout.XattrIndexPosixACL, layout.XattrIndexPosixACLDef:
		ents, err := layout.DecodeACLExt4(val)
		if err != nil {
			setCorruptIno(err, ino)
			return nil, err
		}
		return layout.EncodeACLXattr(ents), nil
	}
	return append([]byte(nil), val...), nil
}

// eaInodeValue reads a value stored in an EA inode (ea_inode feature).
func (v *Volume) eaInodeValue(ino uint32, x *layout.Xattr) ([]byte, error) {
	bad := func(msg string) error {
		return &errs.CorruptError{What: "xattr", Ino: ino, Off: -1, Msg: fmt.Sprintf("%s: EA inode %d %s", x.FullName(), x.ValueInum, msg)}
	}
	if !v.sb.HasIncompat(layout.IncompatEAInode) {
		return nil, bad("without the ea_inode feature")
	}
	if x.ValueInum == ino || x.ValueInum < v.sb.FirstInode() || x.ValueInum > v.sb.InodesCount {
		return nil, bad("out of range")
	}
	n, err := v.entryInode(x.ValueInum) // named by the entry: links 0 is corruption
	if err != nil {
		return nil, err
	}
	n.mu.RLock()
	ok := n.in.Flags&layout.InodeFlagEAInode != 0 && n.in.IsReg() && n.in.Size == uint64(x.ValueSize)
	n.mu.RUnlock()
	if !ok {
		return nil, bad("is not an EA inode of the value's size")
	}
	f := newFile(v, n, x.ValueInum, x.FullName())
	buf := make([]byte, x.ValueSize)
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf, nil
}

// getxattrLocked returns attribute attr of n (n.mu held, either mode).
func (v *Volume) getxattrLocked(n *inode, attr string) ([]byte, error) {
	index, name, err := parseXattrName(attr)
	if err != nil {
		return nil, err
	}
	s, err := v.loadXattrsLocked(n)
	if err != nil {
		return nil, err
	}
	x, _ := s.find(index, name)
	if x == nil {
		return nil, ErrNoAttr
	}
	return v.valueOf(n.ino, x)
}

// listxattrLocked returns the names of n's attributes as listxattr(2)
// does: in-inode ones first, then the block's, each in stored order.
func (v *Volume) listxattrLocked(n *inode) ([]string, error) {
	s, err := v.loadXattrsLocked(n)
	if err != nil {
		return nil, err
	}
	names := []string{}
	for _, attrs := range [][]layout.Xattr{s.ibody, s.block} {
		for _, x := range attrs {
			if visibleXattr(x.Index) {
				full, _ := layout.XattrFullName(x.Index, x.Name)
				names = append(names, full)
			}
		}
	}
	return names, nil
}

// setxattrLocked sets (value != nil) or removes (value == nil) attribute
// attr of n (n.mu held exclusively, inside an operation), as
// ext4_xattr_set_handle does: into the inode body when the whole body set
// fits, else into the block; a shared block is copied first (XA3). Nothing
// changes when it fails for space.
func (v *Volume) setxattrLocked(n *inode, attr string, value []byte, flags int) error {
	v.fcIneligible("xattr change") // fast commits cannot express it (fcwrite.go)
	if n.freed {
		return ErrNotFound
	}
	index, name, err := parseXattrName(attr)
	if err != nil {
		return err
	}
	if index == layout.XattrIndexUser && !n.in.IsReg() && !n.in.IsDir() {
		// xattr_permission: user.* only on files and directories.
		return fmt.Errorf("user attributes need a regular file or directory: %w", fs.ErrPermission)
	}
	if flags&^(XATTR_CREATE|XATTR_REPLACE) != 0 {
		return fmt.Errorf("setxattr flags %#x: %w", flags, ErrInvalid)
	}
	if value != nil && len(value) > layout.XattrMaxValueSize {
		return fmt.Errorf("value of %d bytes (max %d): %w", len(value), layout.XattrMaxValueSize, errXattrTooBig)
	}
	// An ACL may set the mode and may store nothing: an empty one, or an
	// access ACL the mode expresses alone, removes the attribute (and
	// removing a missing one is then no error).
	modeChange, mayBeAbsent := false, false
	var mode uint16
	if value != nil && (index == layout.XattrIndexPosixACL || index == layout.XattrIndexPosixACLDef) {
		if index == layout.XattrIndexPosixACLDef && !n.in.IsDir() {
			return fmt.Errorf("default ACL on a non-directory: %w", ErrInvalid)
		}
		ents, err := layout.DecodeACLXattr(value)
		if err != nil {
			return fmt.Errorf("%s: %w", attr, ErrInvalid)
		}
		equiv := len(ents) == 0 // posix_acl_from_xattr: no entries is no ACL
		if !equiv {
			if err := validACL(ents); err != nil {
				return fmt.Errorf("%s: %w", attr, err)
			}
		}
		if !equiv && index == layout.XattrIndexPosixACL {
			mode, equiv = aclMode(n.in.Mode, ents) // posix_acl_update_mode
			modeChange = true
		}
		value = layout.EncodeACLExt4(ents)
		if equiv {
			value, mayBeAbsent = nil, true
			flags &^= XATTR_REPLACE
		}
	}
	s, err := v.loadXattrsLocked(n)
	if err != nil {
		return err
	}
	old, inBlock := s.find(index, name)
	switch {
	case old != nil && flags&XATTR_CREATE != 0:
		return ErrExist
	case old == nil && flags&XATTR_REPLACE != 0:
		return ErrNoAttr
	case old == nil && value == nil && !mayBeAbsent:
		return ErrNoAttr
	}
	if old != nil && old.ValueInum != 0 {
		return fmt.Errorf("attribute %s in an EA inode: %w", attr, ErrUnsupported)
	}
	ibody, block := s.ibody, s.block
	blockChanged := old != nil && inBlock
	if old != nil {
		if inBlock {
			block = without(block, index, name)
		} else {
			ibody = without(ibody, index, name)
		}
	}
	if value != nil {
		nx := layout.Xattr{Index: index, Name: name, Value: value}
		withNew := append(append([]layout.Xattr(nil), ibody...), nx)
		if old != nil && !inBlock {
			// Replacing an in-inode attribute keeps its place.
			withNew = replaced(s.ibody, nx)
		}
		if s.ibodyLen > 0 && layout.XattrIbodyFits(s.ibodyLen, withNew) {
			ibody = withNew
		} else {
			block = append(block[:len(block):len(block)], nx)
			blockChanged = true
			if !layout.XattrBlockFits(v.bs, block) {
				if !layout.XattrBlockFits(v.bs, []layout.Xattr{nx}) && !layout.XattrIbodyFits(s.ibodyLen, []layout.Xattr{nx}) {
					return fmt.Errorf("%s: value of %d bytes fits neither the inode nor a block: %w", attr, len(value), ErrRange)
				}
				return fmt.Errorf("%s: attributes do not fit the inode and one block: %w", attr, ErrNoSpace)
			}
		}
	}
	if old != nil || value != nil {
		if err := v.ensureExtAttrFeature(); err != nil {
			return err
		}
		if err := v.storeXattrBlockLocked(n, s, block, blockChanged); err != nil {
			return err
		}
		if r := layout.XattrIbodyRegion(n.in); r != nil {
			layout.EncodeXattrIbody(r, ibody)
		}
	}
	if modeChange {
		n.in.Mode = mode
	}
	n.in.Ctime = now()
	return v.writeInodeLocked(n)
}

// replaced returns attrs with the entry of x's name holding x.
func replaced(attrs []layout.Xattr, x layout.Xattr) []layout.Xattr {
	out := append([]layout.Xattr(nil), attrs...)
	for i := range out {
		if out[i].Index == x.Index && out[i].Name == x.Name {
			out[i] = x
		}
	}
	return out
}

// storeXattrBlockLocked makes n's block hold attrs (changed: they differ
// from s.block), as ext4_xattr_block_set does: none frees or drops the
// block (XA2); a block elsewhere holding the same set is shared (its
// refcount goes up); a block only n uses is rewritten in place; otherwise
// a new block is allocated, and a shared one loses n's reference (XA3).
// It fails for space before changing anything.
func (v *Volume) storeXattrBlockLocked(n *inode, s *xattrSet, attrs []layout.Xattr, changed bool) error {
	if !changed {
		return nil
	}
	if len(attrs) == 0 {
		return v.releaseXattrBlockLocked(n)
	}
	b, ok := layout.EncodeXattrBlock(v.bs, 1, attrs) // sorts attrs, sets hashes
	if !ok {
		return ErrNoSpace
	}
	hash := layout.XattrBlockHash(attrs)
	if blk, err := v.shareXattrBlock(n.ino, s.blk, hash, attrs); err != nil {
		return err
	} else if blk != 0 {
		return v.switchXattrBlockLocked(n, s.blk, blk)
	}
	if s.blk != 0 {
		done, err := v.rewriteXattrBlock(n.ino, s.blk, b, hash)
		if done || err != nil {
			return err
		}
	}
	blk, _, err := v.alloc.Allocate(alloc.Request{Goal: v.inodeGoal(n.ino), Min: 1, Max: 1})
	if err != nil {
		return err
	}
	if v.csum {
		layout.SetXattrBlockChecksum(v.csumSeed, blk, b)
	}
	v.stats.metaUpdates.Add(1)
	if err := v.meta.Dirty(blk, b); err != nil {
		return err
	}
	v.xcache.insert(hash, blk)
	return v.switchXattrBlockLocked(n, s.blk, blk)
}

// switchXattrBlockLocked points n at xattr block blk (which already
// counts n's reference) instead of old (0 for none), dropping n's
// reference to old.
func (v *Volume) switchXattrBlockLocked(n *inode, old, blk uint64) error {
	if old == 0 {
		if err := (treeAlloc{v, n}).addBlocks(1); err != nil {
			return err
		}
	} else if err := v.putXattrBlockRef(n.ino, old); err != nil {
		return err
	}
	n.in.FileACL = blk
	return nil
}

// rewriteXattrBlock writes b over xattr block blk if n is still its only
// user (a sharer may have found it in the cache since n read it): the
// block leaves the cache while it changes and comes back with its new
// hash. It reports false when the block is shared.
func (v *Volume) rewriteXattrBlock(ino uint32, blk uint64, b []byte, hash uint32) (bool, error) {
	mu := v.blkLocks.lock(blk)
	defer mu.Unlock()
	_, h, err := v.readXattrBlock(ino, blk)
	if err != nil {
		return false, err
	}
	if h.Refcount > 1 {
		return false, nil
	}
	v.xcache.remove(blk)
	if v.csum {
		layout.SetXattrBlockChecksum(v.csumSeed, blk, b)
	}
	v.stats.metaUpdates.Add(1)
	if err := v.meta.Dirty(blk, b); err != nil {
		return false, err
	}
	v.xcache.insert(hash, blk)
	return true, nil
}

// shareXattrBlock looks for a block other than own holding exactly attrs
// (sorted, as a block keeps them) and takes a reference to it
// (ext4_xattr_block_cache_find); 0 if there is none.
func (v *Volume) shareXattrBlock(ino uint32, own uint64, hash uint32, attrs []layout.Xattr) (uint64, error) {
	if hash == 0 {
		return 0, nil
	}
	for _, cand := range v.xcache.candidates(hash) {
		if cand == own {
			continue
		}
		mu := v.blkLocks.lock(cand)
		if !v.xcache.has(cand) { // freed or rewritten meanwhile
			mu.Unlock()
			continue
		}
		b, h, err := v.readXattrBlock(ino, cand)
		var theirs []layout.Xattr
		if err == nil {
			_, theirs, err = layout.DecodeXattrBlock(b, cand)
		}
		if err != nil || h.Hash != hash || h.Refcount >= xattrRefcountMax || !sameXattrSet(theirs, attrs) {
			if err != nil || h.Refcount >= xattrRefcountMax {
				v.xcache.remove(cand)
			}
			mu.Unlock()
			continue
		}
		err = v.setXattrRefcount(cand, h.Refcount+1)
		if h.Refcount+1 >= xattrRefcountMax {
			v.xcache.remove(cand)
		}
		mu.Unlock()
		if err != nil {
			return 0, err
		}
		return cand, nil
	}
	return 0, nil
}

// sameXattrSet compares two sets entry by entry (ext4_xattr_cmp).
func sameXattrSet(a, b []layout.Xattr) bool {
	return slices.EqualFunc(a, b, func(x, y layout.Xattr) bool {
		return x.Index == y.Index && x.Name == y.Name && x.ValueInum == y.ValueInum &&
			x.ValueSize == y.ValueSize && bytes.Equal(x.Value, y.Value)
	})
}

// ensureExtAttrFeature sets the ext_attr compat feature before the first
// attribute is stored, as ext4_xattr_update_super_block does.
func (v *Volume) ensureExtAttrFeature() error {
	v.sbMu.Lock()
	defer v.sbMu.Unlock()
	if v.sb.HasCompat(layout.CompatExtAttr) {
		return nil
	}
	v.sb.FeatureCompat |= layout.CompatExtAttr
	return v.writeSuperLocked()
}

// validACL checks an ACL as posix_acl_valid does: one owner, owning
// group and other entry, at most one mask, required with named entries,
// and no named user or group twice.
func validACL(ents []layout.ACLEntry) error {
	count := map[uint16]int{}
	ids := map[[2]uint32]bool{}
	for _, e := range ents {
		count[e.Tag]++
		if e.Tag == layout.ACLUser || e.Tag == layout.ACLGroup {
			k := [2]uint32{uint32(e.Tag), e.ID}
			if ids[k] {
				return fmt.Errorf("ACL names id %d twice: %w", e.ID, ErrInvalid)
			}
			ids[k] = true
		}
	}
	if count[layout.ACLUserObj] != 1 || count[layout.ACLGroupObj] != 1 || count[layout.ACLOther] != 1 || count[layout.ACLMask] > 1 {
		return fmt.Errorf("ACL needs one owner, group and other entry and at most one mask: %w", ErrInvalid)
	}
	if len(ids) > 0 && count[layout.ACLMask] == 0 {
		return fmt.Errorf("ACL with named entries but no mask: %w", ErrInvalid)
	}
	return nil
}

// aclMode returns the mode a valid access ACL gives the inode
// (posix_acl_update_mode): user, group (the mask if there is one) and
// other bits from the ACL, and whether the ACL is equivalent to the mode
// alone (only the three base entries).
func aclMode(mode uint16, ents []layout.ACLEntry) (uint16, bool) {
	var user, group, mask, other uint16
	hasMask, equiv := false, true
	for _, e := range ents {
		p := e.Perm & 7
		switch e.Tag {
		case layout.ACLUserObj:
			user = p
		case layout.ACLGroupObj:
			group = p
		case layout.ACLOther:
			other = p
		case layout.ACLMask:
			mask, hasMask = p, true
			equiv = false
		default:
			equiv = false
		}
	}
	if hasMask {
		group = mask
	}
	return mode&^0o777 | user<<6 | group<<3 | other, equiv
}

// xattrOp resolves name (following a final symlink with follow) and runs
// fn on its inode with the inode lock held: shared for reads, exclusive
// inside an operation for writes.
func (v *Volume) xattrOp(op, name string, follow, write bool, fn func(n *inode) error) error {
	err := v.checkOpen()
	if err == nil && write {
		for retried := false; ; retried = true {
			if err = v.beginOp(); err != nil {
				break
			}
			err = v.writableNS()
			if err == nil {
				err = v.xattrResolved(name, follow, write, fn)
			}
			// A new block may be allocatable once freed blocks commit.
			if err = v.endOpErr(err); retried || !v.retryNoSpace(err) {
				break
			}
		}
	} else if err == nil {
		err = v.xattrResolved(name, follow, write, fn)
	}
	if err != nil {
		return &fs.PathError{Op: op, Path: name, Err: err}
	}
	return nil
}

func (v *Volume) xattrResolved(name string, follow, write bool, fn func(n *inode) error) error {
	f, err := v.resolve(name, follow)
	if err != nil {
		return err
	}
	return lockedXattr(f.n, write, fn)
}

func lockedXattr(n *inode, write bool, fn func(n *inode) error) error {
	if write {
		n.mu.Lock()
		defer n.mu.Unlock()
	} else {
		n.mu.RLock()
		defer n.mu.RUnlock()
	}
	return fn(n)
}

// Getxattr returns the value of extended attribute attr ("user.x",
// "security.selinux", "system.posix_acl_access", ...) of the file at name,
// following symlinks. POSIX ACLs come in the xattr ABI form getfattr
// shows (version 2). A missing attribute fails with ErrNoAttr.
func (v *Volume) Getxattr(name, attr string) ([]byte, error) {
	return v.getxattr("getxattr", name, attr, true)
}

// Lgetxattr is Getxattr without following a final symlink.
func (v *Volume) Lgetxattr(name, attr string) ([]byte, error) {
	return v.getxattr("lgetxattr", name, attr, false)
}

func (v *Volume) getxattr(op, name, attr string, follow bool) (val []byte, err error) {
	err = v.xattrOp(op, name, follow, false, func(n *inode) error {
		val, err = v.getxattrLocked(n, attr)
		return err
	})
	return val, err
}

// Listxattr returns the names of the extended attributes of the file at
// name, following symlinks: those in the inode first, then those in its
// block, as Linux lists them (system.data and other namespaces Linux does
// not show are left out).
func (v *Volume) Listxattr(name string) ([]string, error) {
	return v.listxattr("listxattr", name, true)
}

// Llistxattr is Listxattr without following a final symlink.
func (v *Volume) Llistxattr(name string) ([]string, error) {
	return v.listxattr("llistxattr", name, false)
}

func (v *Volume) listxattr(op, name string, follow bool) (names []string, err error) {
	err = v.xattrOp(op, name, follow, false, func(n *inode) error {
		names, err = v.listxattrLocked(n)
		return err
	})
	return names, err
}

// Setxattr sets extended attribute attr of the file at name to value,
// following symlinks. flags is 0, XATTR_CREATE (fail with ErrExist if it
// exists) or XATTR_REPLACE (fail with ErrNoAttr if it does not). Small
// attributes go into the inode, the rest into one block shared copy-on-
// write; ErrNoSpace when they do not fit both, ErrRange for a value no
// attribute can hold. A POSIX access ACL (xattr ABI form) also sets the
// permission bits, and one the mode alone expresses is not stored, as
// Linux does. The change is journaled as one operation.
func (v *Volume) Setxattr(name, attr string, value []byte, flags int) error {
	return v.setxattr("setxattr", name, attr, value, flags, true)
}

// Lsetxattr is Setxattr without following a final symlink.
func (v *Volume) Lsetxattr(name, attr string, value []byte, flags int) error {
	return v.setxattr("lsetxattr", name, attr, value, flags, false)
}

func (v *Volume) setxattr(op, name, attr string, value []byte, flags int, follow bool) error {
	if value == nil {
		value = []byte{}
	}
	return v.xattrOp(op, name, follow, true, func(n *inode) error {
		return v.setxattrLocked(n, attr, value, flags)
	})
}

// Removexattr removes extended attribute attr of the file at name,
// following symlinks; ErrNoAttr if it has none. A block left empty is
// freed, or loses this file's reference if shared.
func (v *Volume) Removexattr(name, attr string) error {
	return v.xattrOp("removexattr", name, true, true, func(n *inode) error {
		return v.setxattrLocked(n, attr, nil, 0)
	})
}

// Lremovexattr is Removexattr without following a final symlink.
func (v *Volume) Lremovexattr(name, attr string) error {
	return v.xattrOp("lremovexattr", name, false, true, func(n *inode) error {
		return v.setxattrLocked(n, attr, nil, 0)
	})
}

// fileXattrOp runs fn on f's inode as xattrOp does for a path.
func (f *File) fileXattrOp(op string, write bool, fn func(n *inode) error) error {
	if f == nil || f.v == nil || f.n == nil {
		return &fs.PathError{Op: op, Err: errNotOpen}
	}
	v := f.v
	err := v.checkOpen()
	if err == nil && fileClosed(f) {
		err = ErrClosed
	}
	if err == nil && write {
		err = f.checkNotSystem()
	}
	if err == nil && write {
		for retried := false; ; retried = true {
			if err = v.beginOp(); err != nil {
				break
			}
			err = v.writableNS()
			if err == nil {
				err = lockedXattr(f.n, true, fn)
			}
			if err = v.endOpErr(err); retried || !v.retryNoSpace(err) {
				break
			}
		}
	} else if err == nil {
		err = lockedXattr(f.n, false, fn)
	}
	if err != nil {
		return &fs.PathError{Op: op, Path: f.name, Err: err}
	}
	return nil
}

// Getxattr is Volume.Getxattr on the open file.
func (f *File) Getxattr(attr string) (val []byte, err error) {
	err = f.fileXattrOp("getxattr", false, func(n *inode) error {
		val, err = f.v.getxattrLocked(n, attr)
		return err
	})
	return val, err
}

// Listxattr is Volume.Listxattr on the open file.
func (f *File) Listxattr() (names []string, err error) {
	err = f.fileXattrOp("listxattr", false, func(n *inode) error {
		names, err = f.v.listxattrLocked(n)
		return err
	})
	return names, err
}

// Setxattr is Volume.Setxattr on the open file (also after its last
// name was removed, as fsetxattr allows).
func (f *File) Setxattr(attr string, value []byte, flags int) error {
	if value == nil {
		value = []byte{}
	}
	return f.fileXattrOp("setxattr", true, func(n *inode) error {
		return f.v.setxattrLocked(n, attr, value, flags)
	})
}

// Removexattr is Volume.Removexattr on the open file.
func (f *File) Removexattr(attr string) error {
	return f.fileXattrOp("removexattr", true, func(n *inode) error {
		return f.v.setxattrLocked(n, attr, nil, 0)
	})
}
