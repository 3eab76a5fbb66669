package ext4io_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/iomap"
)

// fileCalls calls every exported method of File that returns an error
// (go doc ext4io.File); methods without one are called by zeroCalls.
var fileCalls = []struct {
	name string
	op   string // the *fs.PathError's Op
	path string // the *fs.PathError's Path when not "f"
	call func(f *ext4io.File) error
}{
	{"ReadAt", "read", "", func(f *ext4io.File) error { _, err := f.ReadAt(make([]byte, 8), 0); return err }},
	{"Read", "read", "", func(f *ext4io.File) error { _, err := f.Read(make([]byte, 8)); return err }},
	{"WriteAt", "write", "", func(f *ext4io.File) error { _, err := f.WriteAt([]byte("late"), 0); return err }},
	{"Truncate", "truncate", "", func(f *ext4io.File) error { return f.Truncate(4096) }},
	{"Fallocate", "fallocate", "", func(f *ext4io.File) error { return f.Fallocate(ext4io.FallocAllocate, 0, 4096) }},
	{"Sync", "sync", "", func(f *ext4io.File) error { return f.Sync() }},
	{"Datasync", "sync", "", func(f *ext4io.File) error { return f.Datasync() }},
	{"Seek", "seek", "", func(f *ext4io.File) error { _, err := f.Seek(0, io.SeekStart); return err }},
	{"SeekData", "seek", "", func(f *ext4io.File) error { _, err := f.SeekData(0); return err }},
	{"SeekHole", "seek", "", func(f *ext4io.File) error { _, err := f.SeekHole(0); return err }},
	{"Stat", "stat", "", func(f *ext4io.File) error { _, err := f.Stat(); return err }},
	{"Extents", "extents", "", func(f *ext4io.File) error { _, err := f.Extents(); return err }},
	{"Fiemap", "fiemap", "", func(f *ext4io.File) error {
		return f.Fiemap(0, 4096, func(iomap.Extent) error { return nil })
	}},
	{"ReportOps", "map", "", func(f *ext4io.File) error { _, err := f.ReportOps().Begin(0, 4096, 0); return err }},
	{"ReadDir", "readdir", "", func(f *ext4io.File) error { _, err := f.ReadDir(-1); return err }},
	{"Write", "write", "", func(f *ext4io.File) error { _, err := f.Write([]byte("late")); return err }},
	{"WriteString", "write", "", func(f *ext4io.File) error { _, err := f.WriteString("late"); return err }},
	{"WriteAtomic", "atomic write", "", func(f *ext4io.File) error { _, err := f.WriteAtomic(make([]byte, 4096), 0); return err }},
	{"WriteAtomicBatch", "atomic batch write", "", func(f *ext4io.File) error {
		_, err := f.WriteAtomicBatch([]ext4io.AtomicWrite{{Off: 0, Data: make([]byte, 4096)}, {Off: 8192, Data: make([]byte, 4096)}})
		return err
	}},
	{"ReadFrom", "write", "", func(f *ext4io.File) error { _, err := f.ReadFrom(strings.NewReader("late")); return err }},
	{"WriteTo", "read", "", func(f *ext4io.File) error { _, err := f.WriteTo(io.Discard); return err }},
	{"Chmod", "chmod", "", func(f *ext4io.File) error { return f.Chmod(0o600) }},
	{"Chown", "chown", "", func(f *ext4io.File) error { return f.Chown(1, 1) }},
	{"Chtimes", "chtimes", "", func(f *ext4io.File) error { return f.Chtimes(time.Now(), time.Now()) }},
	{"Accessed", "atime", "", func(f *ext4io.File) error { return f.Accessed(time.Now()) }},
	{"Getxattr", "getxattr", "", func(f *ext4io.File) error { _, err := f.Getxattr("user.a"); return err }},
	{"Setxattr", "setxattr", "", func(f *ext4io.File) error { return f.Setxattr("user.a", []byte("v"), 0) }},
	{"Listxattr", "listxattr", "", func(f *ext4io.File) error { _, err := f.Listxattr(); return err }},
	{"Removexattr", "removexattr", "", func(f *ext4io.File) error { return f.Removexattr("user.a") }},
	{"CreateAt", "open", "f/x", func(f *ext4io.File) error { _, err := f.CreateAt("x", 0o644); return err }},
	{"MkdirAt", "mkdir", "f/y", func(f *ext4io.File) error { _, err := f.MkdirAt("y", 0o755); return err }},
	{"LockIO", "lock", "", func(f *ext4io.File) error { _, err := f.LockIO(ext4io.IomapOverwrite, 0, 4096); return err }},
	{"NormalOps", "map", "", func(f *ext4io.File) error { _, err := f.NormalOps().Begin(0, 4096, 0); return err }},
	{"OverwriteOps", "map", "", func(f *ext4io.File) error { _, err := f.OverwriteOps().Begin(0, 4096, 0); return err }},
	{"Close", "close", "", func(f *ext4io.File) error { return f.Close() }},
}

