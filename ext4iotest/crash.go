package ext4iotest

import (
	"fmt"
	"io"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/stretchr/testify/require"
)

// SweepOptions configure CrashSweep. The zero value crashes just before and
// just after every flush (and after the last operation), keeping no
// unflushed write.
type SweepOptions struct {
	// EveryOp crashes after every logged operation (every write, zero-out,
	// discard and flush) instead of around flushes only.
	EveryOp bool
	// CrashAt chooses what survives of the writes not covered by a flush at
	// each point (KeepProb, Tear); its Seed is mixed with the point.
	CrashAt errordev.CrashAtOptions
	// MaxPoints, if > 0, checks at most that many points, spread evenly
	// over the log (the first and last always included).
	MaxPoints int
}

// CrashSweep runs workload on a recording device whose starting image is
// start (errordev.Recorder), then, for each crash point, builds what a
// power cut there could leave (errordev.Recorder.CrashAt) and calls check
// on it in a subtest named after the point ("crash-at-17"). A workload
// error fails t. Crash images identical to one already checked are
// skipped: each image's contents are digested with xxhash, so the sweep
// keeps one 8-byte digest per image instead of a copy. It returns the
// number of images checked.
//
// check typically opens the crashed device (replaying the journal), checks
// the workload's invariant, closes it and runs FsckDev.
func CrashSweep(t *testing.T, start *memdev.Device, workload func(dev blockdev.Device) error,
	check func(t *testing.T, crashed *memdev.Device, rep errordev.CrashReport), opts SweepOptions) int {
	t.Helper()
	rec, err := errordev.NewRecorder(start)
	require.NoError(t, err, "recorder")
	require.NoError(t, workload(rec), "workload")
	points := SweepPoints(rec, opts)
	seen := make(map[uint64]bool, len(points))
	checked := 0
	for _, p := range points {
		co := opts.CrashAt
		co.Seed ^= uint64(p+1) * 0x9E3779B97F4A7C15
		img, rep, err := rec.CrashAt(p, co)
		require.NoError(t, err, "crash at %d", p)
		d, err := Digest(img)
		require.NoError(t, err, "digest of the image crashed at %d", p)
		if seen[d] {
			continue
		}
		seen[d] = true
		checked++
		t.Run(fmt.Sprintf("crash-at-%d", p), func(t *testing.T) {
			t.Logf("crash: %v (image digest %#x)", rep, d)
			check(t, img, rep)
		})
	}
	return checked
}

// SweepPoints returns the crash points CrashSweep visits in rec's log, in
// ascending order: -1 (before anything), then around every flush (the
// operation before it, with everything since the previous flush in
// doubt, and the flush itself) and the last operation; with opts.EveryOp,
// every operation.
func SweepPoints(rec *errordev.Recorder, opts SweepOptions) []int {
	n := rec.Len()
	var pts []int
	if opts.EveryOp {
		for p := -1; p < n; p++ {
			pts = append(pts, p)
		}
	} else {
		last := -2
		add := func(p int) {
			if p > last {
				pts = append(pts, p)
				last = p
			}
		}
		add(-1)
		for _, f := range rec.Flushes() {
			add(f - 1)
			add(f)
		}
		add(n - 1)
	}
	if m := opts.MaxPoints; m > 0 && len(pts) > m {
		spread := make([]int, 0, m)
		for i := range m {
			k := i * (len(pts) - 1) / max(m-1, 1)
			if len(spread) == 0 || pts[k] != spread[len(spread)-1] {
				spread = append(spread, pts[k])
			}
		}
		pts = spread
	}
	return pts
}

// Digest returns the xxhash64 of dev's whole contents: a cheap identity
// for comparing images (crash images, a device before and after an
// operation that must not change it) without keeping copies.
func Digest(dev blockdev.Device) (uint64, error) {
	h := xxhash.New()
	if _, err := io.Copy(h, io.NewSectionReader(dev, 0, dev.Size())); err != nil {
		return 0, err
	}
	return h.Sum64(), nil
}
