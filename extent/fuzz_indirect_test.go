package extent

import (
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzIndirect decodes a block-mapped (ext2/ext3) file from arbitrary
// bytes: i_block, then 1 KiB indirect blocks numbered 1, 2, ... (other
// blocks read as zeroes). WalkIndirect and MapIndirectHole must not panic
// and must finish; an error must wrap ErrCorrupt; every block the walk
// maps, MapIndirect maps to the same place; and a hole MapIndirectHole
// measures holds no mapped block.
func FuzzIndirect(f *testing.F) {
	var ib [RootSize]byte
	for i := 0; i < NDirect; i++ {
		binary.LittleEndian.PutUint32(ib[4*i:], uint32(100+i))
	}
	binary.LittleEndian.PutUint32(ib[4*indSingle:], 1)
	binary.LittleEndian.PutUint32(ib[4*indDouble:], 2)
	binary.LittleEndian.PutUint32(ib[4*indTriple:], 4)
	single := make([]byte, 1024)
	for i := 0; i < 256; i += 3 {
		binary.LittleEndian.PutUint32(single[4*i:], uint32(200+i))
	}
	double := make([]byte, 1024)
	binary.LittleEndian.PutUint32(double[0:], 3)
	binary.LittleEndian.PutUint32(double[40:], 1) // reached twice
	leaf := make([]byte, 1024)
	binary.LittleEndian.PutUint32(leaf[8:], 900)
	triple := make([]byte, 1024)
	binary.LittleEndian.PutUint32(triple[4:], 2)
	seed := append(append(append(append(ib[:], single...), double...), leaf...), triple...)
	f.Add(seed)
	f.Add(ib[:])
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < RootSize {
			return
		}
		var root [RootSize]byte
		copy(root[:], data)
		io := newMemIO(1024)
		rest := data[RootSize:]
		for p := uint64(1); len(rest) > 0; p++ {
			b := make([]byte, 1024)
			rest = rest[copy(b, rest):]
			io.blocks[p] = b
		}
		cfg := Config{BlockSize: 1024, Ino: 5, FirstDataBlock: 1, BlocksCount: 1 << 16, IO: io}
		var runs []Extent
		err := WalkIndirect(&root, cfg, func(e Extent) error {
			if len(runs) < 64 {
				runs = append(runs, e)
			}
			return nil
		}, nil)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("WalkIndirect: %v wraps no ErrCorrupt", err)
		}
		for _, e := range runs {
			for _, l := range []uint32{e.Lblk, e.Lblk + uint32(e.Len) - 1} {
				p, found, err := MapIndirect(&root, cfg, l)
				if err != nil || !found || p != e.Pblk+uint64(l-e.Lblk) {
					t.Fatalf("MapIndirect(%d) = %d %v %v; the walk mapped it to %d", l, p, found, err, e.Pblk+uint64(l-e.Lblk))
				}
			}
		}
		for _, l := range []uint32{0, 11, 12, 267, 268, 65803, 65804, EndLblk - 1} {
			_, found, hole, err := MapIndirectHole(&root, cfg, l)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("MapIndirectHole(%d): %v wraps no ErrCorrupt", l, err)
				}
				continue
			}
			if found {
				continue
			}
			if hole == 0 {
				t.Fatalf("MapIndirectHole(%d): a hole of 0 blocks", l)
			}
			for _, e := range runs {
				if uint64(e.Lblk) < uint64(l)+hole && uint64(l) < uint64(e.Lblk)+uint64(e.Len) {
					t.Fatalf("MapIndirectHole(%d): hole of %d blocks over the walk's run %+v", l, hole, e)
				}
			}
		}
	})
}
