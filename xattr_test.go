package ext4io_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/layout"
	"github.com/stretchr/testify/require"
)

// memImage writes dev's bytes to an image file for e2fsck.
func memImage(t *testing.T, dev *memdev.Device) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "mem.img")
	f, err := os.Create(img)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < dev.Size(); off += int64(len(buf)) {
		n, _ := dev.ReadAt(buf[:min(int64(len(buf)), dev.Size()-off)], off)
		if bytes.Count(buf[:n], []byte{0}) == n {
			continue // keep the image sparse
		}
		if _, err := f.WriteAt(buf[:n], off); err != nil {
			t.Fatal(err)
		}
	}
	require.NoError(t, f.Truncate(dev.Size()))
	return img
}

func newXattrVolume(t *testing.T, size int64, fo ext4io.FormatOptions) (*memdev.Device, *ext4io.Volume) {
	t.Helper()
	dev := memdev.New(size)
	require.NoError(t, ext4io.Format(dev, fo))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	return dev, v
}

// TestXattrBasic: set, get, list, replace and remove in-inode and block
// attributes; the flag and size errors as Linux returns them.
func TestXattrBasic(t *testing.T) {
	for _, bs := range []int{1024, 4096} {
		t.Run(fmt.Sprint(bs), func(t *testing.T) {
			dev, v := newXattrVolume(t, 32<<20, ext4io.FormatOptions{BlockSize: bs})
			f, err := v.Create("f")
			require.NoError(t, err)
			if _, err := v.Getxattr("f", "user.none"); !errors.Is(err, ext4io.ErrNoAttr) {
				t.Fatalf("missing attr: %v", err)
			}
			var pe *fs.PathError
			if _, err := v.Getxattr("f", "user.none"); !errors.As(err, &pe) || pe.Op != "getxattr" {
				t.Fatalf("error %v is not a getxattr PathError", err)
			}
			must := func(err error) {
				t.Helper()
				require.NoError(t, err)
			}
			must(v.Setxattr("f", "user.small", []byte("hi"), 0))
			must(v.Setxattr("f", "user.empty", nil, ext4io.XATTR_CREATE))
			big := bytes.Repeat([]byte("B"), bs/2)
			must(v.Setxattr("f", "user.big", big, 0))
			must(f.Setxattr("trusted.t", []byte("tt"), 0))
			if err := v.Setxattr("f", "user.small", []byte("x"), ext4io.XATTR_CREATE); !errors.Is(err, ext4io.ErrExist) || !errors.Is(err, fs.ErrExist) {
				t.Fatalf("XATTR_CREATE on existing: %v", err)
			}
			if err := v.Setxattr("f", "user.nope", []byte("x"), ext4io.XATTR_REPLACE); !errors.Is(err, ext4io.ErrNoAttr) {
				t.Fatalf("XATTR_REPLACE on missing: %v", err)
			}
			if err := v.Setxattr("f", "user.huge", make([]byte, bs), 0); !errors.Is(err, ext4io.ErrRange) {
				t.Fatalf("value of a block: %v", err)
			}
			if err := v.Setxattr("f", "user.more", bytes.Repeat([]byte("M"), bs/2), 0); !errors.Is(err, ext4io.ErrNoSpace) {
				t.Fatalf("second half-block value: %v", err)
			}
			if err := v.Setxattr("f", "bogus.x", nil, 0); !errors.Is(err, ext4io.ErrUnsupported) {
				t.Fatalf("unknown namespace: %v", err)
			}
			for attr, want := range map[string][]byte{"user.small": []byte("hi"), "user.empty": {}, "user.big": big, "trusted.t": []byte("tt")} {
				got, err := v.Getxattr("f", attr)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s = %q, %v", attr, got, err)
				}
			}
			names, err := f.Listxattr()
			must(err)
			slices.Sort(names)
			if want := []string{"trusted.t", "user.big", "user.empty", "user.small"}; !slices.Equal(names, want) {
				t.Fatalf("list %v, want %v", names, want)
			}
			must(v.Setxattr("f", "user.big", []byte("now small"), ext4io.XATTR_REPLACE))
			must(v.Removexattr("f", "user.small"))
			if err := v.Removexattr("f", "user.small"); !errors.Is(err, ext4io.ErrNoAttr) {
				t.Fatalf("second remove: %v", err)
			}
			must(v.Symlink("f", "link"))
			if got, err := v.Getxattr("link", "user.big"); err != nil || string(got) != "now small" {
				t.Fatalf("through symlink: %q %v", got, err)
			}
			if _, err := v.Lgetxattr("link", "user.big"); !errors.Is(err, ext4io.ErrNoAttr) {
				t.Fatalf("Lgetxattr on the link: %v", err)
			}
			if err := v.Lsetxattr("link", "user.x", nil, 0); !errors.Is(err, fs.ErrPermission) {
				t.Fatalf("user attribute on a symlink: %v", err)
			}
			must(v.Lsetxattr("link", "trusted.x", []byte("ok"), 0))
			must(f.Close())
			must(v.Close())
			e2fs.Fsck(t, memImage(t, dev))
		})
	}
}

