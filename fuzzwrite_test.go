package ext4io_test

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/overlay"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/layout"
)

// fuzzWriteBases are the bases of FuzzWriteImage, built once per fuzz
// worker: the random-damage tree (genDamageTree) with the features the
// other whole-image fuzz base lacks. "inline" has inline_data with lazily
// initialised inode tables (bg_itable_unused, no ITABLE_ZEROED), "journal"
// is the same with orphan_file as a crash left it (committed transactions
// to replay), "nocsum" has no metadata_csum, so that damage reaches the
// decoders past the checksums.
var fuzzWriteBases struct {
	once  sync.Once
	bases []*sweepBase
	// targets are each base's metadata regions, in a fixed order:
	// group descriptors, superblock, then the other kinds by name.
	targets [][]damageTarget
	err     string
}

func fuzzWriteBase(t *testing.T) ([]*sweepBase, [][]damageTarget) {
	fb := &fuzzWriteBases
	fb.once.Do(func() {
		e2fs.Tool(t, "mkfs.ext4")
		e2fs.Tool(t, "debugfs")
		e2fs.Tool(t, "e2fsck")
		lazy := []string{"-b", "1024", "-O", "inline_data", "-E", "lazy_itable_init=1"}
		for _, c := range []struct {
			name    string
			journal bool
			args    []string
		}{
			{"inline", false, lazy},
			{"journal", true, append(lazy, "-O", "orphan_file")},
			{"nocsum", false, []string{"-b", "1024", "-O", "inline_data,^metadata_csum"}},
		} {
			b := buildSweepBase(t, c.name, 27, c.journal, c.args...)
			// The group descriptors first, then the superblock, then
			// the other kinds by name: seeds can name a descriptor.
			tg := append(append([]damageTarget(nil), b.byKind["group descriptor"]...), b.byKind["superblock"]...)
			for _, k := range slices.Sorted(maps.Keys(b.byKind)) {
				if k != "group descriptor" && k != "superblock" {
					tg = append(tg, b.byKind[k]...)
				}
			}
			fb.bases = append(fb.bases, b)
			fb.targets = append(fb.targets, tg)
		}
	})
	if fb.bases == nil {
		t.Skip("no fuzz write base (see the first worker's failure)")
	}
	return fb.bases, fb.targets
}

// fixChecksums recomputes the checksums of the superblock and of every
// group descriptor in dev (at their places in the pristine img), so that
// damage to their fields reaches the code past the checksum checks (the
// lazy inode-table init, the allocators).
func fixChecksums(dev interface {
	ReadAt([]byte, int64) (int, error)
	WriteAt([]byte, int64) (int, error)
}, img []byte) {
	psb, err := layout.DecodeSuperblock(img[1024:2048])
	if err != nil {
		return
	}
	raw := make([]byte, 1024)
	if _, err := dev.ReadAt(raw, 1024); err != nil {
		return
	}
	sb, err := layout.DecodeSuperblock(raw)
	if err != nil {
		return
	}
	dev.WriteAt(sb.Encode(), 1024)
	ds := psb.DescriptorSize()
	for g := range min(psb.GroupCount(), 256) {
		blk, off := psb.DescriptorLocation(g)
		at := int64(blk)*int64(psb.BlockSize()) + int64(off)
		b := make([]byte, ds)
		if _, err := dev.ReadAt(b, at); err != nil {
			return
		}
		gd, err := layout.DecodeGroupDesc(b, ds)
		if err != nil {
			continue
		}
		gd.SetChecksum(sb, uint32(g))
		dev.WriteAt(gd.Raw, at)
	}
}

// applyTargeted XORs the fuzz input onto regions of a base: a byte that
// picks the base (its top bit: recompute the superblock and descriptor
// checksums afterwards), then records of a 2-byte region index (modulo the number
// of regions), a 2-byte offset in the region (modulo its length), a length
// byte and that many bytes.
func applyTargeted(dev interface {
	WriteAt([]byte, int64) (int, error)
}, img []byte, targets []damageTarget, in []byte) (string, error) {
	what := ""
	for len(in) >= 5 {
		tg := targets[int(binary.LittleEndian.Uint16(in))%len(targets)]
		off := tg.off + int64(binary.LittleEndian.Uint16(in[2:]))%tg.n
		n := min(int(in[4]), len(in)-5, int(tg.off+tg.n-off))
		b := append([]byte(nil), img[off:off+int64(n)]...)
		for i := range b {
			b[i] ^= in[5+i]
		}
		if _, err := dev.WriteAt(b, off); err != nil {
			return what, err
		}
		what += fmt.Sprintf(" %s%s@%d+%d", tg.kind, tg.sub, off, n)
		in = in[5+min(int(in[4]), len(in)-5):]
	}
	return what, nil
}

// FuzzWriteImage damages the metadata of an image with inline data, an
// orphan file, lazily initialised inode tables and (one base) a journal to
// replay, then opens it read-only and walks it, and opens it writable and
// runs damageWrite's operations (creates, an htree insert, renames,
// truncates, fallocate, hole punch, unlinks, sync, close) and walks it
// again. No panic, no hang, every error wraps a sentinel, no device write
// outside the device or through the read-only open.
func FuzzWriteImage(f *testing.F) {
	rec := func(base byte, recs ...[]byte) []byte {
		b := []byte{base}
		for _, r := range recs {
			b = append(b, r...)
		}
		return b
	}
	r := func(idx, off uint16, xor ...byte) []byte {
		b := binary.LittleEndian.AppendUint16(nil, idx)
		b = binary.LittleEndian.AppendUint16(b, off)
		return append(append(b, byte(len(xor))), xor...)
	}
	for base := range byte(3) {
		f.Add(rec(base))
		for idx := range uint16(24) {
			f.Add(rec(base, r(idx*7, idx*13, 0x01, 0x80)))
		}
	}
	// Descriptor fields with the checksums fixed: flags, bg_itable_unused,
	// free inodes count, inode table (regions 0.. are the group
	// descriptors).
	for _, fo := range []uint16{0x12, 0x1C, 0x0E, 0x08} {
		for idx := range uint16(3) {
			f.Add(rec(0x80, r(idx, fo, 0x01)))
			f.Add(rec(0x81, r(idx, fo, 0x07, 0x02)))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		// The seeds run in parallel as a test (fuzzing ignores it): each
		// damages its own overlay of the shared, read-only bases.
		t.Parallel()
		bases, targets := fuzzWriteBase(t)
		bi := int(in[0]&0x7f) % len(bases)
		b := bases[bi]
		c := overlay.New(b.mem)
		what, err := applyTargeted(c, b.img, targets[bi], in[1:])
		if err != nil {
			t.Fatal(err)
		}
		if in[0]&0x80 != 0 {
			fixChecksums(c, b.img)
			what += " (checksums fixed)"
		}
		label := b.name + ":" + what
		ro := &boundsDev{Device: overlay.New(c), readOnly: true}
		openAndWalk(t, label, 20*time.Second, func() (*ext4io.Volume, error) {
			return ext4io.Open(ro, ext4io.Options{})
		}, nil)
		ro.check(t, label)
		damageWrite(t, label+" [writable]", &boundsDev{Device: c}, b, 27, newWriteCounts())
	})
}
