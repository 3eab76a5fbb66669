package iomap_test

import (
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io/iomap"
)

const rbs = 1024

// layout builds a tinyFS from a block string: '.' hole, 'M' mapped, 'U'
// unwritten, 'D' delalloc; consecutive letters get contiguous device
// blocks, and '|' starts a new physical run (a discontinuity).
func layout(s string) *tinyFS {
	fs := newTinyFS(rbs, 0, 1<<20)
	lb, phys := int64(0), int64(100)
	for _, ch := range s {
		switch ch {
		case '|':
			phys += 50
			continue
		case 'M':
			fs.set(lb, bWritten, phys)
		case 'U':
			fs.set(lb, bUnwritten, phys)
		case 'D':
			fs.set(lb, bDelalloc, 0)
		}
		lb++
		phys++
	}
	return fs
}

func TestFiemap(t *testing.T) {
	const U, D, L, G = iomap.ExtentUnwritten, iomap.ExtentDelalloc | iomap.ExtentUnknown, iomap.ExtentLast, iomap.ExtentMerged
	e := func(lb, n, phys int64, f iomap.ExtentFlags) iomap.Extent {
		return iomap.Extent{Logical: lb * rbs, Physical: phys * rbs, Length: n * rbs, Flags: f}
	}
	for _, tc := range []struct {
		name   string
		layout string
		off, n int64 // blocks
		merge  bool
		want   []iomap.Extent
	}{
		{"empty", "....", 0, 4, false, nil},
		{"one", "MM..", 0, 4, false, []iomap.Extent{e(0, 2, 100, L)}},
		{"holes skipped", ".M.U", 0, 4, false, []iomap.Extent{e(1, 1, 101, 0), e(3, 1, 103, U|L)}},
		{"delalloc", "MDD.", 0, 4, false, []iomap.Extent{e(0, 1, 100, 0), e(1, 2, 0, D|L)}},
		{"discontiguous", "MM|MM", 0, 4, false, []iomap.Extent{e(0, 2, 100, 0), e(2, 2, 152, L)}},
		{"last within range", "M.M.M", 0, 3, false, []iomap.Extent{e(0, 1, 100, 0), e(2, 1, 102, L)}},
		{"mid extent", "MMMM", 2, 1, false, []iomap.Extent{e(2, 1, 102, L)}},
		{"type change not merged", "MU", 0, 2, true, []iomap.Extent{e(0, 1, 100, 0), e(1, 1, 101, U|L)}},
		{"discontiguous not merged", "M|M", 0, 2, true, []iomap.Extent{e(0, 1, 100, 0), e(1, 1, 151, L)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := layout(tc.layout)
			var got []iomap.Extent
			err := iomap.Fiemap(fs, tc.off*rbs, tc.n*rbs, iomap.FiemapOptions{Merge: tc.merge}, func(x iomap.Extent) error {
				got = append(got, x)
				return nil
			})
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v %v, want %v", got, err, tc.want)
			}
		})
	}
	// Merging needs mappings that the Ops splits: a Funcs returning one block
	// at a time over "MMM" merges into one extent with ExtentMerged.
	fs := layout("MMMU")
	oneBlock := iomap.Funcs{BeginFunc: func(off, length int64, f iomap.Flags) (iomap.Mapping, error) {
		return fs.Begin(off, min(length, rbs), f)
	}}
	for _, merge := range []bool{false, true} {
		var got []iomap.Extent
		if err := iomap.Fiemap(oneBlock, 0, 4*rbs, iomap.FiemapOptions{Merge: merge}, func(x iomap.Extent) error {
			got = append(got, x)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		want := []iomap.Extent{e(0, 1, 100, 0), e(1, 1, 101, 0), e(2, 1, 102, 0), e(3, 1, 103, U|L)}
		if merge {
			want = []iomap.Extent{e(0, 3, 100, G), e(3, 1, 103, U|L)}
		}
		if !slices.Equal(got, want) {
			t.Errorf("merge=%v: got %v, want %v", merge, got, want)
		}
	}
	// fn's error stops the walk.
	stop := errors.New("full")
	calls := 0
	err := iomap.Fiemap(layout("M.M.M"), 0, 5*rbs, iomap.FiemapOptions{}, func(iomap.Extent) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("stop: %v after %d calls", err, calls)
	}
}

func TestSeek(t *testing.T) {
	// present pages (block numbers) for the unwritten-with-cache cases.
	for _, tc := range []struct {
		layout   string
		present  []int64 // nil: no hook
		off      int64   // bytes
		size     int64   // bytes
		data     int64   // -1: ErrNoData
		hole     int64   // -1: ErrNoData
		sizeHint string
	}{
		{"MM..", nil, 0, 4 * rbs, 0, 2 * rbs, ""},
		{"..MM", nil, 0, 4 * rbs, 2 * rbs, 0, ""},
		{"..MM", nil, 2*rbs + 5, 4 * rbs, 2*rbs + 5, 4 * rbs, "hole at EOF"},
		{"MMMM", nil, 4 * rbs, 4 * rbs, -1, -1, "off == size"},
		{"MM..", nil, 2 * rbs, 4 * rbs, -1, 2 * rbs, "no data after"},
		{"UUMM", nil, 0, 4 * rbs, 2 * rbs, 0, "unwritten is hole"},
		{"UUMM", []int64{1}, 0, 4 * rbs, 1 * rbs, 0, "cached unwritten is data"},
		{"UU..", []int64{0, 1}, 100, 4 * rbs, 100, 2 * rbs, "all cached"},
		{"DD..", nil, 0, 4 * rbs, 0, 2 * rbs, "delalloc is data"},
		{"M.D.", nil, rbs, 4 * rbs, 2 * rbs, rbs, ""},
		{"MM", nil, -1, 2 * rbs, -1, -1, "negative"},
	} {
		t.Run(fmt.Sprintf("%s@%d%s", tc.layout, tc.off, tc.sizeHint), func(t *testing.T) {
			fs := layout(tc.layout)
			var opt *iomap.SeekOptions
			if tc.present != nil {
				opt = &iomap.SeekOptions{PageSize: rbs, Present: func(off int64) bool { return slices.Contains(tc.present, off/rbs) }}
			}
			for _, s := range []struct {
				name string
				fn   func(iomap.Ops, int64, int64, *iomap.SeekOptions) (int64, error)
				want int64
			}{{"data", iomap.SeekData, tc.data}, {"hole", iomap.SeekHole, tc.hole}} {
				got, err := s.fn(fs, tc.off, tc.size, opt)
				if s.want < 0 {
					if !errors.Is(err, iomap.ErrNoData) || !errors.Is(err, syscall.ENXIO) {
						t.Errorf("seek %s: %d, %v; want ENXIO", s.name, got, err)
					}
				} else if err != nil || got != s.want {
					t.Errorf("seek %s: %d, %v; want %d", s.name, got, err, s.want)
				}
			}
		})
	}
}
