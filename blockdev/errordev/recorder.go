package errordev

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// Recorder is a Device that logs every modification and flush it passes
// to a wrapped *memdev.Device, so that a crash image can be built for any
// point of the log afterwards (CrashAt), not only for now (Crashable). It
// is safe for concurrent use.
//
// The log holds, in completion order, every successful write (with a
// private copy of its data), zero-out, discard and flush. A flush entry
// remembers how many entries had completed when the flush was issued:
// those, and only those, are durable once the flush entry is in the log.
// A failed operation is assumed not to have reached stable storage and is
// not logged. Memory: the data of every write since NewRecorder.
type Recorder struct {
	dev   *memdev.Device // immutable
	start *memdev.Device // the contents at NewRecorder; immutable

	mu struct {
		sync.Mutex
		log []recEntry
		// base is the image with entries [0, baseN) applied, a cache for
		// CrashAt calls at increasing points.
		base  *memdev.Device
		baseN int
	}
}

// recEntry is one logged operation. cover is, for a Flush, the number of
// entries completed when it was issued; data is a private copy (Write).
type recEntry struct {
	kind   Kind
	off, n int64
	data   []byte
	cover  int
}

var _ blockdev.Device = (*Recorder)(nil)

// NewRecorder wraps dev; its current contents are the log's starting
// image (cloned copy-on-write).
func NewRecorder(dev *memdev.Device) (*Recorder, error) {
	start, err := dev.Clone()
	if err != nil {
		return nil, err
	}
	r := &Recorder{dev: dev, start: start}
	r.mu.base = start
	return r, nil
}

func (r *Recorder) record(e recEntry) {
	r.mu.Lock()
	r.mu.log = append(r.mu.log, e)
	r.mu.Unlock()
}

// Len returns the number of logged operations.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.mu.log)
}

// Flushes returns the log indexes of the flush entries.
func (r *Recorder) Flushes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var fl []int
	for i, e := range r.mu.log {
		if e.kind == Flush {
			fl = append(fl, i)
		}
	}
	return fl
}

// Entry returns log entry i: its kind and, for a modification, the byte
// range it covered (0, 0 for a Flush). Tests use it to check the order
// of operations, such as discards after the flushes that allowed them.
func (r *Recorder) Entry(i int) (kind Kind, off, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.mu.log[i]
	return e.kind, e.off, e.n
}

// ReadAt implements io.ReaderAt.
func (r *Recorder) ReadAt(p []byte, off int64) (int, error) { return r.dev.ReadAt(p, off) }

// WriteAt implements io.WriterAt.
func (r *Recorder) WriteAt(p []byte, off int64) (int, error) {
	n, err := r.dev.WriteAt(p, off)
	if err == nil && n > 0 {
		r.record(recEntry{kind: Write, off: off, n: int64(n), data: bytes.Clone(p[:n])})
	}
	return n, err
}

// ZeroOut implements blockdev.Device.
func (r *Recorder) ZeroOut(off, n int64) error {
	err := r.dev.ZeroOut(off, n)
	if err == nil && n > 0 {
		r.record(recEntry{kind: ZeroOut, off: off, n: n})
	}
	return err
}

// Discard implements blockdev.Device.
func (r *Recorder) Discard(off, n int64) error {
	err := r.dev.Discard(off, n)
	if err == nil && n > 0 {
		r.record(recEntry{kind: Discard, off: off, n: n})
	}
	return err
}

// Flush implements blockdev.Device. The entries completed when it is
// called are durable once its own entry is logged.
func (r *Recorder) Flush() error {
	cover := r.Len()
	if err := r.dev.Flush(); err != nil {
		return err
	}
	r.record(recEntry{kind: Flush, cover: cover})
	return nil
}

// Size implements blockdev.Device.
func (r *Recorder) Size() int64 { return r.dev.Size() }

// LogicalBlockSize implements blockdev.Device.
func (r *Recorder) LogicalBlockSize() int { return r.dev.LogicalBlockSize() }

// Close closes the wrapped device. CrashAt still works afterwards.
func (r *Recorder) Close() error { return r.dev.Close() }

// CrashAtOptions chooses what survives a crash at a point of the log.
type CrashAtOptions struct {
	// Seed seeds the choices below.
	Seed uint64
	// KeepProb is the probability that each unflushed modification before
	// the crash point survives, independently.
	KeepProb float64
	// Tear, if the crash point is a write (or zero-out or discard), keeps
	// a random subset of its TearUnit-sized units (possibly none or all)
	// instead of all of it.
	Tear bool
	// TearUnit is the granularity of a torn write in bytes; 0: the
	// logical block size. A torture whose oracle works on file system
	// blocks tears on those.
	TearUnit int64
}

