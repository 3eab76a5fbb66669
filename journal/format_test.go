package journal

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// formats covers every tag layout: 8, 12, 10, 14 and 16 bytes.
var formats = []Format{
	{BlockSize: 1024},
	{BlockSize: 1024, Incompat: FeatureIncompat64Bit},
	{BlockSize: 1024, Incompat: FeatureIncompatCsumV2, Seed: 0x1234},
	{BlockSize: 1024, Incompat: FeatureIncompatCsumV2 | FeatureIncompat64Bit, Seed: 7},
	{BlockSize: 1024, Incompat: FeatureIncompatCsumV3 | FeatureIncompat64Bit, Seed: 9},
	{BlockSize: 1024, Incompat: FeatureIncompatCsumV3, Seed: 9},
}

func TestTagBytes(t *testing.T) {
	want := []int{8, 12, 10, 14, 16, 16}
	for i, f := range formats {
		if got := f.TagBytes(); got != want[i] {
			t.Errorf("format %d: tag bytes %d, want %d", i, got, want[i])
		}
	}
}

func TestCRC32BE(t *testing.T) {
	// CRC-32/MPEG-2 (init ~0, MSB first, no final xor) check value.
	if got := crc32BE(^uint32(0), []byte("123456789")); got != 0x0376E6E7 {
		t.Fatalf("crc32_be check %#x", got)
	}
}

func TestDescriptorRoundTrip(t *testing.T) {
	for i, f := range formats {
		n := f.TagsPerDescriptor()
		d := &Descriptor{Sequence: 42}
		for k := range n {
			tg := Tag{Block: uint64(1000 + k), Flags: FlagSameUUID, Checksum: uint32(k * 77)}
			if f.is64() {
				tg.Block |= uint64(k) << 33
				tg.High = uint32(tg.Block >> 32)
			}
			if f.Incompat&FeatureIncompatCsumV2 != 0 {
				tg.Checksum &= 0xFFFF
			}
			if k == 0 {
				tg.Flags, tg.UUID = FlagEscape, [16]byte{5, 6, 7}
			}
			if k == n-1 {
				tg.Flags |= FlagLastTag
			}
			d.Tags = append(d.Tags, tg)
		}
		b := make([]byte, f.BlockSize)
		if err := d.Encode(f, b); err != nil {
			t.Fatalf("format %d: %v", i, err)
		}
		if !f.blockTailOK(b) {
			t.Fatalf("format %d: tail checksum", i)
		}
		got, err := DecodeDescriptor(f, b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Tags, d.Tags) {
			t.Fatalf("format %d: tags differ\n%+v\n%+v", i, got.Tags[:2], d.Tags[:2])
		}
		if err := d.Encode(f, make([]byte, f.BlockSize)); err != nil {
			t.Fatal(err)
		}
		d.Tags = append(d.Tags, Tag{})
		if err := d.Encode(f, make([]byte, f.BlockSize)); err == nil {
			t.Fatalf("format %d: one tag too many encoded", i)
		}
	}
}

func TestRevokeAndCommitRoundTrip(t *testing.T) {
	for i, f := range formats {
		r := &Revoke{Sequence: 3}
		for k := range f.RevokesPerBlock() {
			r.Blocks = append(r.Blocks, uint64(k+1))
		}
		b := make([]byte, f.BlockSize)
		if err := r.Encode(f, b); err != nil {
			t.Fatal(err)
		}
		got, err := DecodeRevoke(f, b)
		if err != nil || !reflect.DeepEqual(got.Blocks, r.Blocks) || !f.blockTailOK(b) {
			t.Fatalf("format %d: revoke %v", i, err)
		}
		c := &Commit{Sequence: 5, Sec: 1 << 40, Nsec: 999}
		c.Encode(f, b)
		if f.csumV2or3() && be.Uint32(b[16:]) != f.commitCsum(b) {
			t.Fatalf("format %d: commit checksum", i)
		}
		gc, err := DecodeCommit(b)
		if err != nil || gc.Sec != c.Sec || gc.Nsec != c.Nsec || gc.Sequence != 5 {
			t.Fatalf("format %d: commit %+v %v", i, gc, err)
		}
	}
}

func fmtFromByte(x byte) Format {
	return formats[int(x)%len(formats)]
}

func seedBlocks(f *testing.F, kind int) {
	for i, fm := range formats {
		b := make([]byte, fm.BlockSize)
		switch kind {
		case 0:
			d := &Descriptor{Sequence: 1, Tags: []Tag{{Block: 9}, {Block: 10, Flags: FlagSameUUID | FlagLastTag}}}
			d.Encode(fm, b)
		case 1:
			(&Revoke{Sequence: 1, Blocks: []uint64{4, 5}}).Encode(fm, b)
		case 2:
			(&Commit{Sequence: 1, Sec: 7}).Encode(fm, b)
		}
		f.Add(byte(i), b)
	}
}

