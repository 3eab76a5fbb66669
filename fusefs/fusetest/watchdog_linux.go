package fusetest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// connDir is where the kernel's fusectl file system usually is.
const connDir = "/sys/fs/fuse/connections"

// A Watchdog aborts one FUSE connection when its deadline passes. Make one
// with Watch.
type Watchdog struct {
	t     testing.TB
	dir   string
	abort string // .../connections/N/abort
	after time.Duration

	timer  *time.Timer
	backup *exec.Cmd // the out-of-process watchdog
	report string    // where backup writes the threads' kernel stacks
	ctlMnt string    // a fusectl mount this Watchdog made, or ""

	// mu guards the fields below.
	mu      sync.Mutex
	stopped bool
	fired   bool
	dump    string // goroutines and kernel stacks at the abort
}

// Watch arms a watchdog on the FUSE file system mounted at dir: if Stop
// has not been called after d (or shortly before the test binary's
// -timeout, if sooner), it records this process's goroutines and the kernel
// stacks of its threads, aborts the connection and makes Stop (or the
// test's cleanup) fail the test with that dump.
//
// An in-process timer does this. A process whose own goroutines are all
// stuck (a stop-the-world waiting for a thread blocked on the mount) cannot
// run that timer, so a separate process started here aborts the connection
// 15 s later as a backstop, with the kernel stacks only.
//
// Watch needs root (it reads /proc/self/task/*/stack, writes the abort
// file and, where fusectl is not mounted, mounts it on a temporary
// directory); it fails the test when it cannot arm.
func Watch(t testing.TB, dir string, d time.Duration) *Watchdog {
	t.Helper()
	w, err := Arm(t, dir, d)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// Arm is Watch for goroutines other than the test's: it returns its error
// instead of failing the test.
func Arm(t testing.TB, dir string, d time.Duration) (*Watchdog, error) {
	if dl, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, ok := dl.Deadline(); ok {
			// Leave time for the test to fail and the binary to exit.
			if left := time.Until(end) - 30*time.Second; left < d {
				d = max(left, time.Second)
			}
		}
	}
	w := &Watchdog{t: t, dir: dir, after: d}
	dev, err := mountDev(dir)
	if err != nil {
		return nil, fmt.Errorf("fusetest: %w", err)
	}
	ctl := connDir
	if _, err := os.Stat(filepath.Join(ctl, dev)); err != nil {
		// fusectl is not mounted there (containers): mount our own.
		ctl = t.TempDir()
		if err := syscall.Mount("fusectl", ctl, "fusectl", 0, ""); err != nil {
			return nil, fmt.Errorf("fusetest: mount fusectl: %w", err)
		}
		w.ctlMnt = ctl
	}
	w.abort = filepath.Join(ctl, dev, "abort")
	if _, err := os.Stat(w.abort); err != nil {
		w.unmountCtl()
		return nil, fmt.Errorf("fusetest: connection of %s: %w", dir, err)
	}
	w.report = filepath.Join(t.TempDir(), "watchdog-stacks")
	script := fmt.Sprintf(`sleep %d
for s in /proc/%d/task/*/stack; do echo "== $s"; cat "$s"; done > %s 2>&1
echo 1 > %s`, int((d+15*time.Second)/time.Second), os.Getpid(), w.report, w.abort)
	w.backup = exec.Command("/bin/sh", "-c", script)
	w.backup.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := w.backup.Start(); err != nil {
		w.unmountCtl()
		return nil, fmt.Errorf("fusetest: start watchdog: %w", err)
	}
	w.timer = time.AfterFunc(d, w.fire)
	t.Cleanup(w.Stop)
	return w, nil
}

