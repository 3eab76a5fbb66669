package ext4io

import (
	"errors"
	"sync"
	"sync/atomic"
)

// Discard: telling the device about freed blocks.
//
// With Options.Discard, freeMapped (jmeta.go) queues a discard of each
// run it frees behind the run's release: the release runs once the
// transaction freeing the run has committed (and a checkpoint in
// progress is done), so the discard comes after the commit block that
// made the run free, and before the run can be allocated again, as
// ext4's -o discard issues discards from the jbd2 commit callback and
// keeps the busy extents until they return. Trim (trim.go) discards
// free space on demand. Either way a failed discard loses nothing: the
// blocks keep their old contents or read as zeroes, and are free.

// DiscardStats counts a volume's discards since Open.
type DiscardStats struct {
	// Discards and Bytes count the successful discards of freed runs
	// (Options.Discard) and the bytes they covered.
	Discards, Bytes uint64
	// Failures counts online discards that failed; the operation that
	// freed the blocks did not fail. LastError is the latest failure.
	Failures  uint64
	LastError error
	// Disabled reports that online discard turned itself off because the
	// device does not support it (its Discard returned ErrUnsupported).
	Disabled bool
	// TrimmedBytes counts the bytes Trim discarded.
	TrimmedBytes uint64
}

// discardState is the volume's discard bookkeeping. Safe for concurrent
// use.
type discardState struct {
	off                              atomic.Bool // online discard turned off: unsupported
	discards, bytes, failures, trims atomic.Uint64
	mu                               sync.Mutex
	lastErr                          error // guarded by mu
}

// DiscardStats returns a snapshot of the volume's discard counters.
func (v *Volume) DiscardStats() DiscardStats {
	d := &v.disc
	d.mu.Lock()
	last := d.lastErr
	d.mu.Unlock()
	return DiscardStats{Discards: d.discards.Load(), Bytes: d.bytes.Load(), Failures: d.failures.Load(),
		LastError: last, Disabled: d.off.Load(), TrimmedBytes: d.trims.Load()}
}

// discardFreed discards n blocks from start, freed by a committed
// transaction (or, without a journal, freed but not yet allocatable), if
// Options.Discard asks for it. Errors are counted, not returned.
func (v *Volume) discardFreed(start, n uint64) {
	if !v.opts.Discard || v.disc.off.Load() || n == 0 {
		return
	}
	bs := int64(v.bs)
	err := v.dev.Discard(int64(start)*bs, int64(n)*bs)
	if err == nil {
		v.disc.discards.Add(1)
		v.disc.bytes.Add(n * uint64(bs))
		return
	}
	v.disc.failures.Add(1)
	v.disc.mu.Lock()
	v.disc.lastErr = err
	v.disc.mu.Unlock()
	if errors.Is(err, ErrUnsupported) {
		v.disc.off.Store(true) // as ext4 turns -o discard off on EOPNOTSUPP
	}
}

// freeDiscarding frees n blocks from start on a volume without a journal:
// with Options.Discard they are checked and taken out of free space first
// (so a corrupt mapping never gets metadata or someone else's blocks
// discarded), discarded, then made allocatable.
func (v *Volume) freeDiscarding(start, n uint64) error {
	if !v.opts.Discard || v.disc.off.Load() {
		return v.alloc.Free(start, n)
	}
	release, err := v.alloc.FreeDeferred(start, n)
	if err != nil {
		return err
	}
	v.discardFreed(start, n)
	release()
	return nil
}
