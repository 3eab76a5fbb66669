package ext4io_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestCrashRecovery crashes a journaled workload at every device flush
// (the device keeps what was flushed, a random half of the rest, and tears
// the last write). Each crashed image is recovered three ways: by e2fsck -fy,
// which must leave every file that was fsynced before the crash intact; by
// ext4io, which must produce the same blocks as e2fsck -E journal_only
// (outside superblocks and the journal) and then pass e2fsck -fn; and read
// through ext4io without touching the image.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	const size = 64 << 20
	// Torn writes are cut at the device's 4 KiB atomic-write unit (a torn
	// 512-byte half of the superblock would need e2fsck's backup
	// superblock; ext4io does not fall back to backups).
	base := memdev.NewBlockSize(size, 4096)
	if err := ext4io.Format(base, ext4io.FormatOptions{BlockSize: 1024}); err != nil {
		t.Fatal(err)
	}
	cdev, err := errordev.NewCrashable(base)
	if err != nil {
		t.Fatal(err)
	}
	type crash struct {
		img    *memdev.Device
		synced map[string][]byte // files fsynced before the crash
	}
	synced := map[string][]byte{}
	var crashes []crash
	// Every Flush is a crash point: the crash happens while the flush is
	// in flight, so the image holds what earlier flushes made durable plus
	// a random half of the writes since, with the last one torn.
	dev := &crashAtFlush{Crashable: cdev, onFlush: func(c *errordev.Crashable, n int) {
		img, err := c.Crash(errordev.CrashOptions{Seed: uint64(n), KeepProb: 0.5, TearLast: true})
		if err != nil {
			t.Fatal(err)
		}
		snap := make(map[string][]byte, len(synced))
		for k, d := range synced {
			snap[k] = d
		}
		crashes = append(crashes, crash{img, snap})
	}}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for i := 0; i < 16; i++ {
		name := fmt.Sprintf("f%03d", i)
		f, err := v.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, 1+rng.IntN(40_000))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		if rng.IntN(3) == 0 {
			if err := f.Fallocate(ext4io.FallocKeepSize, 0, int64(len(data))*2); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if rng.IntN(2) == 0 {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			synced[name] = data
		}
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if len(crashes) == 0 {
		t.Fatal("no crash points")
	}
	e2fsck := e2fs.Tool(t, "e2fsck")
	t.Logf("%d crash points", len(crashes))
	for i, c := range crashes {
		if testing.Short() && i%4 != 0 {
			continue
		}
		t.Run(fmt.Sprintf("flush%d", i), func(t *testing.T) {
			// Each crash point has its own image: they are checked in
			// parallel (e2fsck runs overlap the Go work).
			t.Parallel()
			dir := t.TempDir()
			byFsck := filepath.Join(dir, "fsck.img")
			byExt4io := filepath.Join(dir, "ext4io.img")
			journalOnly := filepath.Join(dir, "jonly.img")
			for _, p := range []string{byFsck, byExt4io, journalOnly} {
				saveDev(t, c.img, p)
			}
			// Read through ext4io without changing the image.
			ro, err := ext4io.OpenImage(byExt4io, ext4io.Options{})
			if err != nil {
				t.Fatalf("read-only open of the crashed image: %v", err)
			}
			checkSynced(t, ro, c.synced)
			ro.Close()

			out, err := exec.Command(e2fsck, "-fy", byFsck).CombinedOutput()
			if exitCode(err) > 1 {
				t.Fatalf("e2fsck -fy: %v\n%s", err, out)
			}
			e2fs.Fsck(t, byFsck)
			fv, err := ext4io.OpenImage(byFsck, ext4io.Options{})
			if err != nil {
				t.Fatal(err)
			}
			checkSynced(t, fv, c.synced)
			fv.Close()

			exec.Command(e2fsck, "-E", "journal_only", "-y", journalOnly).Run()
			xv, err := ext4io.OpenImage(byExt4io, ext4io.Options{Replay: true})
			if err != nil {
				t.Fatal(err)
			}
			if info := xv.Recovery(); info != nil {
				t.Logf("ext4io replayed %d transactions, %d blocks", info.Transactions, info.Replayed)
			}
			xv.Close()
			compareReplays(t, byExt4io, journalOnly)
			e2fs.Fsck(t, byExt4io)
		})
	}
}

// TestCrashRecoveredByLinux: Linux mounts an image whose journal ext4io
// left un-replayed, replays it itself, and sees every fsynced file.
func TestCrashRecoveredByLinux(t *testing.T) {
	base := memdev.NewBlockSize(32<<20, 4096)
	if err := ext4io.Format(base, ext4io.FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	dev, err := errordev.NewCrashable(base)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	synced := map[string][]byte{}
	for i := 0; i < 10; i++ {
		name := fmt.Sprintf("s%d", i)
		f, err := v.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		data := bytes.Repeat([]byte{byte('a' + i)}, 5000*(i+1))
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		synced[name] = data
	}
	img, err := dev.Crash(errordev.CrashOptions{Seed: 1, KeepProb: 0.3, TearLast: true})
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	path := filepath.Join(t.TempDir(), "crashed.img")
	saveDev(t, img, path)
	mnt := e2fs.Mount(t, path, false)
	for name, want := range synced {
		got, err := os.ReadFile(filepath.Join(mnt, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Linux reads fsynced %s: %d bytes, err %v", name, len(got), err)
		}
	}
	e2fs.Unmount(t, mnt)
	e2fs.Fsck(t, path)
}

// crashAtFlush calls onFlush (with the flush's number) before each Flush.
type crashAtFlush struct {
	*errordev.Crashable
	n       int
	onFlush func(c *errordev.Crashable, n int)
}

func (d *crashAtFlush) Flush() error {
	d.n++
	d.onFlush(d.Crashable, d.n)
	return d.Crashable.Flush()
}

func checkSynced(t *testing.T, v *ext4io.Volume, synced map[string][]byte) {
	t.Helper()
	for name, want := range synced {
		f, err := v.Open(name)
		if err != nil {
			t.Fatalf("fsynced %s: %v", name, err)
		}
		got := make([]byte, len(want)+1)
		n, _ := f.ReadAt(got, 0)
		if n != len(want) || !bytes.Equal(got[:n], want) {
			t.Fatalf("fsynced %s: %d bytes read, %d fsynced, equal=%v", name, n, len(want), bytes.Equal(got[:n], want))
		}
	}
}
