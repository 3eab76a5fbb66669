package ext4io

import (
	"fmt"

	"github.com/ext4io/ext4io/alloc"
	"github.com/ext4io/ext4io/layout"
)

// CheckTree runs the extent tree's full structural check (tests only).
func (f *File) CheckTree() error {
	if f.m == nil || f.m.tree == nil {
		return nil
	}
	f.n.mu.RLock()
	defer f.n.mu.RUnlock()
	return f.m.tree.Check()
}

// Allocator returns the block and inode allocator of a writable volume
// (nil when read-only or closed), for tests that fill the volume or
// check its free counts. Blocks it hands out belong to the test, which
// must reference them from an inode or free them before Close for the
// image to pass e2fsck.
func (v *Volume) Allocator() *alloc.Allocator {
	if v == nil || v.closed.Load() {
		return nil
	}
	return v.alloc
}

// Group returns a copy of group g's descriptor.
func (v *Volume) Group(g int) (layout.GroupDesc, error) {
	if err := v.checkOpen(); err != nil {
		return layout.GroupDesc{}, err
	}
	if g < 0 || g >= len(v.groups) {
		return layout.GroupDesc{}, fmt.Errorf("ext4io: group %d of %d: %w", g, len(v.groups), ErrInvalid)
	}
	return *v.groups[g], nil
}

// WaitHomeWrites waits until the volume's journalled pages written in
// place in the background (homewrite.go) are settled.
func WaitHomeWrites(v *Volume) { v.home.h.waitAll() }

// DeviceWrapped reports whether the volume's requests go through homeDev.
func DeviceWrapped(v *Volume) bool { return v.home.inner != nil && v.dev != v.home.inner }
