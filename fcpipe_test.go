package ext4io_test

// Flush sharing between consecutive fast commits (fcGroup): a recording
// device checks ext4's ordering on every fast commit written (no tag block
// that maps data is written before a flush issued after that data's write
// completed), and crash images taken while four writers fsync hold no
// file whose blocks were mapped before their data was durable.

import (
	"bytes"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/ext4io/ext4io/layout"
)

// recOp is one write or flush seen by a recDev, with the clock ticks of
// its issue and its completion.
type recOp struct {
	flush      bool
	off        int64
	data       []byte // a copy of a write's bytes
	start, end int64
}

// recDev records the writes and flushes that reach a device, in the order
// they are issued and complete; a flush takes flushDelay, so that fsyncs
// overlap.
type recDev struct {
	blockdev.Device
	flushDelay time.Duration
	clock      atomic.Int64
	mu         sync.Mutex
	ops        []recOp // guarded by mu
}

func (d *recDev) WriteAt(p []byte, off int64) (int, error) {
	op := recOp{off: off, data: bytes.Clone(p), start: d.clock.Add(1)}
	n, err := d.Device.WriteAt(p, off)
	op.end = d.clock.Add(1)
	d.mu.Lock()
	d.ops = append(d.ops, op)
	d.mu.Unlock()
	return n, err
}

func (d *recDev) Flush() error {
	op := recOp{flush: true, start: d.clock.Add(1)}
	time.Sleep(d.flushDelay)
	err := d.Device.Flush()
	op.end = d.clock.Add(1)
	d.mu.Lock()
	d.ops = append(d.ops, op)
	d.mu.Unlock()
	return err
}

// fcAddRanges returns the ADD_RANGE tags of a write if it is a fast
// commit (every block decodes as fast-commit records, the last one ends
// with a TAIL), and whether it is one.
func fcAddRanges(data []byte, bs int) ([]layout.FCRange, bool) {
	if len(data) == 0 || len(data)%bs != 0 {
		return nil, false
	}
	var adds []layout.FCRange
	var last []layout.FCTag
	for i := 0; i < len(data); i += bs {
		tags, err := layout.DecodeFCBlock(data[i:i+bs], i/bs)
		if err != nil || len(tags) == 0 {
			return nil, false
		}
		for _, tg := range tags {
			if tg.Tag == layout.FCTagAddRange {
				r, err := tg.Range()
				if err != nil {
					return nil, false
				}
				adds = append(adds, r)
			}
		}
		last = tags
	}
	return adds, last[len(last)-1].Tag == layout.FCTagTail
}

// fcOrderCheck checks ext4's fast-commit ordering on a recording: for
// every block an ADD_RANGE maps, the last write to it that completed
// before the fast commit's write was issued is followed by a flush issued
// after that write completed and completed before the fast commit's write
// was issued. It returns the fast commits seen, the mapped writes checked
// and the violations.
func fcOrderCheck(ops []recOp, bs int) (fcs, checked, violations int) {
	for _, tw := range ops {
		if tw.flush {
			continue
		}
		adds, ok := fcAddRanges(tw.data, bs)
		if !ok {
			continue
		}
		fcs++
		for _, r := range adds {
			lo, hi := int64(r.Pblk)*int64(bs), int64(r.Pblk+uint64(r.Len))*int64(bs)
			var data *recOp
			for i := range ops {
				d := &ops[i]
				if d.flush || d.end >= tw.start || d.off >= hi || d.off+int64(len(d.data)) <= lo {
					continue
				}
				if data == nil || d.end > data.end {
					data = d
				}
			}
			if data == nil {
				continue
			}
			checked++
			covered := false
			for _, f := range ops {
				if f.flush && f.start > data.end && f.end < tw.start {
					covered = true
					break
				}
			}
			if !covered {
				violations++
			}
		}
	}
	return fcs, checked, violations
}

// TestFastCommitFlushOrder: one and four writers fsync files on a
// recording device; every fast commit's tags are written only after a
// flush that followed the completion of the data they map, while four
// writers take well under one flush per file (consecutive fast commits
// share a flush). With Tuning.FastCommitOneFlush, which writes the tags
// before any flush, the check finds violations: it can fail.
func TestFastCommitFlushOrder(t *testing.T) {
	for _, tc := range []struct {
		jobs       int
		oneFlush   bool
		maxFlushes float64
	}{{1, false, 2.1}, {4, false, 0.8}, {1, true, 1.1}} {
		t.Run(fmt.Sprintf("jobs=%d,oneflush=%v", tc.jobs, tc.oneFlush), func(t *testing.T) {
			// The ordering holds on every attempt. The flush bound counts
			// what overlapping fsyncs share, and a loaded machine (-race
			// beside other tests, CI) can delay a returning writer past
			// the group's wait: there four writers took 0.62-0.81 flushes
			// per file, a few runs in 30 over 0.75, once twice in a row.
			// As in TestFastCommitGroup, the bound is 0.8 and must hold
			// in one of three attempts. Without the group's wait
			// (waitReturning) four writers take 0.86-0.94, so no attempt
			// meets it.
			for attempt := 1; ; attempt++ {
				flushes := fastCommitFlushOrderRun(t, tc.jobs, tc.oneFlush)
				if flushes <= tc.maxFlushes || attempt == 3 {
					assert.LessOrEqual(t, flushes, tc.maxFlushes)
					return
				}
				t.Logf("attempt %d: %.2f flushes per file, over %.2f: again", attempt, flushes, tc.maxFlushes)
			}
		})
	}
}

