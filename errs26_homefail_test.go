package ext4io_test

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestHomeWriteFailureThenWork: after a journalled page's write in place
// failed, every later write that a sync acknowledges (an overwrite of the
// same page, another file's overwrite, append and creation) reads back
// after a crash and recovery; those not acknowledged may be lost.
func TestHomeWriteFailureThenWork(t *testing.T) {
	for _, fc := range []bool{false, true} {
		g, cdev, v, f, addr := homeVolumeFormat(t, ext4io.FormatOptions{NoDiscard: true, FastCommit: fc})
		h, err := v.OpenFile("h", os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
		require.NoError(t, err)
		_, err = h.WriteAt(bytes.Repeat([]byte{1}, 64<<10), 0)
		require.NoError(t, err)
		require.NoError(t, h.Sync())
		g.arm(addr, 16<<10, errors.New("injected write error"))
		p := journalWrite(t, v, f, 7, 64<<10)
		<-g.held
		close(g.release)
		time.Sleep(20 * time.Millisecond)
		acked := map[string][]byte{}
		type step struct {
			name string
			do   func() error
		}
		q := bytes.Repeat([]byte{9}, 16<<10)
		r := bytes.Repeat([]byte{3}, 64<<10)
		steps := []step{
			{"h overwrite", func() error {
				if _, err := h.WriteAt(r, 0); err != nil {
					return err
				}
				return h.Datasync()
			}},
			{"h append", func() error {
				if _, err := h.WriteAt(r, 64<<10); err != nil {
					return err
				}
				return h.Sync()
			}},
			{"f datasync 1", func() error { return f.Datasync() }},
			{"f overwrite", func() error {
				if _, err := f.WriteAt(q, 64<<10); err != nil {
					return err
				}
				return f.Datasync()
			}},
			{"f sync", func() error { return f.Sync() }},
			{"create n", func() error {
				n, err := v.Create("n")
				if err != nil {
					return err
				}
				defer n.Close()
				if _, err := n.WriteAt(r, 0); err != nil {
					return err
				}
				return n.Sync()
			}},
			{"v sync", func() error { return v.Sync() }},
		}
		for _, s := range steps {
			err := s.do()
			t.Logf("fc %v: %s: %v", fc, s.name, err)
			if err == nil {
				acked[s.name] = nil
			}
		}
		img, err := cdev.Crash(errordev.CrashOptions{})
		require.NoError(t, err)
		cv, err := ext4io.Open(img, ext4io.Options{Writable: true})
		require.NoError(t, err)
		read := func(name string, off int64, n int) []byte {
			b, err := cv.ReadFile(name)
			if err != nil || int64(len(b)) < off+int64(n) {
				return nil
			}
			return b[off : off+int64(n)]
		}
		if _, ok := acked["h overwrite"]; ok {
			require.Equal(t, r, read("h", 0, 64<<10), "h's acknowledged overwrite")
		}
		if _, ok := acked["h append"]; ok {
			require.Equal(t, r, read("h", 64<<10, 64<<10), "h's acknowledged append")
		}
		if _, ok := acked["f overwrite"]; ok {
			require.Equal(t, q, read("db", 64<<10, 16<<10), "f's acknowledged overwrite")
		} else {
			got := read("db", 64<<10, 16<<10)
			require.True(t, bytes.Equal(got, p) || bytes.Equal(got, q), "db's page: neither the journalled nor the later one")
		}
		if _, ok := acked["create n"]; ok {
			require.Equal(t, r, read("n", 0, 64<<10), "n, created and synced")
		}
		require.NoError(t, cv.Close())
		ext4iotest.FsckDev(t, img)
		_ = f.Close()
		_ = h.Close()
		_ = v.Close()
	}
}
