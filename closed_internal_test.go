package ext4io

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestClosedCheckedUnderInodeLock: an operation that passed its entry
// check and waits for the inode lock while Close runs must see the close
// once it has the lock, and change nothing: Close sets closed under the
// inode lock, and the write paths read it again under that lock. Here the
// test holds the lock, lets each operation queue on it, marks the File
// closed as Close does, and releases the lock.
func TestClosedCheckedUnderInodeLock(t *testing.T) {
	dev := memdev.New(32 << 20)
	if err := Format(dev, FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, direct := range []bool{false, true} {
		v, err := Open(dev, Options{Writable: true})
		if err != nil {
			t.Fatal(err)
		}
		ops := map[string]func(f *File) error{
			"WriteAt":   func(f *File) error { _, err := f.WriteAt(make([]byte, 4096), 1<<20); return err },
			"Overwrite": func(f *File) error { _, err := f.WriteAt(make([]byte, 4096), 0); return err },
			"Truncate":  func(f *File) error { return f.Truncate(1 << 20) },
			"Fallocate": func(f *File) error { return f.Fallocate(FallocAllocate, 0, 1<<20) },
			"ReadAt":    func(f *File) error { _, err := f.ReadAt(make([]byte, 4096), 0); return err },
		}
		for name, op := range ops {
			f, err := v.Create("f")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(make([]byte, 8192), 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if direct {
				f, err = v.OpenFile("f", os.O_RDWR|O_DIRECT, 0)
			} else {
				f, err = v.OpenFile("f", os.O_RDWR, 0)
			}
			if err != nil {
				t.Fatal(err)
			}
			size := f.Size()
			f.n.mu.Lock()
			done := make(chan error)
			go func() { done <- op(f) }()
			time.Sleep(20 * time.Millisecond) // op passes its entry check and waits for the lock
			f.closed.Store(true)              // what Close does under the lock
			f.n.mu.Unlock()
			if err := <-done; !errors.Is(err, ErrClosed) {
				t.Errorf("direct %v: %s queued on the inode lock across Close: %v, want ErrClosed", direct, name, err)
			}
			if f.Size() != size {
				t.Errorf("direct %v: %s changed the size of a closed File: %d -> %d", direct, name, size, f.Size())
			}
			if err := v.Unlink("f"); err != nil {
				t.Fatal(err)
			}
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
