package ext4io

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// Lookups and opens racing the removal of the name they look up: the
// inode the name named may be freed meanwhile, and its number handed out
// again. No lookup may cache the freed inode (the next create of that
// number then failed with "inode N marked free but in use" and stopped
// the volume), and no File handed out may be of a freed inode.

// TestLookupRemoveStress runs creates, writes and removes of a few names
// against opens, stats and reads of the same names, and creates of fresh
// names that take the freed numbers again. Opens may only fail with
// fs.ErrNotExist; everything else must succeed, and the image must be
// clean.
func TestLookupRemoveStress(t *testing.T) {
	dur := 1500 * time.Millisecond
	if testing.Short() {
		dur = 500 * time.Millisecond
	}
	dev, v := memVolume(t, 32<<20, 1024)
	names := []string{"a", "b", "c"}
	var (
		wg      sync.WaitGroup
		stop    atomic.Bool
		errMu   sync.Mutex
		errList []error
		opened  atomic.Int64
	)
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if len(errList) < 10 {
			errList = append(errList, err)
		}
		stop.Store(true)
	}
	notExistOK := func(op string, err error) {
		var pe *fs.PathError
		switch {
		case err == nil:
		case !errors.Is(err, fs.ErrNotExist):
			fail(fmt.Errorf("%s: %w", op, err))
		case !errors.As(err, &pe):
			fail(fmt.Errorf("%s: not an *fs.PathError: %w", op, err))
		}
	}
	data := make([]byte, 3000)
	for i := range data {
		data[i] = byte(i)
	}
	for w := range 2 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				name := names[(i+w)%len(names)]
				f, err := v.Create(name)
				if err != nil {
					fail(fmt.Errorf("create %s: %w", name, err))
					return
				}
				if _, err := f.Write(data); err != nil {
					fail(fmt.Errorf("write %s: %w", name, err))
				}
				if err := f.Close(); err != nil {
					fail(fmt.Errorf("close %s: %w", name, err))
				}
				notExistOK("remove", v.Remove(name))
			}
		})
	}
	for r := range 3 {
		wg.Go(func() {
			buf := make([]byte, 512)
			for i := 0; !stop.Load(); i++ {
				name := names[(i+r)%len(names)]
				switch (i + r) % 6 {
				case 5:
					ents, err := v.ReadDir(".")
					if err != nil {
						fail(fmt.Errorf("readdir: %w", err))
					}
					for _, e := range ents {
						if _, err := e.Info(); err != nil && !errors.Is(err, fs.ErrNotExist) {
							fail(fmt.Errorf("info %s: %w", e.Name(), err))
						}
					}
				case 0:
					_, err := v.Stat(name)
					notExistOK("stat", err)
				case 1:
					_, err := v.Lstat(name)
					notExistOK("lstat", err)
				case 2:
					_, err := v.ReadFile(name)
					notExistOK("readfile", err)
				case 3:
					f, err := v.OpenFile(name, os.O_RDWR, 0)
					notExistOK("open", err)
					if err != nil {
						continue
					}
					opened.Add(1)
					// The name may go now: the File keeps the inode.
					if _, err := f.ReadAt(buf, 0); err != nil && err != io.EOF {
						fail(fmt.Errorf("read %s: %w", name, err))
					}
					if _, err := f.WriteAt(buf[:100], 100); err != nil {
						fail(fmt.Errorf("write through open %s: %w", name, err))
					}
					if err := f.Close(); err != nil {
						fail(fmt.Errorf("close %s: %w", name, err))
					}
				case 4:
					f, err := FS{v}.Open(name)
					notExistOK("fs open", err)
					if err == nil {
						if _, err := f.Stat(); err != nil {
							fail(fmt.Errorf("fs stat %s: %w", name, err))
						}
						f.Close()
					}
				}
			}
		})
	}
	wg.Go(func() {
		// Renames over the names free their inodes too.
		for i := 0; !stop.Load(); i++ {
			name := names[i%len(names)]
			if err := v.WriteFile("tmp", data[:200], 0o644); err != nil {
				fail(fmt.Errorf("writefile tmp: %w", err))
				return
			}
			if err := v.Rename("tmp", name); err != nil {
				fail(fmt.Errorf("rename over %s: %w", name, err))
				return
			}
		}
	})
	wg.Go(func() {
		// Opens by number, as a FUSE server's: a stale number is
		// fs.ErrNotExist.
		for i := 0; !stop.Load(); i++ {
			fi, err := v.Lstat(names[i%len(names)])
			if err != nil {
				notExistOK("lstat", err)
				continue
			}
			f, err := v.OpenIno(fi.Ino)
			notExistOK("openino", err)
			if err == nil {
				if _, err := f.Stat(); err != nil {
					fail(fmt.Errorf("stat <%d>: %w", fi.Ino, err))
				}
				f.Close()
			}
		}
	})
	wg.Go(func() {
		// Fresh files: the freed numbers go to them.
		for i := 0; !stop.Load(); i++ {
			name := fmt.Sprintf("fresh%d", i%4)
			if err := v.WriteFile(name, data[:100], 0o644); err != nil {
				fail(fmt.Errorf("writefile %s: %w", name, err))
				return
			}
			if err := v.Remove(name); err != nil {
				fail(fmt.Errorf("remove %s: %w", name, err))
				return
			}
		}
	})
	time.Sleep(dur)
	stop.Store(true)
	wg.Wait()
	for _, err := range errList {
		t.Error(err)
	}
	t.Logf("%d opens succeeded", opened.Load())
	require.NoError(t, v.WriteFile("last", data, 0o644), "the volume still takes writes")
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev)
}

