//go:build linux

package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev/nbd"
)

// TestBenchNBD runs three workloads over NBD, served by qemu-nbd from a
// raw image and by nbdkit's memory plugin, each on a Unix socket: both
// sides go through the client's connections, and the report names the
// export. Each server's subtest skips when it is not installed.
func TestBenchNBD(t *testing.T) {
	for _, s := range []struct {
		name string
		args func(sock, dir string) []string
	}{
		{"qemu-nbd", func(sock, dir string) []string {
			img := filepath.Join(dir, "nbd.img")
			if err := os.WriteFile(img, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(img, 128<<20); err != nil {
				t.Fatal(err)
			}
			return []string{"-f", "raw", "-k", sock, "--persistent", "--shared=4", img}
		}},
		{"nbdkit", func(sock, _ string) []string {
			return []string{"-f", "--exit-with-parent", "-U", sock, "memory", "128M"}
		}},
	} {
		t.Run(s.name, func(t *testing.T) {
			if _, err := exec.LookPath(s.name); err != nil {
				t.Skipf("%s not installed", s.name)
			}
			dir := t.TempDir()
			sock := filepath.Join(dir, "sock")
			uri := serveNBD(t, s.name, s.args(sock, dir), sock)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := Run(ctx, Config{Backend: "nbd", Image: uri, Runtime: 100 * time.Millisecond, Seed: 1,
				Workloads: []string{"overwrite-2", "randread-2", "fsync-small"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := rep.Err(); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(rep.Config.Device, "NBD export "+uri+" (128 MiB") || rep.Config.DeviceBytes != 128<<20 {
				t.Fatalf("device %q, %d bytes", rep.Config.Device, rep.Config.DeviceBytes)
			}
			for _, r := range rep.Workloads {
				if r.Engine.Ops <= 0 || r.Raw.Ops <= 0 || r.EngineOverRaw <= 0 {
					t.Fatalf("%s: engine %d ops, raw %d ops, eng/raw %v", r.Name, r.Engine.Ops, r.Raw.Ops, r.EngineOverRaw)
				}
			}
		})
	}
	if err := (Config{Backend: "nbd", Image: "/tmp/x.img", Runtime: time.Second}).Validate(); err == nil {
		t.Error("nbd backend with a path, not a URI: valid")
	}
}

// serveNBD starts name with args, serving on the Unix socket sock, and
// returns the export's URI once a client can connect. The server is
// killed when the test ends, and with the test binary.
func serveNBD(t *testing.T, name string, args []string, sock string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logPath := filepath.Join(filepath.Dir(sock), name+".log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	uri := "nbd+unix:///?socket=" + sock
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		d, err := nbd.Open(uri, nbd.Options{Timeout: 5 * time.Second})
		if err == nil {
			d.Close()
			return uri
		}
		if time.Since(start) > 10*time.Second {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("%s did not serve %s: %v\n%s", name, sock, err, b)
		}
	}
}
