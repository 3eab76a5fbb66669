package ext4io_test

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestNoGoroutineAfterClose: a volume with every background worker
// running (MMP, the commit interval, write-back of the page cache,
// online discard, fast commits, journalled atomic writes in place,
// readahead) leaves no goroutine once Close returned, after a clean run
// and after the device failed every write and flush half-way, with Files
// left open.
func TestNoGoroutineAfterClose(t *testing.T) {
	for _, fault := range []bool{false, true} {
		t.Run(fmt.Sprintf("fault=%v", fault), func(t *testing.T) {
			time.Sleep(20 * time.Millisecond)
			baseG := runtime.NumGoroutine()
			base := memdev.New(64 << 20)
			require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{Features: "mmp", MMPUpdateInterval: 1, FastCommit: true}))
			toggle := errordev.NewToggle(errordev.Kinds(errordev.Always(), errordev.Write, errordev.Flush))
			v, err := ext4io.Open(errordev.New(base, toggle), ext4io.Options{Writable: true, Discard: true,
				CommitInterval: 5 * time.Millisecond, WritebackAge: time.Millisecond})
			require.NoError(t, err)
			db := directFile(t, v, "db", 0, 256<<10)
			_, err = db.WriteAt(bytes.Repeat([]byte{1}, 256<<10), 0)
			require.NoError(t, err)
			require.NoError(t, db.Sync())
			var open []*ext4io.File
			for i := range 20 {
				if fault && i == 10 {
					toggle.Enable()
				}
				_, _ = db.WriteAtomic(bytes.Repeat([]byte{byte(i)}, 16<<10), int64(i%16)*16<<10)
				_ = db.Datasync()
				f, err := v.Create(fmt.Sprintf("f%d", i))
				if err != nil {
					continue
				}
				_, _ = f.Write(bytes.Repeat([]byte{byte(i)}, 100<<10))
				_ = f.Sync()
				b := make([]byte, 4096)
				_, _ = f.ReadAt(b, 0)
				if i%2 == 0 {
					open = append(open, f)
				} else {
					_ = f.Close()
					_ = v.Remove(fmt.Sprintf("f%d", i))
				}
			}
			_, _ = v.Trim(0, 64<<20, 0)
			g, err := v.OpenFile("f0", os.O_RDONLY, 0)
			if err == nil {
				_, _ = g.ReadAt(make([]byte, 64<<10), 0)
			}
			err = v.Close()
			if fault {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for runtime.NumGoroutine() > baseG && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := runtime.NumGoroutine(); n > baseG {
				buf := make([]byte, 1<<20)
				t.Fatalf("%d goroutines left (%d before):\n%s", n, baseG, buf[:runtime.Stack(buf, true)])
			}
			_ = open
		})
	}
}
