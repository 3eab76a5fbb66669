package torture

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/ext4io/ext4io"
)

// testHookExpect, if set, may alter the expected contents of a file before
// the model compares them (tests prove the harness can fail).
var testHookExpect func(name string, want []byte) []byte

// mfile is the model of one regular file of a worker.
type mfile struct {
	name   string
	f      *ext4io.File
	direct bool
	data   []byte // current contents
	synced []byte // contents known durable; nil: nothing known
}

// worker runs random operations in its own directory and models them. It is
// used by one goroutine at a time.
type worker struct {
	v       *ext4io.Volume
	dir     string
	rng     *rand.Rand
	bs      int
	files   map[string]*mfile
	dirs    map[string]bool
	next    int
	volSync bool            // a Volume.Sync succeeded: syncedNames is meaningful
	synced  map[string]bool // names in dir at the last Volume.Sync
	changed map[string]bool // names touched since the last Volume.Sync
	stopped bool            // an I/O error ended the worker's round
	ops     int
	log     []string
	fill    bool // ENOSPC round: end with a fill phase
}

func newWorker(v *ext4io.Volume, dir string, seed uint64, bs int) *worker {
	return &worker{v: v, dir: dir, rng: rand.New(rand.NewPCG(seed, seed^0xabcdef)), bs: bs,
		files: map[string]*mfile{}, dirs: map[string]bool{}, synced: map[string]bool{}, changed: map[string]bool{}}
}

func (w *worker) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

// opError classifies an operation's error: nil if the round may go on, a
// failure otherwise. Device errors stop the worker.
func (w *worker) opError(op string, err error, faults bool) error {
	w.logf("  -> %v", err)
	switch {
	case errors.Is(err, ext4io.ErrNoSpace):
		return nil
	case faults && (errors.Is(err, ext4io.ErrIO) || errors.Is(err, ext4io.ErrReadOnly)):
		w.stopped = true
		return nil
	}
	return fmt.Errorf("%s in %s: unexpected error: %w", op, w.dir, err)
}

func (w *worker) names() []string {
	var n []string
	for k := range w.files {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

func (w *worker) pickFile() *mfile {
	n := w.names()
	if len(n) == 0 {
		return nil
	}
	return w.files[n[w.rng.IntN(len(n))]]
}

func (w *worker) randBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(w.rng.Uint32())
	}
	return b
}

func (w *worker) touch(names ...string) {
	for _, n := range names {
		w.changed[n] = true
	}
}

// drop forgets a file whose state is unknown after a failed operation.
func (w *worker) drop(m *mfile) {
	m.synced = nil
	w.touch(m.name)
	if m.f != nil {
		m.f.Close()
	}
	delete(w.files, m.name)
}

const maxFile = 256 << 10

