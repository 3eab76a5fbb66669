package ext4io_test

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// enospcFillers fill a volume in one way until ErrNoSpace; each returns
// the error that stopped it (nil if it never ran out within its bound).
var enospcFillers = []struct {
	name string
	fill func(v *ext4io.Volume, tag string) error
}{
	{"WriteAtomic", func(v *ext4io.Volume, tag string) error {
		f, err := v.OpenFile(tag, os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		p := bytes.Repeat([]byte{0xA1}, 64<<10)
		for off := int64(0); off < 64<<20; off += int64(len(p)) {
			if _, err := f.WriteAtomic(p, off); err != nil {
				return err
			}
			if off%(1<<20) == 0 {
				if err := f.Sync(); err != nil {
					return err
				}
			}
		}
		return nil
	}},
	{"WriteAtomicBatch", func(v *ext4io.Volume, tag string) error {
		f, err := v.OpenFile(tag, os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		p := bytes.Repeat([]byte{0xB2}, 16<<10)
		for off := int64(0); off < 64<<20; off += 96 << 10 {
			if _, err := f.WriteAtomicBatch([]ext4io.AtomicWrite{{Off: off, Data: p}, {Off: off + 48<<10, Data: p}}); err != nil {
				return err
			}
		}
		return nil
	}},
	{"Fallocate", func(v *ext4io.Volume, tag string) error {
		f, err := v.Create(tag)
		if err != nil {
			return err
		}
		defer f.Close()
		for off := int64(0); off < 64<<20; off += 1 << 20 {
			if err := f.Fallocate(ext4io.FallocAllocate, off, 1<<20); err != nil {
				return err
			}
		}
		return nil
	}},
	{"append+fsync", func(v *ext4io.Volume, tag string) error {
		f, err := v.Create(tag)
		if err != nil {
			return err
		}
		defer f.Close()
		p := bytes.Repeat([]byte{0xC3}, 24<<10)
		for range (64 << 20) / len(p) {
			if _, err := f.Write(p); err != nil {
				return err
			}
			if err := f.Sync(); err != nil {
				return err
			}
		}
		return nil
	}},
	{"small files+fsync", func(v *ext4io.Volume, tag string) error {
		if err := v.Mkdir(tag, 0o755); err != nil {
			return err
		}
		for i := range 100000 {
			f, err := v.Create(fmt.Sprintf("%s/%d", tag, i))
			if err != nil {
				return err
			}
			_, err = f.Write(bytes.Repeat([]byte{byte(i)}, 6000))
			if err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
		return nil
	}},
	{"xattrs", func(v *ext4io.Volume, tag string) error {
		if err := v.Mkdir(tag, 0o755); err != nil {
			return err
		}
		for i := range 100000 {
			name := fmt.Sprintf("%s/%d", tag, i)
			if err := v.WriteFile(name, nil, 0o644); err != nil {
				return err
			}
			for k := range 3 {
				val := bytes.Repeat([]byte(fmt.Sprintf("%d.%d;", i, k)), 200)[:200]
				if err := v.Setxattr(name, fmt.Sprintf("user.k%d", k), val, 0); err != nil {
					return err
				}
			}
		}
		return nil
	}},
	{"directories", func(v *ext4io.Volume, tag string) error {
		for i := range 100000 {
			if err := v.MkdirAll(fmt.Sprintf("%s/%d/%d", tag, i/100, i), 0o755); err != nil {
				return err
			}
		}
		return nil
	}},
}

// TestENOSPCEveryWay fills a small volume (fast commits on) each way of
// enospcFillers in turn: each stops with ErrNoSpace, the volume stays
// usable (a small file can be read back), removing the filler makes its
// space usable again (the same filler runs out again at about the same
// point, in the same volume and, with EXT4IO_LONG, after a reopen),
// Statfs's free blocks match dumpe2fs's after Close, and e2fsck -fn calls
// the image clean after every round.
func TestENOSPCEveryWay(t *testing.T) {
	t.Parallel()
	rounds := sized(1, 1, 2)
	for _, c := range enospcFillers {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// One inode per 2 KiB: the blocks run out before the inodes.
			img := formatImage(t, 12<<20, ext4io.FormatOptions{FastCommit: true, ReservedPercent: -1, InodeRatio: 2048})
			var free [2]uint64
			for round := range rounds {
				v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
				require.NoError(t, err)
				before, err := v.Statfs()
				require.NoError(t, err)
				tag := "fill"
				err = c.fill(v, tag)
				require.ErrorIs(t, err, ext4io.ErrNoSpace, "round %d", round)
				t.Logf("round %d: %v", round, err)
				st, err := v.Statfs()
				require.NoError(t, err)
				free[round] = before.BlocksFree - st.BlocksFree
				// In the same volume: the filler's space, freed, is
				// usable again at once.
				require.NoError(t, v.RemoveAll(tag))
				err = c.fill(v, tag)
				require.ErrorIs(t, err, ext4io.ErrNoSpace, "round %d, refilled without a reopen", round)
				st, err = v.Statfs()
				require.NoError(t, err)
				require.InDelta(t, float64(free[round]), float64(before.BlocksFree-st.BlocksFree), float64(free[round])/20+64,
					"round %d: blocks used by the refill in the same volume", round)
				require.NoError(t, v.Sync(), "Sync after ENOSPC")
				require.NoError(t, v.Close(), "Close after ENOSPC")
				e2fs.Fsck(t, img)
				require.Equal(t, st.BlocksFree, dumpeFree(t, img), "free blocks: Statfs at ENOSPC against dumpe2fs after Close")
				v, err = ext4io.OpenImage(img, ext4io.Options{Writable: true})
				require.NoError(t, err)
				require.NoError(t, v.RemoveAll(tag))
				require.NoError(t, v.WriteFile("after", []byte("usable"), 0o644))
				got, err := v.ReadFile("after")
				require.NoError(t, err)
				require.Equal(t, "usable", string(got))
				require.NoError(t, v.Remove("after"))
				after, err := v.Statfs()
				require.NoError(t, err)
				require.NoError(t, v.Close())
				e2fs.Fsck(t, img)
				require.Equal(t, after.BlocksFree, dumpeFree(t, img), "free blocks after the removal")
				require.Equal(t, before.BlocksFree, after.BlocksFree, "free blocks before the filler and after its removal")
			}
			if rounds > 1 {
				t.Logf("%s: %d and %d blocks used at ENOSPC", c.name, free[0], free[1])
				require.InDelta(t, float64(free[0]), float64(free[1]), float64(free[0])/20+64, "the space freed is usable again after a reopen")
			}
		})
	}
}

// dumpeFree returns dumpe2fs's free block count of img.
func dumpeFree(t *testing.T, img string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(strings.TrimSpace(header(t, img, "Free blocks")), 10, 64)
	require.NoError(t, err)
	return n
}

// TestAtomicOverwriteAtENOSPC: on a volume full to the last block, a
// journalled atomic overwrite (small, over written blocks) needs no
// block and succeeds; a larger one, which remaps, fails with ErrNoSpace
// and leaves the old bytes; both read back after a reopen, and e2fsck
// is clean.
func TestAtomicOverwriteAtENOSPC(t *testing.T) {
	img := formatImage(t, 12<<20, ext4io.FormatOptions{FastCommit: true, ReservedPercent: -1})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	f, err := v.OpenFile("db", os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
	require.NoError(t, err)
	old := bytes.Repeat([]byte{0x11}, 1<<20)
	_, err = f.WriteAt(old, 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.ErrorIs(t, enospcFillers[2].fill(v, "fill"), ext4io.ErrNoSpace) // Fallocate to the last block
	require.NoError(t, v.Sync())
	small := bytes.Repeat([]byte{0x22}, 16<<10)
	c0 := v.Counters().AtomicJournalled
	_, err = f.WriteAtomic(small, 64<<10)
	require.NoError(t, err, "a journalled overwrite on a full volume")
	require.Equal(t, c0+1, v.Counters().AtomicJournalled)
	require.NoError(t, f.Sync())
	big := bytes.Repeat([]byte{0x33}, 512<<10)
	_, err = f.WriteAtomic(big, 256<<10)
	require.ErrorIs(t, err, ext4io.ErrNoSpace, "a remapped atomic write on a full volume")
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	e2fs.Fsck(t, img)
	v, err = ext4io.OpenImage(img, ext4io.Options{})
	require.NoError(t, err)
	got, err := v.ReadFile("db")
	require.NoError(t, err)
	want := append([]byte(nil), old...)
	copy(want[64<<10:], small)
	require.Equal(t, len(want), len(got))
	require.Equal(t, -1, firstDiff(want, got), "first difference")
	require.NoError(t, v.Close())
}

// TestAtomicBatchAtENOSPC: a WriteAtomicBatch whose ranges need more
// blocks than are left fails with ErrNoSpace and writes none of its
// ranges, the blocks it took for the first are free again, and a batch
// that fits then succeeds; after a reopen e2fsck is clean.
func TestAtomicBatchAtENOSPC(t *testing.T) {
	img := formatImage(t, 12<<20, ext4io.FormatOptions{ReservedPercent: -1})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	f, err := v.OpenFile("db", os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
	require.NoError(t, err)
	old := bytes.Repeat([]byte{0x11}, 256<<10)
	_, err = f.WriteAt(old, 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	filler, err := v.Create("fill")
	require.NoError(t, err)
	// Fill, then leave 24 blocks free.
	var off int64
	for ; ; off += 16 << 10 {
		if err := filler.Fallocate(ext4io.FallocAllocate, off, 16<<10); err != nil {
			require.ErrorIs(t, err, ext4io.ErrNoSpace)
			break
		}
	}
	require.NoError(t, filler.Fallocate(ext4io.FallocPunchHole|ext4io.FallocKeepSize, 0, 96<<10))
	require.NoError(t, v.Sync())
	st, err := v.Statfs()
	require.NoError(t, err)
	free := st.BlocksFree
	t.Logf("%d blocks free", free)
	page := bytes.Repeat([]byte{0x22}, 64<<10) // 16 blocks: remapped
	batch := []ext4io.AtomicWrite{{Off: 0, Data: page}, {Off: 128 << 10, Data: page}}
	_, err = f.WriteAtomicBatch(batch)
	require.ErrorIs(t, err, ext4io.ErrNoSpace)
	got := make([]byte, len(old))
	_, err = f.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, -1, firstDiff(old, got), "a batch that failed for space changed the file")
	require.NoError(t, v.Sync())
	st, err = v.Statfs()
	require.NoError(t, err)
	require.Equal(t, free, st.BlocksFree, "free blocks after the failed batch")
	_, err = f.WriteAtomicBatch(batch[:1])
	require.NoError(t, err, "a batch that fits")
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.NoError(t, filler.Close())
	require.NoError(t, v.Close())
	e2fs.Fsck(t, img)
	v, err = ext4io.OpenImage(img, ext4io.Options{})
	require.NoError(t, err)
	b, err := v.ReadFile("db")
	require.NoError(t, err)
	copy(old, page)
	require.Equal(t, -1, firstDiff(old, b))
	require.NoError(t, v.Close())
}
