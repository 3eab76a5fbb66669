package nbd_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
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
	sock string // Unix socket path, or "" for TCP
	tcp  string // host:port when listening on TCP
	// listener is the TCP socket handed to nbdkit (socket activation).
	listener *os.File
	cmd      *exec.Cmd
	done     chan struct{}
	log      syncBuffer // the server's stderr, shown if the test fails
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
// The test binds the port itself and hands the listening socket to
// nbdkit (systemd socket activation: fd 3, LISTEN_FDS=1, and LISTEN_PID
// set by the shell that execs nbdkit, so that it names nbdkit), so no
// other process can take the port between its choice and nbdkit's
// accept. The test keeps its copy of the socket until cleanup: a restart
// serves the same port, and connections made while nbdkit is down wait
// in the socket's backlog.
func startNbdkitTCP(t testing.TB, args ...string) *server {
	t.Helper()
	bin := need(t, "nbdkit")
	sh := need(t, "sh")
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	lf, err := ln.File() // a copy, in blocking mode, for the child
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lf.Close() })
	s := &server{t: t, name: sh, tcp: ln.Addr().String(), listener: lf,
		args: append([]string{"-c", `LISTEN_PID=$$; export LISTEN_PID; exec "$0" "$@"`, bin, "-f", "--exit-with-parent"}, args...)}
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
	s.cmd.Stderr = &s.log
	if s.listener != nil {
		s.cmd.ExtraFiles = []*os.File{s.listener} // fd 3
		s.cmd.Env = append(os.Environ(), "LISTEN_FDS=1")
	}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", s.name, err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(s.cmd, s.done)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial(network, addr)
		if err == nil && s.listener != nil {
			// The socket listened before the server started: wait for the
			// server's greeting instead.
			err = s.greeted(c, deadline)
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

// greeted reads the NBD greeting on c, waiting until deadline at the
// latest, and closes c if it fails.
func (s *server) greeted(c net.Conn, deadline time.Time) error {
	c.SetReadDeadline(deadline)
	magic := make([]byte, 8)
	if _, err := io.ReadFull(c, magic); err != nil {
		c.Close()
		return err
	}
	if string(magic) != "NBDMAGIC" {
		c.Close()
		return fmt.Errorf("greeting %q is not NBD's", magic)
	}
	return nil
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
	s.cmd.Process.Signal(syscall.SIGCONT)
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
