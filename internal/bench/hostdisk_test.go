package bench

import (
	"errors"
	"os"
	"runtime"
	"testing"
)

func TestParseDiskStat(t *testing.T) {
	// vda's stat on a Linux 6.x host: 17 fields.
	const line = "   88321     1734  5613178    38912  1264190   402012 94006632  2399321        0  1152644  2502817    12345        0  9876543     1002    21000     3456\n"
	d, err := parseDiskStat(line)
	if err != nil {
		t.Fatal(err)
	}
	want := diskSnap{Reads: 88321, ReadBytes: 5613178 * 512, Writes: 1264190, WriteBytes: 94006632 * 512}
	if d != want {
		t.Fatalf("got %+v, want %+v", d, want)
	}
	// Kernels before 4.18 have 11 fields; the first 7 are the same.
	if _, err := parseDiskStat("1 2 3 4 5 6 7 8 9 10 11"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "1 2 3 4 5 6", "1 2 x 4 5 6 7", "1 2 3 4 -5 6 7"} {
		if _, err := parseDiskStat(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestHostDiskSnap checks the phase arithmetic on a stat file that
// changes between reads, and that a failed read is reported.
func TestHostDiskSnap(t *testing.T) {
	stats := []string{"10 0 80 0 20 0 160 0 0 0 0", "11 0 88 0 25 0 200 0 0 0 0"}
	n := 0
	h := &hostDisk{statPath: "x", read: func(string) (string, error) {
		if n >= len(stats) {
			return "", errors.New("gone")
		}
		n++
		return stats[n-1], nil
	}}
	a, ok1 := h.snap()
	b, ok2 := h.snap()
	if !ok1 || !ok2 {
		t.Fatal("snap failed")
	}
	if d := b.sub(a); d != (diskSnap{Reads: 1, ReadBytes: 8 * 512, Writes: 5, WriteBytes: 40 * 512}) {
		t.Fatalf("delta %+v", d)
	}
	if _, ok := h.snap(); ok {
		t.Fatal("a failed read reported ok")
	}
	var none *hostDisk
	if _, ok := none.snap(); ok {
		t.Fatal("nil hostDisk reported ok")
	}
}

func TestOpenHostDisk(t *testing.T) {
	if runtime.GOOS != "linux" {
		if openHostDisk(t.TempDir()) != nil {
			t.Fatal("host disk outside Linux")
		}
		return
	}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() && isTmpfs("/dev/shm") {
		if h := openHostDisk("/dev/shm"); h != nil {
			t.Fatalf("tmpfs /dev/shm has host disk %q", h.name)
		}
	}
	if openHostDisk("/nonexistent/ext4io") != nil {
		t.Fatal("host disk for a missing path")
	}
	// Where the temporary directory is on a block device, its counters
	// read; on overlay or tmpfs there is none. Either way no error.
	if h := openHostDisk(t.TempDir()); h != nil {
		if _, ok := h.snap(); !ok || h.name == "" {
			t.Fatalf("host disk %+v does not read", h)
		}
	}
}
