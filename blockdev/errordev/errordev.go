// Package errordev wraps a blockdev.Device to inject faults and to simulate
// crashes.
//
// Fault injection: New(dev, inj) asks inj before every ReadAt, WriteAt,
// Flush, ZeroOut and Discard; a non-nil error fails the operation, which
// then does not reach dev. Injectors compose: OnIndex, After, Always,
// AfterAny, Random, InRange, Kinds, Any, Toggle, Counter and Func.
//
// Crash simulation (this package, not memdev, owns it): NewCrashable(dev)
// passes every operation through to dev and keeps the durable state on the
// side: a memdev image of everything covered by a completed Flush, plus a
// log of the operations since. Crash builds an image from the durable
// state and, optionally, a random subset of the logged operations and a
// torn last write. Stack the two to fail a flush and then crash:
//
//	c, _ := errordev.NewCrashable(memdev.New(size))
//	d := errordev.New(c, errordev.OnIndex(errordev.Flush, 3))
//
// Crashable can only crash now. NewRecorder keeps the whole log instead
// (every write's data, every flush), and Recorder.CrashAt builds the image
// for a crash after any entry: a commit or checkpoint half on the media
// is then a crash point, not only the quiet moment after it.
package errordev

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/ext4io/ext4io/blockdev"
)

// Kind is the kind of an operation.
type Kind uint8

// Operation kinds.
const (
	Read Kind = iota
	Write
	Flush
	ZeroOut
	Discard
	numKinds
)

var kindNames = [numKinds]string{"read", "write", "flush", "zero out", "discard"}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Op describes an operation about to be issued. Len is in bytes; both are
// zero for Flush.
type Op struct {
	Kind     Kind
	Off, Len int64
}

// ErrInjected is the error the built-in injectors return. It wraps
// blockdev.ErrIO, as a real device error would.
var ErrInjected = fmt.Errorf("errordev: injected fault: %w", blockdev.ErrIO)

// Injector decides whether an operation fails. MaybeError is called once
// per operation, possibly from several goroutines at once.
type Injector interface {
	MaybeError(Op) error
}

// Func adapts a function to Injector.
type Func func(Op) error

// MaybeError calls f.
func (f Func) MaybeError(op Op) error { return f(op) }

// Always fails every operation with ErrInjected; restrict it with Kinds or
// InRange, or switch it with a Toggle.
func Always() Injector { return Func(func(Op) error { return ErrInjected }) }

// OnIndex fails the n-th (0-based) operation of kind k with ErrInjected,
// once. It counts only operations of kind k that reach it.
func OnIndex(k Kind, n int64) Injector {
	var seen atomic.Int64
	return Func(func(op Op) error {
		if op.Kind == k && seen.Add(1)-1 == n {
			return ErrInjected
		}
		return nil
	})
}

// After fails every operation of kind k from the n-th (0-based) on: the
// device died.
func After(k Kind, n int64) Injector {
	var seen atomic.Int64
	return Func(func(op Op) error {
		if op.Kind == k && seen.Add(1)-1 >= n {
			return ErrInjected
		}
		return nil
	})
}

// AfterAny fails every operation of any kind (reads, writes, flushes,
// zero-outs and discards alike) from the n-th (0-based) on: the device
// died after n operations. Unlike After, which counts one kind, it finds
// the first operation of a workload that a dead device fails, whatever
// its kind.
func AfterAny(n int64) Injector {
	var seen atomic.Int64
	return Func(func(Op) error {
		if seen.Add(1)-1 >= n {
			return ErrInjected
		}
		return nil
	})
}

// Random fails each operation with probability p, drawn from a generator
// seeded with seed: the same sequence of calls fails the same way.
func Random(seed uint64, p float64) Injector {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	return Func(func(Op) error {
		mu.Lock()
		defer mu.Unlock()
		if rng.Float64() < p {
			return ErrInjected
		}
		return nil
	})
}

// Kinds passes only operations of the given kinds to inj.
func Kinds(inj Injector, kinds ...Kind) Injector {
	var mask uint32
	for _, k := range kinds {
		mask |= 1 << k
	}
	return Func(func(op Op) error {
		if mask&(1<<op.Kind) == 0 {
			return nil
		}
		return inj.MaybeError(op)
	})
}

// InRange passes only operations overlapping [off, off+n) to inj. Flush
// has no range and never matches.
func InRange(inj Injector, off, n int64) Injector {
	return Func(func(op Op) error {
		if op.Kind == Flush || op.Off >= off+n || op.Off+op.Len <= off {
			return nil
		}
		return inj.MaybeError(op)
	})
}