// volumeCalls calls every exported method of Volume that returns an error.
var volumeCalls = []struct {
	name string
	call func(v *ext4io.Volume) error
}{
	{"Open", func(v *ext4io.Volume) error { _, err := v.Open("f"); return err }},
	{"OpenFile", func(v *ext4io.Volume) error { _, err := v.OpenFile("f", os.O_RDWR|ext4io.O_DIRECT, 0); return err }},
	{"OpenIno", func(v *ext4io.Volume) error { _, err := v.OpenIno(2); return err }},
	{"Create", func(v *ext4io.Volume) error { _, err := v.Create("g"); return err }},
	{"Stat", func(v *ext4io.Volume) error { _, err := v.Stat("f"); return err }},
	{"Lstat", func(v *ext4io.Volume) error { _, err := v.Lstat("f"); return err }},
	{"Readlink", func(v *ext4io.Volume) error { _, err := v.Readlink("f"); return err }},
	{"ReadDir", func(v *ext4io.Volume) error { _, err := v.ReadDir("/"); return err }},
	{"Mkdir", func(v *ext4io.Volume) error { return v.Mkdir("d", 0o755) }},
	{"Rmdir", func(v *ext4io.Volume) error { return v.Rmdir("d") }},
	{"Unlink", func(v *ext4io.Volume) error { return v.Unlink("f") }},
	{"Link", func(v *ext4io.Volume) error { return v.Link("f", "h") }},
	{"Symlink", func(v *ext4io.Volume) error { return v.Symlink("f", "s") }},
	{"Rename", func(v *ext4io.Volume) error { return v.Rename("f", "r") }},
	{"Chmod", func(v *ext4io.Volume) error { return v.Chmod("f", 0o600) }},
	{"Chown", func(v *ext4io.Volume) error { return v.Chown("f", 1, 1) }},
	{"Lchown", func(v *ext4io.Volume) error { return v.Lchown("f", 1, 1) }},
	{"Chtimes", func(v *ext4io.Volume) error { return v.Chtimes("f", time.Now(), time.Now()) }},
	{"Lchtimes", func(v *ext4io.Volume) error { return v.Lchtimes("f", time.Now(), time.Now()) }},
	{"Sync", func(v *ext4io.Volume) error { return v.Sync() }},
	{"Journal", func(v *ext4io.Volume) error { _, err := v.Journal(); return err }},
	{"Group", func(v *ext4io.Volume) error { _, err := v.Group(0); return err }},
	{"Mknod", func(v *ext4io.Volume) error { return v.Mknod("n", fs.ModeNamedPipe|0o644, 0) }},
	{"MkdirAll", func(v *ext4io.Volume) error { return v.MkdirAll("a/b", 0o755) }},
	{"Remove", func(v *ext4io.Volume) error { return v.Remove("f") }},
	{"RemoveAll", func(v *ext4io.Volume) error { return v.RemoveAll("f") }},
	{"Rename2", func(v *ext4io.Volume) error { return v.Rename2("f", "r", ext4io.RENAME_NOREPLACE) }},
	{"ReadFile", func(v *ext4io.Volume) error { _, err := v.ReadFile("f"); return err }},
	{"WriteFile", func(v *ext4io.Volume) error { return v.WriteFile("w", []byte("x"), 0o644) }},
	{"Truncate", func(v *ext4io.Volume) error { return v.Truncate("f", 0) }},
	{"DirEntries", func(v *ext4io.Volume) error { _, err := v.DirEntries("/"); return err }},
	{"Getxattr", func(v *ext4io.Volume) error { _, err := v.Getxattr("f", "user.a"); return err }},
	{"Lgetxattr", func(v *ext4io.Volume) error { _, err := v.Lgetxattr("f", "user.a"); return err }},
	{"Setxattr", func(v *ext4io.Volume) error { return v.Setxattr("f", "user.a", []byte("v"), 0) }},
	{"Lsetxattr", func(v *ext4io.Volume) error { return v.Lsetxattr("f", "user.a", []byte("v"), 0) }},
	{"Listxattr", func(v *ext4io.Volume) error { _, err := v.Listxattr("f"); return err }},
	{"Llistxattr", func(v *ext4io.Volume) error { _, err := v.Llistxattr("f"); return err }},
	{"Removexattr", func(v *ext4io.Volume) error { return v.Removexattr("f", "user.a") }},
	{"Lremovexattr", func(v *ext4io.Volume) error { return v.Lremovexattr("f", "user.a") }},
	{"Statfs", func(v *ext4io.Volume) error { _, err := v.Statfs(); return err }},
	{"SyncContext", func(v *ext4io.Volume) error { return v.SyncContext(context.Background()) }},
	{"Trim", func(v *ext4io.Volume) error { _, err := v.Trim(0, 1<<20, 0); return err }},
	{"FileSystem.Open", func(v *ext4io.Volume) error { _, err := v.FileSystem().Open("f"); return err }},
	{"FS.Open", func(v *ext4io.Volume) error { _, err := v.FS().Open("f"); return err }},
	{"FS.Stat", func(v *ext4io.Volume) error { _, err := v.FS().Stat("f"); return err }},
	{"FS.ReadDir", func(v *ext4io.Volume) error { _, err := v.FS().ReadDir("."); return err }},
	{"Close", func(v *ext4io.Volume) error { return v.Close() }},
}

