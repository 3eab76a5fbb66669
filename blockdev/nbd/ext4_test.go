package nbd_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/nbd"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/internal/errs"
)

// sparseImage creates an empty sparse file of size bytes.
func sparseImage(t *testing.T, size int64) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return img
}

// randomData returns n random bytes.
func randomData(rng *rand.Rand, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	return p
}

// checkFiles fails t unless every file in want holds exactly its bytes.
func checkFiles(t *testing.T, v *ext4io.Volume, want map[string][]byte) {
	t.Helper()
	for name, data := range want {
		f, err := v.Open(name)
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		got := make([]byte, len(data)+1)
		n, _ := f.ReadAt(got, 0)
		f.Close()
		if n != len(data) || !bytes.Equal(got[:n], data) {
			t.Fatalf("%s: read %d bytes, want %d (equal prefix: %v)", name, n, len(data), bytes.Equal(got[:min(n, len(data))], data[:min(n, len(data))]))
		}
	}
}

// TestExt4OverNBD formats, fills, closes and reopens an ext4io volume on
// an NBD export (nbdkit's file plugin and qemu-nbd, each over a sparse
// file), then checks the backing file with e2fsck -fn.
func TestExt4OverNBD(t *testing.T) {
	for _, srv := range []string{"nbdkit-file", "qemu-nbd"} {
		t.Run(srv, func(t *testing.T) {
			e2fs.Tool(t, "e2fsck")
			img := sparseImage(t, 64<<20)
			var s *server
			if srv == "qemu-nbd" {
				s = startQemuNbd(t, img)
			} else {
				s = startNbdkit(t, "file", img)
			}
			d := s.open(t, nbd.Options{})
			if err := ext4io.Format(d, ext4io.FormatOptions{}); err != nil {
				t.Fatal(err)
			}
			v, err := ext4io.Open(d, ext4io.Options{Writable: true})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			want := map[string][]byte{}
			for i := range 24 {
				name := fmt.Sprintf("f%02d", i)
				f, err := v.Create(name)
				if err != nil {
					t.Fatal(err)
				}
				data := randomData(rng, 1+rng.IntN(300_000))
				if _, err := f.WriteAt(data, 0); err != nil {
					t.Fatal(err)
				}
				if i%3 == 0 {
					if err := f.Sync(); err != nil {
						t.Fatal(err)
					}
				}
				f.Close()
				want[name] = data
			}
			checkFiles(t, v, want)
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			v, err = ext4io.Open(d, ext4io.Options{})
			if err != nil {
				t.Fatal(err)
			}
			checkFiles(t, v, want)
			v.Close()
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			s.kill()
			e2fs.Fsck(t, img)
		})
	}
}

