package ext4io

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev/memdev"
)

// cachedInodes returns how many inodes v.inodes holds (demoted ones not
// counted).
func (v *Volume) cachedInodes() int {
	v.inoMu.Lock()
	defer v.inoMu.Unlock()
	return len(v.inodes)
}

// inoObj is the model of one inode: its data, shared by its names.
type inoObj struct {
	data  []byte
	mtime time.Time // as the last change left it
}

// TestInodeCacheModel runs goroutines changing files through paths and
// through Files they keep open, with a committer and forced GCs, on a
// volume whose inode cache holds four inodes, and compares every read and
// stat with a model: an inode demoted while a File held it, and read
// again as a second copy, or demoted with changes not written, shows as
// a wrong read or size, or as e2fsck errors at the end.
func TestInodeCacheModel(t *testing.T) {
	dev := memdev.NewBlockSize(64<<20, 1024)
	if err := Format(dev, FormatOptions{BlockSize: 1024}); err != nil {
		t.Fatal(err)
	}
	v, err := Open(dev, Options{Writable: true, InodeCache: 4, WritebackAge: -1, CommitInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const workers, names = 4, 8
	dur := time.Duration(sizedInternal(1, 3, 20)) * time.Second
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bg sync.WaitGroup
	bg.Add(1)
	go func() { // committer and collector: demoted inodes go away
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			runtime.GC()
			if err := v.Sync(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	errc := make(chan error, workers)
	for w := range workers {
		dir := fmt.Sprintf("/d%d", w)
		if err := v.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- inoModelWorker(v, dir, names, uint64(w), stop)
		}()
	}
	time.Sleep(dur)
	close(stop)
	wg.Wait()
	bg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Error(err)
		}
	}
	ev := v.Counters().InodeEvictions
	t.Logf("%d inode evictions, %d cached at the end", ev, v.cachedInodes())
	if ev == 0 {
		t.Error("no inode was evicted: the test proves nothing")
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	checkImage(t, dev)
}

// inoModelWorker changes the files of dir (names of them, some linked
// twice) until stop, checking each read against its model.
func inoModelWorker(v *Volume, dir string, names int, seed uint64, stop chan struct{}) error {
	rng := rand.New(rand.NewPCG(seed, 99))
	model := map[string]*inoObj{}
	open := map[string]*File{} // Files kept open across other operations, by the name they were opened with
	name := func() string { return fmt.Sprintf("%s/f%d", dir, rng.IntN(names)) }
	closeName := func(p string) error {
		if f := open[p]; f != nil {
			delete(open, p)
			return f.Close()
		}
		return nil
	}
	check := func(f *File, p string, o *inoObj) error {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if fi.Size() != int64(len(o.data)) {
			return fmt.Errorf("%s: size %d, model %d", p, fi.Size(), len(o.data))
		}
		if !o.mtime.IsZero() && !fi.ModTime().Equal(o.mtime) {
			return fmt.Errorf("%s: mtime %v, model %v", p, fi.ModTime(), o.mtime)
		}
		got := make([]byte, len(o.data))
		if _, err := f.ReadAt(got, 0); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: read: %w", p, err)
		}
		if i := firstDiffInternal(got, o.data); i >= 0 {
			return fmt.Errorf("%s: byte %d differs from the model", p, i)
		}
		return nil
	}
	for i := 0; ; i++ {
		select {
		case <-stop:
			for p := range open {
				if err := closeName(p); err != nil {
					return err
				}
			}
			return nil
		default:
		}
		p := name()
		o := model[p]
		switch op := rng.IntN(10); {
		case op == 0 && o == nil: // create
			f, err := v.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return fmt.Errorf("create %s: %w", p, err)
			}
			model[p] = &inoObj{}
			if rng.IntN(2) == 0 {
				open[p] = f
			} else if err := f.Close(); err != nil {
				return err
			}
		case op <= 3 && o != nil: // write, direct or buffered, through a kept File or a new one
			f := open[p]
			flag := os.O_RDWR
			direct := rng.IntN(3) == 0
			if direct {
				flag |= O_DIRECT
			}
			own := f == nil || direct
			if own {
				var err error
				if f, err = v.OpenFile(p, flag, 0); err != nil {
					return fmt.Errorf("open %s: %w", p, err)
				}
			}
			off, n := int64(rng.IntN(16))*4096, (1+rng.IntN(3))*4096
			if !direct {
				off, n = int64(rng.IntN(60000)), 1+rng.IntN(9000)
			}
			b := make([]byte, n)
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			if _, err := f.WriteAt(b, off); err != nil {
				return fmt.Errorf("write %s: %w", p, err)
			}
			if end := off + int64(n); end > int64(len(o.data)) {
				o.data = append(o.data, make([]byte, end-int64(len(o.data)))...)
			}
			copy(o.data[off:], b)
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			o.mtime = fi.ModTime()
			if own {
				if err := f.Close(); err != nil {
					return err
				}
			}
		case op == 4 && o != nil: // truncate
			size := int64(rng.IntN(70000))
			var err error
			if f := open[p]; f != nil {
				err = f.Truncate(size)
			} else {
				err = v.Truncate(p, size)
			}
			if err != nil {
				return fmt.Errorf("truncate %s: %w", p, err)
			}
			fi, err := v.Stat(p)
			if err != nil {
				return err
			}
			o.mtime = fi.ModTime()
			if size <= int64(len(o.data)) {
				o.data = o.data[:size]
			} else {
				o.data = append(o.data, make([]byte, size-int64(len(o.data)))...)
			}
		case op == 5 && o != nil: // rename over another name, or to a free one
			q := name()
			if q == p || model[q] == o {
				break // renaming a link over its own inode does nothing
			}
			if err := v.Rename(p, q); err != nil {
				return fmt.Errorf("rename %s %s: %w", p, q, err)
			}
			if err := closeName(q); err != nil {
				return err
			}
			if f := open[p]; f != nil {
				delete(open, p)
				open[q] = f
			}
			model[q] = o
			delete(model, p)
		case op == 6 && o != nil: // link to a free name
			q := name()
			if model[q] != nil {
				break
			}
			if err := v.Link(p, q); err != nil {
				return fmt.Errorf("link %s %s: %w", p, q, err)
			}
			model[q] = o
		case op == 7 && o != nil: // unlink (a kept File keeps an orphan)
			if err := v.Remove(p); err != nil {
				return fmt.Errorf("remove %s: %w", p, err)
			}
			delete(model, p)
			if f := open[p]; f != nil && rng.IntN(2) == 0 {
				if err := check(f, p, o); err != nil {
					return fmt.Errorf("unlinked: %w", err)
				}
			}
			if err := closeName(p); err != nil {
				return err
			}
		case op == 8 && o != nil: // read and stat through a path
			f, err := v.Open(p)
			if err != nil {
				return fmt.Errorf("open %s: %w", p, err)
			}
			err = check(f, p, o)
			f.Close()
			if err != nil {
				return err
			}
			fi, err := v.Stat(p)
			if err != nil {
				return err
			}
			if fi.Size() != int64(len(o.data)) {
				return fmt.Errorf("stat %s: size %d, model %d", p, fi.Size(), len(o.data))
			}
		case op == 9: // read through a kept File, sync it, or close it
			f := open[p]
			if f == nil {
				if _, err := v.Stat(p); (err == nil) != (o != nil) && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("stat %s: %v with model %v", p, err, o != nil)
				}
				break
			}
			if err := check(f, p, o); err != nil {
				return err
			}
			switch rng.IntN(3) {
			case 0:
				if err := f.Sync(); err != nil {
					return err
				}
			case 1:
				if err := closeName(p); err != nil {
					return err
				}
			}
		}
	}
}

