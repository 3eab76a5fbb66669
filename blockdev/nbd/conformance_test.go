package nbd_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
	"github.com/ext4io/ext4io/blockdev/nbd"
)

// TestConformance runs blockdevtest.Run against real servers: nbdkit's
// memory (on a Unix socket and on TCP) and file plugins, nbdkit with a 4 KiB minimum block size (the
// client's read-modify-write path), without WRITE_ZEROES (the
// fallbacks), on one connection, and qemu-nbd over a raw image.
func TestConformance(t *testing.T) {
	size := func(n int64) string { return strconv.FormatInt(n, 10) }
	cases := []struct {
		name string
		opts nbd.Options
		new  func(t *testing.T, n int64) *server
		// check runs on the first device, to prove the case exercises
		// what it says.
		check func(t *testing.T, d *nbd.Device)
	}{
		{"nbdkit-memory", nbd.Options{}, func(t *testing.T, n int64) *server {
			return startNbdkit(t, "memory", size(n))
		}, func(t *testing.T, d *nbd.Device) {
			if d.Conns() < 2 {
				t.Errorf("nbdkit memory (multi-conn) gave %d connections", d.Conns())
			}
		}},
		{"nbdkit-memory-tcp", nbd.Options{}, func(t *testing.T, n int64) *server {
			return startNbdkitTCP(t, "memory", size(n))
		}, nil},
		{"nbdkit-memory-1conn", nbd.Options{Conns: 1}, func(t *testing.T, n int64) *server {
			return startNbdkit(t, "memory", size(n))
		}, nil},
		{"nbdkit-file", nbd.Options{}, func(t *testing.T, n int64) *server {
			img := filepath.Join(t.TempDir(), "img")
			if err := os.WriteFile(img, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(img, n); err != nil {
				t.Fatal(err)
			}
			return startNbdkit(t, "file", img)
		}, nil},
		{"nbdkit-min4k", nbd.Options{}, func(t *testing.T, n int64) *server {
			return startNbdkit(t, "--filter=blocksize-policy", "memory", size(n),
				"blocksize-minimum=4096", "blocksize-maximum=65536", "blocksize-error-policy=error")
		}, func(t *testing.T, d *nbd.Device) {
			if d.LogicalBlockSize() != 4096 {
				t.Errorf("LogicalBlockSize = %d, want 4096 from the server's minimum", d.LogicalBlockSize())
			}
		}},
		{"nbdkit-nozero", nbd.Options{}, func(t *testing.T, n int64) *server {
			return startNbdkit(t, "--filter=nozero", "--filter=blocksize-policy", "memory", size(n),
				"zeromode=none", "blocksize-minimum=512", "blocksize-error-policy=error")
		}, nil},
		{"qemu-nbd", nbd.Options{}, func(t *testing.T, n int64) *server {
			img := filepath.Join(t.TempDir(), "img")
			if err := os.WriteFile(img, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(img, n); err != nil {
				t.Fatal(err)
			}
			return startQemuNbd(t, img)
		}, func(t *testing.T, d *nbd.Device) {
			t.Logf("qemu-nbd: %d connection(s), %d-byte logical blocks", d.Conns(), d.LogicalBlockSize())
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			first := true
			blockdevtest.Run(t, func(t *testing.T, n int64) blockdev.Device {
				d := tc.new(t, n).open(t, tc.opts)
				if first && tc.check != nil {
					tc.check(t, d)
				}
				first = false
				return d
			})
		})
	}
}
