package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/fusefs"
)

// mountChildEnv marks the server process that ext4io mount --background
// starts: it reports on descriptor 3 either mountReady, once the file
// system is mounted, or why it failed.
const (
	mountChildEnv = "EXT4IO_MOUNT_CHILD"
	mountReady    = "ready"
)

// cmdMount serves an image over FUSE, in the foreground unless
// --background. SIGINT, SIGTERM, SIGHUP (a closed terminal), fusermount3
// -u and umount unmount it, as libfuse's signal handlers do for fuse2fs
// (a signal ignored at start, as under nohup, stays ignored); then the
// volume is closed, which writes back, commits and marks the file system
// clean.
func cmdMount(args []string, w io.Writer) error {
	fs := newFlags("mount")
	opts := fs.String("o", "", "mount options, comma-separated: ro, rw, allow_other, default_permissions,\n"+
		"no_default_permissions, direct_io, no_writeback_cache, kernel_cache, cache_size=N,\n"+
		"attr_timeout=S, entry_timeout=S, debug, fsname=NAME; others go to FUSE as given")
	debug := fs.Bool("d", false, "log every FUSE request (as -o debug)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the mount (go tool pprof) to FILE at unmount")
	bg := fs.Bool("background", false, "serve from a background process; return once mounted (fuse2fs's default)")
	fs.Bool("f", false, "serve in the foreground (the default; as fuse2fs -f)")
	pos, err := parseArgs(fs, args, 2, 2)
	if err != nil {
		return err
	}
	if *bg && os.Getenv(mountChildEnv) == "" {
		return mountBackground(args)
	}
	var ready *os.File
	if os.Getenv(mountChildEnv) == "1" {
		ready = os.NewFile(3, "ready")
		os.Unsetenv(mountChildEnv)
	}
	// The signals are caught from before the mount, so that one arriving
	// as soon as it is up (or while it starts) unmounts it cleanly
	// instead of killing the server.
	sig := make(chan os.Signal, 2)
	if sigs := stopSignals(); len(sigs) > 0 { // Notify of none would catch every signal
		signal.Notify(sig, sigs...)
	}
	defer signal.Stop(sig)
	s, v, stop, err := startMount(pos, *opts, *debug, *cpuprofile)
	if ready != nil {
		msg := mountReady
		if err != nil {
			msg = err.Error()
		}
		ready.WriteString(msg)
		ready.Close()
	}
	if err != nil {
		return err
	}
	defer stop()
	dir := pos[1]
	go func() {
		for range sig {
			// Unmount fails while files are in use (EBUSY); the next
			// signal tries again.
			if err := s.Unmount(); err != nil {
				fmt.Fprintf(os.Stderr, "ext4io mount: unmount %s: %v\n", dir, err)
			}
		}
	}()
	s.Wait()
	signal.Stop(sig)
	return v.Close()
}