// fire runs when the deadline passes: dump, then abort.
func (w *Watchdog) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.fired = true
	if b, _ := os.ReadFile(w.report); len(b) > 0 {
		// The backstop aborted first: this process could not run its
		// timer, and what it would dump now is after the fact.
		return
	}
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	w.dump = "goroutines:\n" + string(buf) + "\nkernel stacks:\n" + kernelStacks()
	if err := os.WriteFile(w.abort, []byte("1"), 0); err != nil {
		w.dump += fmt.Sprintf("\nabort: %v", err)
	}
	// This process ran its timer: the backstop is not needed, and its
	// report would make Stop blame a stuck process.
	w.stopBackup()
}

// stopBackup kills the out-of-process watchdog and waits for it.
func (w *Watchdog) stopBackup() {
	if w.backup.Process != nil && w.backup.ProcessState == nil {
		syscall.Kill(-w.backup.Process.Pid, syscall.SIGKILL)
		w.backup.Wait()
	}
}

// Stop disarms the watchdog and fails the test if it fired. Call it once
// the mount is gone (after the unmount and the server's exit), so that
// the unmount is watched too; Watch also registers it as a cleanup. It
// is idempotent.
func (w *Watchdog) Stop() {
	w.t.Helper()
	w.timer.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.stopped = true
	w.stopBackup()
	backup, _ := os.ReadFile(w.report)
	w.unmountCtl()
	switch {
	case len(backup) > 0:
		w.t.Errorf("fusetest: the FUSE mount at %s did not finish within %v and this process could not run its watchdog (all goroutines stopped: a stop-the-world waiting for a thread blocked on the mount?): connection aborted from outside\nkernel stacks:\n%s", w.dir, w.after, backup)
	case w.fired:
		w.t.Errorf("fusetest: the FUSE mount at %s did not finish within %v: connection aborted\n%s", w.dir, w.after, w.dump)
	}
}

// Fired reports whether the watchdog aborted the connection.
func (w *Watchdog) Fired() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fired {
		return true
	}
	b, _ := os.ReadFile(w.report)
	return len(b) > 0
}

func (w *Watchdog) unmountCtl() {
	if w.ctlMnt != "" {
		syscall.Unmount(w.ctlMnt, syscall.MNT_DETACH)
		w.ctlMnt = ""
	}
}

// Mounted reports whether a FUSE file system is mounted at dir. It reads
// /proc/self/mountinfo and does not ask the file system's server, so it
// answers at once even when that server has stopped answering (where a
// stat of dir would block): tests use it to wait for a mount served by
// another process, or to check that one is gone.
func Mounted(dir string) bool {
	_, err := mountDev(dir)
	return err == nil
}

// mountDev returns the minor device number of the file system mounted at
// dir, which names its FUSE connection, from /proc/self/mountinfo (a stat
// of dir would ask the server).
func mountDev(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	dev := ""
	for _, l := range strings.Split(string(b), "\n") {
		// 45 27 0:40 / /mnt/point rw,... - fuse.ext4io ...
		f := strings.Fields(l)
		if len(f) < 5 || unescape(f[4]) != abs {
			continue
		}
		sep := strings.Index(l, " - ")
		if sep < 0 || !strings.HasPrefix(l[sep+3:], "fuse") {
			continue
		}
		_, minor, ok := strings.Cut(f[2], ":")
		if !ok {
			continue
		}
		if _, err := strconv.ParseUint(minor, 10, 32); err == nil {
			dev = minor // the last one mounted there is on top
		}
	}
	if dev == "" {
		return "", fmt.Errorf("no FUSE mount at %s", abs)
	}
	return dev, nil
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b bytes.Buffer
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// kernelStacks returns the kernel stack of each thread of this process.
func kernelStacks() string {
	var b strings.Builder
	tasks, _ := filepath.Glob("/proc/self/task/*/stack")
	for _, p := range tasks {
		s, err := os.ReadFile(p)
		fmt.Fprintf(&b, "== %s\n", p)
		if err != nil {
			fmt.Fprintf(&b, "%v\n", err)
			continue
		}
		b.Write(s)
	}
	return b.String()
}
