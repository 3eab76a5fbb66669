package blockdev

import (
	"fmt"
	"reflect"
	"sync"
)

// Locker is implemented by devices that can be claimed by one writer
// across processes: File, Direct and Mmap. Device itself stays small; Claim
// is the way to use it.
type Locker interface {
	// Lock claims the device for its only writer, without waiting. It
	// fails with an error wrapping ErrBusy when another open of the same
	// file or device holds the claim, in this process or another (an
	// exclusive flock), or when Linux has it mounted, directly or through
	// a loop device (the message names the mount point). Read-only opens
	// are never refused by a claim.
	Lock() error
	// Unlock gives up the claim. Closing the device does too.
	Unlock() error
}

// fileIDer is implemented by the backends on an OS file: the file's
// device and inode numbers, so that Claim refuses a second writer through
// another Device on the same file even where flock does not (non-Linux).
type fileIDer interface {
	fileID() (fileID, bool)
}

type fileID struct{ dev, ino uint64 }

// claims is the in-process registry of claimed devices: each Device
// value (when comparable) and each file's dev/ino.
var claims struct {
	mu   sync.Mutex
	keys map[any]struct{}
}

// Claim claims dev for one writer and returns the function that releases
// the claim. A second Claim of the same Device value, or of another Device
// on the same file, fails with an error wrapping ErrBusy until release is
// called, as does (through Locker) a claim by another process or a mount.
// Every device can be claimed in process (memdev included); devices that
// implement Locker are claimed across processes too.
//
// ext4io.Open claims the device of every writable Volume, and
// ext4io.Format the device it formats.
//
// A device that wraps another and says so with a method Unwrap() Device
// (errordev.Device does) is claimed with every device under it, so that
// the wrapped file is claimed as it would be alone.
func Claim(dev Device) (release func(), err error) {
	var keys []any
	var l Locker
	for d, depth := dev, 0; d != nil && depth < maxUnwrap; depth++ {
		if t := reflect.TypeOf(d); t != nil && t.Comparable() {
			keys = append(keys, d)
		}
		if f, ok := d.(fileIDer); ok {
			if id, ok := f.fileID(); ok {
				keys = append(keys, id)
			}
		}
		if dl, ok := d.(Locker); ok && l == nil {
			l = dl
		}
		u, ok := d.(interface{ Unwrap() Device })
		if !ok {
			break
		}
		d = u.Unwrap()
	}
	claims.mu.Lock()
	for _, k := range keys {
		if _, held := claims.keys[k]; held {
			claims.mu.Unlock()
			return nil, fmt.Errorf("blockdev: %s: a writer in this process holds it: %w", devName(dev), ErrBusy)
		}
	}
	if claims.keys == nil {
		claims.keys = make(map[any]struct{})
	}
	for _, k := range keys {
		claims.keys[k] = struct{}{}
	}
	claims.mu.Unlock()
	drop := func() {
		claims.mu.Lock()
		for _, k := range keys {
			delete(claims.keys, k)
		}
		claims.mu.Unlock()
	}
	ok := l != nil
	if ok {
		if err := l.Lock(); err != nil {
			drop()
			return nil, err
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if ok {
				l.Unlock() // a closed device has dropped its flock already
			}
			drop()
		})
	}, nil
}

// maxUnwrap bounds Claim's walk down Unwrap chains (a wrapper that
// returns itself would loop).
const maxUnwrap = 16

// devName names dev for messages: its path for the OS backends.
func devName(dev Device) string {
	for d, depth := dev, 0; d != nil && depth < maxUnwrap; depth++ {
		if p, ok := d.(interface{ devPath() string }); ok {
			return p.devPath()
		}
		u, ok := d.(interface{ Unwrap() Device })
		if !ok {
			break
		}
		d = u.Unwrap()
	}
	return fmt.Sprintf("%T device", dev)
}

func (d *File) devPath() string   { return d.path }
func (d *Direct) devPath() string { return d.path }
