package ext4io

import "github.com/ext4io/ext4io/alloc"

var _ alloc.MetaUpdater = (*jmeta)(nil)

// Update changes block blk in place with fn (alloc.MetaUpdater): the
// allocator's bitmap and descriptor writes go straight into the running
// transaction's copy of the block, with no GetWrite and Dirty copies. fn
// runs with m.mu held (see update).
func (m *jmeta) Update(blk uint64, fn func(b []byte)) error { return m.update(blk, fn) }
