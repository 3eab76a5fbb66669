package ext4io_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/layout"
)

// TestFastCommitOverOldFilesystem: the device held an ext4 filesystem of
// the same geometry before Format (a reused disk), so the new files take
// inode slots that hold the old files' inodes: their i_block has the
// extent magic and extents to blocks the new files now use.
func TestFastCommitOverOldFilesystem(t *testing.T) {
	t.Parallel()
	for _, fo := range []ext4io.FormatOptions{
		{},
		{InodeSize: 128},
		{InodeSize: 512},
		{BlockSize: 1024},
	} {
		for _, claimed := range []bool{true, false} {
			t.Run(fmt.Sprintf("bs=%d,is=%d,zeroed=%v", fo.BlockSize, fo.InodeSize, claimed), func(t *testing.T) {
				base := fcReusedDisk(t, fo)
				if claimed {
					fcMarkItableZeroed(t, base)
				}
				crashImg, want, c := fcCrashWorkload(t, base, 3)
				if !claimed {
					// The inode tables are zeroed past the used inodes at
					// the first create in each group: no create meets a
					// stale tree.
					assert.GreaterOrEqual(t, c.FastCommits, uint64(25), "creates on a reused disk fast-commit")
				}
				fcCheckCrashImage(t, t.TempDir(), crashImg, want)
			})
		}
	}
}

// fcMarkItableZeroed sets ITABLE_ZEROED in every group descriptor of the
// filesystem on dev without zeroing anything, as mkfs.ext4 does on a
// device whose discard claims to zero (or a crafted image): the stale
// inode slots then stay, where ext4io would otherwise zero the inode
// table past the used inodes at the first create in the group.
func fcMarkItableZeroed(t *testing.T, dev *memdev.Device) {
	t.Helper()
	raw := make([]byte, 1024)
	_, err := dev.ReadAt(raw, 1024)
	require.NoError(t, err)
	sb, err := layout.DecodeSuperblock(raw)
	require.NoError(t, err)
	bs, ds := int64(sb.BlockSize()), sb.DescriptorSize()
	at := (int64(sb.FirstDataBlock) + 1) * bs
	for g := range sb.GroupCount() {
		b := make([]byte, ds)
		off := at + int64(g)*int64(ds)
		_, err := dev.ReadAt(b, off)
		require.NoError(t, err)
		d, err := layout.DecodeGroupDesc(b, ds)
		require.NoError(t, err)
		d.Flags |= layout.BgInodeZeroed
		d.SetChecksum(sb, uint32(g))
		_, err = dev.WriteAt(d.Raw, off)
		require.NoError(t, err)
	}
}

