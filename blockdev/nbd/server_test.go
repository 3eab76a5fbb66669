package nbd_test

import (
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev/nbd"
)

// server is an NBD server process the test started, listening on a Unix
// socket in a private directory. It is killed at the end of the test.
type server struct {
	t    testing.TB
	name string
	args []string
	sock string   // Unix socket path, or "" for TCP
	tcp  string   // host:port when listening on TCP
	ln   *os.File // the TCP listening socket, handed to each launch
	cmd  *exec.Cmd
	done chan struct{}
	log  syncBuffer // the server's stderr, shown if the test fails
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of exec's
// copying goroutine and the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// need skips t with one line when the named binary is missing.
func need(t testing.TB, bin string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		t.Skipf("%s not installed (apt-get install nbdkit qemu-utils)", bin)
	}
	return p
}

// sockDir returns a short private directory (Unix socket paths are limited
// to 108 bytes, and t.TempDir paths of subtests can be longer).
func sockDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nbd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startNbdkit runs nbdkit in the foreground on a new socket with the given
// plugin and filter arguments.
func startNbdkit(t testing.TB, args ...string) *server {
	t.Helper()
	bin := need(t, "nbdkit")
	sock := filepath.Join(sockDir(t), "s")
	return start(t, bin, append([]string{"-f", "--exit-with-parent", "-U", sock}, args...), sock)
}

// startNbdkitTCP is startNbdkit listening on a free port of 127.0.0.1.
// The test binds and listens on the port itself and hands the socket to
// nbdkit (socket activation: LISTEN_FDS), so that no other process can take
// the port between the choice and nbdkit's bind, and restart serves the
// same socket again.
func startNbdkitTCP(t testing.TB, args ...string) *server {
	t.Helper()
	bin := need(t, "nbdkit")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	ln.Close() // f, a duplicate, keeps the socket listening
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	s := &server{t: t, name: bin, tcp: ln.Addr().String(), ln: f,
		args: append([]string{"-f", "--exit-with-parent"}, args...)}
	s.launch()
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			t.Logf("%s %v stderr:\n%s", s.name, s.args, s.log.String())
		}
	})
	return s
}

// startQemuNbd serves a raw image with qemu-nbd.
func startQemuNbd(t testing.TB, img string, extra ...string) *server {
	t.Helper()
	bin := need(t, "qemu-nbd")
	sock := filepath.Join(sockDir(t), "s")
	args := append([]string{"-k", sock, "-f", "raw", "-t", "-e", "8"}, extra...)
	return start(t, bin, append(args, img), sock)
}

func start(t testing.TB, bin string, args []string, sock string) *server {
	t.Helper()
	s := &server{t: t, name: bin, args: args, sock: sock}
	s.launch()
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			t.Logf("%s %v stderr:\n%s", s.name, s.args, s.log.String())
		}
	})
	return s
}

// launch starts the process and waits (at most 10 s) until the socket
// accepts connections.
func (s *server) launch() {
	s.t.Helper()
	network, addr := "unix", s.sock
	if s.tcp != "" {
		network, addr = "tcp", s.tcp
	} else {
		os.Remove(s.sock)
	}
	s.cmd = exec.Command(s.name, s.args...)
	if s.ln != nil {
		// LISTEN_PID must be the server's own: the shell's, which exec
		// keeps. The socket is fd 3 (ExtraFiles[0]).
		s.cmd = exec.Command("/bin/sh", append([]string{"-c", `export LISTEN_PID=$$ LISTEN_FDS=1; exec "$0" "$@"`, s.name}, s.args...)...)
		s.cmd.ExtraFiles = []*os.File{s.ln}
	}
	s.cmd.Stderr = &s.log
	s.cmd.SysProcAttr = dieWithParent()
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", s.name, err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(s.cmd, s.done)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial(network, addr)
		if err == nil && s.ln != nil {
			// The socket listens before the server runs: ready once the
			// server sends the handshake's first bytes.
			c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			_, err = io.ReadFull(c, make([]byte, 8))
			if err != nil {
				c.Close()
			}
		}
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-s.done:
			s.t.Fatalf("%s %v exited before listening", s.name, s.args)
		default:
		}
		if time.Now().After(deadline) {
			s.kill()
			s.t.Fatalf("%s not listening on %s after 10 s: %v", s.name, addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill sends SIGKILL (after SIGCONT, in case it was stopped) and reaps the
// process.
func (s *server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	resume(s.cmd.Process)
	s.cmd.Process.Kill()
	<-s.done
}

// restart starts the same command again on the same socket.
func (s *server) restart() {
	s.t.Helper()
	s.kill()
	s.launch()
}

func (s *server) uri() string {
	if s.tcp != "" {
		return "nbd://" + s.tcp + "/"
	}
	return "nbd+unix:///?socket=" + s.sock
}

// open connects a Device to the server.
func (s *server) open(t testing.TB, opts nbd.Options) *nbd.Device {
	t.Helper()
	d, err := nbd.Open(s.uri(), opts)
	if err != nil {
		t.Fatalf("Open %s: %v", s.uri(), err)
	}
	return d
}

// TestNbdkitTCPKeepsPort: the TCP server's port stays the test's while
// nbdkit is down (between a kill and a restart), so no other process can
// bind it, and the restarted server answers on it.
func TestNbdkitTCPKeepsPort(t *testing.T) {
	s := startNbdkitTCP(t, "memory", "1M")
	s.kill()
	if ln, err := net.Listen("tcp", s.tcp); err == nil {
		ln.Close()
		t.Fatalf("another listener bound %s while the server was down", s.tcp)
	}
	s.restart()
	d := s.open(t, nbd.Options{})
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}