// mountBackground runs this command again as a server in its own session,
// with standard input and output on /dev/null, and returns once the child
// has mounted the file system, or with the child's error.
func mountBackground(args []string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	r, wr, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(exe, append([]string{"mount"}, args...)...)
	cmd.Env = append(os.Environ(), mountChildEnv+"=1")
	cmd.ExtraFiles = []*os.File{wr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	wr.Close()
	if err != nil {
		return err
	}
	msg, _ := io.ReadAll(r)
	if string(msg) == mountReady {
		return cmd.Process.Release()
	}
	werr := cmd.Wait()
	if len(msg) == 0 {
		return fmt.Errorf("mount server exited before mounting: %v", werr)
	}
	return errors.New(string(msg))
}

// startMount opens the image and mounts it; stop ends the CPU profile.
func startMount(pos []string, opts string, debug bool, cpuprofile string) (s *fusefs.Server, v *ext4io.Volume, stop func(), err error) {
	o, err := fusefs.ParseOptions(opts)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: -o: %w", errUsage, err)
	}
	o.Debug = o.Debug || debug
	// cache_size is the volume's page cache, not a FUSE option.
	var cache int64
	extra := o.Extra[:0]
	for _, opt := range o.Extra {
		if v, ok := strings.CutPrefix(opt, "cache_size="); ok {
			if cache, err = parseSize(v); err != nil {
				return nil, nil, nil, fmt.Errorf("%w: -o cache_size: %w", errUsage, err)
			}
			if err := checkCacheSize(cache, memTotal()); err != nil {
				return nil, nil, nil, fmt.Errorf("%w: -o cache_size=%s: %w", errUsage, v, err)
			}
		} else {
			extra = append(extra, opt)
		}
	}
	o.Extra = extra
	image, dir := pos[0], pos[1]
	if o.FsName == "" {
		o.FsName = image
	}
	v, err = openImageOpts(image, ext4io.Options{Writable: !o.ReadOnly, PageCacheBytes: mountCache(cache)})
	if err != nil {
		return nil, nil, nil, err
	}
	stop = func() {}
	if cpuprofile != "" {
		pf, err := os.Create(cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(pf)
		}
		if err != nil {
			v.Close()
			return nil, nil, nil, err
		}
		stop = func() {
			pprof.StopCPUProfile()
			pf.Close()
		}
	}
	err = fusermountSays(dir, func() (err error) {
		s, err = fusefs.Mount(v, dir, o)
		return err
	})
	if err != nil {
		stop()
		v.Close()
		return nil, nil, nil, err
	}
	return s, v, stop, nil
}

// mountCache is the page cache of a mount: the -o cache_size given, else
// an eighth of the machine's memory between 64 MiB and 1 GiB, so that the
// dirty data of a workload fits as it would in Linux's page cache.
func mountCache(size int64) int64 {
	if size > 0 {
		return size
	}
	return min(max(memTotal()/8, 64<<20), 1<<30)
}

// checkCacheSize refuses a page cache larger than the machine's memory
// (mem bytes; 0 when unknown, which lets any size through): the cache
// holds written pages in this process's memory until write-back, so one
// that cannot fit would have the process swapped out or killed for
// memory before it fills.
func checkCacheSize(size, mem int64) error {
	if mem > 0 && size > mem {
		return fmt.Errorf("%d MiB is more than the machine's memory (%d MiB)", size>>20, mem>>20)
	}
	return nil
}

// memTotal is /proc/meminfo's MemTotal in bytes ("MemTotal: 24683520 kB"),
// 0 off Linux.
func memTotal() int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if f := strings.Fields(v); ok && k == "MemTotal" && len(f) == 2 && f[1] == "kB" {
			kb, _ := strconv.ParseInt(f[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// fusermountSays runs mount with os.Stderr on a pipe. go-fuse runs
// fusermount3 with this process's standard error, and on a refusal
// returns only "fusermount exited with code 256"; fusermount3's own
// words ("unknown option 'bogus'") are then the error instead, one line,
// also in a background server whose standard error is /dev/null. What it
// says on a mount that works goes on to standard error.
func fusermountSays(dir string, mount func() error) error {
	r, w, err := os.Pipe()
	if err != nil {
		return mount()
	}
	defer r.Close()
	saved := os.Stderr
	os.Stderr = w
	err = mount()
	os.Stderr = saved
	w.Close()
	// Read what is there, not to the end: a fusermount3 still running
	// would keep the pipe open.
	r.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	said, _ := io.ReadAll(r)
	if err == nil || len(bytes.TrimSpace(said)) == 0 {
		saved.Write(said)
		return err
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(said)), "\n") {
		// "/usr/bin/fusermount3: unknown option 'bogus'"
		if prog, rest, ok := strings.Cut(l, ": "); ok && filepath.IsAbs(prog) {
			l = filepath.Base(prog) + ": " + rest
		}
		lines = append(lines, l)
	}
	return fmt.Errorf("mount %s: %s", dir, strings.Join(lines, "; "))
}
