package ext4io_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestHomeWriteStress: goroutines each own a file and mix journalled
// atomic writes (slowed writes in place), Datasync, Sync, direct
// overwrites, punches, truncates and reads checked against a model of the
// file, while another goroutine syncs the volume; under a watchdog (a
// deadlock fails instead of hanging). At the end, every file reads as its
// model, after Close and after a crash keeping only flushed writes.
func TestHomeWriteStress(t *testing.T) {
	t.Parallel()
	const (
		files = 4
		size  = 256 << 10
		page  = 16 << 10
	)
	base := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{NoDiscard: true}))
	cdev, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	d := &lateDev{Device: cdev, off: 0, end: 64 << 20, delay: 200 * time.Microsecond}
	v, err := ext4io.Open(d, ext4io.Options{Writable: true, CommitInterval: -1})
	require.NoError(t, err)
	models := make([][]byte, files)
	fs := make([]*ext4io.File, files)
	for i := range fs {
		fs[i] = directFile(t, v, fmt.Sprintf("f%d", i), 0, size)
		models[i] = bytes.Repeat([]byte{0xEE}, size)
		_, err := fs[i].WriteAt(models[i], 0)
		require.NoError(t, err)
	}
	require.NoError(t, v.Sync())
	done := make(chan struct{})
	errc := make(chan error, files+1)
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Second)
	for i := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, model := fs[i], models[i]
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			fail := func(format string, a ...any) { errc <- fmt.Errorf("file %d: "+format, append([]any{i}, a...)...) }
			for k := 0; time.Now().Before(deadline); k++ {
				off := int64(rng.IntN(size/page)) * page
				p := bytes.Repeat([]byte{byte(k)}, page)
				switch rng.IntN(7) {
				case 0, 1, 2:
					if _, err := f.WriteAtomic(p, off); err != nil {
						fail("atomic write: %v", err)
						return
					}
					copy(model[off:], p)
					if rng.IntN(2) == 0 {
						if err := f.Datasync(); err != nil {
							fail("datasync: %v", err)
							return
						}
					}
				case 3:
					if _, err := f.WriteAt(p, off); err != nil {
						fail("write: %v", err)
						return
					}
					copy(model[off:], p)
				case 4:
					if err := f.Fallocate(ext4io.FallocPunchHole, off, page); err != nil {
						fail("punch: %v", err)
						return
					}
					clear(model[off : off+page])
				case 5:
					if err := f.Sync(); err != nil {
						fail("sync: %v", err)
						return
					}
				case 6:
					got := make([]byte, page)
					if _, err := f.ReadAt(got, off); err != nil {
						fail("read: %v", err)
						return
					}
					if !bytes.Equal(got, model[off:off+page]) {
						fail("read at %d: got %x.., want %x..", off, got[:4], model[off:off+4])
						return
					}
				}
			}
		}()
	}
	go func() {
		for time.Now().Before(deadline) {
			if err := v.Sync(); err != nil {
				errc <- fmt.Errorf("volume sync: %v", err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("deadlock: the writers did not finish")
	}
	close(errc)
	t.Logf("journalled atomic writes: %d", v.Counters().AtomicJournalled)
	for err := range errc {
		t.Error(err)
	}
	for i, f := range fs {
		require.NoError(t, f.Sync())
		require.NoError(t, f.Close())
		b, err := v.ReadFile(fmt.Sprintf("f%d", i))
		require.NoError(t, err)
		require.True(t, bytes.Equal(models[i], b), "file %d before Close", i)
	}
	require.NoError(t, v.Close())
	for i := range fs {
		require.Equal(t, models[i], crashRead(t, cdev, fmt.Sprintf("f%d", i), 0, size), "file %d after a crash", i)
	}
}
