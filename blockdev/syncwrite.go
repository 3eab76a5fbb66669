package blockdev

import "errors"

// SyncWriter is implemented by devices that write and make durable in one
// request, as a FUA write does (pwritev2 with RWF_DSYNC): one system call
// and one wait where WriteAt and Flush take two.
//
// WriteAtSync makes only its own bytes durable. Writes that completed
// before it are not covered: a caller that needs them on stable storage
// first (a journal's log blocks before its commit block) calls Flush
// before WriteAtSync, as jbd2's REQ_PREFLUSH|REQ_FUA commit does. A crash
// before it returns may leave any part of p written.
//
// Use the function WriteAtSync, which falls back to WriteAt and Flush for
// devices that are not SyncWriters.
type SyncWriter interface {
	// WriteAtSync writes p at off, like WriteAt, and returns once p is on
	// stable storage. A device that finds it cannot (a kernel without
	// RWF_DSYNC) falls back to WriteAt and Flush itself; an error wrapping
	// ErrUnsupported, having written nothing, asks the caller to.
	WriteAtSync(p []byte, off int64) (int, error)
}

// WriteAtSync writes p at off of dev and makes it durable: with one
// request when dev is a SyncWriter, else (or when its WriteAtSync fails
// with ErrUnsupported or errors.ErrUnsupported) with WriteAt and then
// Flush. Like a FUA write, it makes no earlier write durable, though the
// fallback's Flush happens to.
//
// Device counters (the bench's, a Recorder's) count a WriteAtSync as one
// write and one flush, the fallback's cost, so counts compare across
// devices.
func WriteAtSync(dev Device, p []byte, off int64) (int, error) {
	if sw, ok := dev.(SyncWriter); ok {
		n, err := sw.WriteAtSync(p, off)
		if err == nil || n != 0 || !(errors.Is(err, ErrUnsupported) || errors.Is(err, errors.ErrUnsupported)) {
			return n, err
		}
	}
	n, err := dev.WriteAt(p, off)
	if err != nil {
		return n, err
	}
	return n, dev.Flush()
}
