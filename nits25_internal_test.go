package ext4io

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestInodeWriteErrorKeepsDirty: on a volume without a journal, where
// an inode's write goes through to the device, a failed write of the
// inode table block leaves the inode dirty: the change made in memory
// (a chmod, which fails with the I/O error) still reaches the disk at the
// next Sync, once the device works again, as Linux's inode stays dirty
// for write-back.
func TestInodeWriteErrorKeepsDirty(t *testing.T) {
	mem := memdev.NewBlockSize(32<<20, 4096)
	if err := Format(mem, FormatOptions{Features: "^has_journal"}); err != nil {
		t.Fatal(err)
	}
	toggle := errordev.NewToggle(nil)
	var inj errordev.Injector = toggle
	dev := errordev.New(mem, errordev.Func(func(op errordev.Op) error { return inj.MaybeError(op) }))
	v, err := Open(dev, Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	if v.jm != nil {
		t.Fatal("the volume has a journal")
	}
	if err := v.WriteFile("f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := v.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Sync(); err != nil { // nothing left to write but the chmod
		t.Fatal(err)
	}
	g, idx := v.sb.InodeLocation(f.ino)
	off := int64(v.groups[g].InodeTable)*int64(v.bs) + int64(idx)*int64(v.sb.InodeSizeBytes())
	toggle = errordev.NewToggle(errordev.Kinds(errordev.InRange(errordev.Always(), off, 1), errordev.Write))
	inj = toggle
	toggle.Enable()
	err = f.Chmod(0o600)
	toggle.Disable()
	if !errors.Is(err, ErrIO) {
		t.Fatalf("Chmod with the inode table write failing: %v, want an I/O error", err)
	}
	if err := v.Sync(); err != nil {
		t.Fatalf("Sync once the device works: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	v2, err := Open(mem, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Close()
	fi, err := v2.Stat("f")
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode(); got != 0o600 {
		t.Errorf("mode on disk after the failed write and Sync: %v, want %v", got, fs.FileMode(0o600))
	}
}
