package ext4io_test

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/iomap"
)

// gateDev holds the first write overlapping an armed range until released
// (failing it with fail, when set), so that a journalled page's write in
// place (homewrite.go) is still in flight while a test acts.
type gateDev struct {
	blockdev.Device
	mu       sync.Mutex
	off, end int64
	armed    bool
	fail     error
	held     chan struct{} // closed when the write is held
	release  chan struct{}
}

func (d *gateDev) arm(off, n int64, fail error) {
	d.mu.Lock()
	d.off, d.end, d.armed, d.fail = off, off+n, true, fail
	d.held, d.release = make(chan struct{}), make(chan struct{})
	d.mu.Unlock()
}

func (d *gateDev) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	hit := d.armed && off < d.end && d.off < off+int64(len(p))
	if hit {
		d.armed = false
	}
	held, release, fail := d.held, d.release, d.fail
	d.mu.Unlock()
	if hit {
		close(held)
		<-release
		if fail != nil {
			return 0, fail
		}
	}
	return d.Device.WriteAt(p, off)
}

// homeVolume opens a volume on a gate over a crashable memory device with
// a file "db" of 256 KiB written and synced (direct I/O), and returns the
// byte address of the file's block at 64 KiB.
func homeVolume(t *testing.T) (*gateDev, *errordev.Crashable, *ext4io.Volume, *ext4io.File, int64) {
	t.Helper()
	return homeVolumeFormat(t, ext4io.FormatOptions{NoDiscard: true})
}

// homeVolumeFormat is homeVolume on a device formatted with fo.
func homeVolumeFormat(t *testing.T, fo ext4io.FormatOptions) (*gateDev, *errordev.Crashable, *ext4io.Volume, *ext4io.File, int64) {
	t.Helper()
	base := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(base, fo))
	cdev, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	g := &gateDev{Device: cdev}
	v, err := ext4io.Open(g, ext4io.Options{Writable: true, CommitInterval: -1})
	require.NoError(t, err)
	f := directFile(t, v, "db", 0, 256<<10)
	_, err = f.WriteAt(bytes.Repeat([]byte{0xEE}, 256<<10), 0)
	require.NoError(t, err)
	require.NoError(t, v.Sync())
	return g, cdev, v, f, int64(physOf(t, f)[16]) * 4096
}

// heldWrite writes a journalled page of b at 64 KiB while the gate holds
// its write in place, checks that WriteAtomic returned before that write
// completed, and releases it after d.
func heldWrite(t *testing.T, g *gateDev, v *ext4io.Volume, f *ext4io.File, addr int64, b byte, d time.Duration) []byte {
	t.Helper()
	g.arm(addr, 16<<10, nil)
	p := journalWrite(t, v, f, b, 64<<10)
	select {
	case <-g.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the write in place never came")
	}
	release := g.release
	time.AfterFunc(d, func() { close(release) })
	return p
}

// TestHomeWriteReadsWait: every read of a journalled page's blocks while
// its write in place is in flight returns the new data (the device's
// requests wait for the pending write): direct reads, buffered reads of
// another handle, iomap ops driven on the caller's own device handle, a
// volume-level read of the file.
func TestHomeWriteReadsWait(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		read func(t *testing.T, g *gateDev, v *ext4io.Volume, f *ext4io.File) []byte
	}{
		{"direct", func(t *testing.T, _ *gateDev, _ *ext4io.Volume, f *ext4io.File) []byte {
			got := make([]byte, 16<<10)
			_, err := f.ReadAt(got, 64<<10)
			require.NoError(t, err)
			return got
		}},
		{"buffered", func(t *testing.T, _ *gateDev, v *ext4io.Volume, _ *ext4io.File) []byte {
			h, err := v.OpenFile("db", os.O_RDONLY, 0)
			require.NoError(t, err)
			defer h.Close()
			got := make([]byte, 16<<10)
			_, err = h.ReadAt(got, 64<<10)
			require.NoError(t, err)
			return got
		}},
		{"readfile", func(t *testing.T, _ *gateDev, v *ext4io.Volume, _ *ext4io.File) []byte {
			b, err := v.ReadFile("db")
			require.NoError(t, err)
			return b[64<<10 : 80<<10]
		}},
		{"iomap", func(t *testing.T, g *gateDev, _ *ext4io.Volume, f *ext4io.File) []byte {
			got := make([]byte, 16<<10)
			_, err := iomap.DirectRead(g.Device, f.NormalOps(), got, 64<<10, nil)
			require.NoError(t, err)
			return got
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, _, v, f, addr := homeVolume(t)
			p := heldWrite(t, g, v, f, addr, 7, 50*time.Millisecond)
			require.Equal(t, p, c.read(t, g, v, f), "read while the write in place was in flight")
			require.NoError(t, f.Close())
			require.NoError(t, v.Close())
		})
	}
}