// fastCommitFlushOrderRun fsyncs 40 files from each of jobs writers on a
// fresh fast-commit volume over a recording device with slowed flushes,
// checks the ordering of every fast commit on the recording and returns
// the flushes per fsynced file.
func fastCommitFlushOrderRun(t *testing.T, jobs int, oneFlush bool) (flushes float64) {
	t.Helper()
	base := memdev.New(256 << 20)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{FastCommit: true, NoDiscard: true, JournalBlocks: 16384}))
	rec := &recDev{Device: base, flushDelay: 200 * time.Microsecond}
	dev := &countDev{Device: rec}
	// No background committer: an fsync it made fall back would map its
	// data in no fast commit, and the check would miss it.
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1,
		Tuning: ext4io.Tuning{FastCommitOneFlush: oneFlush}})
	require.NoError(t, err)
	for job := range jobs {
		require.NoError(t, v.Mkdir(fmt.Sprintf("d%d", job), 0o755))
	}
	require.NoError(t, v.Sync())
	c0 := v.Counters()
	_, flushes, _ = fsyncConcurrently(t, v, dev, jobs, 40, 4096, nil)
	c := v.Counters()
	require.NoError(t, v.Close())
	rec.mu.Lock()
	fcs, checked, bad := fcOrderCheck(rec.ops, 4096)
	rec.mu.Unlock()
	t.Logf("%d jobs: %.2f flushes per file, %d fast commits (%d shared fsyncs) on the device: %d mapped writes checked, %d written before a flush covered them",
		jobs, flushes, c.FastCommits-c0.FastCommits, c.FastCommitShared-c0.FastCommitShared, checked, bad)
	assert.EqualValues(t, fcs, c.FastCommits-c0.FastCommits, "every fast commit is recognized")
	assert.GreaterOrEqual(t, checked, jobs*40, "every file's data is checked")
	if oneFlush {
		assert.NotZero(t, bad, "FastCommitOneFlush writes tags before their data is flushed")
	} else {
		assert.Zero(t, bad, "tags written before the data they map was flushed")
	}
	ext4iotest.FsckDev(t, base)
	return flushes
}

// hookDev calls beforeFlush (when set) before each flush reaches the
// device.
// fcHookVolume opens a writable fast-commit volume, formatted on base,
// through a Crashable of base wrapped in a hookDev: the crash tests take
// images of crash's durable state from dev's flush hook.
func fcHookVolume(t *testing.T, base *memdev.Device, opts ext4io.FormatOptions) (*errordev.Crashable, *hookDev, *ext4io.Volume) {
	t.Helper()
	opts.FastCommit, opts.NoDiscard = true, true
	require.NoError(t, ext4io.Format(base, opts))
	crash, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	dev := &hookDev{Device: crash}
	// No background committer: the tests count fast commits.
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	return crash, dev, v
}

type hookDev struct {
	blockdev.Device
	beforeFlush atomic.Pointer[func()]
}

func (d *hookDev) Flush() error {
	if f := d.beforeFlush.Load(); f != nil {
		(*f)()
	}
	return d.Device.Flush()
}

