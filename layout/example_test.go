package layout_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/layout"
)

// DecodeSuperblock parses the 1024 bytes at byte 1024 of an image and
// validates them, checksum included. layout does no I/O: the caller
// reads the bytes.
func ExampleDecodeSuperblock() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{Label: "data", Features: "^orphan_file"}); err != nil {
		log.Fatal(err)
	}
	raw := make([]byte, layout.SuperblockSize)
	if _, err := dev.ReadAt(raw, layout.SuperblockOffset); err != nil {
		log.Fatal(err)
	}
	sb, err := layout.DecodeSuperblock(raw)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("label %q, %d blocks of %d bytes in %d groups\n",
		sb.Label(), sb.BlocksCount, sb.BlockSize(), sb.GroupCount())
	fmt.Println("inodes:", sb.InodesCount, "of", sb.InodeSizeBytes(), "bytes")
	fmt.Println(layout.FeatureNames(sb.FeatureCompat, sb.FeatureRoCompat, sb.FeatureIncompat))
	fmt.Println("has journal:", sb.HasCompat(layout.CompatHasJournal))
	// Output:
	// label "data", 16384 blocks of 4096 bytes in 1 groups
	// inodes: 4096 of 256 bytes
	// [has_journal ext_attr dir_index sparse_super large_file huge_file dir_nlink extra_isize metadata_csum filetype extent 64bit flex_bg metadata_csum_seed]
	// has journal: true
}

// With metadata_csum, s_checksum is crc32c over the first 0x3FC bytes.
// DecodeSuperblock rejects a superblock whose checksum does not match.
func ExampleSuperblock_ComputeChecksum() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	raw := make([]byte, layout.SuperblockSize)
	if _, err := dev.ReadAt(raw, layout.SuperblockOffset); err != nil {
		log.Fatal(err)
	}
	sb, err := layout.DecodeSuperblock(raw)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored == computed:", sb.Checksum == sb.ComputeChecksum())

	sb.MntCount++
	fixed := sb.Encode() // recomputes the checksum
	_, err = layout.DecodeSuperblock(fixed)
	fmt.Println("re-encoded decodes:", err == nil)

	raw[0x78] ^= 0xff // change the volume name without fixing the checksum
	_, err = layout.DecodeSuperblock(raw)
	fmt.Println("corrupt:", errors.Is(err, layout.ErrCorrupt))
	// Output:
	// stored == computed: true
	// re-encoded decodes: true
	// corrupt: true
}

// DirHash computes the htree hash that places a name in an indexed
// directory, from the superblock's hash seed. debugfs agrees:
// dx_hash -h half_md4 -s 67452301-efcd-ab89-98ba-dcfe10325476 hello.txt
func ExampleDirHash() {
	seed := [4]uint32{0x01234567, 0x89abcdef, 0xfedcba98, 0x76543210}
	for _, name := range []string{"a", "hello.txt"} {
		hash, minor, ok := layout.DirHash(layout.HashHalfMD4, seed, []byte(name))
		fmt.Printf("%-9s %#08x %#08x %v\n", name, hash, minor, ok)
	}
	// Output:
	// a         0xdeaa09f8 0x61702ed2 true
	// hello.txt 0x1caaf99e 0x7d6c9ec8 true
}

// Reading an inode by hand: the superblock locates the group descriptor,
// the descriptor locates the inode table, and the inode carries its own
// checksum.
func ExampleDecodeInode() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	raw := make([]byte, layout.SuperblockSize)
	if _, err := dev.ReadAt(raw, layout.SuperblockOffset); err != nil {
		log.Fatal(err)
	}
	sb, err := layout.DecodeSuperblock(raw)
	if err != nil {
		log.Fatal(err)
	}
	bs := int64(sb.BlockSize())

	group, index := sb.InodeLocation(layout.RootIno)
	descBlock, descOff := sb.DescriptorLocation(group)
	gdRaw := make([]byte, sb.DescriptorSize())
	if _, err := dev.ReadAt(gdRaw, int64(descBlock)*bs+int64(descOff)); err != nil {
		log.Fatal(err)
	}
	gd, err := layout.DecodeGroupDesc(gdRaw, sb.DescriptorSize())
	if err != nil {
		log.Fatal(err)
	}
	if err := gd.Verify(sb, uint32(group), descBlock); err != nil {
		log.Fatal(err)
	}

	isize := sb.InodeSizeBytes()
	inRaw := make([]byte, isize)
	if _, err := dev.ReadAt(inRaw, int64(gd.InodeTable)*bs+int64(index)*int64(isize)); err != nil {
		log.Fatal(err)
	}
	in, err := layout.DecodeInode(inRaw, isize)
	if err != nil {
		log.Fatal(err)
	}
	pos := int64(index) * int64(isize) // for the error message: block and offset
	if err := in.VerifyChecksum(sb.CsumSeed(), layout.RootIno, gd.InodeTable+uint64(pos/bs), int(pos%bs)); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("root: dir %v, mode %#o, links %d, size %d, extents %v\n", in.IsDir(),
		in.Mode&^layout.ModeFmt, in.LinksCount, in.Size, in.Flags&layout.InodeFlagExtents != 0)
	// Output:
	// root: dir true, mode 0755, links 3, size 4096, extents true
}
