//go:build linux

package bench

// Config.Kernel: the same jobs with fio on Linux's ext4, mounted from a
// loop device (losetup --direct-io=on) over a backing file of the same
// kind as the bench's (same directory; /dev/shm for the memory backend).
// It is set up once and serves every round (Config.Repeat), or, when the
// run's host files are fresh per workload (tmpfs, fresh.go), set up anew
// for every workload (renew). The loop device, mount and file are always
// cleaned up.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// kernelEnv is a mounted kernel ext4 for the run.
type kernelEnv struct {
	dir                string // where the backing file is
	fastCommit         bool
	backing, loop, mnt string
	region             int64
	prepared           prepKind // what mnt/bench.dat holds
	havePrep           bool
	used               bool // a workload has run here
	notes              []string
}

// kernelRunHook, set by tests, sees each Linux run's environment after
// its preparation, before fio.
var kernelRunHook func(w workload, e *kernelEnv)

// hasRun reports whether a workload has run in e.
func (e *kernelEnv) hasRun() bool { return e.used }

// renew sets up a new environment like e, on a new backing file, loop
// device and filesystem, and then tears e down. When the new one cannot
// be set up, what of it was is torn down and e stays.
func (e *kernelEnv) renew(ctx context.Context) (*kernelEnv, error) {
	n, err := setupKernel(ctx, e.dir, e.region, e.fastCommit)
	if err != nil {
		if n != nil {
			n.teardown()
		}
		return nil, err
	}
	e.teardown()
	return n, nil
}

// startKernel checks that the kernel column can run and sets it up. env
// is nil when it cannot, info.Skipped saying why; the caller tears down a
// non-nil env. With fastCommit the filesystem has fast_commit.
func startKernel(ctx context.Context, dir string, region int64, fastCommit bool) (*kernelEnv, KernelInfo) {
	info := KernelInfo{Backing: dir}
	if os.Geteuid() != 0 {
		info.Skipped = "not root: loop devices and mount need root"
		return nil, info
	}
	for _, tool := range []string{"fio", "losetup", "mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			info.Skipped = tool + " not found in PATH"
			if tool == "fio" {
				info.Skipped += " (apt-get install fio)"
			}
			return nil, info
		}
	}
	if out, err := exec.Command("fio", "--version").Output(); err == nil {
		info.Fio = strings.TrimSpace(string(out))
	}
	env, err := setupKernel(ctx, dir, region, fastCommit)
	if err != nil {
		if env != nil {
			env.teardown()
		}
		info.Skipped = err.Error()
		return nil, info
	}
	info.Notes, info.Ran = env.notes, true
	return env, info
}

func setupKernel(ctx context.Context, dir string, region int64, fastCommit bool) (*kernelEnv, error) {
	env := &kernelEnv{dir: dir, fastCommit: fastCommit, region: region}
	f, err := os.CreateTemp(dir, "ext4io-bench-kernel-*.img")
	if err != nil {
		return nil, fmt.Errorf("backing file: %w", err)
	}
	env.backing = f.Name()
	// Written whole, not sparse: the engine's and raw's blocks are
	// written before their sequential writers run (warmsDevice), and a
	// first write into a hole of the backing file would cost Linux the
	// host's allocation they no longer pay.
	err = fillSeq(f, kernelBackingBytes(region))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return env, fmt.Errorf("backing file: %w", err)
	}
	out, err := exec.CommandContext(ctx, "losetup", "--direct-io=on", "--find", "--show", env.backing).CombinedOutput()
	if err != nil {
		// Some backing filesystems refuse O_DIRECT: say so and go on buffered.
		out2, err2 := exec.CommandContext(ctx, "losetup", "--find", "--show", env.backing).CombinedOutput()
		if err2 != nil {
			return env, fmt.Errorf("losetup refused: %s", strings.TrimSpace(string(out)+" "+string(out2)))
		}
		out = out2
		env.notes = append(env.notes, "losetup --direct-io=on refused on "+dir+"; the loop device is buffered")
	}
	env.loop = strings.TrimSpace(string(out))
	args := []string{"-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0"}
	if fastCommit {
		args = append(args, "-O", "fast_commit")
	}
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", append(args, env.loop)...).CombinedOutput(); err != nil {
		return env, fmt.Errorf("mkfs.ext4 failed: %s", strings.TrimSpace(string(out)))
	}
	mnt, err := os.MkdirTemp("", "ext4io-bench-mnt-*")
	if err != nil {
		return env, err
	}
	env.mnt = mnt
	if out, err := exec.CommandContext(ctx, "mount", "-t", "ext4", env.loop, mnt).CombinedOutput(); err != nil {
		os.Remove(mnt)
		env.mnt = ""
		return env, fmt.Errorf("mount refused: %s", strings.TrimSpace(string(out)))
	}
	return env, nil
}

// teardown unmounts, detaches and removes, whatever got set up. It does
// not take the run's context: cleanup must happen after an interrupt too.
func (e *kernelEnv) teardown() {
	if e.mnt != "" {
		if err := exec.Command("umount", e.mnt).Run(); err != nil {
			exec.Command("umount", "-l", e.mnt).Run()
		}
		os.Remove(e.mnt)
	}
	if e.loop != "" {
		exec.Command("losetup", "-d", e.loop).Run()
	}
	if e.backing != "" {
		os.Remove(e.backing)
	}
}