// step runs one random operation. It returns a non-nil error only for a
// harness failure (unexpected error).
func (w *worker) step(faults bool) error {
	w.ops++
	m := w.pickFile()
	k := w.rng.IntN(100)
	if m == nil || len(w.files) < 2 && k < 50 {
		k = 0
	}
	var err error
	var op string
	switch {
	case k < 8: // create
		name := fmt.Sprintf("f%d", w.next)
		w.next++
		direct := w.rng.IntN(3) == 0
		op = fmt.Sprintf("create %s direct=%v", name, direct)
		w.logf("%s", op)
		w.touch(name)
		var f *ext4io.File
		f, err = w.v.Create(path.Join(w.dir, name))
		if err == nil && direct {
			f.Close()
			f, err = w.v.OpenFile(path.Join(w.dir, name), os.O_RDWR|ext4io.O_DIRECT, 0)
		}
		if err == nil {
			w.files[name] = &mfile{name: name, f: f, direct: direct}
		}
	case k < 40: // write
		off := w.rng.IntN(maxFile)
		n := 1 + w.rng.IntN(64<<10)
		if m.direct {
			off -= off % w.bs
			n = (n + w.bs - 1) / w.bs * w.bs
		}
		p := w.randBytes(n)
		op = fmt.Sprintf("write %s off=%d len=%d", m.name, off, n)
		w.logf("%s", op)
		m.synced = nil
		_, err = m.f.WriteAt(p, int64(off))
		if err == nil {
			if len(m.data) < off+n {
				m.data = append(m.data, make([]byte, off+n-len(m.data))...)
			}
			copy(m.data[off:], p)
		}
	case k < 48: // truncate
		size := w.rng.IntN(maxFile + 4096)
		op = fmt.Sprintf("truncate %s size=%d", m.name, size)
		w.logf("%s", op)
		m.synced = nil
		if err = m.f.Truncate(int64(size)); err == nil {
			m.data = resize(m.data, size)
		}
	case k < 62: // fallocate
		mode := []ext4io.FallocMode{ext4io.FallocAllocate, ext4io.FallocKeepSize, ext4io.FallocPunchHole,
			ext4io.FallocZeroRange, ext4io.FallocWriteZeroes}[w.rng.IntN(5)]
		off := w.rng.IntN(maxFile)
		n := 1 + w.rng.IntN(96<<10)
		op = fmt.Sprintf("fallocate %s mode=%v off=%d len=%d", m.name, mode, off, n)
		w.logf("%s", op)
		m.synced = nil
		if err = m.f.Fallocate(mode, int64(off), int64(n)); err == nil {
			m.data = fallocModel(m.data, mode, off, n)
		}
	case k < 68: // rename within the directory, maybe over another file
		var to string
		if o := w.pickFile(); o != nil && o != m && w.rng.IntN(2) == 0 {
			to = o.name
		} else {
			to = fmt.Sprintf("f%d", w.next)
			w.next++
		}
		op = fmt.Sprintf("rename %s %s", m.name, to)
		w.logf("%s", op)
		w.touch(m.name, to)
		m.synced = nil
		if err = w.v.Rename(path.Join(w.dir, m.name), path.Join(w.dir, to)); err == nil {
			if o := w.files[to]; o != nil {
				o.f.Close()
			}
			delete(w.files, m.name)
			m.name = to
			w.files[to] = m
		}
	case k < 72: // unlink
		op = fmt.Sprintf("unlink %s", m.name)
		w.logf("%s", op)
		w.touch(m.name)
		m.synced = nil
		if err = w.v.Unlink(path.Join(w.dir, m.name)); err == nil {
			m.f.Close()
			delete(w.files, m.name)
		}
	case k < 77: // mkdir or rmdir
		var d string
		for n := range w.dirs {
			d = n
			break
		}
		if d != "" && w.rng.IntN(2) == 0 {
			op = "rmdir " + d
			w.logf("%s", op)
			w.touch(d)
			if err = w.v.Rmdir(path.Join(w.dir, d)); err == nil {
				delete(w.dirs, d)
			}
		} else {
			d = fmt.Sprintf("d%d", w.next)
			w.next++
			op = "mkdir " + d
			w.logf("%s", op)
			w.touch(d)
			if err = w.v.Mkdir(path.Join(w.dir, d), 0o755); err == nil {
				w.dirs[d] = true
			}
		}
	case k < 92: // file sync
		op = "fsync " + m.name
		w.logf("%s", op)
		if err = m.f.Sync(); err == nil {
			m.synced = bytes.Clone(m.data)
			if m.synced == nil {
				m.synced = []byte{}
			}
		}
	default: // volume sync
		op = "syncfs"
		w.logf("%s", op)
		if err = w.v.Sync(); err == nil {
			w.syncAll()
		}
	}
	if err != nil {
		if m != nil && !strings.HasPrefix(op, "mkdir") && !strings.HasPrefix(op, "rmdir") && !strings.HasPrefix(op, "create") && !strings.HasPrefix(op, "sync") {
			w.drop(m)
		}
		return w.opError(op, err, faults)
	}
	return nil
}

// syncAll records a successful Volume.Sync: every name and content is durable.
func (w *worker) syncAll() {
	w.volSync = true
	w.synced = map[string]bool{}
	for n, m := range w.files {
		w.synced[n] = true
		m.synced = bytes.Clone(m.data)
		if m.synced == nil {
			m.synced = []byte{}
		}
	}
	for n := range w.dirs {
		w.synced[n] = true
	}
	w.changed = map[string]bool{}
}