// Any asks each injector in turn and returns the first error. Every
// injector before the failing one sees the operation.
func Any(injs ...Injector) Injector {
	return Func(func(op Op) error {
		for _, inj := range injs {
			if err := inj.MaybeError(op); err != nil {
				return err
			}
		}
		return nil
	})
}

// Toggle switches an injector on and off at run time. It starts disabled.
// It is safe for concurrent use.
type Toggle struct {
	inj Injector
	on  atomic.Bool
}

// NewToggle returns a disabled Toggle around inj.
func NewToggle(inj Injector) *Toggle { return &Toggle{inj: inj} }

// Enable makes t consult its injector.
func (t *Toggle) Enable() { t.on.Store(true) }

// Disable makes t pass every operation.
func (t *Toggle) Disable() { t.on.Store(false) }

// Enabled reports whether t is enabled.
func (t *Toggle) Enabled() bool { return t.on.Load() }

// MaybeError implements Injector.
func (t *Toggle) MaybeError(op Op) error {
	if !t.on.Load() {
		return nil
	}
	return t.inj.MaybeError(op)
}

// Counter counts the operations it sees, by kind, and the ones its
// injector (which may be nil) failed. It is safe for concurrent use.
type Counter struct {
	inj    Injector
	seen   [numKinds]atomic.Int64
	failed [numKinds]atomic.Int64
}

// NewCounter returns a Counter around inj, or a pure counter if inj is nil.
func NewCounter(inj Injector) *Counter { return &Counter{inj: inj} }

// Count returns how many operations of kind k were seen.
func (c *Counter) Count(k Kind) int64 { return c.seen[k].Load() }

// Failed returns how many operations of kind k the injector failed.
func (c *Counter) Failed(k Kind) int64 { return c.failed[k].Load() }

// MaybeError implements Injector.
func (c *Counter) MaybeError(op Op) error {
	if op.Kind >= numKinds {
		return nil
	}
	c.seen[op.Kind].Add(1)
	if c.inj == nil {
		return nil
	}
	err := c.inj.MaybeError(op)
	if err != nil {
		c.failed[op.Kind].Add(1)
	}
	return err
}

// Device is a Device whose operations can be failed by an Injector. It is
// safe for concurrent use if the wrapped device and injector are.
type Device struct {
	dev blockdev.Device
	inj Injector
}

var _ blockdev.Device = (*Device)(nil)

// New wraps dev; inj may be nil (no faults). Injected errors are returned
// wrapped with the operation and offset; the built-in ones wrap
// ErrInjected and so blockdev.ErrIO.
func New(dev blockdev.Device, inj Injector) *Device { return &Device{dev: dev, inj: inj} }

// Unwrap returns the wrapped device.
func (d *Device) Unwrap() blockdev.Device { return d.dev }

func (d *Device) check(k Kind, off, n int64) error {
	if d.inj == nil {
		return nil
	}
	if err := d.inj.MaybeError(Op{Kind: k, Off: off, Len: n}); err != nil {
		return fmt.Errorf("errordev: %v at %d (+%d): %w", k, off, n, err)
	}
	return nil
}

// ReadAt implements io.ReaderAt.
func (d *Device) ReadAt(p []byte, off int64) (int, error) {
	if err := d.check(Read, off, int64(len(p))); err != nil {
		return 0, err
	}
	return d.dev.ReadAt(p, off)
}

// WriteAt implements io.WriterAt.
func (d *Device) WriteAt(p []byte, off int64) (int, error) {
	if err := d.check(Write, off, int64(len(p))); err != nil {
		return 0, err
	}
	return d.dev.WriteAt(p, off)
}

// Flush implements blockdev.Device.
func (d *Device) Flush() error {
	if err := d.check(Flush, 0, 0); err != nil {
		return err
	}
	return d.dev.Flush()
}

// ZeroOut implements blockdev.Device.
func (d *Device) ZeroOut(off, n int64) error {
	if err := d.check(ZeroOut, off, n); err != nil {
		return err
	}
	return d.dev.ZeroOut(off, n)
}

// Discard implements blockdev.Device.
func (d *Device) Discard(off, n int64) error {
	if err := d.check(Discard, off, n); err != nil {
		return err
	}
	return d.dev.Discard(off, n)
}

// Size implements blockdev.Device.
func (d *Device) Size() int64 { return d.dev.Size() }

// LogicalBlockSize implements blockdev.Device.
func (d *Device) LogicalBlockSize() int { return d.dev.LogicalBlockSize() }

// Close closes the wrapped device; it is never failed by the injector.
func (d *Device) Close() error { return d.dev.Close() }
