package main

import (
	"github.com/ext4io/ext4io/esc"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/fsprim"
	"github.com/ext4io/ext4io/iomap"
	"github.com/ext4io/ext4io/layout"
)

// blobOps are the engine's iomap ops for one inode: the extent tree on
// disk, the extent-status cache in front of it, and the allocator. Begin
// maps a written range or allocates a hole (never overwriting in place:
// blobs are written once); the completion hook maps the new blocks once
// their data is on the device; End frees what no completed write reached.
type blobOps struct {
	fs   *fsprim.FS
	ino  uint32
	tree *extent.Tree
	ta   *fsprim.TreeAlloc
	es   *esc.Tree
}

func (s *Store) ops(ino uint32, in *layout.Inode) (*blobOps, error) {
	ta := &fsprim.TreeAlloc{A: s.fs.Alloc, Ino: ino}
	root := in.Block
	tr, err := extent.Open(&root, s.fs.TreeConfig(ino, in, ta))
	if err != nil {
		return nil, err
	}
	return &blobOps{fs: s.fs, ino: ino, tree: tr, ta: ta, es: s.cache.Inode(ino)}, nil
}

func (o *blobOps) Begin(off, length int64, flags iomap.Flags) (iomap.Mapping, error) {
	bs := int64(o.fs.BS)
	lblk := uint32(off / bs)
	e, err := o.es.Fill(lblk, fsprim.Lookup(o.tree))
	if err != nil {
		return iomap.Mapping{}, err
	}
	n := min(int64(e.End()-lblk), (off+length+bs-1)/bs-int64(lblk))
	m := iomap.Mapping{Offset: int64(lblk) * bs, Length: n * bs, Type: iomap.Hole, Addr: iomap.NoAddr}
	switch {
	case e.Status == esc.Written:
		m.Type, m.Addr = iomap.Mapped, int64(e.PblkOf(lblk))*bs
	case e.Status == esc.Unwritten:
		m.Type, m.Addr = iomap.Unwritten, int64(e.PblkOf(lblk))*bs
	case flags&iomap.Write != 0:
		start, got, err := o.fs.Alloc.AllocFor(o.ino, 0, 1, uint64(min(n, extent.MaxWrittenLen)))
		if err != nil {
			return iomap.Mapping{}, err
		}
		m.Type, m.Addr, m.Length, m.Flags = iomap.Mapped, int64(start)*bs, int64(got)*bs, iomap.MapNew
	}
	return m, nil
}

// EndIO maps [off, off+n) of a new mapping: its data is on the device.
func (o *blobOps) EndIO(off, n int64, m iomap.Mapping) error {
	if m.Flags&iomap.MapNew == 0 {
		return nil
	}
	bs := int64(o.fs.BS)
	e := extent.Extent{Lblk: uint32(off / bs), Len: uint32((n + bs - 1) / bs), Pblk: uint64((m.Addr + off - m.Offset) / bs)}
	if err := o.tree.Insert(e); err != nil {
		return err
	}
	return o.es.Insert(esc.Extent{Lblk: e.Lblk, Len: e.Len, Pblk: e.Pblk, Status: esc.Written})
}

func (o *blobOps) End(off, length, written int64, flags iomap.Flags, m iomap.Mapping) error {
	bs := int64(o.fs.BS)
	if used := (off + written + bs - 1) / bs; m.Flags&iomap.MapNew != 0 && used < m.End()/bs {
		return o.fs.Alloc.Free(uint64((m.Addr+used*bs-m.Offset)/bs), uint64(m.End()/bs-used))
	}
	return nil
}
