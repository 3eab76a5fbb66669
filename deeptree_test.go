package ext4io_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// compareExtents checks that debugfs lists file's extents exactly as
// ext4io does and returns the tree depth debugfs reports.
func compareExtents(t *testing.T, img, name string) int {
	t.Helper()
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	f, err := v.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	exts, err := f.Extents()
	if err != nil {
		t.Fatal(err)
	}
	depth, j := 0, 0
	for _, r := range e2fs.Extents(t, img, name) {
		depth = max(depth, r.Depth)
		if !r.Leaf {
			continue
		}
		if j >= len(exts) {
			t.Fatalf("debugfs lists more extents than ext4io's %d", len(exts))
		}
		e := exts[j]
		if r.Logical != e.Logical || r.Physical != e.Physical || r.Length != e.Length || r.Unwritten != e.Unwritten {
			t.Fatalf("extent %d: debugfs %+v, ext4io %+v", j, r, e)
		}
		j++
	}
	if j != len(exts) {
		t.Fatalf("debugfs lists %d extents, ext4io %d", j, len(exts))
	}
	return depth
}

// TestDeepTreesWithAlloc grows extent trees to depth 2 (and 3 with 1 KiB
// blocks outside -short) on real images through the write path and the
// real allocator, punches them, truncates them back to depth 0, and at each
// stage checks debugfs's listing against ext4io's and e2fsck -fn.
func TestDeepTreesWithAlloc(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		opts    ext4io.FormatOptions
		size    int64
		extents int
		depth   int
	}{
		{"1k-csum-depth2", ext4io.FormatOptions{BlockSize: 1024}, 64 << 20, 1200, 2},
		{"4k-nocsum-depth2", ext4io.FormatOptions{Features: "^metadata_csum"}, 128 << 20, 1500, 2},
	}
	if !testing.Short() {
		cases = append(cases, struct {
			name    string
			opts    ext4io.FormatOptions
			size    int64
			extents int
			depth   int
		}{"1k-nocsum-depth3", ext4io.FormatOptions{BlockSize: 1024, Features: "^metadata_csum"}, 160 << 20, 30000, 3})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			img := formatImage(t, c.size, c.opts)
			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
			if err != nil {
				t.Fatal(err)
			}
			f, err := v.Create("frag")
			if err != nil {
				t.Fatal(err)
			}
			bs := int64(v.BlockSize())
			block := make([]byte, bs)
			for i := 0; i < c.extents; i++ {
				block[0] = byte(i)
				// Every other block, alternating written and unwritten, so
				// no two extents merge.
				if i%2 == 0 {
					_, err = f.WriteAt(block, int64(2*i)*bs)
				} else {
					err = f.Fallocate(ext4io.FallocAllocate, int64(2*i)*bs, bs)
				}
				if err != nil {
					t.Fatalf("extent %d: %v", i, err)
				}
			}
			stage := func(what string, want int) {
				t.Helper()
				if err := f.CheckTree(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if err := v.Close(); err != nil {
					t.Fatal(err)
				}
				e2fs.Fsck(t, img)
				d := compareExtents(t, img, "frag")
				if want >= 0 && d != want {
					t.Fatalf("%s: depth %d, want %d", what, d, want)
				}
				t.Logf("%s: depth %d, debugfs agrees, e2fsck clean", what, d)
				if v, err = ext4io.OpenImage(img, ext4io.Options{Writable: true}); err != nil {
					t.Fatal(err)
				}
				if f, err = v.OpenFile("frag", os.O_RDWR, 0); err != nil {
					t.Fatal(err)
				}
			}
			stage("grown", c.depth)
			rng := rand.New(rand.NewPCG(uint64(c.extents), 3))
			for i := 0; i < 200; i++ {
				off := rng.Int64N(int64(2*c.extents)) * bs
				if err := f.Fallocate(ext4io.FallocPunchHole, off, bs*(1+rng.Int64N(40))); err != nil {
					t.Fatal(err)
				}
			}
			stage("punched", -1)
			if err := f.Truncate(int64(c.extents) * bs / 2); err != nil {
				t.Fatal(err)
			}
			stage("truncated", -1)
			if err := f.Truncate(3 * bs); err != nil {
				t.Fatal(err)
			}
			stage(fmt.Sprintf("truncated to %d blocks", 3), 0)
			v.Close()
		})
	}
}