func firstDiffInternal(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestInodeCacheBounded walks a tree of many files (stat of each, and a
// read of some) on a volume with a small inode cache: v.inodes stays near
// the bound while the walk goes on, though the walk touches every inode.
func TestInodeCacheBounded(t *testing.T) {
	files := sizedInternal(2000, 10000, 50000)
	const perDir = 500
	dev := memdev.NewBlockSize(256<<20, 1024)
	if err := Format(dev, FormatOptions{BlockSize: 1024, InodeRatio: 2048}); err != nil {
		t.Fatal(err)
	}
	v, err := Open(dev, Options{Writable: true, PageCacheBytes: -1, InodeCache: 256}) // pages would pin the inodes
	if err != nil {
		t.Fatal(err)
	}
	for i := range files {
		if i%perDir == 0 {
			if err := v.Mkdir(fmt.Sprintf("/d%d", i/perDir), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		f, err := v.Create(fmt.Sprintf("/d%d/f%d", i/perDir, i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if n := v.cachedInodes(); n > 256+64 {
			t.Fatalf("creating file %d: %d inodes cached, bound 256", i, n)
		}
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	checkImage(t, dev)
	for _, bound := range []int{256, -1} {
		v, err := Open(dev, Options{InodeCache: bound})
		if err != nil {
			t.Fatal(err)
		}
		peak := 0
		b := make([]byte, 1)
		for d := range files / perDir {
			ents, err := v.ReadDir(fmt.Sprintf("/d%d", d))
			if err != nil {
				t.Fatal(err)
			}
			for j, e := range ents {
				p := fmt.Sprintf("/d%d/%s", d, e.Name())
				if _, err := v.Stat(p); err != nil {
					t.Fatal(err)
				}
				if j%10 == 0 {
					f, err := v.Open(p)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := f.ReadAt(b, 0); err != nil || b[0] != 'x' {
						t.Fatalf("%s: %q, %v", p, b, err)
					}
					f.Close()
				}
			}
			peak = max(peak, v.cachedInodes())
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("InodeCache %d: walk of %d files: peak %d inodes cached, %d evictions, heap in use %d KiB",
			bound, files, peak, v.Counters().InodeEvictions, ms.HeapInuse>>10)
		if bound > 0 && peak > bound+64 {
			t.Errorf("peak %d inodes cached, bound %d", peak, bound)
		}
		if bound < 0 && peak < files {
			t.Errorf("unbounded cache: peak %d, want every inode (%d)", peak, files)
		}
		v.Close()
	}
}

// TestInodeCacheDemotion steps one inode through the cache: a clean inode
// with an open File is demoted, found again as the same struct, put back
// by a write through the File before the write changes it, and not
// demoted while the write's times are not written.
func TestInodeCacheDemotion(t *testing.T) {
	dev, v := memVolume(t, 32<<20, 1024)
	f, err := v.OpenFile("/a", os.O_RDWR|os.O_CREATE|O_DIRECT, 0o644) // direct: no pages pin it
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 16384)); err != nil {
		t.Fatal(err)
	}
	n, ino := f.n, f.ino
	cached := func() bool {
		v.inoMu.Lock()
		defer v.inoMu.Unlock()
		return v.inodes[ino] == n
	}
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	n.used.Store(false)
	if !v.demote(n) || cached() {
		t.Fatal("a clean, unlocked inode was not demoted")
	}
	if g, err := v.getInode(ino); err != nil || g != n {
		t.Fatalf("getInode of a demoted inode still held: %p, %v; want the held %p", g, err, n)
	}
	n.used.Store(false)
	if !v.demote(n) {
		t.Fatal("not demoted again")
	}
	b := bytes.Repeat([]byte{7}, 4096)
	if _, err := f.WriteAt(b, 4096); err != nil {
		t.Fatal(err)
	}
	if !cached() {
		t.Fatal("a write through a File left its demoted inode out of the cache")
	}
	if !n.dirty && n.touchEpoch.Load() == 0 {
		t.Fatal("the overwrite left no times pending: the next check proves nothing")
	}
	n.used.Store(false)
	if v.demote(n) {
		t.Fatal("an inode with times not written was demoted")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g := reopenChecked(t, v, dev, "/a")
	got := make([]byte, 4096)
	if _, err := g.ReadAt(got, 4096); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("read back: %v", err)
	}
}

// TestInodeCacheClosedFilesLetGo: Files opened once and closed leave
// nothing in the open-File tracking, which would keep their inodes in
// memory past the cache's bound.
func TestInodeCacheClosedFilesLetGo(t *testing.T) {
	_, v := memVolume(t, 64<<20, 1024)
	defer v.Close()
	for i := range 3000 {
		f, err := v.Create(fmt.Sprintf("/f%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s := v.ns()
	s.mu.Lock()
	n := len(s.mu.open)
	s.mu.Unlock()
	if n > 0 {
		t.Errorf("%d inodes of closed Files still tracked", n)
	}
}