// prepare puts bench.dat in the state w wants (reusing a fully written
// one) and returns a note when it could not match the ext4io side.
func (e *kernelEnv) prepare(w workload) (string, error) {
	file := filepath.Join(e.mnt, "bench.dat")
	if w.Prep == prepWritten && e.havePrep && e.prepared == prepWritten {
		if w.Op == opSeqRead {
			// Buffered reads start cold, as the engine's do.
			unix.Sync()
			os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0)
		}
		return "", nil
	}
	os.Remove(file)
	os.RemoveAll(filepath.Join(e.mnt, "small"))
	e.havePrep = false
	note := ""
	if w.Prep != prepFresh {
		f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return "", err
		}
		switch w.Prep {
		case prepWritten:
			err = fillSeq(f, e.region)
		case prepFallocated:
			err = unix.Fallocate(int(f.Fd()), 0, 0, e.region)
		case prepWriteZeroes:
			err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_WRITE_ZEROES, 0, e.region)
			if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
				note = "FALLOC_FL_WRITE_ZEROES unsupported here; the file was written with zeroes instead"
				err = fillZero(f, e.region)
			}
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", fmt.Errorf("preparing %s: %w", prepNames[w.Prep], err)
		}
	}
	e.prepared, e.havePrep = w.Prep, true
	// Drop the page cache so reads and writes start cold, as on the engine side.
	unix.Sync()
	os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0)
	return note, nil
}

func fillZero(f *os.File, n int64) error {
	buf := make([]byte, 1<<20)
	for off := int64(0); off < n; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf[:min(int64(len(buf)), n-off)], off); err != nil {
			return err
		}
	}
	return nil
}

// fioArgs maps a workload onto fio options: psync, time_based, the same
// region, I/O size and job count.
func (e *kernelEnv) fioArgs(c *config, w workload, jobs int) []string {
	// In milliseconds: fio takes a fraction of a second ("0.300s") as no
	// limit, and a job then runs until it has done all its I/O
	// (fsync-small's 20,000 files a job fill a small filesystem).
	ms := strconv.FormatInt(max(c.Runtime.Milliseconds(), 1), 10)
	a := []string{"--name=" + w.Name, "--ioengine=psync", "--group_reporting=1", "--output-format=json",
		"--bs=" + strconv.Itoa(w.IOSize), "--numjobs=" + strconv.Itoa(jobs), "--runtime=" + ms + "ms",
		"--fallocate=none", "--randrepeat=0", "--norandommap=1"}
	if w.Direct {
		a = append(a, "--direct=1")
	}
	file := filepath.Join(e.mnt, "bench.dat")
	size := "--size=" + strconv.FormatInt(e.region, 10)
	switch w.Op {
	case opRandWrite:
		a = append(a, "--rw=randwrite", "--filename="+file, size, "--time_based=1")
	case opRandRead:
		a = append(a, "--rw=randread", "--filename="+file, size, "--time_based=1")
	case opSeqRead:
		a = append(a, "--rw=read", "--filename="+file, size, "--time_based=1")
	case opSeqWrite:
		// A new file for every pass over the region, as ext4io truncates.
		a = append(a, "--rw=write", "--filename="+file, size, "--time_based=1", "--unlink_each_loop=1")
		if w.Sync {
			a = append(a, "--end_fsync=1")
		}
	case opSmallFsync:
		dir := filepath.Join(e.mnt, "small")
		os.MkdirAll(dir, 0o755)
		a = append(a, "--rw=write", "--directory="+dir, "--filesize="+strconv.Itoa(w.IOSize),
			"--nrfiles=20000", "--openfiles=1", "--file_service_type=sequential", "--create_on_open=1", "--fsync=1")
	}
	return a
}

// fioOut is the part of fio's JSON output the bench reads.
type fioOut struct {
	Jobs []struct {
		Read, Write fioDir
	} `json:"jobs"`
}

type fioDir struct {
	IOBytes  int64   `json:"io_bytes"`
	BwBytes  float64 `json:"bw_bytes"`
	IOPS     float64 `json:"iops"`
	Runtime  int64   `json:"runtime"` // ms
	TotalIOs int64   `json:"total_ios"`
	ClatNs   struct {
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

func (e *kernelEnv) run(ctx context.Context, c *config, w workload, jobs int) (*Measure, string, error) {
	e.used = true
	t0 := time.Now()
	note, err := e.prepare(w)
	if err != nil {
		return nil, "", err
	}
	prep := time.Since(t0)
	if kernelRunHook != nil {
		kernelRunHook(w, e)
	}
	cmd := exec.CommandContext(ctx, "fio", e.fioArgs(c, w, jobs)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, "", fmt.Errorf("fio: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	// fio may print notices before the JSON document.
	if i := strings.IndexByte(string(out), '{'); i > 0 {
		out = out[i:]
	}
	var fo fioOut
	if err := json.Unmarshal(out, &fo); err != nil || len(fo.Jobs) == 0 {
		return nil, "", fmt.Errorf("fio output: %v", err)
	}
	d := fo.Jobs[0].Write
	if w.Op == opRandRead || w.Op == opSeqRead {
		d = fo.Jobs[0].Read
	}
	m := &Measure{Ops: d.TotalIOs, Seconds: float64(d.Runtime) / 1e3, IOPS: d.IOPS, MBps: d.BwBytes / 1e6,
		P50us: d.ClatNs.Percentile["50.000000"] / 1e3, P99us: d.ClatNs.Percentile["99.000000"] / 1e3, PrepSecond: prep.Seconds()}
	if w.Op == opSmallFsync {
		note = strings.TrimPrefix(note+"; fio counts files/s as write IOPS; its latency excludes the fsync", "; ")
	}
	if w.Op != opSeqWrite {
		// Content changed or files left behind: later workloads re-prepare.
		if w.Op != opRandRead && w.Op != opSeqRead && w.Prep != prepWritten {
			e.havePrep = false
		}
	} else {
		e.havePrep = false
	}
	return m, note, nil
}
