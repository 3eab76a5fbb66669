package ext4io_test

// The random damage sweep's write phase: writes on damaged images fail
// cleanly, stay in bounds, and leave what e2fsck can repair.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
)

// boundsDev passes everything to a Device and records every WriteAt,
// ZeroOut or Discard outside [0, Size), and, when readOnly, every one at
// all: ext4io must refuse out-of-bounds writes itself and must not write
// through a read-only open.
type boundsDev struct {
	blockdev.Device
	readOnly bool

	mu     sync.Mutex
	writes int      // WriteAt, ZeroOut and Discard calls
	nbad   int      // of them out of bounds (or on a read-only open)
	bad    []string // the first few
}

func (d *boundsDev) note(op string, off, n int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writes++
	size := d.Device.Size()
	if d.readOnly || off < 0 || n < 0 || off > size || n > size-off {
		d.nbad++
		if len(d.bad) < 4 {
			what := "out of bounds"
			if d.readOnly {
				what = "on a read-only open"
			}
			d.bad = append(d.bad, fmt.Sprintf("%s [%d, +%d) of a %d-byte device: %s\n%s", op, off, n, size, what, debug.Stack()))
		}
	}
}

func (d *boundsDev) WriteAt(p []byte, off int64) (int, error) {
	d.note("WriteAt", off, int64(len(p)))
	return d.Device.WriteAt(p, off)
}

func (d *boundsDev) ZeroOut(off, n int64) error {
	d.note("ZeroOut", off, n)
	return d.Device.ZeroOut(off, n)
}

func (d *boundsDev) Discard(off, n int64) error {
	d.note("Discard", off, n)
	return d.Device.Discard(off, n)
}

// check fails t for every bad write seen, and reports whether there was none.
func (d *boundsDev) check(t *testing.T, label string) bool {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range d.bad {
		t.Errorf("%s: device %s", label, b)
	}
	if d.nbad > len(d.bad) {
		t.Errorf("%s: %d more bad device writes", label, d.nbad-len(d.bad))
	}
	return d.nbad == 0
}

var _ blockdev.Device = (*boundsDev)(nil)

// writeSentinels are the errors every failed write-side operation must wrap.
var writeSentinels = []struct {
	name string
	err  error
}{
	{"corrupt", ext4io.ErrCorrupt},
	{"nospace", ext4io.ErrNoSpace},
	{"readonly", ext4io.ErrReadOnly},
	{"unsupported", ext4io.ErrUnsupported},
	{"io", ext4io.ErrIO},
	{"invalid", ext4io.ErrInvalid},
	{"notfound", ext4io.ErrNotFound},
	{"exist", ext4io.ErrExist},
	{"closed", ext4io.ErrClosed},
}

// writeCounts are the outcomes of the phases that open damaged images
// writable (or with Replay), summed over a sweep.
type writeCounts struct {
	tried, opened, replayed int
	refused                 map[string]int // writable open failed, by sentinel
	opsOK                   int
	opsFailed               map[string]int // by sentinel
	devWrites               int            // device writes seen by boundsDev
	oob                     int            // out-of-bounds device writes (must be 0)
	walkErrs                map[string]int // errors of the walk right after the writable open
	rewalked                int            // reopened read-only and walked after Close
	bareCorrupt             int            // ErrCorrupt without a *CorruptError
	firstBare               string
	// Replay opens (journaled bases only).
	replayTried, replayOpened int
	replayRefused             map[string]int
}

func newWriteCounts() *writeCounts {
	return &writeCounts{refused: map[string]int{}, walkErrs: map[string]int{}, opsFailed: map[string]int{}, replayRefused: map[string]int{}}
}

// classify names the sentinel err wraps; an error wrapping none fails t.
func (wc *writeCounts) classify(t *testing.T, label, op string, err error) string {
	t.Helper()
	for _, s := range writeSentinels {
		if errors.Is(err, s.err) {
			if s.err == ext4io.ErrCorrupt {
				var ce *ext4io.CorruptError
				if !errors.As(err, &ce) {
					wc.bareCorrupt++
					if wc.firstBare == "" {
						wc.firstBare = fmt.Sprintf("%s: %s: %v", label, op, err)
					}
				}
			}
			return s.name
		}
	}
	t.Errorf("%s: %s: error wraps no ext4io sentinel: %v (%T)", label, op, err, err)
	return "UNWRAPPED"
}

// damageVerbose (EXT4IO_DAMAGE_VERBOSE=1) logs every failed write-side
// operation of TestRandomDamage.
var damageVerbose = os.Getenv("EXT4IO_DAMAGE_VERBOSE") != ""

// writeOpDeadline bounds each operation of the write phase: far more than
// any of them needs, even under -race.
const writeOpDeadline = 10 * time.Second

// wop runs fn in a goroutine; a panic or no result within writeOpDeadline
// ends the test, naming label (seed and region) and op.
func wop(t *testing.T, label, op string, fn func() error) error {
	t.Helper()
	type result struct {
		err   error
		panic string
	}
	ch := make(chan result, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				ch <- result{panic: fmt.Sprintf("%v\n%s", r, debug.Stack())}
			}
		}()
		ch <- result{err: fn()}
	}()
	select {
	case r := <-ch:
		if r.panic != "" {
			t.Fatalf("%s: %s panicked: %s", label, op, r.panic)
		}
		return r.err
	case <-time.After(writeOpDeadline):
		t.Fatalf("%s: %s: no result after %v (hang?)", label, op, writeOpDeadline)
		return nil
	}
}

