package errordev

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// Crashable is a Device that remembers what would survive a power cut. It
// is safe for concurrent use.
//
// Every operation goes to the wrapped device. Successful writes, zero-outs
// and discards are also appended to a log; a Flush that succeeds on the
// wrapped device applies the log entries that completed before it started
// to the durable image, a memdev. A failed operation is assumed not to have
// reached stable storage. Discarded ranges read as zeroes in crash images.
type Crashable struct {
	dev blockdev.Device // immutable

	mu struct {
		sync.Mutex
		durable *memdev.Device // state covered by completed flushes
		log     []entry        // operations since, in completion order
		nextSeq uint64         // seq of the next log entry
	}
}

// entry is one logged modification. data is a private copy (Write only).
type entry struct {
	seq    uint64
	kind   Kind
	off, n int64
	data   []byte
}

var _ blockdev.Device = (*Crashable)(nil)

// NewCrashable wraps dev, whose current contents count as durable. A
// *memdev.Device is cloned in O(chunks); any other device is read whole.
func NewCrashable(dev blockdev.Device) (*Crashable, error) {
	var img *memdev.Device
	if m, ok := dev.(*memdev.Device); ok {
		var err error
		if img, err = m.Clone(); err != nil {
			return nil, err
		}
	} else {
		img = memdev.NewBlockSize(dev.Size(), dev.LogicalBlockSize())
		buf := make([]byte, 1<<20)
		zero := make([]byte, memdev.ChunkSize)
		for off := int64(0); off < dev.Size(); off += int64(len(buf)) {
			n := int(min(int64(len(buf)), dev.Size()-off))
			if _, err := dev.ReadAt(buf[:n], off); err != nil {
				return nil, fmt.Errorf("errordev: reading initial contents at %d: %w", off, err)
			}
			for i := 0; i < n; i += memdev.ChunkSize {
				c := buf[i:min(n, i+memdev.ChunkSize)]
				if !bytes.Equal(c, zero[:len(c)]) {
					img.WriteAt(c, off+int64(i))
				}
			}
		}
	}
	c := &Crashable{dev: dev}
	c.mu.durable = img
	return c, nil
}

func (c *Crashable) record(k Kind, off, n int64, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.log = append(c.mu.log, entry{seq: c.mu.nextSeq, kind: k, off: off, n: n, data: data})
	c.mu.nextSeq++
}

// ReadAt implements io.ReaderAt.
func (c *Crashable) ReadAt(p []byte, off int64) (int, error) { return c.dev.ReadAt(p, off) }

// WriteAt implements io.WriterAt.
func (c *Crashable) WriteAt(p []byte, off int64) (int, error) {
	n, err := c.dev.WriteAt(p, off)
	if err == nil {
		c.record(Write, off, int64(n), bytes.Clone(p[:n]))
	}
	return n, err
}

// ZeroOut implements blockdev.Device.
func (c *Crashable) ZeroOut(off, n int64) error {
	err := c.dev.ZeroOut(off, n)
	if err == nil && n > 0 {
		c.record(ZeroOut, off, n, nil)
	}
	return err
}

// Discard implements blockdev.Device.
func (c *Crashable) Discard(off, n int64) error {
	err := c.dev.Discard(off, n)
	if err == nil && n > 0 {
		c.record(Discard, off, n, nil)
	}
	return err
}

// Flush flushes the wrapped device and, if that succeeds, makes durable
// every operation that completed before Flush was called.
func (c *Crashable) Flush() error {
	c.mu.Lock()
	target := c.mu.nextSeq
	c.mu.Unlock()
	if err := c.dev.Flush(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := 0
	for ; k < len(c.mu.log) && c.mu.log[k].seq < target; k++ {
		if err := apply(c.mu.durable, c.mu.log[k], c.mu.log[k].n); err != nil {
			return fmt.Errorf("errordev: applying flushed %v at %d to the durable image: %w", c.mu.log[k].kind, c.mu.log[k].off, err)
		}
	}
	c.mu.log = append([]entry(nil), c.mu.log[k:]...)
	return nil
}

// apply performs the first n bytes of e on img.
func apply(img *memdev.Device, e entry, n int64) error {
	var err error
	switch e.kind {
	case Write:
		_, err = img.WriteAt(e.data[:n], e.off)
	case ZeroOut:
		err = img.ZeroOut(e.off, n)
	case Discard:
		err = img.Discard(e.off, n)
	}
	return err
}

// Unflushed returns the number of logged operations not yet covered by a
// completed Flush.
func (c *Crashable) Unflushed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.log)
}

// CrashOptions chooses what survives a simulated crash beyond the flushed
// state.
type CrashOptions struct {
	// Seed seeds the choices below; the same seed and log give the same
	// image.
	Seed uint64
	// KeepProb is the probability that each unflushed operation survives,
	// independently: 0 keeps none (only flushed state), 1 keeps all.
	// Survivors are applied in their original order.
	KeepProb float64
	// TearLast, if the last unflushed operation is a write, keeps only a
	// random proper prefix of its logical blocks (possibly none), instead
	// of the KeepProb choice.
	TearLast bool
}

// Crash returns a new device holding what a power cut now could leave on
// disk. The Crashable is unchanged and can go on, or crash again. Cost:
// O(chunks of the durable image) plus replaying the kept log entries.
func (c *Crashable) Crash(opts CrashOptions) (*memdev.Device, error) {
	c.mu.Lock()
	img, err := c.mu.durable.Clone()
	log := c.mu.log // entries are never mutated; the slice is replaced, not edited
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9E3779B97F4A7C15))
	lbs := int64(c.dev.LogicalBlockSize())
	for i, e := range log {
		n := e.n
		if opts.TearLast && i == len(log)-1 && e.kind == Write {
			start := e.off - e.off%lbs
			blocks := (e.off + e.n - start + lbs - 1) / lbs
			k := rng.Int64N(blocks) // 0 .. blocks-1: a proper prefix
			n = max(0, min(e.n, start+k*lbs-e.off))
		} else if rng.Float64() >= opts.KeepProb {
			continue
		}
		if n == 0 {
			continue
		}
		if err := apply(img, e, n); err != nil {
			return nil, fmt.Errorf("errordev: replaying %v at %d: %w", e.kind, e.off, err)
		}
	}
	return img, nil
}

// Size implements blockdev.Device.
func (c *Crashable) Size() int64 { return c.dev.Size() }

// LogicalBlockSize implements blockdev.Device.
func (c *Crashable) LogicalBlockSize() int { return c.dev.LogicalBlockSize() }

// Close closes the wrapped device. Crash still works afterwards.
func (c *Crashable) Close() error { return c.dev.Close() }
