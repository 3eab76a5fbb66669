//go:build unix

package blockdev_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
)

func newMmap(t testing.TB, size int64) *blockdev.Mmap {
	m, _ := newMmapFile(t, size)
	return m
}

// newMmapFile maps a new file of size bytes in a temporary directory and
// returns the device and the file's path.
func newMmapFile(t testing.TB, size int64) (*blockdev.Mmap, string) {
	path := filepath.Join(t.TempDir(), "img")
	f, err := blockdev.CreateFile(path, size)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	m, err := blockdev.OpenMmap(path, false)
	if err != nil {
		t.Fatal(err)
	}
	return m, path
}

func TestMmapConformance(t *testing.T) {
	blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device { return newMmap(t, size) })
}

func TestMmapEmptyFile(t *testing.T) {
	m := newMmap(t, 0)
	defer m.Close()
	if n, err := m.ReadAt(make([]byte, 10), 0); n != 0 || err != io.EOF {
		t.Errorf("ReadAt on empty = %d, %v", n, err)
	}
	if _, err := m.WriteAt([]byte{1}, 0); !errors.Is(err, blockdev.ErrInvalid) {
		t.Errorf("WriteAt on empty = %v, want ErrInvalid", err)
	}
	if err := m.Flush(); err != nil {
		t.Errorf("Flush on empty: %v", err)
	}
}

// TestMmapTruncatedUnderneath truncates the file behind the mapping: the
// copies fault with SIGBUS, which must come back as ErrIO, not a crash.
func TestMmapTruncatedUnderneath(t *testing.T) {
	const size = 1 << 20
	m, path := newMmapFile(t, size)
	defer m.Close()
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 4096)
	if _, err := m.ReadAt(p, size-8192); !errors.Is(err, blockdev.ErrIO) {
		t.Errorf("ReadAt past the truncation = %v, want ErrIO", err)
	}
	if _, err := m.WriteAt(p, size-8192); !errors.Is(err, blockdev.ErrIO) {
		t.Errorf("WriteAt past the truncation = %v, want ErrIO", err)
	}
	if _, err := m.ReadAt(p, 0); err != nil {
		t.Errorf("ReadAt inside the remaining file = %v", err)
	}
}

// TestMmapFlushDirtyPages checks Flush msyncs exactly the written pages
// and that the data is in the file.
func TestMmapFlushDirtyPages(t *testing.T) {
	m, path := newMmapFile(t, 1<<20)
	defer m.Close()
	page := int64(os.Getpagesize())
	want := make([]byte, 1<<20)
	for i, off := range []int64{0, page - 1, 100 * page, 1<<20 - 100} {
		p := blockdevtest.Pattern(uint64(i), off, 100)
		if _, err := m.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		copy(want[off:], p)
	}
	if err := m.ZeroOut(50*page+1, 10); err != nil {
		t.Fatal(err)
	}
	last := int((1<<20 - 1) / page)
	wantPages := fmt.Sprint([]int{0, 1, 50, 100, last})
	if got := fmt.Sprint(blockdev.MmapDirtyPages(m)); got != wantPages {
		t.Errorf("dirty pages = %s, want %s", got, wantPages)
	}
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := blockdev.MmapDirtyPages(m); len(got) != 0 {
		t.Errorf("dirty pages after Flush = %v", got)
	}
	disk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(disk, want) {
		t.Errorf("file contents differ from what was written through the mapping")
	}
}

func TestMmapReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img")
	want := blockdevtest.Pattern(9, 0, 8192)
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := blockdev.OpenMmap(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.WriteAt([]byte{1}, 0); !errors.Is(err, blockdev.ErrReadOnly) {
		t.Errorf("WriteAt read-only = %v, want ErrReadOnly", err)
	}
	got := make([]byte, 8192)
	if _, err := m.ReadAt(got, 0); err != nil || string(got) != string(want) {
		t.Errorf("ReadAt read-only: %v, equal %v", err, string(got) == string(want))
	}
}

func BenchmarkMmapRandom4K(b *testing.B) {
	blockdevtest.BenchRandom4K(b, newMmap(b, 64<<20))
}

// TestMmapDirtyConcurrent writes random page ranges from several
// goroutines while another takes the dirty set as Flush does: every page
// written is taken by one of the takes or by the last one after the
// writers finish, so no Flush can miss a completed write.
func TestMmapDirtyConcurrent(t *testing.T) {
	const size = 64 << 20
	m := newMmap(t, size)
	defer m.Close()
	page := int64(os.Getpagesize())
	pages := int(size / page)
	written := make([][]bool, 4)
	var wg sync.WaitGroup
	for g := range written {
		written[g] = make([]bool, pages)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			buf := make([]byte, 3*page)
			for range 20000 {
				off := rng.Int64N(size - 3*page)
				n := 1 + rng.Int64N(3*page-1)
				if _, err := m.WriteAt(buf[:n], off); err != nil {
					t.Error(err)
					return
				}
				for p := off / page; p <= (off+n-1)/page; p++ {
					written[g][p] = true
				}
			}
		}()
	}
	taken := make([]bool, pages)
	take := func() {
		for _, r := range blockdev.MmapTakeDirty(m) {
			for p := r[0]; p < r[1]; p++ {
				taken[p] = true
			}
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
			take()
		}
	}
	take()
	for g := range written {
		for p, w := range written[g] {
			if w && !taken[p] {
				t.Fatalf("page %d was written (goroutine %d) but never taken for msync", p, g)
			}
		}
	}
	if got := blockdev.MmapDirtyPages(m); len(got) != 0 {
		t.Errorf("dirty pages after the last take: %d", len(got))
	}
}