// fillPhase appends to a new file until the volume is full.
func (w *worker) fillPhase() (sawNoSpace bool, err error) {
	name := fmt.Sprintf("fill%d", w.next)
	w.next++
	w.logf("fill %s", name)
	w.touch(name)
	f, err := w.v.Create(path.Join(w.dir, name))
	if err != nil {
		if errors.Is(err, ext4io.ErrNoSpace) {
			return true, nil
		}
		return false, fmt.Errorf("fill create %s/%s: %w", w.dir, name, err)
	}
	m := &mfile{name: name, f: f}
	w.files[name] = m
	chunk := w.randBytes(1 << 20)
	for off := 0; ; off += len(chunk) {
		if _, err := f.WriteAt(chunk, int64(off)); err != nil {
			w.logf("  -> %v", err)
			w.drop(m)
			if errors.Is(err, ext4io.ErrNoSpace) {
				return true, nil
			}
			return false, fmt.Errorf("fill write %s/%s at %d: %w", w.dir, name, off, err)
		}
		m.data = append(m.data, chunk...)
	}
}

func resize(b []byte, n int) []byte {
	if n <= len(b) {
		return b[:n:n]
	}
	return append(b, make([]byte, n-len(b))...)
}

// fallocModel is what the contents must be after Fallocate(mode, off, n).
func fallocModel(b []byte, mode ext4io.FallocMode, off, n int) []byte {
	end := off + n
	switch mode {
	case ext4io.FallocAllocate:
		if end > len(b) {
			b = resize(b, end)
		}
	case ext4io.FallocPunchHole:
		clear(b[min(off, len(b)):min(end, len(b))])
	case ext4io.FallocZeroRange, ext4io.FallocWriteZeroes:
		if end > len(b) {
			b = resize(b, end)
		}
		clear(b[off:end])
	}
	return b
}

// check compares the volume with the model. With durable set it checks only
// what the last syncs made durable (after a crash); otherwise everything
// (after a clean Close).
func (w *worker) check(v *ext4io.Volume, durable bool) error {
	if !durable || w.volSync {
		ents, err := v.ReadDir(w.dir)
		if err != nil {
			return fmt.Errorf("readdir %s: %w", w.dir, err)
		}
		have := map[string]bool{}
		for _, e := range ents {
			if e.Name() == "." || e.Name() == ".." {
				continue
			}
			have[e.Name()] = true
		}
		want := w.synced
		if !durable {
			want = map[string]bool{}
			for n := range w.files {
				want[n] = true
			}
			for n := range w.dirs {
				want[n] = true
			}
		}
		for n := range want {
			if !have[n] && (!durable || !w.changed[n]) {
				return fmt.Errorf("%s/%s: missing (durable=%v)", w.dir, n, durable)
			}
		}
		for n := range have {
			if !want[n] && (!durable || !w.changed[n]) && (durable || !w.changed[n] || !strings.HasPrefix(n, "fill")) {
				return fmt.Errorf("%s/%s: exists but the model says it does not (durable=%v)", w.dir, n, durable)
			}
		}
	}
	for _, n := range w.names() {
		m := w.files[n]
		want := m.data
		if durable {
			want = m.synced
		}
		if want == nil {
			continue
		}
		name := path.Join(w.dir, n)
		if testHookExpect != nil {
			want = testHookExpect(name, bytes.Clone(want))
		}
		f, err := v.Open(name)
		if err != nil {
			return fmt.Errorf("%s: synced file: %w", name, err)
		}
		got := make([]byte, f.Size())
		_, err = f.ReadAt(got, 0)
		f.Close()
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: read: %w", name, err)
		}
		if !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			return fmt.Errorf("%s: contents differ (durable=%v): size %d want %d, first difference at byte %d", name, durable, len(got), len(want), i)
		}
	}
	return nil
}

// runWorkers runs n ops on each worker concurrently.
func runWorkers(ws []*worker, n int, faults bool) error {
	var wg sync.WaitGroup
	errs := make([]error, len(ws))
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < n && !w.stopped; j++ {
				if err := w.step(faults); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