// damageWrite opens dev writable and, if that works, runs a fixed sequence
// of writes: create, a buffered 20 KiB write, fsync, mkdir, a create and a
// rename into an existing directory, an htree insert into big/, unlink of
// an open file, truncate and fallocate of an existing file, a hole punch
// and a truncate of frag (its extent tree), an unlink of an existing file,
// sync and close. Each operation runs under wop; every error must wrap a
// sentinel. The writable volume is walked before the writes, and reopened
// read-only and walked after Close. dev must see
// no out-of-bounds write. It returns the number of failed operations and
// the first failure.
func damageWrite(t *testing.T, label string, dev *boundsDev, base *sweepBase, seed uint64, wc *writeCounts) (failed int, first error) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	wc.tried++
	defer func() {
		dev.mu.Lock()
		wc.devWrites += dev.writes
		wc.oob += dev.nbad
		dev.mu.Unlock()
		dev.check(t, label)
	}()
	var v *ext4io.Volume
	err := wop(t, label, "open writable", func() (err error) {
		v, err = ext4io.Open(dev, ext4io.Options{Writable: true})
		return err
	})
	if err != nil {
		wc.refused[wc.classify(t, label, "open writable", err)]++
		if damageVerbose {
			t.Logf("%s: open writable: %v", label, err)
		}
		return 1, fmt.Errorf("open writable: %w", err)
	}
	wc.opened++
	if v.Recovery() != nil {
		wc.replayed++
	}
	// Reads through the writable volume's metadata layer first.
	var st *walkStats
	wop(t, label, "walk", func() error { st = walkVolume(v, nil); return nil })
	for _, u := range st.unwrapped {
		t.Errorf("%s: walk of the writable volume: error wraps no sentinel: %s", label, u)
	}
	for _, b := range st.bareCorrupt {
		t.Errorf("%s: walk of the writable volume: ErrCorrupt without a *CorruptError (no context): %s", label, b)
	}
	for k, n := range st.errs {
		wc.walkErrs[k] += n
	}
	do := func(op string, fn func() error) bool {
		t.Helper()
		err := wop(t, label, op, fn)
		if err == nil {
			wc.opsOK++
			return true
		}
		wc.opsFailed[wc.classify(t, label, op, err)]++
		if damageVerbose {
			t.Logf("%s: %s: %v", label, op, err)
		}
		failed++
		if first == nil {
			first = fmt.Errorf("%s: %w", op, err)
		}
		return false
	}
	withFile := func(name string, fn func(f *ext4io.File) error) func() error {
		return func() error {
			f, err := v.OpenFile(name, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			err = fn(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}
	}
	var f *ext4io.File
	if do("create dmg-new", func() (err error) { f, err = v.Create("dmg-new"); return err }) {
		data := make([]byte, 20<<10)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		do("write 20 KiB", func() error { _, err := f.WriteAt(data, 100); return err })
		do("fsync", f.Sync)
	}
	do("mkdir dmg-dir", func() error { return v.Mkdir("dmg-dir", 0o755) })
	do("create dmg-dir/inner", func() error {
		g, err := v.Create("dmg-dir/inner")
		if err != nil {
			return err
		}
		_, err = g.WriteAt([]byte("inner"), 0)
		if cerr := g.Close(); err == nil {
			err = cerr
		}
		return err
	})
	do("rename into d1", func() error { return v.Rename("dmg-dir/inner", "d1/dmg-moved") })
	do("create big/dmg-htree", func() error {
		g, err := v.Create("big/dmg-htree")
		if err == nil {
			err = g.Close()
		}
		return err
	})
	do("unlink open dmg-new", func() error { return v.Unlink("dmg-new") })
	if f != nil {
		do("close unlinked dmg-new", f.Close)
	}
	victim := base.files[rng.IntN(len(base.files))]
	do("truncate "+victim, withFile(victim, func(f *ext4io.File) error { return f.Truncate(f.Size() / 2) }))
	do("fallocate "+victim, withFile(victim, func(f *ext4io.File) error {
		return f.Fallocate(ext4io.FallocKeepSize, 0, 64<<10)
	}))
	do("punch frag", withFile("frag", func(f *ext4io.File) error {
		return f.Fallocate(ext4io.FallocPunchHole, rng.Int64N(1<<20), 40<<10)
	}))
	do("truncate frag", withFile("frag", func(f *ext4io.File) error { return f.Truncate(rng.Int64N(3 << 19)) }))
	other := base.files[rng.IntN(len(base.files))]
	do("unlink "+other, func() error { return v.Unlink(other) })
	do("sync", v.Sync)
	do("close", v.Close)
	// What the writes left must read without panic, hang or stray error,
	// and without a device write: the reopen is read-only.
	dev.mu.Lock()
	dev.readOnly = true
	dev.mu.Unlock()
	st = openAndWalk(t, label+" [after writes]", 20*time.Second, func() (*ext4io.Volume, error) {
		return ext4io.Open(dev, ext4io.Options{})
	}, nil)
	if st != nil && st.openErr == nil {
		wc.rewalked++
	}
	return failed, first
}
