package nbd_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
	"github.com/ext4io/ext4io/blockdev/nbd"
	"github.com/ext4io/ext4io/internal/errs"
)

// within fails t if fn takes longer than limit, and returns its error.
// fn runs in a goroutine, so a hang is reported rather than suffered.
func within(t *testing.T, limit time.Duration, what string, fn func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- fn() }()
	select {
	case err := <-errc:
		t.Logf("%s: %v after %v", what, err, time.Since(start).Round(time.Millisecond))
		return err
	case <-time.After(limit):
		t.Fatalf("%s: still blocked after %v", what, limit)
		return nil
	}
}

func readErr(d blockdev.Device, off int64) func() error {
	return func() error {
		_, err := d.ReadAt(make([]byte, 4096), off)
		return err
	}
}

// TestServerKilled: once the server dies, every operation fails with ErrIO
// at once (the socket reports EOF), and Close does not hang.
func TestServerKilled(t *testing.T) {
	s := startNbdkit(t, "memory", "4M")
	d := s.open(t, nbd.Options{Timeout: 5 * time.Second})
	if _, err := d.WriteAt(blockdevtest.Pattern(1, 0, 8192), 0); err != nil {
		t.Fatal(err)
	}
	s.kill()
	for i, fn := range []func() error{
		readErr(d, 0),
		func() error { _, err := d.WriteAt(make([]byte, 512), 0); return err },
		d.Flush,
		func() error { return d.ZeroOut(0, 4096) },
	} {
		if err := within(t, 2*time.Second, "op after kill", fn); !errors.Is(err, blockdev.ErrIO) {
			t.Errorf("op %d after the server died = %v, want ErrIO", i, err)
		}
	}
	if err := within(t, 7*time.Second, "Close", d.Close); err != nil {
		t.Errorf("Close after the server died: %v", err)
	}
}

// TestServerStalled: a stopped server (SIGSTOP) costs one timeout: the
// requests in flight fail with ErrIO within it, and so do later ones.
func TestServerStalled(t *testing.T) {
	s := startNbdkit(t, "memory", "4M")
	const timeout = 400 * time.Millisecond
	d := s.open(t, nbd.Options{Timeout: timeout})
	defer d.Close()
	if _, err := d.WriteAt(blockdevtest.Pattern(1, 0, 8192), 0); err != nil {
		t.Fatal(err)
	}
	if err := stop(s.cmd.Process); err != nil {
		t.Fatal(err)
	}
	defer resume(s.cmd.Process)
	// The signal is delivered asynchronously: requests sent before every
	// thread of the server has stopped could still be served.
	waitStopped(t, s.cmd.Process.Pid)
	// Several requests in flight on every connection, writes large enough
	// to fill the socket buffers.
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	start := time.Now()
	for i := range 16 {
		wg.Go(func() {
			var err error
			if i%2 == 0 {
				err = readErr(d, int64(i)*4096)()
			} else {
				_, err = d.WriteAt(make([]byte, 1<<20), int64(i%4)<<20)
			}
			errc <- err
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout + 3*time.Second):
		t.Fatalf("requests to a stalled server still blocked after %v", time.Since(start))
	}
	close(errc)
	for err := range errc {
		if !errors.Is(err, blockdev.ErrIO) {
			t.Errorf("request to a stalled server = %v, want ErrIO", err)
		}
	}
	t.Logf("16 requests failed after %v (timeout %v)", time.Since(start).Round(time.Millisecond), timeout)
	if err := within(t, time.Second, "read after the stall", readErr(d, 0)); !errors.Is(err, blockdev.ErrIO) {
		t.Errorf("read after the stall = %v, want ErrIO", err)
	}
}

// waitStopped waits until every thread of process pid is stopped (state
// T in /proc/PID/task/*/stat; elsewhere a pause), failing t after 5 s.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	if runtime.GOOS != "linux" {
		time.Sleep(200 * time.Millisecond) // no /proc task states to read
		return
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		stopped := len(tasks) > 0
		for _, p := range tasks {
			b, err := os.ReadFile(p)
			// The state follows the command name, which is in parentheses.
			if i := bytes.LastIndexByte(b, ')'); err != nil || i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
				stopped = false
				break
			}
		}
		if stopped {
			return
		}
	}
	t.Fatalf("process %d did not stop within 5 s of SIGSTOP", pid)
}

