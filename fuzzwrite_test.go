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
	// targets are each base's metadata regions, in a fixed order.
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
			var tg []damageTarget
			for _, k := range slices.Sorted(maps.Keys(b.byKind)) {
				tg = append(tg, b.byKind[k]...)
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

// applyTargeted XORs the fuzz input onto regions of a base: a byte that
// picks the base, then records of a 2-byte region index (modulo the number
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
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		bases, targets := fuzzWriteBase(t)
		bi := int(in[0]) % len(bases)
		b := bases[bi]
		c := overlay.New(b.mem)
		what, err := applyTargeted(c, b.img, targets[bi], in[1:])
		if err != nil {
			t.Fatal(err)
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
