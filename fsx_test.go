package ext4io_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/stretchr/testify/require"
)

// fsxModel is the expected contents of one file.
type fsxModel struct {
	name string
	data []byte
}

func (m *fsxModel) write(off int64, p []byte) {
	if end := off + int64(len(p)); end > int64(len(m.data)) {
		m.data = append(m.data, make([]byte, end-int64(len(m.data)))...)
	}
	copy(m.data[off:], p)
}

func (m *fsxModel) truncate(size int64) {
	if size <= int64(len(m.data)) {
		m.data = m.data[:size]
		return
	}
	m.data = append(m.data, make([]byte, size-int64(len(m.data)))...)
}

func (m *fsxModel) zero(off, n int64, grow bool) {
	end := off + n
	if end > int64(len(m.data)) {
		if grow {
			m.truncate(end)
		} else {
			end = int64(len(m.data))
		}
	}
	if off < end {
		clear(m.data[off:end])
	}
}

// TestFsx runs random writes (buffered through the page cache with delayed
// allocation, and direct), syncs, truncates, fallocates (every implemented
// mode) and reads on several files of a writable volume, checking every
// read against an in-memory model, reopening the volume now and then, and
// running e2fsck -fn at each reopen and at the end.
func TestFsx(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		opts        ext4io.FormatOptions
		size        int64
		cache       int64 // Options.PageCacheBytes
		deferSplits bool  // Options.Tuning.DeferSplits
		zeroChunk   int64 // Options.Tuning.ZeroOutChunk
		escBudget   int64 // Options.CacheBudget
		skipInRoot  bool  // Options.Tuning.ExtentCacheSkipInRoot
	}{
		{"4k", ext4io.FormatOptions{}, 256 << 20, 0, false, 0, 0, false},
		// A 4 KiB extent-status cache: the shrinker keeps dropping
		// entries, so lookups keep refilling from the tree. (Few of fsx's
		// direct writes take the queued path; TestConvBitsTinyCache drives
		// that one.)
		{"4k-tinyesc", ext4io.FormatOptions{}, 256 << 20, 0, false, 0, 4 << 10, false},
		// Mappings from in-inode extent roots are never cached: every
		// lookup of a small file's blocks goes to i_block.
		{"4k-skipinroot", ext4io.FormatOptions{}, 256 << 20, 0, false, 0, 0, true},
		// Direct writes into preallocated space zero and convert 16 KiB
		// chunks, next to buffered writes whose dirty pages keep them from
		// zeroing a chunk.
		{"4k-zerochunk", ext4io.FormatOptions{}, 256 << 20, 0, false, 16 << 10, 0, false},
		// A 32-page cache: writers keep finding it full of dirty pages;
		// unwritten extents split at I/O completion.
		{"1k-nocsum-smallcache-defer", ext4io.FormatOptions{BlockSize: 1024, Features: "^metadata_csum"}, 128 << 20, 32 << 10, true, 0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			seed := uint64(len(c.name)) * 7919
			if s := os.Getenv("EXT4IO_FSX_SEED"); s != "" {
				seed, _ = strconv.ParseUint(s, 10, 64)
			}
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 1))
			img := formatImage(t, c.size, c.opts)
			vopts := ext4io.Options{Writable: true, PageCacheBytes: c.cache, Tuning: ext4io.Tuning{DeferSplits: c.deferSplits, ZeroOutChunk: c.zeroChunk, ExtentCacheSkipInRoot: c.skipInRoot}, CacheBudget: c.escBudget}
			v, err := ext4io.OpenImage(img, vopts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { v.Close() }()
			const nfiles = 4
			models := make([]*fsxModel, nfiles)
			files := make([]*ext4io.File, nfiles)
			direct := make([]*ext4io.File, nfiles) // the same files opened with O_DIRECT
			openDirect := func() {
				for i := range direct {
					if direct[i], err = v.OpenFile(models[i].name, os.O_RDWR|ext4io.O_DIRECT, 0); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i := range models {
				models[i] = &fsxModel{name: fmt.Sprintf("file%d", i)}
				if files[i], err = v.Create(models[i].name); err != nil {
					t.Fatal(err)
				}
			}
			openDirect()
			bs := int64(v.BlockSize())
			const maxSize = 4 << 20
			randOff := func() int64 {
				if rng.IntN(3) == 0 {
					return rng.Int64N(maxSize/bs) * bs // aligned
				}
				return rng.Int64N(maxSize)
			}
			randLen := func() int64 {
				switch rng.IntN(4) {
				case 0:
					return 1 + rng.Int64N(100)
				case 1:
					return bs * (1 + rng.Int64N(8))
				default:
					return 1 + rng.Int64N(300_000)
				}
			}
			check := func(step int, i int) {
				m, f := models[i], files[i]
				if f.Size() != int64(len(m.data)) {
					t.Fatalf("step %d %s: size %d, model %d", step, m.name, f.Size(), len(m.data))
				}
				// The file's digest, read through a small buffer, against
				// the model's; the bytes are read whole only to report a
				// difference.
				d, n, err := digestOf(io.NewSectionReader(f, 0, int64(len(m.data))))
				require.NoError(t, err, "step %d %s", step, m.name)
				require.Equal(t, int64(len(m.data)), n, "step %d %s: bytes read", step, m.name)
				if d != xxhash.Sum64(m.data) {
					got := make([]byte, len(m.data))
					_, err := f.ReadAt(got, 0)
					require.True(t, err == nil || err == io.EOF, "step %d %s: %v", step, m.name, err)
					for j := range got {
						if got[j] != m.data[j] {
							t.Fatalf("step %d %s: first difference at byte %d (block %d): got %#x want %#x", step, m.name, j, int64(j)/bs, got[j], m.data[j])
						}
					}
					t.Fatalf("step %d %s: digest %#x, model's %#x, yet a second read equals the model", step, m.name, d, xxhash.Sum64(m.data))
				}
			}
			steps := sized(60, 120, 1000)
			if s := os.Getenv("EXT4IO_FSX_STEPS"); s != "" {
				steps, _ = strconv.Atoi(s)
			}
			for step := 0; step < steps; step++ {
				i := rng.IntN(nfiles)
				m, f := models[i], files[i]
				switch op := rng.IntN(10); {
				case op < 4:
					off, n := randOff(), randLen()
					p := make([]byte, n)
					for j := range p {
						p[j] = byte(rng.Uint32()) | 1
					}
					how := "buffered"
					w := f
					if rng.IntN(3) == 0 { // direct: aligned to 512-byte sectors
						how, w = "direct", direct[i]
						align := int64(512)
						if rng.IntN(2) == 0 {
							// Block-aligned: inside the on-disk size these take
							// the shared lock (overwrites, queued conversions).
							align = bs
						}
						off = off / align * align
						if int64(len(p)) < align {
							p = append(p, bytes.Repeat([]byte{0x5a}, int(align)-len(p))...)
						}
						p = p[:int64(len(p))/align*align]
					}
					if _, err := w.WriteAt(p, off); err != nil {
						t.Fatalf("step %d: %s write %s [%d,+%d): %v", step, how, m.name, off, len(p), err)
					}
					m.write(off, p)
				case op == 4:
					size := rng.Int64N(maxSize)
					if err := f.Truncate(size); err != nil {
						t.Fatalf("step %d: truncate %s %d: %v", step, m.name, size, err)
					}
					m.truncate(size)
				case op < 9:
					modes := []ext4io.FallocMode{ext4io.FallocAllocate, ext4io.FallocKeepSize, ext4io.FallocPunchHole,
						ext4io.FallocZeroRange, ext4io.FallocWriteZeroes, ext4io.FallocCollapseRange, ext4io.FallocInsertRange}
					mode := modes[rng.IntN(len(modes))]
					off, n := randOff(), randLen()
					size := int64(len(m.data))
					if mode == ext4io.FallocCollapseRange || mode == ext4io.FallocInsertRange {
						// Block-aligned, inside the file (collapse: before EOF).
						off, n = off/bs*bs, (n+bs-1)/bs*bs
						if mode == ext4io.FallocCollapseRange && off+n >= size || mode == ext4io.FallocInsertRange && off >= size ||
							size+n > maxSize*2 {
							break
						}
					}
					if err := f.Fallocate(mode, off, n); err != nil {
						t.Fatalf("step %d: fallocate %v %s [%d,+%d): %v", step, mode, m.name, off, n, err)
					}
					switch mode {
					case ext4io.FallocCollapseRange:
						m.data = append(m.data[:off], m.data[off+n:]...)
					case ext4io.FallocInsertRange:
						m.data = append(m.data[:off], append(make([]byte, n), m.data[off:]...)...)
					case ext4io.FallocAllocate:
						if off+n > int64(len(m.data)) {
							m.truncate(off + n)
						}
					case ext4io.FallocPunchHole:
						m.zero(off, n, false)
					case ext4io.FallocZeroRange, ext4io.FallocWriteZeroes:
						m.zero(off, n, true)
					}
				case rng.IntN(3) == 0:
					// Write back: the file's pages or every file's.
					sync := f.Sync
					if rng.IntN(2) == 0 {
						sync = v.Sync
					}
					if err := sync(); err != nil {
						t.Fatalf("step %d: sync: %v", step, err)
					}
				default:
					// Reopen the volume and check the image.
					if err := v.Close(); err != nil {
						t.Fatal(err)
					}
					if keep := os.Getenv("EXT4IO_KEEP"); keep != "" {
						b, _ := os.ReadFile(img)
						os.WriteFile(keep, b, 0o644)
					}
					e2fs.Fsck(t, img)
					if v, err = ext4io.OpenImage(img, vopts); err != nil {
						t.Fatal(err)
					}
					for j := range files {
						if files[j], err = v.OpenFile(models[j].name, os.O_RDWR, 0); err != nil {
							t.Fatal(err)
						}
					}
					openDirect()
				}
				check(step, i)
				if err := files[i].CheckTree(); err != nil {
					t.Fatalf("step %d %s: %v", step, m.name, err)
				}
			}
			for i := range files {
				check(steps, i)
			}
			if skips := v.CacheStats().FillSkips; (skips > 0) != c.skipInRoot {
				t.Errorf("extent cache: %d fills not cached with ExtentCacheSkipInRoot %v", skips, c.skipInRoot)
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			out := e2fs.Fsck(t, img)
			if !strings.Contains(out, "clean") && !strings.Contains(out, "files") {
				t.Logf("%s", out)
			}
			// Read back through a fresh read-only open and through debugfs.
			ro, err := ext4io.OpenImage(img, ext4io.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer ro.Close()
			for _, m := range models {
				f, err := ro.Open(m.name)
				if err != nil {
					t.Fatal(err)
				}
				d, n, err := digestOf(f)
				require.NoError(t, err, m.name)
				require.Equal(t, int64(len(m.data)), n, "%s: size after reopen", m.name)
				require.Equal(t, xxhash.Sum64(m.data), d, "%s differs after reopen", m.name)
			}
			// The trees ext4io wrote (with the real allocator) are listed by
			// debugfs exactly as ext4io lists them.
			for _, m := range models {
				f, err := ro.Open(m.name)
				if err != nil {
					t.Fatal(err)
				}
				exts, err := f.Extents()
				if err != nil {
					t.Fatal(err)
				}
				var leaves []e2fs.ExtentLine
				depth := 0
				for _, r := range e2fs.Extents(t, img, m.name) {
					depth = max(depth, r.Depth)
					if r.Leaf {
						leaves = append(leaves, r)
					}
				}
				if len(leaves) != len(exts) {
					t.Fatalf("%s: debugfs lists %d extents, ext4io %d", m.name, len(leaves), len(exts))
				}
				for j, r := range leaves {
					e := exts[j]
					if r.Logical != e.Logical || r.Physical != e.Physical || r.Length != e.Length || r.Unwritten != e.Unwritten {
						t.Fatalf("%s extent %d: debugfs %+v, ext4io %+v", m.name, j, r, e)
					}
				}
				t.Logf("%s: %d extents, tree depth %d, debugfs agrees", m.name, len(exts), depth)
			}
			// Linux reads every file exactly as the model says.
			t.Run("linux", func(t *testing.T) {
				dir := e2fs.Mount(t, img, true)
				for _, m := range models {
					lf, err := os.Open(filepath.Join(dir, m.name))
					require.NoError(t, err)
					d, n, err := digestOf(lf)
					require.NoError(t, errors.Join(err, lf.Close()))
					require.Equal(t, int64(len(m.data)), n, "Linux reads %s with another size", m.name)
					require.Equal(t, xxhash.Sum64(m.data), d, "Linux reads %s differently", m.name)
				}
				e2fs.Unmount(t, dir)
				e2fs.Fsck(t, img)
			})
			if _, err := v.Create("file0"); !errors.Is(err, ext4io.ErrClosed) {
				t.Fatalf("Create on a closed volume: %v", err)
			}
		})
	}
}
