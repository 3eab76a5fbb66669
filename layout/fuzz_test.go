package layout

import (
	"bytes"
	"testing"
)

// seedSuperblock returns a valid superblock encoding built in memory.
func seedSuperblock() *Superblock {
	sb := &Superblock{
		InodesCount: 2048, BlocksCount: 8192, FirstDataBlock: 0, LogBlockSize: 2,
		LogClusterSize: 2, BlocksPerGroup: 32768, ClustersPerGroup: 32768, InodesPerGroup: 2048,
		Magic: SuperMagic, State: StateValid, RevLevel: 1, FirstIno: 11, InodeSize: 256,
		FeatureIncompat: IncompatExtents | Incompat64Bit | IncompatFiletype, DescSize: 64,
		FeatureRoCompat: RoCompatMetadataCsum, ChecksumType: ChecksumTypeCrc32c,
	}
	sb.Encode()
	return sb
}

func FuzzSuperblock(f *testing.F) {
	f.Add(seedSuperblock().Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		sb, err := DecodeSuperblock(b)
		if err != nil {
			return
		}
		if !bytes.Equal(sb.Encode(), b[:SuperblockSize]) {
			t.Fatal("decoded superblock does not re-encode identically")
		}
		// Derived geometry must not panic.
		_ = sb.GroupCount()
		_ = sb.DescBlocks()
		for g := uint64(0); g < 4 && g < sb.GroupCount(); g++ {
			sb.DescriptorLocation(g)
			sb.GroupHasSuper(g)
		}
	})
}

func FuzzGroupDesc(f *testing.F) {
	sb := seedSuperblock()
	gd := &GroupDesc{BlockBitmap: 10, InodeBitmap: 11, InodeTable: 12, FreeBlocksCount: 100, ItableUnused: 7}
	gd.SetChecksum(sb, 0)
	f.Add(gd.Raw, true)
	f.Add(gd.Raw[:32], false)
	f.Fuzz(func(t *testing.T, b []byte, is64 bool) {
		size := DescSize32
		if is64 {
			size = DescSize64
		}
		g, err := DecodeGroupDesc(b, size)
		if err != nil {
			return
		}
		_ = g.Verify(sb, 1, 1)
		if !bytes.Equal(g.Encode(size), b[:size]) {
			t.Fatal("descriptor does not re-encode identically")
		}
	})
}

func FuzzInode(f *testing.F) {
	in := &Inode{Mode: ModeReg | 0o644, Size: 1 << 40, LinksCount: 1, ExtraIsize: 32, Flags: InodeFlagExtents}
	in.Encode(256)
	in.SetChecksum(12345, 12)
	f.Add(in.Raw)
	f.Add(in.Raw[:128])
	f.Fuzz(func(t *testing.T, b []byte) {
		size := 256
		if len(b) < 256 {
			size = 128
		}
		in, err := DecodeInode(b, size)
		if err != nil {
			return
		}
		_ = in.VerifyChecksum(1, 12, 0, 0)
		if r := XattrIbodyRegion(in); r != nil {
			_, _ = DecodeXattrIbody(r)
		}
		if !bytes.Equal(in.Encode(size), b[:size]) {
			t.Fatal("inode does not re-encode identically")
		}
	})
}

func FuzzDirBlock(f *testing.F) {
	b := make([]byte, 1024)
	PutDirEntry(b, 0, 2, 12, FtDir, []byte("."))
	PutDirEntry(b, 12, 2, 12, FtDir, []byte(".."))
	PutDirEntry(b, 24, 12, 1024-24-DirTailLen, FtRegFile, []byte("file"))
	SetDirTail(7, b)
	f.Add(b, true)
	f.Fuzz(func(t *testing.T, b []byte, tail bool) {
		if len(b) < DirTailLen || len(b) > 1<<16 {
			return
		}
		_ = VerifyDirBlock(7, b, 1, 2)
		n := 0
		_ = DirBlock(b, 1, 2, tail, true, true, func(e DirEntry) error {
			if e.Off+e.RecLen > len(b) || len(e.Name) > MaxNameLen {
				t.Fatalf("entry escapes block: %+v", e)
			}
			n++
			return nil
		})
		if n > len(b)/12 {
			t.Fatalf("%d entries in %d bytes", n, len(b))
		}
	})
}

func FuzzDxNode(f *testing.F) {
	b := make([]byte, 1024)
	PutDirEntry(b, 0, 2, 12, FtDir, []byte("."))
	PutDirEntry(b, 12, 2, 1012, FtDir, []byte(".."))
	b[DxRootInfoOff+5] = 8
	limit := DxLimit(1024, DxRootCountOff, true)
	PutDxEntries(b, DxRootCountOff, limit, []DxEntry{{0, 1}, {0x1000, 2}})
	SetDxTail(3, b, DxRootCountOff, 2, limit)
	f.Add(b, true)
	f.Fuzz(func(t *testing.T, b []byte, csum bool) {
		if len(b) > 1<<16 {
			return
		}
		if _, n, err := DecodeDxRoot(b, 1, 2, csum, false); err == nil {
			if csum {
				_ = VerifyDx(3, b, n, 1, 2)
			}
			n.DxLookup(0x800)
		}
		if n, err := DecodeDxNode(b, 1, 2, csum); err == nil && csum {
			_ = VerifyDx(3, b, n, 1, 2)
		}
	})
}
