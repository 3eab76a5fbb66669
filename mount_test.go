//go:build linux

package ext4io_test

// Files written by Linux itself: an image made by mkfs.ext4 is mounted
// with `mount -o loop`, the kernel writes files at random offsets,
// fallocates (with and without KEEP_SIZE), punches holes, zeroes ranges,
// fills a directory until it is hash-indexed and makes symlinks; the test
// keeps a model of every file in memory. After umount everything is read
// back through ext4io and compared byte for byte, the extent maps are
// compared with debugfs, and e2fsck -fn must find the image clean.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// modelFile is what a file must hold: its bytes (len = size).
type modelFile struct{ data []byte }

func (m *modelFile) write(p []byte, off int64) {
	if end := off + int64(len(p)); end > int64(len(m.data)) {
		m.data = append(m.data, make([]byte, end-int64(len(m.data)))...)
	}
	copy(m.data[off:], p)
}

// zero clears [off, off+n), growing the file unless keepSize.
func (m *modelFile) zero(off, n int64, keepSize bool) {
	end := off + n
	if end > int64(len(m.data)) {
		if keepSize {
			end = int64(len(m.data))
		} else {
			m.data = append(m.data, make([]byte, end-int64(len(m.data)))...)
		}
	}
	if off < end {
		clear(m.data[off:end])
	}
}

// TestLinuxWrittenFiles: see the file comment. Skipped with -short, when
// not root, or where mount -o loop fails.
func TestLinuxWrittenFiles(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("mounts an image; skipped with -short")
	}
	for i, bs := range []int{4096, 1024} {
		t.Run(fmt.Sprintf("%dk", bs/1024), func(t *testing.T) {
			t.Parallel()
			seed := uint64(7000 + i)
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 1))
			img := filepath.Join(t.TempDir(), "img")
			e2fs.Mkfs(t, img, "64M", "-b", fmt.Sprint(bs))
			mnt := mountLoop(t, img)
			files := map[string]*modelFile{}
			randBytes := func(n int) []byte {
				b := make([]byte, n)
				for j := range b {
					b[j] = byte(rng.Uint32())
				}
				return b
			}
			for k := 0; k < 24; k++ {
				name := fmt.Sprintf("f%02d", k)
				f, err := os.Create(filepath.Join(mnt, name))
				if err != nil {
					t.Fatal(err)
				}
				m := &modelFile{}
				fd := int(f.Fd())
				for op := 0; op < 12; op++ {
					off := rng.Int64N(3 << 20)
					n := 1 + rng.Int64N(200_000)
					var err error
					switch rng.IntN(6) {
					case 0, 1:
						p := randBytes(int(n))
						_, err = f.WriteAt(p, off)
						m.write(p, off)
					case 2:
						err = unix.Fallocate(fd, 0, off, n)
						if off+n > int64(len(m.data)) {
							m.zero(int64(len(m.data)), off+n-int64(len(m.data)), false)
						}
					case 3:
						err = unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, off, n)
					case 4:
						err = unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
						m.zero(off, n, true)
					case 5:
						keep := rng.IntN(2) == 0
						mode := uint32(unix.FALLOC_FL_ZERO_RANGE)
						if keep {
							mode |= unix.FALLOC_FL_KEEP_SIZE
						}
						err = unix.Fallocate(fd, mode, off, n)
						m.zero(off, n, keep)
					}
					if err != nil {
						t.Fatalf("%s op %d: %v", name, op, err)
					}
					if rng.IntN(4) == 0 {
						f.Sync() // let some ops reach disk between others
					}
				}
				f.Close()
				files[name] = m
			}
			// Writes into an unwritten extent: [unwritten][written][unwritten].
			{
				f, _ := os.Create(filepath.Join(mnt, "prealloc"))
				if err := unix.Fallocate(int(f.Fd()), 0, 0, 1<<20); err != nil {
					t.Fatal(err)
				}
				m := &modelFile{data: make([]byte, 1<<20)}
				p := randBytes(3 * bs)
				f.WriteAt(p, 100*int64(bs)+17)
				m.write(p, 100*int64(bs)+17)
				f.Close()
				files["prealloc"] = m
			}
			// Many extents: every other block written (depth >= 1).
			{
				f, _ := os.Create(filepath.Join(mnt, "fragmented"))
				m := &modelFile{}
				for b := 0; b < 1200; b += 2 {
					p := randBytes(bs)
					f.WriteAt(p, int64(b*bs))
					m.write(p, int64(b*bs))
					if b%64 == 0 {
						f.Sync()
					}
				}
				f.Close()
				files["fragmented"] = m
			}
			// A directory the kernel indexes, and symlinks.
			big := filepath.Join(mnt, "big")
			os.Mkdir(big, 0o755)
			for k := 0; k < 2000; k++ {
				if err := os.WriteFile(filepath.Join(big, fmt.Sprintf("entry-%05d-%08x", k, rng.Uint32())), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			links := map[string]string{
				"short-link": "f00",
				"long-link":  strings.Repeat("a-long-symlink-target/", 8) + "end",
				"dangling":   "no/such/file",
			}
			for name, target := range links {
				if err := os.Symlink(target, filepath.Join(mnt, name)); err != nil {
					t.Fatal(err)
				}
			}
			var bigNames []string
			ents, err := os.ReadDir(big)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				bigNames = append(bigNames, e.Name())
			}
			// Linux's view is the model: reread every file through the
			// mount so a wrong model fails here, not in ext4io.
			for name, m := range files {
				got, err := os.ReadFile(filepath.Join(mnt, name))
				if err != nil || !bytes.Equal(got, m.data) {
					t.Fatalf("model of %s disagrees with Linux (%d vs %d bytes, err %v)", name, len(m.data), len(got), err)
				}
			}
			umount(t, mnt, img)

			e2fs.Fsck(t, img)
			if !strings.Contains(e2fs.Debugfs(t, img, false, "htree big"), "Root node dump") {
				t.Fatal("the kernel did not index big/")
			}
			v, err := ext4io.OpenImage(img, ext4io.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			var unwritten, maxDepth int
			for name, m := range files {
				rows, depth := e2fs.Leaves(t, img, name)
				maxDepth = max(maxDepth, depth)
				want := leafExtents(rows)
				for _, e := range want {
					if e.Unwritten {
						unwritten++
					}
				}
				checkFile(t, v, name, want, m.data, rng)
			}
			if unwritten == 0 || maxDepth == 0 {
				t.Fatalf("workload made %d unwritten extents and depth %d; want both > 0", unwritten, maxDepth)
			}
			t.Logf("%d files, %d unwritten extents, max depth %d", len(files), unwritten, maxDepth)
			got, err := v.ReadDir("big")
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range got {
				names = append(names, e.Name())
				if _, err := v.Lstat("big/" + e.Name()); err != nil {
					t.Fatalf("lookup big/%s: %v", e.Name(), err)
				}
			}
			sort.Strings(names)
			if strings.Join(names, "/") != strings.Join(bigNames, "/") {
				t.Fatalf("ReadDir big: %d names, Linux listed %d", len(names), len(bigNames))
			}
			for name, target := range links {
				if got, err := v.Readlink(name); err != nil || got != target {
					t.Fatalf("Readlink %s = %q, %v; want %q", name, got, err, target)
				}
			}
		})
	}
}