func FuzzDescriptor(f *testing.F) {
	seedBlocks(f, 0)
	f.Fuzz(func(t *testing.T, x byte, b []byte) {
		fm := fmtFromByte(x)
		if len(b) != fm.BlockSize {
			return
		}
		d, err := DecodeDescriptor(fm, b)
		if err != nil {
			return
		}
		out := make([]byte, len(b))
		if err := d.Encode(fm, out); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func FuzzRevoke(f *testing.F) {
	seedBlocks(f, 1)
	f.Fuzz(func(t *testing.T, x byte, b []byte) {
		fm := fmtFromByte(x)
		if len(b) != fm.BlockSize {
			return
		}
		r, err := DecodeRevoke(fm, b)
		if err != nil {
			return
		}
		out := make([]byte, len(b))
		if err := r.Encode(fm, out); err != nil || !bytes.Equal(out, b) {
			t.Fatalf("re-encoding differs: %v", err)
		}
	})
}

func FuzzCommit(f *testing.F) {
	seedBlocks(f, 2)
	f.Fuzz(func(t *testing.T, x byte, b []byte) {
		fm := fmtFromByte(x)
		c, err := DecodeCommit(b)
		if err != nil {
			return
		}
		out := make([]byte, len(b))
		c.Encode(fm, out)
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func FuzzSuperblock(f *testing.F) {
	sb := Superblock{Header: Header{Magic, BlockTypeSuperblockV2, 0}, BlockSize: 1024, MaxLen: 1024, First: 1,
		SeqTail: 3, FeatureIncompat: FeatureIncompatCsumV3, ChecksumType: ChecksumTypeCRC32C}
	sb.SetChecksum()
	b := make([]byte, SuperblockSize)
	sb.Encode(b)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		sb, err := DecodeSuperblock(b)
		if err != nil {
			return
		}
		out := make([]byte, SuperblockSize)
		sb.Encode(out)
		if !bytes.Equal(out, b[:SuperblockSize]) {
			t.Fatalf("re-encoding differs")
		}
	})
}

// committedLog returns the device image of a v3-checksummed 64-bit journal
// after n committed transactions, each logging one block and revoking
// another, before any checkpoint.
func committedLog(f *testing.F, n int) []byte {
	dev := newTestDev(f)
	j, err := Create(testConfig(dev), CreateOptions{CsumV3: true, Is64Bit: true})
	if err != nil {
		f.Fatal(err)
	}
	for i := range n {
		h, _ := j.Start(3)
		h.GetWriteAccess(tHome0 + uint64(i))
		h.Dirty(tHome0+uint64(i), bytes.Repeat([]byte{byte(i)}, tBS))
		h.Revoke(tHome0 + 5)
		h.Stop()
		j.Commit()
	}
	return dev.snapshot()
}

// patchLog returns a copy of img with patch written into the first
// logBlocks blocks of its journal at off (modulo their length), cut at
// their end.
func patchLog(img []byte, logBlocks int, off uint16, patch []byte) []byte {
	im := bytes.Clone(img)
	l := im[tJOff*tBS : (tJOff+logBlocks)*tBS]
	copy(l[int(off)%len(l):], patch)
	return im
}

// FuzzRecover mutates the log of a journal holding two transactions and a
// revoke: Open and Recover must not panic or hang.
func FuzzRecover(f *testing.F) {
	img := committedLog(f, 2)
	f.Add(uint16(0), []byte{0})
	f.Add(uint16(1024*2+12), []byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, off uint16, patch []byte) {
		im := patchLog(img, 12, off, patch)
		j, err := Open(testConfig(memDevFrom(im)))
		if err != nil {
			return
		}
		j.Recover()
	})
}

// FuzzScan mutates the log and the superblock of a journal holding two
// transactions, a revoke and a log that wraps, and walks it with Scan (the
// CLI's journal command) and FastCommitBlocks: no panic or hang, fn called
// at most once per log block, and every error wraps a sentinel.
func FuzzScan(f *testing.F) {
	img := committedLog(f, 3)
	// The log before the checkpoint empties it: s_start points at the
	// first transaction.
	f.Add(uint16(0), []byte{})
	f.Add(uint16(0x1C), []byte{0, 0, 0, 5})           // s_start
	f.Add(uint16(0x10), []byte{0, 0, 0, 4})           // s_maxlen
	f.Add(uint16(0x54), []byte{0, 0, 0, 100})         // s_num_fc_blks
	f.Add(uint16(0x28), []byte{0, 0, 0, 0x30})        // incompat: fast commit
	f.Add(uint16(tBS+12+8), []byte{0, 0, 0, 0, 0, 0}) // first descriptor tag
	f.Fuzz(func(t *testing.T, off uint16, patch []byte) {
		wd := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("no result after 10s: off %d patch %x", off, patch)) })
		defer wd.Stop()
		im := patchLog(img, 12, off, patch)
		j, err := Open(testConfig(memDevFrom(im)))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrIO) && !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("Open: %v wraps no sentinel", err)
			}
			return
		}
		seen := map[uint32]int{}
		n := 0
		if len(patch) == 0 && j.Superblock().Start == 0 {
			t.Fatal("the pristine seed log is empty")
		}
		err = j.Scan(func(lb LogBlock) error {
			n++
			if seen[lb.Block]++; seen[lb.Block] > 1 && n > tJLen {
				t.Fatalf("Scan reported log block %d again after %d blocks", lb.Block, n)
			}
			return nil
		})
		if n > tJLen {
			t.Fatalf("Scan called fn %d times on a %d-block journal", n, tJLen)
		}
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrIO) {
			t.Fatalf("Scan: %v wraps no sentinel", err)
		}
		if bl, err := j.FastCommitBlocks(); err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrIO) {
			t.Fatalf("FastCommitBlocks: %v wraps no sentinel", err)
		} else if len(bl) > tJLen {
			t.Fatalf("%d fast-commit blocks in a %d-block journal", len(bl), tJLen)
		}
	})
}