// TestFastCommitOverOldFilesystemReusedNumber: on a reused disk, a file
// created over an old inode and unlinked before any commit frees its
// number, which the next create takes; the fast commit holds CREAT,
// UNLINK, CREAT of that number. The on-disk i_block is still the old
// filesystem's tree (not the unlinked file's own, whose blocks no other
// file could have taken), so the create must not be a fast commit.
func TestFastCommitOverOldFilesystemReusedNumber(t *testing.T) {
	t.Parallel()
	base := fcReusedDisk(t, ext4io.FormatOptions{})
	fcMarkItableZeroed(t, base)
	crash, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	v, err := ext4io.Open(crash, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	ino := func(name string) uint32 {
		fi, err := v.Stat(name)
		require.NoError(t, err)
		return fi.Sys().(*ext4io.FileInfo).Ino
	}
	require.NoError(t, v.Mkdir("a", 0o755))
	// A file over the old files' data: the old trees map its blocks.
	big := bytes.Repeat([]byte{0xb1}, 12<<20)
	f, err := v.Create("big")
	require.NoError(t, err)
	_, err = f.WriteAt(big, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, v.Sync())
	want := map[string][]byte{"big": big}
	for i := range 8 {
		f, err := v.Create(fmt.Sprintf("a/tmp%d", i))
		require.NoError(t, err)
		_, err = f.WriteAt(bytes.Repeat([]byte{byte(i)}, 5000), 0)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		old := ino(fmt.Sprintf("a/tmp%d", i))
		require.NoError(t, v.Unlink(fmt.Sprintf("a/tmp%d", i)))
		name := fmt.Sprintf("a/f%d", i)
		f, err = v.Create(name)
		require.NoError(t, err)
		require.Equal(t, old, ino(name), "the create takes the unlinked file's number")
		data := bytes.Repeat([]byte{0x40 + byte(i)}, 3000+i*1000)
		_, err = f.WriteAt(data, 0)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		require.NoError(t, f.Close())
		want[name] = data
	}
	// An append is a fast commit whatever the creates were: the crash
	// image has one pending.
	f, err = v.OpenFile("a/f0", os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("tail"), int64(len(want["a/f0"])))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	want["a/f0"] = append(want["a/f0"], "tail"...)
	c := v.Counters()
	t.Logf("fast commits %d, fallbacks %d, journal commits %d", c.FastCommits, c.FastCommitFallbacks, c.JournalCommits)
	img, err := crash.Crash(errordev.CrashOptions{})
	require.NoError(t, err)
	require.NoError(t, v.Close())
	fcCheckCrashImage(t, t.TempDir(), ext4iotest.ImageOf(t, img), want)
}

// fcDiskSize is the device size for the stale-slot tests: with 1 KiB
// blocks one group (8 MiB), as a group marked INODE_UNINIT gets its inode
// table zeroed when its first inode is taken and the workload's
// directories would otherwise land in such groups.
func fcDiskSize(fo ext4io.FormatOptions) int64 {
	if fo.BlockSize == 1024 {
		return 8 << 20
	}
	return 64 << 20
}

// fcReusedDisk returns a device formatted with fo and FastCommit over an
// ext4 filesystem of the same geometry that holds 64 files in 16
// directories (the inode tables are left for lazy init, so the old
// inodes stay in the new volume's free slots).
func fcReusedDisk(t *testing.T, fo ext4io.FormatOptions) *memdev.Device {
	t.Helper()
	size := fcDiskSize(fo)
	base := memdev.New(size)
	old := fo
	old.NoDiscard = true
	require.NoError(t, ext4io.Format(base, old))
	ov, err := ext4io.Open(base, ext4io.Options{Writable: true})
	require.NoError(t, err)
	// Directories in most groups (the new volume's a and b may
	// land in any of them), their files' inodes next to them.
	rng := rand.New(rand.NewPCG(7, 7))
	for d := range 16 {
		require.NoError(t, ov.Mkdir(fmt.Sprintf("d%d", d), 0o755))
	}
	for i := range 64 {
		f, err := ov.Create(fmt.Sprintf("d%d/old%d", i%16, i))
		require.NoError(t, err)
		b := make([]byte, 1+rng.IntN(int(size/320)))
		for j := range b {
			b[j] = byte(rng.UintN(256))
		}
		_, err = f.WriteAt(b, 0)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	require.NoError(t, ov.Close())

	nf := fo
	nf.FastCommit, nf.NoDiscard = true, true
	require.NoError(t, ext4io.Format(base, nf))
	return base
}

// TestFastCommitOverHostileInodeSlots: after Format the free inode slots
// are filled with hostile stale bytes, one kind per subtest: stale
// i_extra_isize values (0, odd, beyond the inode), the in-inode xattr
// magic at other offsets than the header's and at the header's place
// (with an inline-data entry), extent roots (empty with garbage after the
// header, and one mapping metadata blocks), garbage checksums, crtime and
// projid, random bytes. Each fast commit over them must replay clean and
// equal in e2fsck, ext4io and Linux, and the files must have no xattrs.
func TestFastCommitOverHostileInodeSlots(t *testing.T) {
	t.Parallel()
	for kind := range fcHostileKinds {
		for _, fo := range []ext4io.FormatOptions{
			{},
			{InodeSize: 128},
			{InodeSize: 512},
			{BlockSize: 1024},
			{BlockSize: 1024, InodeSize: 512},
		} {
			if fo.InodeSize == 128 && kind <= 5 {
				continue // the kinds of the area past 128 bytes
			}
			t.Run(fmt.Sprintf("kind=%d,bs=%d,is=%d", kind, fo.BlockSize, fo.InodeSize), func(t *testing.T) {
				base := memdev.New(fcDiskSize(fo))
				fo.FastCommit, fo.NoDiscard = true, true
				require.NoError(t, ext4io.Format(base, fo))
				fcMarkItableZeroed(t, base)
				poked := fcPokeFreeSlots(t, base, fo, kind)
				t.Logf("%d free slots made hostile", poked)
				crashImg, want, _ := fcCrashWorkload(t, base, 4)
				fcCheckCrashImage(t, t.TempDir(), crashImg, want)
				fcNoXattrsAfterReplay(t, crashImg, want)
			})
		}
	}
}

// fcHostileKinds is the number of kinds of stale bytes fcPokeFreeSlots
// writes; kinds 0-5 are about the area past the first 128 bytes.
const fcHostileKinds = 10

// fcPokeFreeSlots fills every all-zero inode slot of dev's inode tables
// (the free ones Format left for lazy init) with hostile stale bytes and
// returns how many it filled: random bytes, a link count and kind.
func fcPokeFreeSlots(t *testing.T, dev *memdev.Device, fo ext4io.FormatOptions, kind int) int {
	t.Helper()
	bs, isz := fo.BlockSize, fo.InodeSize
	if bs == 0 {
		bs = 4096
	}
	if isz == 0 {
		isz = 256
	}
	out, err := exec.Command(e2fs.Tool(t, "dumpe2fs"), ext4iotest.ImageOf(t, dev)).CombinedOutput()
	require.NoError(t, err, "%s", out)
	re := regexp.MustCompile(`Inode table at (\d+)-(\d+)`)
	le := binary.LittleEndian
	rng := rand.New(rand.NewPCG(5, 5))
	poked := 0
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		lo, _ := strconv.ParseInt(m[1], 10, 64)
		hi, _ := strconv.ParseInt(m[2], 10, 64)
		tbl := make([]byte, (hi-lo+1)*int64(bs))
		_, err := dev.ReadAt(tbl, lo*int64(bs))
		require.NoError(t, err)
		for off := 0; off+isz <= len(tbl); off += isz {
			s := tbl[off : off+isz]
			if !bytes.Equal(s, make([]byte, isz)) {
				continue
			}
			for i := range s {
				s[i] = byte(rng.UintN(256))
			}
			le.PutUint16(s[0x1a:], 1) // i_links_count: a live file of another filesystem
			poked++
			extra := 0
			if isz > 128 {
				extra = isz - 128
			}
			switch kind {
			case 0:
				if extra > 0 {
					le.PutUint16(s[128:], 0)
				}
			case 1:
				if extra > 0 {
					le.PutUint16(s[128:], 3)
				}
			case 2:
				if extra > 0 {
					le.PutUint16(s[128:], 0xffff)
				}
			case 3, 4: // the magic where a stale i_extra_isize (4, 64) puts it
				if extra >= 72 {
					x := 4 + (kind-3)*60
					le.PutUint16(s[128:], uint16(x))
					fcStaleIbodyXattr(s[128+x:], "stale")
				}
			case 5: // the magic at the header's place for i_extra_isize 32, an inline-data entry
				if extra >= 64 {
					le.PutUint16(s[128:], 32)
					le.PutUint32(s[0x20:], 0x10000000) // EXT4_INLINE_DATA_FL
					fcStaleIbodyXattr(s[160:], "data")
				}
			case 6: // an empty extent root, garbage after its header
				le.PutUint16(s[0x28:], 0xf30a)
				le.PutUint16(s[0x2a:], 0)
				le.PutUint16(s[0x2c:], 4)
				le.PutUint16(s[0x2e:], 0)
			case 7: // an extent root mapping blocks 0-99 (superblock, descriptors, bitmaps)
				le.PutUint16(s[0x28:], 0xf30a)
				le.PutUint16(s[0x2a:], 1)
				le.PutUint16(s[0x2c:], 4)
				le.PutUint16(s[0x2e:], 0)
				le.PutUint32(s[0x34:], 0)   // ee_block
				le.PutUint16(s[0x38:], 100) // ee_len
				le.PutUint16(s[0x3a:], 0)   // ee_start_hi
				le.PutUint32(s[0x3c:], 0)   // ee_start_lo
			case 8: // an index root of depth 2 to block 1
				le.PutUint16(s[0x28:], 0xf30a)
				le.PutUint16(s[0x2a:], 1)
				le.PutUint16(s[0x2c:], 4)
				le.PutUint16(s[0x2e:], 2)
				le.PutUint32(s[0x34:], 0) // ei_block
				le.PutUint32(s[0x38:], 1) // ei_leaf_lo
			}
		}
		_, err = dev.WriteAt(tbl, lo*int64(bs))
		require.NoError(t, err)
	}
	return poked
}

// fcStaleIbodyXattr writes an in-inode xattr header and one entry
// ("user."+name, or system.data for "data") with a 4-byte value to b.
func fcStaleIbodyXattr(b []byte, name string) {
	le := binary.LittleEndian
	clear(b[:64])
	le.PutUint32(b, 0xEA020000)
	e := b[4:]
	idx := byte(1) // user.
	if name == "data" {
		idx = 7 // system.
	}
	e[0] = byte(len(name))
	e[1] = idx
	le.PutUint16(e[2:], 40) // e_value_offs, from the first entry
	le.PutUint32(e[8:], 4)  // e_value_size
	copy(e[16:], name)
	copy(e[40:], "old!")
}