// TestFastCommitPipelineCrash: four writers fsync files, and before
// every second flush reaches the device a crash image is taken, keeping a
// random half of the unflushed writes (and tearing the last one). The device was
// filled with a pattern before Format, so a block mapped before its data
// was durable reads as the pattern. In every image (ext4io's in-memory
// replay of the log and the fast commits), every file is empty or holds
// exactly what was written, and every file whose fsync returned before
// the image was taken is there.
func TestFastCommitPipelineCrash(t *testing.T) {
	const jobs, files = 4, 30
	base := memdev.New(128 << 20)
	fill := bytes.Repeat([]byte{0xA5}, 1<<20)
	for off := int64(0); off < base.Size(); off += int64(len(fill)) {
		_, err := base.WriteAt(fill, off)
		require.NoError(t, err)
	}
	crash, dev, v := fcHookVolume(t, base, ext4io.FormatOptions{JournalBlocks: 8192})
	for job := range jobs {
		require.NoError(t, v.Mkdir(fmt.Sprintf("d%d", job), 0o755))
	}
	require.NoError(t, v.Sync())

	content := func(job, i int) []byte {
		data := make([]byte, 3000+i*37)
		for k := range data {
			data[k] = byte(job*31 + i + k)
		}
		return data
	}
	var synced sync.Map // name -> true once its fsync returned
	check := func(seed uint64) (n int) {
		// The fsyncs returned before the image is taken.
		var must []string
		synced.Range(func(k, _ any) bool { must = append(must, k.(string)); return true })
		img, err := crash.Crash(errordev.CrashOptions{Seed: seed, KeepProb: 0.5, TearLast: seed%2 == 0})
		if !assert.NoError(t, err) {
			return 0
		}
		rv, err := ext4io.Open(img, ext4io.Options{})
		if !assert.NoError(t, err, "seed %d: open the crash image", seed) {
			return 0
		}
		defer rv.Close()
		for _, name := range must {
			_, err := rv.Stat(name)
			assert.NoError(t, err, "seed %d: %s fsynced, then missing", seed, name)
		}
		for job := range jobs {
			for i := range files {
				name := fmt.Sprintf("d%d/f%d", job, i)
				f, err := rv.Open(name)
				if err != nil {
					assert.ErrorIs(t, err, fs.ErrNotExist, "seed %d: %s", seed, name)
					continue
				}
				got := make([]byte, f.Size())
				_, err = f.ReadAt(got, 0)
				f.Close()
				assert.NoError(t, err)
				if len(got) > 0 && !assert.True(t, bytes.Equal(content(job, i), got),
					"seed %d: %s holds %d bytes not written (%d bytes, want empty or %d); %d bytes of the pattern",
					seed, name, len(got), len(got), len(content(job, i)), bytes.Count(got, []byte{0xA5})) {
					return n
				}
				n++
			}
		}
		return n
	}

	// A crash image before every second flush: the moments the
	// ordering is about (tags written, data or tags not yet flushed).
	var images, seen atomic.Int64
	var flushes atomic.Uint64
	hook := func() {
		if k := flushes.Add(1); k%2 == 0 {
			seen.Add(int64(check(k)))
			images.Add(1)
		}
	}
	dev.beforeFlush.Store(&hook)
	var wg sync.WaitGroup
	for job := range jobs {
		wg.Go(func() {
			for i := range files {
				name := fmt.Sprintf("d%d/f%d", job, i)
				f, err := v.Create(name)
				if !assert.NoError(t, err) {
					return
				}
				_, err = f.WriteAt(content(job, i), 0)
				assert.NoError(t, err)
				assert.NoError(t, f.Sync())
				synced.Store(name, true)
				assert.NoError(t, f.Close())
			}
		})
	}
	wg.Wait()
	dev.beforeFlush.Store(nil)
	c := v.Counters()
	t.Logf("%d crash images, %d files checked in them; fast commits %d, shared %d, fallbacks %d",
		images.Load(), seen.Load(), c.FastCommits, c.FastCommitShared, c.FastCommitFallbacks)
	assert.GreaterOrEqual(t, images.Load(), int64(15))
	// The images are about fast commits: most fsyncs made one or shared
	// one (a background commit can make a few fall back).
	assert.GreaterOrEqual(t, c.FastCommits+c.FastCommitShared, uint64(jobs*files/2), "fsyncs that fast-committed")
	check(0)
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, base)
}

// TestFastCommitFlushError: a failed flush of a fast commit fails its
// fsync with ErrIO; the changes it carried go out with the next fsync,
// which commits in full, and the crash image then holds both files.
func TestFastCommitFlushError(t *testing.T) {
	base := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{FastCommit: true, NoDiscard: true}))
	crash, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	fail := errordev.NewToggle(errordev.Kinds(errordev.Always(), errordev.Flush))
	// No background committer: a tick while flushes fail would stop the
	// volume, and one between the fsyncs would change the counts.
	v, err := ext4io.Open(errordev.New(crash, fail), ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	put := func(name, data string) error {
		f, err := v.Create(name)
		require.NoError(t, err)
		defer f.Close()
		_, err = f.WriteAt([]byte(data), 0)
		require.NoError(t, err)
		return f.Sync()
	}
	require.NoError(t, put("warm", "up")) // the first fast commit after the mount's commit
	c0 := v.Counters()
	fail.Enable()
	err = put("a", "first")
	fail.Disable()
	require.Error(t, err)
	assert.ErrorIs(t, err, ext4io.ErrIO)
	require.NoError(t, put("b", "second"))
	c := v.Counters()
	assert.Equal(t, c0.FastCommits, c.FastCommits, "neither fsync is a fast commit")
	assert.Equal(t, c0.FastCommitFallbacks+1, c.FastCommitFallbacks, "the fsync after the failure commits in full")
	img, err := crash.Crash(errordev.CrashOptions{})
	require.NoError(t, err)
	require.NoError(t, v.Close())
	rv, err := ext4io.Open(img, ext4io.Options{})
	require.NoError(t, err)
	defer rv.Close()
	for name, want := range map[string]string{"warm": "up", "a": "first", "b": "second"} {
		f, err := rv.Open(name)
		require.NoError(t, err, name)
		got := make([]byte, f.Size())
		_, err = f.ReadAt(got, 0)
		require.NoError(t, err)
		f.Close()
		assert.Equal(t, want, string(got), name)
	}
}
