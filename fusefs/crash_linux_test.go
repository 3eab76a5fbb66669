package fusefs_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/fusefs"
	"github.com/ext4io/ext4io/fusefs/fusetest"
)

// serveEnv makes the test binary a mount server (see TestMain): its value
// is "IMAGE DIR".
const serveEnv = "EXT4IO_FUSEFS_SERVE"

func TestMain(m *testing.M) {
	if arg := os.Getenv(serveEnv); arg != "" {
		os.Exit(serve(arg))
	}
	os.Exit(m.Run())
}

// serve mounts IMAGE at DIR until unmounted or signalled, as ext4io mount
// does, and prints "ready" once the mount is up.
func serve(arg string) int {
	img, dir, _ := strings.Cut(arg, " ")
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := fusefs.Mount(v, dir, fusefs.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		s.Unmount()
	}()
	fmt.Println("ready")
	s.Wait()
	if err := v.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startServer runs the test binary as a mount server of img at dir.
func startServer(t *testing.T, img, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+img+" "+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	check(t, err)
	check(t, cmd.Start())
	buf := make([]byte, 6)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("mount server did not start: %q %v", buf, err)
	}
	return cmd
}

// crashItersEnv sets TestCrashKill's number of iterations (default 5;
// EXT4IO_FUSE_CRASH_ITERS=20 for the long run in docs/fuse.md).
const crashItersEnv = "EXT4IO_FUSE_CRASH_ITERS"

// TestCrashKill kills the mount process (SIGKILL) during a write-heavy
// workload, five times (crashItersEnv). Each time ext4io reopens the image (replaying the
// journal), e2fsck -fn finds it clean, and every file the workload had
// fsynced reads back whole.
func TestCrashKill(t *testing.T) {
	needFUSE(t)
	if testing.Short() {
		t.Skip("fusefs crash test: -short")
	}
	iters := 5
	if e := os.Getenv(crashItersEnv); e != "" {
		n, err := strconv.Atoi(e)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", crashItersEnv, e)
		}
		iters = n
	}
	// Files accumulate: 256 MiB (sparse) for each five iterations.
	img := newImage(t, int64(256<<20)*int64((iters+4)/5))
	start := time.Now()
	for iter := range iters {
		seed := uint64(time.Now().UnixNano())
		t.Logf("iteration %d, seed %d", iter, seed)
		rng := rand.New(rand.NewPCG(seed, uint64(iter)))
		dir := t.TempDir()
		cmd := startServer(t, img, dir)
		wd := fusetest.Watch(t, dir, 2*time.Minute)

		var mu sync.Mutex
		synced := map[string][]byte{} // fsynced files and their contents
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for w := range 4 {
			wrng := rand.New(rand.NewPCG(seed, uint64(100+w)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					name := fmt.Sprintf("i%d-w%d-%d", iter, w, i)
					data := make([]byte, 1+wrng.IntN(300<<10))
					for j := range data {
						data[j] = byte(wrng.Uint32())
					}
					f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
					if err != nil {
						return // the server is gone
					}
					_, err = f.Write(data)
					doSync := i%2 == 0
					if err == nil && doSync {
						err = f.Sync()
					}
					f.Close()
					if err != nil {
						return
					}
					if doSync {
						mu.Lock()
						synced[name] = data
						mu.Unlock()
					} else if i%3 == 0 {
						// Unsynced namespace churn.
						os.Rename(filepath.Join(dir, name), filepath.Join(dir, name+".r"))
					}
				}
			}()
		}
		time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		close(stop)
		wg.Wait()
		// The dead server leaves the mount point disconnected.
		exec.Command("fusermount3", "-u", "-z", dir).Run()
		wd.Stop()

		// Reopening replays the journal.
		v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
		if err != nil {
			t.Fatalf("iteration %d: reopen: %v", iter, err)
		}
		if r := v.Recovery(); r == nil {
			t.Logf("iteration %d: no journal recovery needed", iter)
		}
		mu.Lock()
		for name, want := range synced {
			f, err := v.Open("/" + name)
			if err != nil {
				t.Fatalf("iteration %d: fsynced %s: %v", iter, name, err)
			}
			got := make([]byte, len(want)+1)
			k, err := f.ReadAt(got, 0)
			f.Close()
			if err != nil && err != io.EOF {
				t.Fatalf("iteration %d: read %s: %v", iter, name, err)
			}
			if !bytes.Equal(got[:k], want) {
				t.Fatalf("iteration %d: fsynced %s: %d bytes differ from the %d written", iter, name, k, len(want))
			}
		}
		t.Logf("iteration %d: %d fsynced files intact", iter, len(synced))
		mu.Unlock()
		check(t, v.Close())
		e2fsck(t, img)
	}
	t.Logf("%d iterations in %v", iters, time.Since(start).Round(time.Second))
}
