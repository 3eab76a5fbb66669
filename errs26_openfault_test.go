package ext4io_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/blockdev/overlay"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestOpenFaultSweep fails each read, write and flush in turn of a
// writable open of a crash image that needs everything an open does (a
// journal replay with a journalled atomic page, fast commits to replay,
// an orphan to finish) and of the Close after a small write: every
// failure is a clear error (no panic), leaves no goroutine behind and
// releases the claim, and the image then opens (replaying whatever is
// left), holds every fsynced file and is clean for e2fsck (checked at
// every fifth fault, or by the e2fsck run). A fault in the fast-commit replay, which is not
// atomic, leaves the filesystem marked for e2fsck, as e2fsck's replay
// does: the next writable open replays the log and says to run e2fsck,
// after which every file is there.
func TestOpenFaultSweep(t *testing.T) {
	base := memdev.New(32 << 20)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{FastCommit: true, NoDiscard: true}))
	cdev, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	v, err := ext4io.Open(cdev, ext4io.Options{Writable: true, CommitInterval: -1})
	require.NoError(t, err)
	synced := map[string][]byte{}
	db := directFile(t, v, "db", 0, 64<<10)
	_, err = db.WriteAt(bytes.Repeat([]byte{1}, 64<<10), 0)
	require.NoError(t, err)
	require.NoError(t, v.Sync())
	page := bytes.Repeat([]byte{2}, 16<<10)
	_, err = db.WriteAtomic(page, 16<<10)
	require.NoError(t, err)
	want := bytes.Repeat([]byte{1}, 64<<10)
	copy(want[16<<10:], page)
	synced["db"] = want
	orphan, err := v.Create("orphan")
	require.NoError(t, err)
	_, err = orphan.WriteAt(make([]byte, 256<<10), 0)
	require.NoError(t, err)
	require.NoError(t, orphan.Sync())
	require.NoError(t, v.Unlink("orphan"))
	for i := range 4 {
		name := fmt.Sprintf("fc%d", i)
		f, err := v.Create(name)
		require.NoError(t, err)
		p := bytes.Repeat([]byte{byte(0x40 + i)}, 5000+i)
		_, err = f.Write(p)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		require.NoError(t, f.Close())
		synced[name] = p
	}
	require.NotZero(t, v.Counters().FastCommits, "no fast commit")
	crash, err := cdev.Crash(errordev.CrashOptions{})
	require.NoError(t, err)
	pristine, err := crash.Clone()
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	baseG := runtime.NumGoroutine()

	for _, kind := range []errordev.Kind{errordev.Read, errordev.Write, errordev.Flush} {
		faults, fixed := 0, 0
		for n := int64(0); ; n++ {
			img := overlay.New(pristine)
			counter := errordev.NewCounter(errordev.OnIndex(kind, n))
			hit := func() bool { return counter.Failed(kind) > 0 }
			var openErr, closeErr error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("%v %d: panic %v", kind, n, r)
					}
				}()
				v, err := ext4io.Open(errordev.New(img, counter), ext4io.Options{Writable: true, CommitInterval: -1})
				if openErr = err; err != nil {
					return
				}
				f, err := v.OpenFile("db", os.O_RDWR|ext4io.O_DIRECT, 0)
				if err == nil {
					_, _ = f.WriteAtomic(page, 32<<10)
					_ = f.Close()
				}
				closeErr = v.Close()
			}()
			if !hit() {
				require.NoError(t, openErr, "%v %d: no fault, yet", kind, n)
				require.NoError(t, closeErr, "%v %d: no fault, yet", kind, n)
				break
			}
			faults++
			if openErr != nil {
				require.True(t, errors.Is(openErr, ext4io.ErrIO) || errors.Is(openErr, errordev.ErrInjected), "%v %d: open: %v", kind, n, openErr)
			}
			// The claim is released and the image opens, or, when the
			// fault stopped a fast-commit replay, which is not atomic,
			// says to run e2fsck, which then replays it.
			var checked blockdev.Device = img
			v, err := ext4io.Open(img, ext4io.Options{Writable: true})
			if errors.Is(err, ext4io.ErrReadOnly) && strings.Contains(err.Error(), "run e2fsck") {
				require.ErrorContains(t, openErr, "fast-commit replay", "%v %d: errors recorded", kind, n)
				fixed++
				path := ext4iotest.ImageOf(t, img)
				out, ferr := exec.Command(ext4iotest.Tool(t, "e2fsck"), "-fy", path).CombinedOutput()
				if code := exitCode(ferr); code > 1 || strings.Contains(string(out), "Fix? yes") {
					t.Fatalf("%v %d: e2fsck -fy: exit %d\n%s", kind, n, code, out)
				}
				fd, ferr := blockdev.OpenFile(path, false)
				require.NoError(t, ferr)
				defer fd.Close()
				checked = fd
				v, err = ext4io.Open(fd, ext4io.Options{Writable: true})
			}
			require.NoError(t, err, "%v %d: open after the fault (open: %v, close: %v)", kind, n, openErr, closeErr)
			for name, want := range synced {
				got, err := v.ReadFile(name)
				require.NoError(t, err, "%v %d: %s (open: %v, close: %v)", kind, n, name, openErr, closeErr)
				if name == "db" {
					// The write of the faulty session may be there.
					alt := append([]byte(nil), want...)
					copy(alt[32<<10:], page)
					if bytes.Equal(got, alt) {
						continue
					}
				}
				require.True(t, bytes.Equal(want, got), "%v %d: %s differs", kind, n, name)
			}
			_, err = v.Stat("orphan")
			require.True(t, errors.Is(err, os.ErrNotExist), "%v %d: orphan: %v", kind, n, err)
			require.NoError(t, v.Close())
			if n%5 == 0 && checked == blockdev.Device(img) {
				ext4iotest.FsckDev(t, checked)
			}
		}
		t.Logf("%v: %d faults, %d of them left the image for e2fsck", kind, faults, fixed)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseG && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseG {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines left (%d before):\n%s", n, baseG, buf[:runtime.Stack(buf, true)])
	}
}