// FuzzRecoverFormats is FuzzRecover and FuzzScan over journals of every
// checksum format (none, v1 transaction checksums, v2, v3; 32- and
// 64-bit tags): mutations of a log without block checksums reach the
// descriptor tags, revoke records and commit headers that a v3 log's
// checksums stop. The log holds three transactions with revokes.
func FuzzRecoverFormats(f *testing.F) {
	opts := []CreateOptions{
		{},
		{Is64Bit: true},
		{CsumV1: true},
		{CsumV2: true},
		{CsumV3: true, Is64Bit: true},
	}
	imgs := make([][]byte, len(opts))
	for i, o := range opts {
		dev := newTestDev(f)
		j, err := Create(testConfig(dev), o)
		if err != nil {
			f.Fatal(err)
		}
		for k := range 3 {
			h, _ := j.Start(4)
			for b := range 3 {
				h.GetWriteAccess(tHome0 + uint64(k*3+b))
				h.Dirty(tHome0+uint64(k*3+b), bytes.Repeat([]byte{byte(k*3 + b)}, tBS))
			}
			h.Revoke(tHome0 + 20 + uint64(k))
			h.Stop()
			j.Commit()
		}
		imgs[i] = dev.snapshot()
	}
	for i := range opts {
		f.Add(byte(i), uint16(0), []byte{})
		f.Add(byte(i), uint16(tBS+12), []byte{0xff, 0xff, 0xff, 0xff})   // first tag's block
		f.Add(byte(i), uint16(tBS+12+4), []byte{0, 0, 0, 0x0a})          // tag flags: last, same UUID
		f.Add(byte(i), uint16(0x1C), []byte{0, 0, 0, 0x7f})              // s_start
		f.Add(byte(i), uint16(5*tBS+12), []byte{0, 0, 0x7f, 0xff, 0xff}) // revoke r_count
	}
	f.Fuzz(func(t *testing.T, sel byte, off uint16, patch []byte) {
		wd := time.AfterFunc(10*time.Second, func() {
			panic(fmt.Sprintf("no result after 10s: format %d off %d patch %x", sel, off, patch))
		})
		defer wd.Stop()
		img := imgs[int(sel)%len(imgs)]
		im := patchLog(img, tJLen, off, patch)
		sentinel := func(what string, err error) {
			if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrIO) && !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("%s: %v wraps no sentinel", what, err)
			}
		}
		dev := memDevFrom(im)
		j, err := Open(testConfig(dev))
		sentinel("Open", err)
		if err != nil {
			return
		}
		if len(patch) == 0 && j.Superblock().Start == 0 {
			t.Fatal("the pristine seed log is empty")
		}
		n := 0
		sentinel("Scan", j.Scan(func(LogBlock) error { n++; return nil }))
		if n > tJLen {
			t.Fatalf("Scan called fn %d times on a %d-block journal", n, tJLen)
		}
		_, err = j.Recover()
		sentinel("Recover", err)
	})
}
