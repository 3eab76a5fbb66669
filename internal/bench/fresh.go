package bench

// Fresh host files per workload in RAM. When the temporary image lives
// in tmpfs, every workload (in every round) starts on a new image file,
// and with Config.Kernel on a new backing file, loop device and
// filesystem for each Linux column. In tmpfs a file's bytes are pages of
// RAM, and the physical order of those pages decides what the kernel's
// copy into them costs: a file written in order sits mostly in
// consecutive frames, one whose pages were punched and refilled in random
// order (write-zeroes files, rezero) does not, and the copy and the page
// lookup then cost up to half as much again (docs/performance.md). With
// one image for the whole run, every workload's engine file would sit on
// whatever pages earlier workloads left, while Linux's backing file keeps
// the pages it got at setup. Each new file is made, and the workload
// prepared on it, before the previous one is closed and removed, so its
// pages come from free memory rather than from the frames the old file
// frees. At most two images exist at once beside the Linux backing
// files, or one image beside a column's old and new backing files: the
// peak chooseSize budgets for (freshPeak).
//
// On other host filesystems nothing changes: there the state the
// workloads leave is the host filesystem's extents under the image, and
// writing GiBs of new files per workload on a disk costs minutes
// (docs/bench.md). A user's --image is the user's file, kept; the memory
// and NBD backends have no host file.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// freshHost reports whether c's run gives every workload new host files:
// a temporary image file in a tmpfs directory.
func freshHost(c *config) bool {
	return c.Image == "" && c.Backend != "memory" && c.Backend != "nbd" && isTmpfs(c.Dir)
}

// freshKernelNote is the Linux columns' note when their host files are
// fresh per workload.
const freshKernelNote = "a new backing file (written whole), loop device and mkfs.ext4 for every workload (tmpfs: fresh host pages, as the engine's and raw's new image file), set up before the previous one is torn down"

// kernelBackingBytes is the size of a Linux column's backing file for a
// raw region of region bytes.
func kernelBackingBytes(region int64) int64 { return 2*region + 256<<20 }

// kernelColumns is the number of Linux columns c's run may set up.
func kernelColumns(c *config) int64 {
	switch {
	case !c.Kernel:
		return 0
	case c.FastCommit && hasFastCommitWorkload(c.workloads):
		return 2
	}
	return 1
}

func hasFastCommitWorkload(ws []workload) bool {
	for _, w := range ws {
		if fastCommitMatters(w) {
			return true
		}
	}
	return false
}

// freshPeak is the most host storage a fresh-per-workload run with an
// image of size bytes holds at once: two images (the new one prepared
// before the old one goes) beside the Linux columns' backing files, or
// one image beside a Linux column's two backing files and the other
// column's one.
func freshPeak(c *config, size int64) int64 {
	k, kb := kernelColumns(c), kernelBackingBytes(regionFor(size))
	peak := 2*size + k*kb
	if k > 0 {
		peak = max(peak, size+(k+1)*kb)
	}
	return peak
}

// freshSummary is the log line of a fresh-per-workload run.
func freshSummary(c *config, size int64) string {
	return fmt.Sprintf("fresh host files: %s is tmpfs, so every workload gets a new image file (and each Linux column a new backing file), made before the previous one is removed; at most %s of host memory at once",
		c.Dir, gib(freshPeak(c, size)))
}

// freshImage gives the coming workload a new image file when the run is
// fresh per workload and the current image has served one: it closes the
// volume, creates the file and points the bench's windows at it. The
// previous image stays (retired) until retireImage, after the workload's
// preparation.
func (r *benchRun) freshImage() error {
	if !r.cfg.fresh || r.back == nil {
		return nil
	}
	if !r.imageUsed {
		r.imageUsed = true
		return nil
	}
	if err := r.closeEngine(); err != nil {
		return err
	}
	nb, err := tempBacking(r.cfg, r.back.dev.Size())
	if err != nil {
		return fmt.Errorf("new image file: %w", err)
	}
	r.retireImage() // a previous workload's, if its preparation failed
	r.retired = r.back.replace(nb)
	r.setDevice(r.back.dev)
	r.image.path = r.back.path
	r.vPrep, r.rawPrepValid, r.warmExt = prepFresh, false, nil
	return nil
}

// retireImage closes and removes the previous image file, if any.
func (r *benchRun) retireImage() error {
	old := r.retired
	if old == nil {
		return nil
	}
	r.retired = nil
	if err := old.close(); err != nil {
		return fmt.Errorf("removing the previous image file: %w", err)
	}
	return nil
}

// freshKernel returns the environment a Linux column runs the coming
// workload in: env itself, or, when the run is fresh per workload and env
// has run a workload, a new one set up like it, env torn down after.
// When the new one cannot be set up, env stays (the caller still holds
// it) and the error says why.
func freshKernel(ctx context.Context, c *config, env *kernelEnv) (*kernelEnv, error) {
	if !c.fresh || !env.hasRun() {
		return env, nil
	}
	if err := ctx.Err(); err != nil {
		return env, err // not GiBs of backing file written for nothing
	}
	n, err := env.renew(ctx)
	if err != nil {
		return env, fmt.Errorf("new backing file: %w", err)
	}
	return n, nil
}

// memAvailable is the host's available memory in bytes (MemAvailable in
// /proc/meminfo), or a bound no run reaches when it cannot be read.
func memAvailable() int64 {
	v := procField("/proc/meminfo", "MemAvailable")
	kb, err := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
	if err != nil || kb <= 0 {
		return 1 << 62
	}
	return kb << 10
}