// CrashReport says what CrashAt kept.
type CrashReport struct {
	Point     int // the crash point (last entry that happened), -1: none
	Durable   int // entries [0, Durable) were covered by a completed flush
	Unflushed int // entries in [Durable, Point]
	Kept      int // of them, kept (the torn one counts)
	Torn      bool
}

func (c CrashReport) String() string {
	return fmt.Sprintf("point %d durable %d unflushed %d kept %d torn %v", c.Point, c.Durable, c.Unflushed, c.Kept, c.Torn)
}

// CrashAt returns a new device holding what a power cut right after log
// entry p could leave on the media (p = -1: before the first entry): the
// start image, then every entry covered by a flush completed at or before
// p, then each later modification up to p kept with opts.KeepProb and
// applied in log order, entry p itself always kept (and, with opts.Tear,
// torn). Applying a random subset in order yields, for every sector, any
// one of the writes to it since the last flush or its flushed contents,
// which is what a volatile write cache can leave. Cost: the bytes applied
// since the last CrashAt at an earlier durable point.
func (r *Recorder) CrashAt(p int, opts CrashAtOptions) (*memdev.Device, CrashReport, error) {
	r.mu.Lock()
	log := r.mu.log[:len(r.mu.log):len(r.mu.log)]
	if p < -1 || p >= len(log) {
		r.mu.Unlock()
		return nil, CrashReport{}, fmt.Errorf("errordev: crash point %d outside the log [-1, %d)", p, len(log))
	}
	durable := 0
	for i := 0; i <= p; i++ {
		if log[i].kind == Flush {
			durable = max(durable, log[i].cover)
		}
	}
	base, baseN := r.mu.base, r.mu.baseN
	if baseN > durable {
		base, baseN = r.start, 0
	}
	r.mu.Unlock()
	img, err := base.Clone()
	if err != nil {
		return nil, CrashReport{}, err
	}
	for i := baseN; i < durable; i++ {
		if err := applyRec(img, log[i]); err != nil {
			return nil, CrashReport{}, err
		}
	}
	// Cache the durable image for the next call.
	if cached, err := img.Clone(); err == nil {
		r.mu.Lock()
		if durable >= r.mu.baseN {
			r.mu.base, r.mu.baseN = cached, durable
		}
		r.mu.Unlock()
	}
	rep := CrashReport{Point: p, Durable: durable}
	rng := rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x5DEECE66D))
	unit := opts.TearUnit
	if unit <= 0 {
		unit = int64(r.dev.LogicalBlockSize())
	}
	for i := durable; i <= p; i++ {
		e := log[i]
		if e.kind == Flush {
			continue
		}
		rep.Unflushed++
		var keep func(off, n int64) bool
		if i == p {
			if opts.Tear {
				rep.Torn = true
				keep = func(int64, int64) bool { return rng.IntN(2) == 0 }
			}
		} else if rng.Float64() >= opts.KeepProb {
			continue
		}
		rep.Kept++
		if keep != nil {
			if err := applyTorn(img, e, unit, keep); err != nil {
				return nil, rep, err
			}
			continue
		}
		if err := applyRec(img, e); err != nil {
			return nil, rep, err
		}
	}
	return img, rep, nil
}

// applyRec performs e on img.
func applyRec(img *memdev.Device, e recEntry) error {
	var err error
	switch e.kind {
	case Write:
		_, err = img.WriteAt(e.data, e.off)
	case ZeroOut:
		err = img.ZeroOut(e.off, e.n)
	case Discard:
		err = img.Discard(e.off, e.n)
	}
	if err != nil {
		return fmt.Errorf("errordev: replaying %v at %d: %w", e.kind, e.off, err)
	}
	return nil
}

// applyTorn performs the unit-aligned pieces of e that keep chooses.
func applyTorn(img *memdev.Device, e recEntry, unit int64, keep func(off, n int64) bool) error {
	for off := e.off; off < e.off+e.n; {
		end := min(e.off+e.n, (off/unit+1)*unit)
		if keep(off, end-off) {
			part := e
			part.off, part.n = off, end-off
			if e.kind == Write {
				part.data = e.data[off-e.off : end-e.off]
			}
			if err := applyRec(img, part); err != nil {
				return err
			}
		}
		off = end
	}
	return nil
}