func isClosed(err error) bool {
	return errors.Is(err, ext4io.ErrClosed) && errors.Is(err, fs.ErrClosed)
}

// TestClosedFileRefusesEverything: after File.Close every method that
// returns an error returns an *fs.PathError naming the file and the
// operation, matching ErrClosed and fs.ErrClosed; the volume stays usable.
func TestClosedFileRefusesEverything(t *testing.T) {
	img, v, _ := openWritableWithFile(t)
	for _, tc := range fileCalls {
		t.Run(tc.name, func(t *testing.T) {
			f, err := v.Open("f")
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			err = tc.call(f)
			if !isClosed(err) {
				t.Fatalf("%s after Close: %v, want ErrClosed", tc.name, err)
			}
			var pe *fs.PathError
			path := tc.path
			if path == "" {
				path = "f"
			}
			if !errors.As(err, &pe) || pe.Op != tc.op || pe.Path != path {
				t.Errorf("%s after Close: %#v, want *fs.PathError{Op: %q, Path: %q}", tc.name, err, tc.op, path)
			}
		})
	}
	f, err := v.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	if f.Size() != 8192 {
		t.Errorf("size %d after the closed writes, want 8192", f.Size())
	}
	f.Close()
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	e2fs.Fsck(t, img)
}

// TestClosedVolumeRefusesEverything: after Volume.Close every Volume
// method that returns an error, and every method of its open Files,
// returns an error matching ErrClosed; a second Close too.
func TestClosedVolumeRefusesEverything(t *testing.T) {
	img, v, f := openWritableWithFile(t)
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range volumeCalls {
		if err := tc.call(v); !isClosed(err) {
			t.Errorf("Volume.%s after Close: %v, want ErrClosed", tc.name, err)
		}
	}
	for _, tc := range fileCalls {
		if tc.name == "Close" {
			continue
		}
		if err := tc.call(f); !isClosed(err) {
			t.Errorf("File.%s after Volume.Close: %v, want ErrClosed", tc.name, err)
		}
	}
	if v.Allocator() != nil {
		t.Error("Allocator of a closed volume is not nil")
	}
	e2fs.Fsck(t, img)
}