// TestCrashOverNBD kills the server in the middle of an ext4io workload.
// nbdkit's cache filter (cache=writeback) holds writes until the client
// flushes, so the kill loses what was not flushed, as a power cut would.
// The server is restarted on the same file; ext4io reopens the volume,
// replaying its journal; every file synced before the kill must be intact
// and e2fsck -fn clean.
func TestCrashOverNBD(t *testing.T) {
	e2fs.Tool(t, "e2fsck")
	seeds := uint64(3)
	if testing.Short() {
		seeds = 1
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			img := sparseImage(t, 64<<20)
			s := startNbdkit(t, "--filter=cache", "file", img, "cache=writeback")
			opts := nbd.Options{Timeout: 5 * time.Second}
			d := s.open(t, opts)
			if err := ext4io.Format(d, ext4io.FormatOptions{BlockSize: 1024}); err != nil {
				t.Fatal(err)
			}
			if err := d.Flush(); err != nil {
				t.Fatal(err)
			}
			v, err := ext4io.Open(d, ext4io.Options{Writable: true})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(seed, 99))
			synced := map[string][]byte{}
			killAfter := 6 + rng.IntN(6) // syncs before the kill is armed
			var killed atomic.Bool
			killDone := make(chan struct{})
			syncs := 0
			var failedAt string
			for i := 0; i < 400 && failedAt == ""; i++ {
				name := fmt.Sprintf("f%03d", i)
				data := randomData(rng, 1+rng.IntN(60_000))
				f, err := v.Create(name)
				if err != nil {
					failedAt = fmt.Sprintf("create %s: %v", name, err)
					break
				}
				if _, err := f.WriteAt(data, 0); err != nil {
					failedAt = fmt.Sprintf("write %s: %v", name, err)
				} else if rng.IntN(2) == 0 {
					if err := f.Sync(); err != nil {
						failedAt = fmt.Sprintf("sync %s: %v", name, err)
					} else if !killed.Load() {
						synced[name] = data
						syncs++
					}
				}
				f.Close()
				if syncs == killAfter && !killed.Load() {
					// Kill while the workload goes on, a few ms from now.
					killed.Store(true)
					delay := time.Duration(rng.IntN(20)) * time.Millisecond
					time.AfterFunc(delay, func() { s.kill(); close(killDone) })
				}
			}
			if !killed.Load() {
				t.Fatal("workload finished before the kill was armed")
			}
			t.Logf("%d files synced before the kill; workload stopped at: %s", len(synced), failedAt)
			if failedAt == "" {
				t.Fatal("the workload never saw the server die")
			}
			// Closing a volume whose device died must not hang.
			closed := make(chan error, 1)
			go func() { closed <- v.Close() }()
			select {
			case err := <-closed:
				t.Logf("Close of the volume on the dead server: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("Volume.Close hangs on a dead server")
			}
			d.Close()

			<-killDone
			s.restart()
			d = s.open(t, opts)
			v, err = ext4io.Open(d, ext4io.Options{Writable: true})
			if err != nil {
				t.Fatalf("reopen after the crash: %v", err)
			}
			t.Logf("recovery: %+v", v.Recovery())
			checkFiles(t, v, synced)
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			s.kill() // the cache filter wrote everything back at the flushes
			e2fs.Fsck(t, img)
		})
	}
}

// TestExt4ServerWriteErrors: the server starts failing every write (EIO,
// then ENOSPC as a full thin pool would) in the middle of an ext4io
// workload. ext4io must report errors wrapping ErrIO, never mistake the
// server's ENOSPC for its own ErrNoSpace, and once the server heals, a
// reopen (journal recovery) must find every synced file and leave an image
// e2fsck accepts.
func TestExt4ServerWriteErrors(t *testing.T) {
	e2fs.Tool(t, "e2fsck")
	for _, errno := range []string{"EIO", "ENOSPC"} {
		t.Run(errno, func(t *testing.T) {
			img := sparseImage(t, 64<<20)
			trigger := filepath.Join(t.TempDir(), "fail")
			s := startNbdkit(t, "--filter=error", "file", img,
				"error-pwrite-rate=1", "error-pwrite="+errno, "error-pwrite-file="+trigger,
				"error-zero-rate=1", "error-zero="+errno, "error-zero-file="+trigger)
			d := s.open(t, nbd.Options{Timeout: 10 * time.Second})
			defer d.Close()
			if err := ext4io.Format(d, ext4io.FormatOptions{}); err != nil {
				t.Fatal(err)
			}
			v, err := ext4io.Open(d, ext4io.Options{Writable: true})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(5, 6))
			synced := map[string][]byte{}
			var failure error
			for i := 0; i < 200 && failure == nil; i++ {
				if i == 10 {
					if err := os.WriteFile(trigger, nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				name := fmt.Sprintf("f%03d", i)
				data := randomData(rng, 1+rng.IntN(50_000))
				f, err := v.Create(name)
				if err != nil {
					failure = err
					break
				}
				if _, err := f.WriteAt(data, 0); err != nil {
					failure = err
				} else if err := f.Sync(); err != nil {
					failure = err
				} else if i < 10 {
					synced[name] = data
				}
				f.Close()
			}
			if failure == nil {
				t.Fatal("the workload never saw the server's errors")
			}
			t.Logf("workload stopped at: %v", failure)
			if !errors.Is(failure, blockdev.ErrIO) {
				t.Errorf("error %v does not wrap ErrIO", failure)
			}
			if errors.Is(failure, errs.ErrNoSpace) {
				t.Errorf("the server's %s surfaced as ext4io's ErrNoSpace: %v", errno, failure)
			}
			v.Close()
			os.Remove(trigger)
			v, err = ext4io.Open(d, ext4io.Options{Writable: true})
			if err != nil {
				t.Fatalf("reopen once the server heals: %v", err)
			}
			checkFiles(t, v, synced)
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			s.kill()
			e2fs.Fsck(t, img)
		})
	}
}