// TestXattrModel: random set/replace/remove/unlink on many files from
// several goroutines, checked against a map after every step and by
// e2fsck at the end.
func TestXattrModel(t *testing.T) {
	seed := int64(os.Getpid())
	t.Logf("seed %d", seed)
	dev, v := newXattrVolume(t, 64<<20, ext4io.FormatOptions{BlockSize: 1024})
	const workers, files, steps = 4, 12, 400
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed + int64(w)))
			model := map[string]map[string][]byte{}
			fail := func(format string, args ...any) {
				errc <- fmt.Errorf("worker %d: "+format, append([]any{w}, args...)...)
			}
			for s := 0; s < steps; s++ {
				name := fmt.Sprintf("w%d-f%d", w, rng.Intn(files))
				attrs, exists := model[name]
				if !exists {
					f, err := v.Create(name)
					if err != nil {
						fail("create %s: %v", name, err)
						return
					}
					f.Close()
					attrs = map[string][]byte{}
					model[name] = attrs
				}
				// Few names and values: identical sets are common, so
				// blocks get shared, copied on write and released.
				attr := fmt.Sprintf("user.a%d", rng.Intn(5))
				switch op := rng.Intn(10); {
				case op < 6:
					val := bytes.Repeat([]byte{byte('a' + rng.Intn(2))}, []int{0, 3, 20, 100, 300}[rng.Intn(5)])
					err := v.Setxattr(name, attr, val, 0)
					switch {
					case errors.Is(err, ext4io.ErrNoSpace):
					case err != nil:
						fail("set %s %s: %v", name, attr, err)
						return
					default:
						attrs[attr] = val
					}
				case op < 9:
					err := v.Removexattr(name, attr)
					if _, ok := attrs[attr]; ok != (err == nil) || err != nil && !errors.Is(err, ext4io.ErrNoAttr) {
						fail("remove %s %s (in model %v): %v", name, attr, ok, err)
						return
					}
					delete(attrs, attr)
				default:
					if err := v.Unlink(name); err != nil {
						fail("unlink %s: %v", name, err)
						return
					}
					delete(model, name)
					continue
				}
				got, err := v.Listxattr(name)
				if err != nil {
					fail("list %s: %v", name, err)
					return
				}
				slices.Sort(got)
				var want []string
				for a := range attrs {
					want = append(want, a)
				}
				slices.Sort(want)
				if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
					fail("step %d: %s lists %v, model %v", s, name, got, want)
					return
				}
				for _, a := range want {
					if val, err := v.Getxattr(name, a); err != nil || !bytes.Equal(val, attrs[a]) {
						fail("step %d: %s %s = %q %v, model %q", s, name, a, val, err, attrs[a])
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	require.NoError(t, v.Close())
	e2fs.Fsck(t, memImage(t, dev))
}

// TestXattrShare: files given identical block sets share one block, as
// Linux's mbcache makes them; changing one copies it, removing the
// attributes or the files drops references; e2fsck checks every
// h_refcount against the inodes naming the block.
func TestXattrShare(t *testing.T) {
	for _, feat := range []string{"^ext_attr", "^metadata_csum", "^has_journal"} {
		t.Run(feat, func(t *testing.T) { testXattrShare(t, feat) })
	}
}

func testXattrShare(t *testing.T, features string) {
	img := filepath.Join(t.TempDir(), "share.img")
	e2fs.Mkfs(t, img, "16M", "-b", "1024", "-I", "256", "-O", features)
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	big := bytes.Repeat([]byte("S"), 400)
	for i := range 5 {
		name := fmt.Sprintf("f%d", i)
		f, err := v.Create(name)
		require.NoError(t, err)
		f.Close()
		require.NoError(t, v.Setxattr(name, "user.big", big, 0))
		if err := v.Setxattr(name, "user.big2", big, 0); err != nil {
			t.Fatal(err)
		}
	}
	require.NoError(t, v.Close())
	e2fs.Fsck(t, img)
	blk := fileACL(t, img, "/f0")
	for i := 1; i < 5; i++ {
		if got := fileACL(t, img, fmt.Sprintf("/f%d", i)); got != blk {
			t.Fatalf("f%d has block %s, f0 %s: not shared", i, got, blk)
		}
	}
	v, err = ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	must := func(err error) {
		t.Helper()
		require.NoError(t, err)
	}
	must(v.Setxattr("f1", "user.big", []byte("changed"), 0)) // copy on write
	must(v.Removexattr("f2", "user.big2"))
	must(v.Unlink("f3"))
	must(v.Setxattr("f1", "user.big", big, 0)) // identical again: back to sharing
	must(v.Close())
	e2fs.Fsck(t, img)
	if got := fileACL(t, img, "/f1"); got != blk {
		t.Fatalf("f1 back to the shared set has block %s, want %s", got, blk)
	}
}

// TestXattrConcurrentIO: attribute reads and writes race with direct
// writes (which update the inode under the shared lock) on one file;
// -race checks the locking, the model the values.
func TestXattrConcurrentIO(t *testing.T) {
	dev, v := newXattrVolume(t, 64<<20, ext4io.FormatOptions{BlockSize: 4096})
	f, err := v.Create("f")
	require.NoError(t, err)
	require.NoError(t, f.Fallocate(ext4io.FallocWriteZeroes, 0, 1<<20))
	d, err := v.OpenFile("f", os.O_RDWR|ext4io.O_DIRECT, 0)
	require.NoError(t, err)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(2)
	go func() { // direct overwrites and extending writes
		defer wg.Done()
		buf := make([]byte, 4096)
		for i := int64(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := d.WriteAt(buf, (i%300)*4096); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() { // readers
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := f.Listxattr(); err != nil {
				t.Error(err)
				return
			}
			if _, err := v.Getxattr("f", "user.k"); err != nil && !errors.Is(err, ext4io.ErrNoAttr) {
				t.Error(err)
				return
			}
		}
	}()
	for i := range 200 {
		val := bytes.Repeat([]byte{byte(i)}, i*3%700)
		require.NoError(t, v.Setxattr("f", "user.k", val, 0))
		if got, err := f.Getxattr("user.k"); err != nil || !bytes.Equal(got, val) {
			t.Fatalf("step %d: %d bytes, %v", i, len(got), err)
		}
	}
	close(stop)
	wg.Wait()
	d.Close()
	f.Close()
	require.NoError(t, v.Close())
	e2fs.Fsck(t, memImage(t, dev))
}

// TestXattrACL: an access ACL sets the permission bits; one the mode
// expresses alone, or an empty one, stores nothing; invalid ACLs fail
// with ErrInvalid; a default ACL needs a directory.
func TestXattrACL(t *testing.T) {
	dev, v := newXattrVolume(t, 32<<20, ext4io.FormatOptions{BlockSize: 1024})
	f, err := v.Create("f")
	require.NoError(t, err)
	f.Close()
	require.NoError(t, v.Mkdir("d", 0o755))
	e := func(tag, perm uint16, id uint32) layout.ACLEntry {
		return layout.ACLEntry{Tag: tag, Perm: perm, ID: id}
	}
	u := uint32(layout.ACLUndefinedID)
	named := layout.EncodeACLXattr([]layout.ACLEntry{e(layout.ACLUserObj, 7, u), e(layout.ACLUser, 6, 1000),
		e(layout.ACLGroupObj, 5, u), e(layout.ACLMask, 6, u), e(layout.ACLOther, 1, u)})
	const acl = "system.posix_acl_access"
	require.NoError(t, v.Setxattr("f", acl, named, 0))
	if got, err := v.Getxattr("f", acl); err != nil || !bytes.Equal(got, named) {
		t.Fatalf("ACL read back %x %v, want %x", got, err, named)
	}
	if fi, _ := v.Stat("f"); fi.Mode().Perm() != 0o761 {
		t.Fatalf("mode %v after the ACL, want -rwxrw---x", fi.Mode())
	}
	base := layout.EncodeACLXattr([]layout.ACLEntry{e(layout.ACLUserObj, 6, u), e(layout.ACLGroupObj, 4, u), e(layout.ACLOther, 4, u)})
	require.NoError(t, v.Setxattr("f", acl, base, 0))
	if _, err := v.Getxattr("f", acl); !errors.Is(err, ext4io.ErrNoAttr) {
		t.Fatalf("an ACL equal to the mode is stored: %v", err)
	}
	if fi, _ := v.Stat("f"); fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v after the base ACL, want 0644", fi.Mode())
	}
	for _, bad := range [][]layout.ACLEntry{
		{e(layout.ACLUserObj, 6, u), e(layout.ACLOther, 4, u)},                                                       // no group
		{e(layout.ACLUserObj, 6, u), e(layout.ACLUser, 6, 5), e(layout.ACLGroupObj, 4, u), e(layout.ACLOther, 4, u)}, // no mask
	} {
		if err := v.Setxattr("f", acl, layout.EncodeACLXattr(bad), 0); !errors.Is(err, ext4io.ErrInvalid) {
			t.Fatalf("invalid ACL %v: %v", bad, err)
		}
	}
	if err := v.Setxattr("f", acl, []byte("junk"), 0); !errors.Is(err, ext4io.ErrInvalid) {
		t.Fatalf("junk ACL: %v", err)
	}
	if err := v.Setxattr("f", "system.posix_acl_default", named, 0); !errors.Is(err, ext4io.ErrInvalid) {
		t.Fatalf("default ACL on a file: %v", err)
	}
	require.NoError(t, v.Setxattr("d", "system.posix_acl_default", named, 0))
	if fi, _ := v.Stat("d"); fi.Mode().Perm() != 0o755 {
		t.Fatalf("a default ACL changed the mode: %v", fi.Mode())
	}
	empty := layout.EncodeACLXattr(nil)
	require.NoError(t, v.Setxattr("d", "system.posix_acl_default", empty, 0))
	if names, _ := v.Listxattr("d"); len(names) != 0 {
		t.Fatalf("an empty ACL left %v", names)
	}
	require.NoError(t, v.Close())
	e2fs.Fsck(t, memImage(t, dev))
}

// TestXattrNoSpace: with no free block, an attribute that needs one fails
// with ErrNoSpace and changes nothing; once a file's blocks are freed
// (allocatable after the commit the retry waits for), it succeeds.
func TestXattrNoSpace(t *testing.T) {
	dev := memdev.New(8 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{BlockSize: 1024}))
	// No timed commits: blocks freed by "small" wait for a commit (the
	// retry's, or the unlink's own).
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, CommitInterval: -1, WritebackAge: -1})
	require.NoError(t, err)
	must := func(err error) {
		t.Helper()
		require.NoError(t, err)
	}
	f, err := v.Create("x")
	must(err)
	f.Close()
	small, err := v.Create("small")
	must(err)
	_, err = small.WriteAt(make([]byte, 1024), 0)
	must(err)
	must(small.Sync())
	small.Close()
	must(v.Setxattr("x", "user.small", []byte("in the inode"), 0))
	filler, err := v.Create("filler")
	must(err)
	buf := make([]byte, 64<<10)
	for off := int64(0); ; off += int64(len(buf)) {
		if _, err := filler.WriteAt(buf, off); err != nil {
			if !errors.Is(err, ext4io.ErrNoSpace) {
				t.Fatal(err)
			}
			break
		}
	}
	for {
		if err := filler.Sync(); err == nil {
			break
		} else if !errors.Is(err, ext4io.ErrNoSpace) {
			t.Fatal(err)
		}
	}
	for off := filler.Size(); ; off += 1024 { // the last blocks, one at a time
		if _, err := filler.WriteAt(buf[:1024], off); err != nil {
			break
		}
		if err := filler.Sync(); err != nil {
			break
		}
	}
	filler.Close()
	if err := v.Setxattr("x", "user.big", bytes.Repeat([]byte("B"), 600), 0); !errors.Is(err, ext4io.ErrNoSpace) {
		t.Fatalf("attribute needing a block on a full volume: %v", err)
	}
	if names, _ := v.Listxattr("x"); !slices.Equal(names, []string{"user.small"}) {
		t.Fatalf("failed set left %v", names)
	}
	must(v.Unlink("small"))
	must(v.Setxattr("x", "user.big", bytes.Repeat([]byte("B"), 600), 0))
	must(v.Close())
	e2fs.Fsck(t, memImage(t, dev))
}

// TestXattrOrphan: an open file whose last name is gone keeps taking
// attributes (as fsetxattr does); its block is freed with the inode when
// the last File closes.
func TestXattrOrphan(t *testing.T) {
	dev, v := newXattrVolume(t, 32<<20, ext4io.FormatOptions{BlockSize: 1024})
	f, err := v.Create("f")
	require.NoError(t, err)
	require.NoError(t, v.Unlink("f"))
	if err := f.Setxattr("user.big", bytes.Repeat([]byte("O"), 700), 0); err != nil {
		t.Fatal(err)
	}
	if got, err := f.Getxattr("user.big"); err != nil || len(got) != 700 {
		t.Fatalf("orphan's attribute: %d bytes, %v", len(got), err)
	}
	require.NoError(t, f.Close())
	if _, err := f.Listxattr(); !errors.Is(err, ext4io.ErrClosed) {
		t.Fatalf("Listxattr on a closed File: %v", err)
	}
	require.NoError(t, v.Close())
	e2fs.Fsck(t, memImage(t, dev))
}