// removeIn runs v.Remove(name) in a goroutine and waits for it at most
// wait: it reports whether it ended, and the channel its error comes on.
func removeIn(v *Volume, name string, wait time.Duration) (bool, chan error) {
	done := make(chan error, 1)
	go func() { done <- v.Remove(name) }()
	select {
	case err := <-done:
		done <- err
		return true, done
	case <-time.After(wait):
		return false, done
	}
}

// TestStatRacingRemoveCachesNothingFreed: a Stat reads the inode of the
// name it found, and the name's removal frees that inode before the Stat
// caches it. The Stat must not cache the inode read before the eviction
// (a linked copy of a freed number), and must fail, if at all, with
// fs.ErrNotExist. The removal waits for the lookup: the directory's lock
// is held until the inode is cached.
func TestStatRacingRemoveCachesNothingFreed(t *testing.T) {
	dev, v := memVolume(t, 16<<20, 1024)
	require.NoError(t, v.WriteFile("a", []byte("x"), 0o644))
	fi, err := v.Stat("a")
	require.NoError(t, err)
	ino := fi.Ino
	v.forgetInode(ino) // closed and not cached, as after a reopen

	var (
		fired atomic.Bool
		ended bool
		done  chan error
	)
	v.inodeReadHook = func(n uint32) {
		if n == ino && fired.CompareAndSwap(false, true) {
			ended, done = removeIn(v, "a", 200*time.Millisecond)
		}
	}
	_, err = v.Stat("a")
	v.inodeReadHook = nil
	if err != nil {
		assert.ErrorIs(t, err, fs.ErrNotExist)
	}
	assert.False(t, ended, "Remove ran while the lookup held the inode it read")
	require.NoError(t, <-done)
	assert.Nil(t, v.cachedInode(ino), "the removed inode is still cached")

	requireNumberReused(t, v, dev, ino)
}

// TestOpenInoRacingRemove: OpenIno reads an inode that is freed before it
// caches it. The read overlapped the eviction, so it is done again, finds
// the inode free and fails with fs.ErrNotExist, caching nothing.
func TestOpenInoRacingRemove(t *testing.T) {
	dev, v := memVolume(t, 16<<20, 1024)
	require.NoError(t, v.WriteFile("a", []byte("x"), 0o644))
	fi, err := v.Stat("a")
	require.NoError(t, err)
	ino := fi.Ino
	v.forgetInode(ino)

	var hooked atomic.Bool
	v.inodeReadHook = func(n uint32) {
		if n == ino && hooked.CompareAndSwap(false, true) {
			ended, done := removeIn(v, "a", 5*time.Second)
			require.True(t, ended)
			require.NoError(t, <-done)
		}
	}
	_, err = v.OpenIno(ino)
	v.inodeReadHook = nil
	require.True(t, hooked.Load())
	require.ErrorIs(t, err, fs.ErrNotExist)
	var pe *fs.PathError
	require.ErrorAs(t, err, &pe)
	assert.Nil(t, v.cachedInode(ino), "a stale copy of the freed inode was cached")

	requireNumberReused(t, v, dev, ino)
}