// TestServerSlow: nbdkit's delay filter holds reads for 5 s; with a
// 300 ms timeout the read fails with ErrIO in time.
func TestServerSlow(t *testing.T) {
	s := startNbdkit(t, "--filter=delay", "memory", "4M", "rdelay=5")
	d := s.open(t, nbd.Options{Timeout: 300 * time.Millisecond, Conns: 1})
	defer d.Close()
	if err := within(t, 2*time.Second, "delayed read", readErr(d, 0)); !errors.Is(err, blockdev.ErrIO) {
		t.Errorf("delayed read = %v, want ErrIO", err)
	}
}

// TestServerErrors: errors the server returns map to the sentinels, and
// the connection survives them (but for ESHUTDOWN, after which the client
// disconnects). nbdkit's error filter cannot fail flushes.
func TestServerErrors(t *testing.T) {
	cases := []struct {
		errno string
		want  []error
	}{
		{"EIO", []error{blockdev.ErrIO}},
		{"ENOSPC", []error{blockdev.ErrIO}}, // not ErrNoSpace: see ServerError
		{"EPERM", []error{blockdev.ErrIO, blockdev.ErrReadOnly}},
		{"EINVAL", []error{blockdev.ErrIO, blockdev.ErrInvalid}},
		{"ESHUTDOWN", []error{blockdev.ErrIO}},
	}
	for _, tc := range cases {
		t.Run(tc.errno, func(t *testing.T) {
			trigger := filepath.Join(t.TempDir(), "fail")
			s := startNbdkit(t, "--filter=error", "memory", "4M",
				"error-rate=1", "error="+tc.errno, "error-file="+trigger)
			d := s.open(t, nbd.Options{Timeout: 5 * time.Second, Conns: 1})
			defer d.Close()
			p := blockdevtest.Pattern(2, 4096, 4096)
			if _, err := d.WriteAt(p, 4096); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(trigger, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			ops := map[string]func() error{
				"read":  readErr(d, 4096),
				"write": func() error { _, err := d.WriteAt(p, 4096); return err },
				"zero":  func() error { return d.ZeroOut(8192, 4096) },
				"trim":  func() error { return d.Discard(8192, 4096) },
			}
			for name, op := range ops {
				err := op()
				for _, w := range tc.want {
					if !errors.Is(err, w) {
						t.Errorf("%s with server %s = %v, want %v", name, tc.errno, err, w)
					}
				}
				if tc.errno == "ENOSPC" && errors.Is(err, errs.ErrNoSpace) {
					t.Errorf("%s: server ENOSPC became the file system's ErrNoSpace: %v", name, err)
				}
				var se *nbd.ServerError
				if !errors.As(err, &se) {
					t.Errorf("%s: %v is not a *ServerError", name, err)
				} else if se.Errno.String() != tc.errno {
					t.Errorf("%s: Errno %v, want %s", name, se.Errno, tc.errno)
				}
				if tc.errno == "ESHUTDOWN" {
					return // the client must stop talking to this server
				}
			}
			os.Remove(trigger)
			got := make([]byte, 4096)
			if _, err := d.ReadAt(got, 4096); err != nil {
				t.Fatalf("read once errors stop: %v", err)
			}
			if string(got) != string(p) {
				t.Fatalf("data changed by failed requests")
			}
		})
	}
}

// TestReadOnly: a read-only export (nbdkit -r) or Options.ReadOnly refuses
// modifications with ErrReadOnly without asking the server; reads and
// Flush work.
func TestReadOnly(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		opts nbd.Options
	}{
		{"server", []string{"-r", "memory", "4M"}, nbd.Options{}},
		{"option", []string{"memory", "4M"}, nbd.Options{ReadOnly: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startNbdkit(t, tc.args...).open(t, tc.opts)
			defer d.Close()
			if !d.ReadOnly() {
				t.Fatal("ReadOnly() = false")
			}
			if _, err := d.WriteAt(make([]byte, 512), 0); !errors.Is(err, blockdev.ErrReadOnly) {
				t.Errorf("WriteAt = %v, want ErrReadOnly", err)
			}
			if err := d.ZeroOut(0, 512); !errors.Is(err, blockdev.ErrReadOnly) {
				t.Errorf("ZeroOut = %v, want ErrReadOnly", err)
			}
			if err := d.Discard(0, 512); !errors.Is(err, blockdev.ErrReadOnly) {
				t.Errorf("Discard = %v, want ErrReadOnly", err)
			}
			if _, err := d.ReadAt(make([]byte, 512), 0); err != nil {
				t.Errorf("ReadAt: %v", err)
			}
			if err := d.Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
		})
	}
}

