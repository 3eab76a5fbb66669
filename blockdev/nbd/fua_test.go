package nbd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
	"github.com/ext4io/ext4io/blockdev/nbd"
)

// TestNbdkitFUA: blockdev.WriteAtSync on an nbdkit export, whose memory
// plugin advertises NBD_FLAG_SEND_FUA, sends its write with
// NBD_CMD_FLAG_FUA and no flush, as nbdkit's log filter records them
// ("fua=1"); a plain WriteAt and Flush are logged as such.
func TestNbdkitFUA(t *testing.T) {
	logfile := filepath.Join(t.TempDir(), "log")
	s := startNbdkit(t, "--filter=log", "memory", "size=1M", "logfile="+logfile)
	d := s.open(t, nbd.Options{Conns: 1})
	p := blockdevtest.Pattern(1, 0, 8192)
	if n, err := blockdev.WriteAtSync(d, p, 4096); err != nil || n != len(p) {
		t.Fatalf("WriteAtSync = %d, %v", n, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(logfile)
	if err != nil {
		t.Fatal(err)
	}
	var writes, fua, flushes int
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.Contains(l, " Write ") && strings.Contains(l, "..."):
			writes++
			if strings.Contains(l, "fua=1") {
				fua++
			}
		case strings.Contains(l, " Flush ") && strings.Contains(l, "..."):
			flushes++
		}
	}
	if writes != 1 || fua != 1 || flushes != 0 {
		t.Errorf("nbdkit logged %d writes (%d with FUA) and %d flushes, want one FUA write and no flush; log:\n%s", writes, fua, flushes, b)
	}
}

// BenchmarkWriteAtSync: a durable 4 KiB write on nbdkit memory (which
// advertises FUA and multi-conn), as one FUA write (blockdev.WriteAtSync)
// and as a write and a flush of every connection.
func BenchmarkWriteAtSync(b *testing.B) {
	s := startNbdkit(b, "memory", "64M")
	d := s.open(b, nbd.Options{})
	defer d.Close()
	buf := blockdevtest.Pattern(2, 0, 4096)
	for _, tc := range []struct {
		name  string
		write func(off int64) error
	}{
		{"FUA", func(off int64) error { _, err := blockdev.WriteAtSync(d, buf, off); return err }},
		{"WriteAt+Flush", func(off int64) error {
			if _, err := d.WriteAt(buf, off); err != nil {
				return err
			}
			return d.Flush()
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(4096)
			for i := range b.N {
				if err := tc.write(int64(i%1024) * 4096); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