// TestOpenInoFreedNumber: OpenIno of a number whose inode was freed
// fails with fs.ErrNotExist (a stale FUSE node) and caches nothing, so
// the number goes to the next create.
func TestOpenInoFreedNumber(t *testing.T) {
	dev, v := memVolume(t, 16<<20, 1024)
	require.NoError(t, v.WriteFile("a", []byte("x"), 0o644))
	fi, err := v.Stat("a")
	require.NoError(t, err)
	ino := fi.Ino
	require.NoError(t, v.Remove("a"))
	require.Nil(t, v.cachedInode(ino))

	_, err = v.OpenIno(ino)
	require.ErrorIs(t, err, fs.ErrNotExist)
	var pe *fs.PathError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "open", pe.Op)
	assert.Nil(t, v.cachedInode(ino), "a freed inode was cached")

	requireNumberReused(t, v, dev, ino)
}

// TestOpenRacingRemoveBeforeTrack: the name's removal frees the inode
// after the open found it and before the open counted its File. The open
// must not hand out a File of the freed inode: without O_CREATE it fails
// with fs.ErrNotExist, with O_CREATE it makes the file again.
func TestOpenRacingRemoveBeforeTrack(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(v *Volume) (*File, error)
	}{
		{"OpenFile", func(v *Volume) (*File, error) { return v.OpenFile("a", os.O_RDWR, 0) }},
		{"Create", func(v *Volume) (*File, error) { return v.Create("a") }},
		{"FS.Open", func(v *Volume) (*File, error) {
			f, err := FS{v}.Open("a")
			if err != nil {
				return nil, err
			}
			return f.(*File), nil
		}},
		{"CreateAt", func(v *Volume) (*File, error) {
			d, err := v.Open(".")
			if err != nil {
				return nil, err
			}
			defer d.Close()
			require.NoError(t, v.Remove("a")) // CreateAt makes it
			return d.CreateAt("a", 0o644)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev, v := memVolume(t, 16<<20, 1024)
			require.NoError(t, v.WriteFile("a", []byte("x"), 0o644))
			var freed uint32
			v.openHook = func(f *File) {
				if freed == 0 && f.ino >= v.sb.FirstInode() {
					freed = f.ino
					require.NoError(t, v.Remove("a"))
				}
			}
			f, err := tc.open(v)
			v.openHook = nil
			require.NotZero(t, freed, "the hook ran")
			if err != nil {
				require.ErrorIs(t, err, fs.ErrNotExist)
				var pe *fs.PathError
				require.ErrorAs(t, err, &pe)
			} else {
				require.False(t, f.n.freed, "a File of a freed inode was handed out")
				require.NotZero(t, f.n.in.LinksCount)
				_, err := f.WriteAt([]byte("data"), 0)
				require.NoError(t, err)
				require.NoError(t, f.Close())
			}
			// The freed number goes to the next creates; none may find it
			// live or written.
			for i := range 3 {
				require.NoError(t, v.WriteFile(fmt.Sprintf("n%d", i), []byte("y"), 0o644))
			}
			require.NoError(t, v.Close())
			ext4iotest.FsckDev(t, dev)
		})
	}
}

// TestDirEntryInfoAfterRemove: a directory entry read before its name was
// removed and its inode freed reports fs.ErrNotExist from Info, as os's
// DirEntry.Info does, not the corruption a free inode named by an entry
// would be; one whose inode is live still reports it.
func TestDirEntryInfoAfterRemove(t *testing.T) {
	dev, v := memVolume(t, 16<<20, 1024)
	require.NoError(t, v.WriteFile("a", []byte("x"), 0o644))
	require.NoError(t, v.WriteFile("b", []byte("yy"), 0o644))
	d, err := v.resolve(".", true)
	require.NoError(t, err)
	ents, err := d.readDirAll()
	require.NoError(t, err)
	require.Len(t, ents, 3) // lost+found, a, b
	require.NoError(t, v.Remove("a"))
	for _, e := range ents {
		de := &fsDirEntry{v: v, e: e, dir: d}
		fi, err := de.Info()
		switch e.Name {
		case "a":
			require.ErrorIs(t, err, fs.ErrNotExist)
			var pe *fs.PathError
			require.ErrorAs(t, err, &pe)
		case "b":
			require.NoError(t, err)
			assert.EqualValues(t, 2, fi.Size())
		}
	}
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev)
}

