package ext4io_test

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/crafted"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestAdv25JournalTooShort: a journal superblock whose log (s_first to
// s_maxlen) is shorter than jbd2's 1024 blocks, which Linux refuses to
// load ("JBD2: Journal too short"). A writable open took it, accepted
// writes and then failed every Sync and the Close with ENOSPC ("3 credits
// exceed the log (-1 at most in one transaction)"), losing them; it is now
// refused at Open as corrupt. A read-only open, which writes no log,
// still reads the volume.
func TestAdv25JournalTooShort(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	e2fs.Mkfs(t, base, "16M", "-b", "1024")
	out := e2fs.Debugfs(t, base, false, "bmap <8> 0")
	jblk, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("bmap <8> 0: %q", out)
	}
	img, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	jsb := img[jblk*1024:]
	if binary.BigEndian.Uint32(jsb) != 0xc03b3998 || binary.BigEndian.Uint32(jsb[0x10:]) != 1024 ||
		binary.BigEndian.Uint32(jsb[0x28:])&0x10 != 0 {
		t.Fatalf("journal superblock at block %d: want a 1024-block journal without checksums", jblk)
	}
	for _, tc := range []struct {
		name       string
		off, value uint32
	}{
		{"s_first 1023", 0x14, 1023},
		{"s_maxlen 2", 0x10, 2},
		{"s_maxlen 1023", 0x10, 1023},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			b := append([]byte(nil), img...)
			binary.BigEndian.PutUint32(b[jblk*1024+int(tc.off):], tc.value)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			v, err := ext4io.OpenImage(p, ext4io.Options{Writable: true})
			if err == nil {
				werr := v.WriteFile("f", []byte("data"), 0o644)
				serr := v.Sync()
				cerr := v.Close()
				t.Fatalf("writable open of a log shorter than 1024 blocks: no error (WriteFile %v, Sync %v, Close %v)", werr, serr, cerr)
			}
			if !errors.Is(err, ext4io.ErrCorrupt) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("writable open: %v, want one line wrapping ErrCorrupt", err)
			}
			v, err = ext4io.OpenImage(p, ext4io.Options{})
			if err != nil {
				t.Fatalf("read-only open: %v", err)
			}
			if _, err := v.ReadDir("/"); err != nil {
				t.Errorf("read-only ReadDir: %v", err)
			}
			v.Close()
		})
	}
}

// TestAdv25MMPWaitBounded: an image's s_mmp_update_interval or MMP block
// check interval of 65535 s made a writable Open wait 65,595 s (18 hours,
// min(2c+1, c+60)) before it claimed the block, even a clean one. Intervals
// are taken at most 300 s, the longest any holder uses: the wait is at
// most 360 s.
func TestAdv25MMPWaitBounded(t *testing.T) {
	for _, c := range [][2]uint16{{65535, 0}, {0, 65535}, {301, 0}, {300, 0}} {
		if got := ext4io.MMPWait(c[0], c[1]); got != 360*time.Second {
			t.Errorf("wait(update %d, check %d) = %v, want 6m0s", c[0], c[1], got)
		}
	}
}

// TestAdv25JournalLogLoop: a log whose every block is a descriptor of the
// tid at s_start, with no commit, matches at each block the scan reaches,
// round and round the log: Open's recovery scan never ended (e2fsck 1.47
// hangs on it too, "recovering journal"). The scan now stops as corrupt
// once it has gone past the log's length.
func TestAdv25JournalLogLoop(t *testing.T) {
	img := crafted.LoopingLog(t, t.TempDir())
	for _, writable := range []bool{false, true} {
		done := make(chan error, 1)
		go func() {
			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: writable})
			if err == nil {
				v.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ext4io.ErrCorrupt) || strings.Contains(err.Error(), "\n") {
				t.Errorf("open (writable %v): %v, want one line wrapping ErrCorrupt", writable, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("open (writable %v) of a log of descriptors without a commit: no answer in 30 s", writable)
		}
	}
}

// TestAdv25JournalHole: a journal inode with a hole inside the log. A
// writable open took it; the first commit that reached the hole aborted
// the journal, the volume stopped, and the writes of that commit and every
// later one were lost (Sync and Close failed). The log is now checked to
// be mapped at Open, which refuses it as corrupt; a read-only open, which
// writes no log, still reads the volume.
func TestAdv25JournalHole(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	e2fs.Mkfs(t, img, "16M", "-b", "1024")
	e2fs.Debugfs(t, img, true, "punch <8> 500 500")
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err == nil {
		v.Close()
		t.Fatal("writable open of a journal with a hole at block 500: no error")
	}
	if !errors.Is(err, ext4io.ErrCorrupt) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("writable open: %v, want one line wrapping ErrCorrupt", err)
	}
	v, err = ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatalf("read-only open: %v", err)
	}
	if _, err := v.ReadDir("/"); err != nil {
		t.Errorf("read-only ReadDir: %v", err)
	}
	v.Close()
}