// TestHomeWriteWritesOrdered: a write of a journalled page's blocks while
// its write in place is in flight lands after it: the late write in place
// never overwrites newer data. A direct write, a buffered write with
// Sync, and a journalled write of the same page.
func TestHomeWriteWritesOrdered(t *testing.T) {
	t.Parallel()
	q := bytes.Repeat([]byte{9}, 16<<10)
	for _, c := range []struct {
		name  string
		write func(t *testing.T, v *ext4io.Volume, f *ext4io.File) []byte
	}{
		{"direct", func(t *testing.T, _ *ext4io.Volume, f *ext4io.File) []byte {
			_, err := f.WriteAt(q, 64<<10)
			require.NoError(t, err)
			return q
		}},
		{"buffered", func(t *testing.T, v *ext4io.Volume, _ *ext4io.File) []byte {
			h, err := v.OpenFile("db", os.O_RDWR, 0)
			require.NoError(t, err)
			_, err = h.WriteAt(q, 64<<10)
			require.NoError(t, err)
			require.NoError(t, h.Sync())
			require.NoError(t, h.Close())
			return q
		}},
		{"journalled", func(t *testing.T, v *ext4io.Volume, f *ext4io.File) []byte {
			require.NoError(t, f.Datasync())
			return journalWrite(t, v, f, 9, 64<<10)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, _, v, f, addr := homeVolume(t)
			heldWrite(t, g, v, f, addr, 7, 50*time.Millisecond)
			want := c.write(t, v, f)
			ext4io.WaitHomeWrites(v)
			got := make([]byte, 16<<10)
			_, err := g.Device.ReadAt(got, addr)
			require.NoError(t, err)
			require.Equal(t, want, got, "the device after the later write")
			require.NoError(t, f.Close())
			require.NoError(t, v.Close())
		})
	}
}

// TestHomeWriteCrashAfterLaterCommit: a crash right after a later
// transaction committed while a journalled page's write in place was still
// in flight, the later writes at other places of the file: the file's next
// journalled page (its transaction revokes the first page's logged copy,
// so it must not commit before the first page is on the device), a plain
// write and Datasync, Volume.Sync (which revokes every logged copy). The
// crash keeps only flushed writes; both pages must read new.
func TestHomeWriteCrashAfterLaterCommit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		later func(t *testing.T, v *ext4io.Volume, f *ext4io.File) []byte
	}{
		{"journalled", func(t *testing.T, v *ext4io.Volume, f *ext4io.File) []byte {
			require.NoError(t, f.Datasync()) // the shortcut: no wait, no I/O
			return journalWrite(t, v, f, 8, 128<<10)
		}},
		{"plain", func(t *testing.T, _ *ext4io.Volume, f *ext4io.File) []byte {
			q := bytes.Repeat([]byte{8}, 16<<10)
			_, err := f.WriteAt(q, 128<<10)
			require.NoError(t, err)
			require.NoError(t, f.Datasync())
			return q
		}},
		{"volume sync", func(t *testing.T, v *ext4io.Volume, f *ext4io.File) []byte {
			q := bytes.Repeat([]byte{8}, 16<<10)
			_, err := f.WriteAt(q, 128<<10)
			require.NoError(t, err)
			require.NoError(t, v.Sync())
			return q
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, cdev, v, f, addr := homeVolume(t)
			p := heldWrite(t, g, v, f, addr, 7, 100*time.Millisecond)
			q := c.later(t, v, f)
			require.Equal(t, p, crashRead(t, cdev, "db", 64<<10, 16<<10), "the first page after the crash")
			require.Equal(t, q, crashRead(t, cdev, "db", 128<<10, 16<<10), "the later page after the crash")
			require.NoError(t, f.Close())
			require.NoError(t, v.Close())
		})
	}
}

// TestHomeWriteFailure: a journalled page whose write in place fails is
// reported by the file's next Datasync, the volume stops committing, and
// the page is not marked home: the volume's Close checkpoints the logged
// copy home, so the device holds the new page.
func TestHomeWriteFailure(t *testing.T) {
	t.Parallel()
	g, cdev, v, f, addr := homeVolume(t)
	g.arm(addr, 16<<10, errors.New("injected write error"))
	p := journalWrite(t, v, f, 7, 64<<10)
	select {
	case <-g.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the write in place never came")
	}
	close(g.release)
	ext4io.WaitHomeWrites(v)
	err := f.Datasync()
	require.ErrorIs(t, err, ext4io.ErrIO)
	require.ErrorContains(t, err, "in place")
	_ = f.Close()
	_ = v.Close()
	got := make([]byte, 16<<10)
	_, err = cdev.ReadAt(got, addr)
	require.NoError(t, err)
	require.Equal(t, p, got, "the page on the device after Close")
	require.Equal(t, p, crashRead(t, cdev, "db", 64<<10, 16<<10), "the page after a crash")
}