// TestNoSuchExport: qemu-nbd serves one named export; asking for another
// fails with ErrNotFound, the right name works.
func TestNoSuchExport(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startQemuNbd(t, img, "-x", "disk")
	if _, err := nbd.Open("nbd+unix:///nope?socket="+s.sock, nbd.Options{}); !errors.Is(err, errs.ErrNotFound) {
		t.Errorf("Open of a missing export = %v, want ErrNotFound", err)
	}
	d, err := nbd.Open("nbd+unix:///disk?socket="+s.sock, nbd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Size() != 1<<20 {
		t.Errorf("Size = %d, want %d", d.Size(), 1<<20)
	}
}

// TestDialFails: nothing listening is ErrIO, promptly.
func TestDialFails(t *testing.T) {
	sock := filepath.Join(sockDir(t), "none")
	err := within(t, 2*time.Second, "dial", func() error {
		_, err := nbd.Open("nbd+unix:///?socket="+sock, nbd.Options{Timeout: time.Second})
		return err
	})
	if !errors.Is(err, blockdev.ErrIO) {
		t.Errorf("Open with no server = %v, want ErrIO", err)
	}
}

// TestBadRange: nbdkit's ddrescue filter fails reads of the ranges its
// mapfile marks bad (here [1 MiB, 1 MiB + 64 KiB)) with EIO. Reads touching
// the range fail with ErrIO; reads beside it, before and after, succeed on
// the same connection.
func TestBadRange(t *testing.T) {
	img := sparseImage(t, 4<<20)
	want := blockdevtest.Pattern(9, 0, 4<<20)
	if err := os.WriteFile(img, want, 0o644); err != nil {
		t.Fatal(err)
	}
	mapfile := filepath.Join(t.TempDir(), "map")
	const mapping = "# Mapfile\n0x0 + 1\n" +
		"0x00000000 0x00100000 +\n" +
		"0x00100000 0x00010000 -\n" +
		"0x00110000 0x002F0000 +\n"
	if err := os.WriteFile(mapfile, []byte(mapping), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startNbdkit(t, "--filter=ddrescue", "file", img, "ddrescue-mapfile="+mapfile)
	d := s.open(t, nbd.Options{Timeout: 5 * time.Second, Conns: 1})
	defer d.Close()
	for _, r := range []struct {
		off, n int64
		bad    bool
	}{
		{0, 64 << 10, false},
		{1<<20 - 4096, 8192, true}, // straddles the start
		{1<<20 + 4096, 4096, true}, // inside
		{1<<20 + 60<<10, 8192, true},
		{1<<20 + 64<<10, 4096, false}, // just after
		{3 << 20, 1 << 20, false},
	} {
		p := make([]byte, r.n)
		_, err := d.ReadAt(p, r.off)
		switch {
		case r.bad && !errors.Is(err, blockdev.ErrIO):
			t.Errorf("read [%d, +%d) across the bad range = %v, want ErrIO", r.off, r.n, err)
		case !r.bad && err != nil:
			t.Errorf("read [%d, +%d) beside the bad range: %v", r.off, r.n, err)
		case !r.bad && string(p) != string(want[r.off:r.off+r.n]):
			t.Errorf("read [%d, +%d): wrong data", r.off, r.n)
		}
	}
}

// TestCloseWhileBusy: Close while goroutines read, write and flush waits
// for the requests in flight, sends NBD_CMD_DISC, and every later call
// fails with ErrClosed; nothing hangs or races.
func TestCloseWhileBusy(t *testing.T) {
	s := startNbdkit(t, "memory", "4M")
	d := s.open(t, nbd.Options{Timeout: 5 * time.Second})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			buf := make([]byte, 8192)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				switch (w + i) % 3 {
				case 0:
					_, err = d.ReadAt(buf, int64(w)*8192)
				case 1:
					_, err = d.WriteAt(buf, int64(w)*8192)
				case 2:
					err = d.Flush()
				}
				if err != nil {
					if !errors.Is(err, blockdev.ErrClosed) {
						errc <- err
					}
					return
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	if err := within(t, 10*time.Second, "Close while busy", d.Close); err != nil {
		t.Errorf("Close: %v", err)
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Errorf("operation racing Close = %v, want nil or ErrClosed", err)
	}
}
