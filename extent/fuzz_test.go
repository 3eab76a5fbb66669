package extent

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// fuzzTree builds a 1 KiB-block tree from data: 60 bytes of root, a flags
// byte, then blocks numbered 1, 2, ... .
func fuzzTree(data []byte) (*Tree, *memIO, bool) {
	if len(data) < RootSize+1 {
		return nil, nil, false
	}
	var root [RootSize]byte
	copy(root[:], data)
	flags := data[RootSize]
	io := newMemIO(1024)
	rest := data[RootSize+1:]
	for p := uint64(1); len(rest) > 0; p++ {
		b := make([]byte, 1024)
		n := copy(b, rest)
		rest = rest[n:]
		if flags&1 != 0 {
			SetBlockChecksum(b, 7)
		}
		io.blocks[p] = b
	}
	tr, err := Open(&root, Config{BlockSize: 1024, Ino: 5, Seed: 7, Csum: flags&2 != 0, FirstDataBlock: 1, BlocksCount: 1 << 20, IO: io})
	return tr, io, err == nil
}

func seedTree(f *testing.F) {
	m := newModelRun(nil, 1, 1024, 0, 3000, 3)
	m.cfg.Seed = 7
	root := EmptyRoot()
	m.tr, _ = Open(&root, m.cfg)
	for k := uint32(0); k < 400; k++ {
		_ = m.tr.Insert(Extent{Lblk: 3 * k, Len: 1 + k%3, Pblk: 100 + 5*uint64(k), Unwritten: k%4 == 0})
	}
	// Renumber: fuzz blocks are 1.. in order of appearance.
	r := m.tr.Root()
	var blocks []uint64
	_ = m.tr.Blocks(func(p uint64, _ int) error { blocks = append(blocks, p); return nil })
	if len(blocks) > 0 {
		num := map[uint64]uint64{}
		for i, p := range blocks {
			num[p] = uint64(i + 1)
		}
		renum := func(b []byte, n int) {
			for i := 0; i < n; i++ {
				off := HeaderSize + EntrySize*i + 4
				p := uint64(binary.LittleEndian.Uint32(b[off:]))
				binary.LittleEndian.PutUint32(b[off:], uint32(num[p]))
			}
		}
		if binary.LittleEndian.Uint16(r[6:]) > 0 {
			renum(r[:], int(binary.LittleEndian.Uint16(r[2:])))
		}
		in := append([]byte{}, r[:]...)
		in = append(in, 3)
		for _, p := range blocks {
			b := append([]byte(nil), m.io.blocks[p]...)
			if binary.LittleEndian.Uint16(b[6:]) > 0 {
				renum(b, int(binary.LittleEndian.Uint16(b[2:])))
			}
			in = append(in, b...)
		}
		f.Add(in)
	}
	e := EmptyRoot()
	f.Add(append(e[:], 0))
	var one [RootSize]byte
	Header{Magic: Magic, Entries: 2, Max: 4}.Encode(one[:])
	_ = Extent{Lblk: 0, Len: 8, Pblk: 10}.Encode(one[12:])
	_ = Extent{Lblk: 9, Len: 40000 - 32768, Pblk: 30, Unwritten: true}.Encode(one[24:])
	f.Add(append(one[:], 0))
}

// FuzzTree decodes a tree from arbitrary bytes: Open, Walk, Lookup, Check,
// Blocks must not panic or hang; every node that decodes re-encodes to the
// same bytes; and a tree that passes Check survives a Remove.
func FuzzTree(f *testing.F) {
	seedTree(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, io, ok := fuzzTree(data)
		if !ok {
			return
		}
		var root [RootSize]byte
		copy(root[:], data)
		if tr.Root() != root {
			t.Fatalf("root does not re-encode identically")
		}
		_ = tr.Walk(func(Extent) error { return nil })
		for _, l := range []uint32{0, 1, 5, 100, 1 << 20, EndLblk - 1} {
			_, _, _, _ = tr.Lookup(l)
		}
		_ = tr.Blocks(func(p uint64, depth int) error {
			raw := io.blocks[p]
			n, err := tr.decodeNode(raw, p, false, depth, "fuzz")
			if err != nil {
				t.Fatalf("walked block %d fails to decode: %v", p, err)
			}
			if enc := tr.encodeLocked(n); !bytes.Equal(enc, raw) {
				t.Fatalf("block %d does not re-encode identically", p)
			}
			return nil
		})
		if tr.Check() == nil {
			tr.cfg.Alloc = newMemAlloc(1 << 19)
			if err := tr.Remove(3, 7); err != nil {
				t.Fatalf("Remove on a checked tree: %v", err)
			}
			if err := tr.Check(); err != nil {
				t.Fatalf("Check after Remove: %v", err)
			}
		}
	})
}

// FuzzEntries checks that every 12-byte entry decodes and re-encodes
// identically as an extent, an index and a header.
func FuzzEntries(f *testing.F) {
	f.Add(make([]byte, 12))
	f.Add([]byte{0x0a, 0xf3, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 12 {
			return
		}
		b = b[:12]
		out := make([]byte, 12)
		if err := DecodeExtent(b).Encode(out); err != nil || !bytes.Equal(out, b) {
			t.Fatalf("extent %x -> %+v -> %x (%v)", b, DecodeExtent(b), out, err)
		}
		if err := DecodeIndex(b).Encode(out); err != nil || !bytes.Equal(out, b) {
			t.Fatalf("index %x -> %x (%v)", b, out, err)
		}
		DecodeHeader(b).Encode(out)
		if !bytes.Equal(out, b) {
			t.Fatalf("header %x -> %x", b, out)
		}
	})
}

// FuzzPutExtents checks that putExtents, the tree's encoding loop, writes
// exactly what Extent.Encode writes, and nothing for an extent Encode
// rejects.
func FuzzPutExtents(f *testing.F) {
	f.Add(uint32(0), uint32(1), uint64(1), false)
	f.Add(uint32(7), uint32(0), uint64(1), false)
	f.Add(uint32(7), uint32(MaxWrittenLen), uint64(maxPblk-1), false)
	f.Add(uint32(7), uint32(MaxWrittenLen+1), uint64(9), false)
	f.Add(uint32(7), uint32(MaxUnwrittenLen), uint64(1)<<40, true)
	f.Add(uint32(7), uint32(MaxWrittenLen), uint64(9), true)
	f.Add(uint32(7), uint32(0), uint64(9), true)
	f.Add(uint32(7), uint32(5), uint64(maxPblk), true)
	f.Add(uint32(EndLblk), uint32(1<<32-1), uint64(1<<64-1), true)
	f.Fuzz(func(t *testing.T, lblk, n uint32, pblk uint64, unw bool) {
		e := []Extent{{Lblk: 1, Len: 2, Pblk: 3}, {Lblk: lblk, Len: n, Pblk: pblk, Unwritten: unw}}
		want := bytes.Repeat([]byte{0xa5}, 3*EntrySize)
		got := bytes.Clone(want)
		for i := range e {
			_ = e[i].Encode(want[EntrySize*i:])
		}
		putExtents(got, e)
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v: putExtents wrote %x, Encode %x", e[1], got, want)
		}
	})
}