// TestUnlinkCountsOpenUnderInodeLock: an unlink decides whether a File
// is open (the inode becomes an orphan) or not (it is freed now) under
// the inode's lock, which it holds until the inode is freed. An open that
// found the inode before the unlink and counts its File (trackOpen)
// while the unlink waits for that lock must keep a live inode: here the
// unlink waits for the lock the test holds, the open counts its File and
// then reads the freed flag before the unlink takes the lock.
func TestUnlinkCountsOpenUnderInodeLock(t *testing.T) {
	dev, v := memVolume(t, 16<<20, 1024)
	require.NoError(t, v.WriteFile("a", []byte("x"), 0o644))
	found := make(chan *File)
	proceed := make(chan struct{})
	v.openHook = func(f *File) {
		found <- f
		<-proceed
	}
	type result struct {
		f   *File
		err error
	}
	opened := make(chan result, 1)
	go func() {
		f, err := v.OpenFile("a", os.O_RDWR, 0)
		opened <- result{f, err}
	}()
	n := (<-found).n
	v.openHook = nil
	n.mu.Lock() // the unlink waits for it
	removed := make(chan error, 1)
	go func() { removed <- v.Remove("a") }()
	time.Sleep(100 * time.Millisecond)
	close(proceed) // trackOpen counts the File, then waits for the lock
	require.Eventually(t, func() bool { return v.inodeInUse(n.ino) }, 10*time.Second, time.Millisecond)
	time.Sleep(10 * time.Millisecond) // and reaches the lock
	n.mu.Unlock()                     // the open's read lock is granted before the unlink's lock
	r := <-opened
	require.NoError(t, <-removed)
	require.NoError(t, r.err)
	require.False(t, n.freed, "the unlink freed an inode whose File was handed out")
	assert.True(t, v.isOrphan(r.f.ino))
	_, err := r.f.WriteAt([]byte("data"), 0)
	require.NoError(t, err)
	require.NoError(t, r.f.Close())
	for i := range 3 {
		require.NoError(t, v.WriteFile(fmt.Sprintf("n%d", i), []byte("y"), 0o644))
	}
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev)
}

// TestOpenInoOrphan: OpenIno of an orphan (unlinked while open) opens it
// while another File has it open, and the orphan then stays until that
// File closes too. Once its Files are all closed the orphan is being
// freed, and OpenIno fails with fs.ErrNotExist: before the reaper takes
// it off the orphans (releaseOrphans frees it after finding it unused,
// without its lock), and after (it frees it next).
func TestOpenInoOrphan(t *testing.T) {
	dev, v := memVolume(t, 16<<20, 1024)
	orphan := func(name string) *File {
		f, err := v.Create(name)
		require.NoError(t, err)
		_, err = f.Write([]byte("data"))
		require.NoError(t, err)
		require.NoError(t, v.Remove(name))
		require.True(t, v.isOrphan(f.ino))
		return f
	}

	f := orphan("a")
	g, err := v.OpenIno(f.ino)
	require.NoError(t, err, "an orphan with an open File opens by number")
	require.NoError(t, f.Close())
	assert.True(t, v.isOrphan(g.ino), "the File opened by number keeps the orphan")
	buf := make([]byte, 4)
	_, err = g.ReadAt(buf, 0)
	require.NoError(t, err)
	assert.Equal(t, "data", string(buf))
	require.NoError(t, g.Close())
	assert.Nil(t, v.cachedInode(g.ino))

	f = orphan("b")
	f.closed.Store(true) // closed, not yet released
	_, err = v.OpenIno(f.ino)
	require.ErrorIs(t, err, fs.ErrNotExist, "an orphan without Files is being freed")
	// The reaper found it unused and takes it off the orphans.
	s := v.ns()
	s.mu.Lock()
	delete(s.mu.orphans, f.ino)
	s.mu.Unlock()
	_, err = v.OpenIno(f.ino)
	require.ErrorIs(t, err, fs.ErrNotExist, "an orphan taken off the orphans is being freed")
	require.False(t, v.inodeInUse(f.ino))
	require.NoError(t, v.freeOrphan(f.ino))
	assert.True(t, f.n.freed)

	for i := range 3 {
		require.NoError(t, v.WriteFile(fmt.Sprintf("n%d", i), []byte("y"), 0o644))
	}
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev)
}

// requireNumberReused checks that freed inode number ino is the next a
// create gets (nothing cached keeps it live), then closes v and runs
// e2fsck on dev.
func requireNumberReused(t *testing.T, v *Volume, dev blockdev.Device, ino uint32) {
	t.Helper()
	g, err := v.Create("b")
	require.NoError(t, err, "the freed number is handed out again")
	assert.Equal(t, ino, g.ino)
	require.NoError(t, g.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev)
}
