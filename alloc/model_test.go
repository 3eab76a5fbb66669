package alloc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/ext4io/ext4io/internal/mkfs"
)

// model tracks the runs the test owns and which blocks they cover.
type model struct {
	owned []run
	used  map[uint64]bool
	total uint64
}

func (m *model) add(t *testing.T, r run) {
	t.Helper()
	for b := r.start; b < r.start+r.n; b++ {
		if m.used[b] {
			t.Fatalf("block %d handed out twice (run %d+%d)", b, r.start, r.n)
		}
		m.used[b] = true
	}
	m.owned = append(m.owned, r)
	m.total += r.n
}

func (m *model) remove(i int) run {
	r := m.owned[i]
	m.owned[i] = m.owned[len(m.owned)-1]
	m.owned = m.owned[:len(m.owned)-1]
	for b := r.start; b < r.start+r.n; b++ {
		delete(m.used, b)
	}
	m.total -= r.n
	return r
}

func TestModel(t *testing.T) {
	cases := []struct {
		name string
		size int64
		o    mkfs.Options
		args []string
	}{
		{"format-4k", 64 << 20, mkfs.Options{}, nil},
		{"format-1k-nocsum", 32 << 20, mkfs.Options{BlockSize: 1024, Features: "^metadata_csum,^64bit"}, nil},
		{"format-2k-noflex", 48 << 20, mkfs.Options{BlockSize: 2048, Features: "^flex_bg"}, nil},
		{"mkfs.ext4-resize_inode", 64 << 20, mkfs.Options{}, []string{"-b", "1024", "-O", "resize_inode"}},
		{"mkfs.ext4-4k", 200 << 20, mkfs.Options{}, []string{"-b", "4096"}},
	}
	seqs := 2
	if os.Getenv("EXT4IO_LONG") != "" {
		seqs = 10
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for s := 0; s < seqs; s++ {
				seed := uint64(time.Now().UnixNano())
				t.Run(fmt.Sprint(s), func(t *testing.T) {
					t.Logf("seed %d", seed)
					runModel(t, newImage(t, c.size, c.o, c.args), rand.New(rand.NewPCG(seed, 7)))
				})
			}
		})
	}
}

func runModel(t *testing.T, m *img, rng *rand.Rand) {
	a := m.a
	free0 := a.FreeBlocks()
	md := &model{used: map[uint64]bool{}}
	nb := m.sb.BlocksCount
	bpg := uint64(m.sb.BlocksPerGroup)
	check := func(what string) {
		t.Helper()
		if got, want := a.FreeBlocks(), free0-md.total; got != want {
			t.Fatalf("after %s: FreeBlocks %d, model %d", what, got, want)
		}
	}
	for op := 0; op < 1500; op++ {
		switch k := rng.IntN(100); {
		case k < 40: // single blocks, random goal
			s, n, err := a.Alloc(rng.Uint64N(nb), 1, 1)
			if err != nil {
				if !errors.Is(err, ErrNoSpace) {
					t.Fatal(err)
				}
				continue
			}
			md.add(t, run{s, n})
			check("single")
		case k < 60: // runs near an owned run's end
			goal := rng.Uint64N(nb)
			if len(md.owned) > 0 {
				r := md.owned[rng.IntN(len(md.owned))]
				goal = r.start + r.n
			}
			lo := 1 + rng.Uint64N(64)
			hi := lo + rng.Uint64N(2048)
			s, n, err := a.Alloc(goal, lo, hi)
			if err != nil {
				if !errors.Is(err, ErrNoSpace) {
					t.Fatal(err)
				}
				continue
			}
			if n < lo || n > hi {
				t.Fatalf("Alloc(%d,%d,%d) = %d blocks", goal, lo, hi, n)
			}
			md.add(t, run{s, n})
			check("run")
		case k < 63: // long runs, up to a group
			lo := bpg / 4
			before, avail := a.FreeBlocks(), a.Available(0)
			s, n, err := a.Alloc(rng.Uint64N(nb), lo, bpg)
			if err != nil {
				if !errors.Is(err, ErrNoSpace) {
					t.Fatal(err)
				}
				if a.FreeBlocks() != before || a.Available(0) != avail {
					t.Fatalf("ErrNoSpace changed counts")
				}
				continue
			}
			md.add(t, run{s, n})
			check("long")
		case k < 90: // free (whole or a part of) an owned run
			if len(md.owned) == 0 {
				continue
			}
			i := rng.IntN(len(md.owned))
			r := md.remove(i)
			if r.n > 2 && rng.IntN(2) == 0 {
				cut := 1 + rng.Uint64N(r.n-1)
				md.add(t, run{r.start + cut, r.n - cut})
				r.n = cut
			}
			if err := a.Free(r.start, r.n); err != nil {
				t.Fatalf("Free(%d,%d): %v", r.start, r.n, err)
			}
			check("free")
		case k < 93: // double free
			if len(md.owned) == 0 {
				continue
			}
			r := md.remove(rng.IntN(len(md.owned)))
			if err := a.Free(r.start, r.n); err != nil {
				t.Fatal(err)
			}
			if err := a.Free(r.start, r.n); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("double Free(%d,%d) = %v, want ErrCorrupt", r.start, r.n, err)
			}
			check("double free")
		case k < 96: // metadata
			g := rng.Uint64N(m.sb.GroupCount())
			d, _ := a.GroupDesc(g)
			for _, b := range []uint64{d.BlockBitmap, d.InodeBitmap, d.InodeTable, m.sb.GroupFirstBlock(0) + 1} {
				if err := a.Free(b, 1); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Free(metadata %d) = %v, want ErrCorrupt", b, err)
				}
			}
			check("metadata free")
		default: // fill to ErrNoSpace, then give half back
			if rng.IntN(4) != 0 {
				continue
			}
			for {
				s, n, err := a.Allocate(Request{Goal: rng.Uint64N(nb), Min: 1, Max: 4096, Flags: MustSucceed})
				if err != nil {
					if !errors.Is(err, ErrNoSpace) {
						t.Fatal(err)
					}
					break
				}
				md.add(t, run{s, n})
			}
			if a.FreeBlocks() != 0 {
				t.Fatalf("ErrNoSpace with %d free blocks", a.FreeBlocks())
			}
			check("fill")
			for i := 0; i < len(md.owned); i++ {
				r := md.remove(i)
				if err := a.Free(r.start, r.n); err != nil {
					t.Fatal(err)
				}
			}
			check("drain")
		}
	}
	// Verify the on-disk bitmaps by reopening from disk.
	m.sync(t)
	m.reopen(t, Options{})
	if m.a.FreeBlocks() != free0-md.total {
		t.Fatalf("reopened: %d free, want %d", m.a.FreeBlocks(), free0-md.total)
	}
	// Keep up to ~60 runs in test files, free the rest, then e2fsck.
	sort.Slice(md.owned, func(i, j int) bool { return md.owned[i].start < md.owned[j].start })
	keep := md.owned
	if len(keep) > 200 {
		for _, r := range keep[200:] {
			if err := m.a.Free(r.start, r.n); err != nil {
				t.Fatal(err)
			}
		}
		keep = keep[:200]
	}
	m.attach(t, keep)
	m.sync(t)
	fsck(t, m.path)
}
