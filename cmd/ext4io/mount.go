package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/fusefs"
)

// cmdMount serves an image over FUSE in the foreground. SIGINT, SIGTERM,
// fusermount3 -u and umount unmount it; then the volume is closed, which
// writes back, commits and marks the file system clean.
func cmdMount(args []string, w io.Writer) error {
	fs := newFlags("mount")
	opts := fs.String("o", "", "mount options, comma-separated: ro, rw, allow_other, default_permissions,\n"+
		"no_default_permissions, direct_io, debug, fsname=NAME; others go to FUSE as given")
	debug := fs.Bool("d", false, "log every FUSE request (as -o debug)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the mount (go tool pprof) to FILE at unmount")
	pos, err := parseArgs(fs, args, 2, 2)
	if err != nil {
		return err
	}
	var o fusefs.Options
	var cache int64
	o.Debug = *debug
	for _, opt := range strings.Split(*opts, ",") {
		switch opt {
		case "":
		case "ro":
			o.ReadOnly = true
		case "rw":
			o.ReadOnly = false
		case "allow_other":
			o.AllowOther = true
		case "default_permissions":
			o.NoDefaultPermissions = false
		case "no_default_permissions":
			o.NoDefaultPermissions = true
		case "direct_io":
			o.DirectIO = true
		case "writeback_cache":
			o.NoWritebackCache = false
		case "no_writeback_cache":
			o.NoWritebackCache = true
		case "debug":
			o.Debug = true
		default:
			if v, ok := strings.CutPrefix(opt, "fsname="); ok {
				o.FsName = v
			} else if v, ok := strings.CutPrefix(opt, "cache_size="); ok {
				if cache, err = parseSize(v); err != nil {
					return fmt.Errorf("%w: -o cache_size: %w", errUsage, err)
				}
			} else {
				o.Extra = append(o.Extra, opt)
			}
		}
	}
	image, dir := pos[0], pos[1]
	if o.FsName == "" {
		o.FsName = image
	}
	v, err := ext4io.OpenImage(image, ext4io.Options{Writable: !o.ReadOnly, PageCacheBytes: mountCache(cache)})
	if err != nil {
		return err
	}
	if *cpuprofile != "" {
		pf, err := os.Create(*cpuprofile)
		if err != nil {
			v.Close()
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			v.Close()
			return err
		}
		defer pprof.StopCPUProfile()
	}
	s, err := fusefs.Mount(v, dir, o)
	if err != nil {
		v.Close()
		return err
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
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

// mountCache is the page cache of a mount: the -o cache_size given, else
// an eighth of the machine's memory between 64 MiB and 1 GiB, so that the
// dirty data of a workload fits as it would in Linux's page cache.
func mountCache(size int64) int64 {
	if size > 0 {
		return size
	}
	var mem int64 // MemTotal, "24683520 kB"; 0 off Linux
	if f := strings.Fields(procField("/proc/meminfo", "MemTotal")); len(f) == 2 && f[1] == "kB" {
		kb, _ := strconv.ParseInt(f[0], 10, 64)
		mem = kb << 10
	}
	return min(max(mem/8, 64<<20), 1<<30)
}