// TestZeroValues: the zero File and Volume (and a nil *File, as a nil
// *os.File) are not open: every method returns an error matching
// ErrInvalid or a zero value, none panics.
func TestZeroValues(t *testing.T) {
	for _, f := range []*ext4io.File{new(ext4io.File), nil} {
		for _, tc := range fileCalls {
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("File.%s on %v: panic %v", tc.name, f, r)
					}
				}()
				if err := tc.call(f); !errors.Is(err, ext4io.ErrInvalid) {
					t.Errorf("File.%s on a zero File: %v, want ErrInvalid", tc.name, err)
				}
			}()
		}
		if f.Size() != 0 || f.Ino() != 0 {
			t.Errorf("zero File: size %d ino %d", f.Size(), f.Ino())
		}
	}
	for _, v := range []*ext4io.Volume{new(ext4io.Volume)} {
		for _, tc := range volumeCalls {
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("Volume.%s on %v: panic %v", tc.name, v, r)
					}
				}()
				if err := tc.call(v); !errors.Is(err, ext4io.ErrInvalid) {
					t.Errorf("Volume.%s on a zero Volume: %v, want ErrInvalid", tc.name, err)
				}
			}()
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Volume accessors on %v: panic %v", v, r)
				}
			}()
			_ = v.Superblock()
			_ = v.CacheStats()
			_ = v.Counters()
			_ = v.Recovery()
			if v.BlockSize() != 0 || v.Writable() || v.Allocator() != nil {
				t.Error("zero Volume reports a block size, writability or an allocator")
			}
		}()
	}
}

// TestWriteAfterUnlinkClose: the corruption. Create, Unlink,
// Close, then WriteAt on the closed File must fail and change nothing: the
// inode was freed, and a write would have landed in blocks a later file
// reuses (e2fsck: block bitmap differences).
func TestWriteAfterUnlinkClose(t *testing.T) {
	img, v, f := openWritableWithFile(t)
	if err := v.Unlink("f"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 64<<10), 0); !isClosed(err) {
		t.Errorf("WriteAt after Close: %v", err)
	}
	if err := f.Truncate(1 << 20); !isClosed(err) {
		t.Errorf("Truncate after Close: %v", err)
	}
	if err := f.Fallocate(ext4io.FallocAllocate, 0, 1<<20); !isClosed(err) {
		t.Errorf("Fallocate after Close: %v", err)
	}
	if err := f.Sync(); !isClosed(err) {
		t.Errorf("Sync after Close: %v", err)
	}
	g, err := v.Create("g")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt(make([]byte, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	g.Close()
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	e2fs.Fsck(t, img)
}

// TestCloseRacesIO: Close while other goroutines write, read, truncate
// and sync the same (unlinked) File: each call either succeeds before
// Close or fails with ErrClosed, nothing lands in the freed inode (e2fsck
// is clean), and -race finds no data race. Direct and buffered files.
func TestCloseRacesIO(t *testing.T) {
	for _, direct := range []bool{false, true} {
		name := "buffered"
		if direct {
			name = "direct"
		}
		t.Run(name, func(t *testing.T) {
			img, v, f := openWritableWithFile(t)
			f.Close()
			for round := 0; round < 20; round++ {
				flags := os.O_RDWR
				if direct {
					flags |= ext4io.O_DIRECT
				}
				f, err := v.OpenFile("f", flags, 0)
				if err != nil {
					t.Fatal(err)
				}
				if round%2 == 1 {
					if err := v.Unlink("f"); err != nil {
						t.Fatal(err)
					}
				}
				var wg sync.WaitGroup
				for g := 0; g < 4; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						buf := make([]byte, 4096)
						for i := 0; ; i++ {
							var err error
							switch (g + i) % 4 {
							case 0:
								_, err = f.WriteAt(buf, int64(i%16)*4096)
							case 1:
								_, err = f.ReadAt(buf, 0)
								if err == io.EOF {
									err = nil
								}
							case 2:
								err = f.Truncate(int64(i%8) * 4096)
							case 3:
								err = f.Sync()
							}
							if err != nil {
								if !isClosed(err) {
									t.Errorf("op %d: %v", (g+i)%4, err)
								}
								return
							}
						}
					}()
				}
				time.Sleep(time.Millisecond)
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				wg.Wait()
				if round%2 == 1 {
					g, err := v.Create("f")
					if err != nil {
						t.Fatal(err)
					}
					g.WriteAt(make([]byte, 8192), 0)
					g.Close()
				}
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			e2fs.Fsck(t, img)
		})
	}
}
