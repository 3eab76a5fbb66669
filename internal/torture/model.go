package torture

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/layout"
)

// testHookExpect, if set, may alter the expected contents of a file before
// the model compares them (tests prove the harness can fail).
var testHookExpect func(name string, want []byte) []byte

// What a crash may leave of a worker's files, by kind of operation:
//
//   - plain writes, truncates, fallocates: nothing is promised of a file
//     changed since its last sync (File.Sync, File.Datasync,
//     Volume.Sync) but that no block exposes data no version of the
//     worker's files had (checkStale); a file synced and not changed since
//     reads exactly as the model says (snap.content).
//   - untorn writes (atomic.go): each unit, one WriteAtomic or a whole
//     WriteAtomicBatch, reads entirely with its new bytes or with none of
//     them; units issued together that overlap read as a serial order of
//     the ones that made it. The rule holds for a unit from its call
//     until the first later operation that may change a byte of its
//     ranges begins: a plain write, truncate or zeroing fallocate
//     overlapping it, or a later atomic unit overlapping it, or a rename
//     or unlink of its file. A plain write overlapping an atomic unit thus
//     ends that unit's check (their mix is legal after a crash: the plain
//     write may reach the device in part), and an atomic unit after a
//     plain write is checked as a whole over whatever the plain write left.
//     A worker's steps run one after the other, so plain writes never run
//     concurrently with atomic units on its files; only the units of one
//     atomic step run concurrently, with each other.
//     Once a sync begun after the unit returned has returned, the unit's
//     bytes are part of the exact contents above: they must read new.

// mfile is the model of one regular file of a worker.
type mfile struct {
	name   string
	f      *ext4io.File
	direct bool
	data   []byte // current contents
	synced []byte // contents known durable; nil: nothing known
	xattrs xset   // current extended attributes; nil: none
	// xcands holds the attribute sets the file may have after a crash:
	// the one of its last sync, then each one an operation since set
	// (xattr operations are atomic). nil: nothing known.
	xcands []xset
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
	// unknown holds the names of files dropped after a failed operation
	// (drop): the name may be there or not, now and after any later sync.
	// Names are never reused. Copied on write: snapshots share it.
	unknown map[string]bool
	stopped bool // an I/O error ended the worker's round
	ops     int
	xops    int    // xattr calls
	xsteps  int    // steps that were xattr operations (runWorkers does not count them)
	shared  []xset // attribute sets shared by the round's workers; immutable
	log     []string

	// clock returns the device-operation log's length (Recorder.Len):
	// snapshots are stamped with it, so a crash point of the log knows
	// which operations had begun and which had returned. nil: 0.
	clock func() int
	// hist holds the durable-state snapshots of the round, in time
	// order: before each operation's call (pre) and after it (post).
	hist []snap
	// seen holds, by hash (hseed), every non-zero file-system block any
	// version of any of the worker's files had, or was about to have:
	// after a crash each block of each file must be one of them with some
	// bytes zeroed (no stale data exposed).
	seen     map[uint64][]byte
	hseed    maphash.Seed
	versions []version // with debugVersions

	// atomics holds the round's atomic steps (atomic.go), in order.
	atomics   []*atomicRec
	atomicPct int // percentage of steps that are atomic steps (Config.AtomicPercent)
	asteps    int // steps that were atomic steps (runWorkers does not count them)
	aops      int // WriteAtomic and WriteAtomicBatch calls
	abatches  int // WriteAtomicBatch calls of several ranges that succeeded
	arefused  int // calls refused with ErrUnsupported
}

type version struct {
	op   string
	data []byte
}

// explain describes how blk, found at byte off of a file, relates to the
// versions debugVersions kept.
func (w *worker) explain(blk []byte, off int) string {
	var b strings.Builder
	for _, v := range w.versions {
		if off >= len(v.data) {
			continue
		}
		vb := make([]byte, w.bs)
		copy(vb, v.data[off:min(off+w.bs, len(v.data))])
		same := 0
		for i := range vb {
			if vb[i] == blk[i] {
				same++
			}
		}
		if same > 64 {
			fmt.Fprintf(&b, "\n  %q: %d of %d bytes equal (len %d)", v.op, same, w.bs, len(v.data))
			i := 0
			for i < w.bs && vb[i] == blk[i] {
				i++
			}
			fmt.Fprintf(&b, ", first difference at %d", i)
		}
	}
	return b.String()
}

// snap is what a crash must preserve of a worker's files at one moment,
// and when that moment was on the device-operation log.
type snap struct {
	idx     int  // log length when taken
	pre     bool // taken before an operation's call: it may be in flight
	op      string
	volSync bool
	synced  map[string]bool   // names at the last Volume.Sync; shared, never mutated
	changed map[string]bool   // names touched since; a copy
	unknown map[string]bool   // names that may be there or not (worker.unknown); shared, never mutated
	content map[string][]byte // name -> durable contents; shared slices, never mutated
	xattrs  map[string][]xset // name -> possible attribute sets (mfile.xcands); shared, never mutated
}

func newWorker(v *ext4io.Volume, dir string, seed uint64, bs int) *worker {
	return &worker{v: v, dir: dir, rng: rand.New(rand.NewPCG(seed, seed^0xabcdef)), bs: bs,
		files: map[string]*mfile{}, dirs: map[string]bool{}, synced: map[string]bool{}, changed: map[string]bool{},
		seen: map[uint64][]byte{}, hseed: maphash.MakeSeed()}
}

func (w *worker) now() int {
	if w.clock == nil {
		return 0
	}
	return w.clock()
}

// snapshot returns the durable state now; the contents of the names in
// uncertain are left out (an operation in flight may change them).
func (w *worker) snapshot(pre bool, op string, uncertain ...string) snap {
	s := snap{idx: w.now(), pre: pre, op: op, volSync: w.volSync, synced: w.synced,
		changed: maps.Clone(w.changed), unknown: w.unknown, content: make(map[string][]byte, len(w.files)), xattrs: map[string][]xset{}}
	for n, m := range w.files {
		if m.synced != nil {
			s.content[n] = m.synced
		}
		if m.xcands != nil {
			s.xattrs[n] = slices.Clip(m.xcands)
		}
	}
	for _, n := range uncertain {
		delete(s.content, n)
		delete(s.xattrs, n)
	}
	return s
}

// pre records the state with the next call in flight; call it right
// before the call, after the model marked what the call may change.
func (w *worker) pre(op string, uncertain ...string) {
	w.hist = append(w.hist, w.snapshot(true, op, uncertain...))
}

// at returns the durable state for a crash right after log entry p: the
// last snapshot whose operation had returned by then (post, all its
// device operations at or before p) or had begun (pre, none of its
// device operations before its stamp).
func (w *worker) at(p int) (snap, bool) {
	for i := len(w.hist) - 1; i >= 0; i-- {
		s := w.hist[i]
		if s.pre && s.idx <= p || !s.pre && s.idx <= p+1 {
			return s, true
		}
	}
	return snap{}, false
}

// debugVersions, if set (tests), keeps every version whole, so that a
// stale block can be explained.
var debugVersions bool

// addVersion remembers the blocks of b, a version of a file.
func (w *worker) addVersion(b []byte) {
	if debugVersions {
		w.versions = append(w.versions, version{w.log[len(w.log)-1], bytes.Clone(b)})
	}
	pad := make([]byte, w.bs)
	for off := 0; off < len(b); off += w.bs {
		blk := b[off:min(off+w.bs, len(b))]
		if len(blk) < w.bs {
			copy(pad, blk)
			clear(pad[len(blk):])
			blk = pad
		}
		if allZero(blk) {
			continue
		}
		if h := maphash.Bytes(w.hseed, blk); w.seen[h] == nil {
			w.seen[h] = bytes.Clone(blk)
		}
	}
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
// Its name stays unknown: a failed write, truncate or fallocate leaves the
// file, a failed rename or unlink may or may not have removed the name.
func (w *worker) drop(m *mfile) {
	m.synced = nil
	w.touch(m.name)
	w.unknown = maps.Clone(w.unknown)
	if w.unknown == nil {
		w.unknown = map[string]bool{}
	}
	w.unknown[m.name] = true
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
	if m != nil && w.rng.IntN(100) < 20 {
		w.xsteps++
		return w.xattrStep(m, faults)
	}
	if m != nil && w.rng.IntN(100) < w.atomicPct {
		w.asteps++
		return w.atomicStep(m, faults)
	}
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
		w.pre(op)
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
		next := resize(bytes.Clone(m.data), max(len(m.data), off+n))
		copy(next[off:], p)
		w.addVersion(next)
		w.invalidate(m.name, int64(off), int64(off+n))
		w.pre(op)
		if _, err = m.f.WriteAt(p, int64(off)); err == nil {
			m.data = next
		}
	case k < 48: // truncate
		size := w.rng.IntN(maxFile + 4096)
		op = fmt.Sprintf("truncate %s size=%d", m.name, size)
		w.logf("%s", op)
		m.synced = nil
		next := resize(bytes.Clone(m.data), size)
		w.addVersion(next)
		w.invalidate(m.name, int64(size), math.MaxInt64)
		w.pre(op)
		if err = m.f.Truncate(int64(size)); err == nil {
			m.data = next
		}
	case k < 62: // fallocate
		mode := []ext4io.FallocMode{ext4io.FallocAllocate, ext4io.FallocKeepSize, ext4io.FallocPunchHole,
			ext4io.FallocZeroRange, ext4io.FallocWriteZeroes}[w.rng.IntN(5)]
		off := w.rng.IntN(maxFile)
		n := 1 + w.rng.IntN(96<<10)
		op = fmt.Sprintf("fallocate %s mode=%v off=%d len=%d", m.name, mode, off, n)
		w.logf("%s", op)
		m.synced = nil
		next := fallocModel(bytes.Clone(m.data), mode, off, n)
		w.addVersion(next)
		if mode != ext4io.FallocAllocate && mode != ext4io.FallocKeepSize {
			w.invalidate(m.name, int64(off), int64(off+n))
		}
		w.pre(op)
		if err = m.f.Fallocate(mode, int64(off), int64(n)); err == nil {
			m.data = next
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
		m.xcands = nil
		w.invalidateFile(m.name)
		w.invalidateFile(to)
		w.pre(op, to)
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
		m.xcands = nil
		w.invalidateFile(m.name)
		w.pre(op)
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
			w.pre(op)
			if err = w.v.Rmdir(path.Join(w.dir, d)); err == nil {
				delete(w.dirs, d)
			}
		} else {
			d = fmt.Sprintf("d%d", w.next)
			w.next++
			op = "mkdir " + d
			w.logf("%s", op)
			w.touch(d)
			w.pre(op)
			if err = w.v.Mkdir(path.Join(w.dir, d), 0o755); err == nil {
				w.dirs[d] = true
			}
		}
	case k < 92: // file sync
		data := w.rng.IntN(2) == 0
		op = "fsync " + m.name
		if data {
			op = "fdatasync " + m.name
		}
		w.logf("%s", op)
		w.pre(op)
		sync := m.f.Sync
		if data {
			sync = m.f.Datasync
		}
		if err = sync(); err == nil {
			m.synced = m.durable()
			m.syncX()
		}
	default: // volume sync
		op = "syncfs"
		w.logf("%s", op)
		w.pre(op)
		if err = w.v.Sync(); err == nil {
			w.syncAll()
		}
	}
	defer func() { w.hist = append(w.hist, w.snapshot(false, op)) }()
	if err != nil {
		if m != nil && !strings.HasPrefix(op, "mkdir") && !strings.HasPrefix(op, "rmdir") && !strings.HasPrefix(op, "create") && !strings.HasPrefix(op, "sync") {
			w.drop(m)
		}
		return w.opError(op, err, faults)
	}
	return nil
}

// durable returns the model's contents as known durable after a sync:
// m.data itself, capped, not a copy. The model never changes bytes of
// m.data in place (writes, truncates and fallocates build a new slice;
// appends write only past its length, which the cap keeps out), so the
// snapshots holding it stay as they were. Never nil: nil means nothing
// known.
func (m *mfile) durable() []byte {
	if m.data == nil {
		return []byte{}
	}
	return m.data[:len(m.data):len(m.data)]
}

// syncAll records a successful Volume.Sync: every name and content is durable.
func (w *worker) syncAll() {
	w.volSync = true
	w.synced = map[string]bool{}
	for n, m := range w.files {
		w.synced[n] = true
		m.synced = m.durable()
		m.syncX()
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
// what the last syncs made durable (after a crash at the end of the
// operations); otherwise everything (after a clean Close).
func (w *worker) check(v *ext4io.Volume, durable bool) error {
	if durable {
		return w.checkAt(v, w.snapshot(false, "now"))
	}
	all := snap{volSync: true, synced: map[string]bool{}, changed: map[string]bool{}, unknown: w.unknown, content: map[string][]byte{}, xattrs: map[string][]xset{}}
	for n, m := range w.files {
		all.synced[n] = true
		all.content[n] = m.data
		all.xattrs[n] = []xset{m.xattrs}
	}
	for n := range w.dirs {
		all.synced[n] = true
	}
	return w.compare(v, all, false)
}

// checkAt checks a volume recovered from a crash against s, the durable
// state at the crash point: every name and content it holds must be there,
// and no file of the worker may expose a block it never wrote.
func (w *worker) checkAt(v *ext4io.Volume, s snap) error {
	if err := w.compare(v, s, true); err != nil {
		return err
	}
	return w.checkStale(v)
}

// compare compares the volume with s. durable: names touched since the
// last Volume.Sync may be there or not; otherwise only names whose
// creation failed (fill files) may be there beyond s. Either way the
// names of dropped files (s.unknown) may be there.
func (w *worker) compare(v *ext4io.Volume, s snap, durable bool) error {
	if s.volSync {
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
		for n := range s.synced {
			if !have[n] && (!durable || !s.changed[n]) {
				return fmt.Errorf("%s/%s: missing (durable=%v)", w.dir, n, durable)
			}
		}
		for n := range have {
			if !s.synced[n] && !s.unknown[n] && (!durable || !s.changed[n]) && (durable || !w.changed[n] || !strings.HasPrefix(n, "fill")) {
				return fmt.Errorf("%s/%s: exists but the model says it does not (durable=%v)", w.dir, n, durable)
			}
		}
	}
	names := slices.Sorted(maps.Keys(s.content))
	for _, n := range names {
		want := s.content[n]
		name := path.Join(w.dir, n)
		if testHookExpect != nil {
			want = testHookExpect(name, bytes.Clone(want))
		}
		// The file's xxhash digest, read through a small buffer, against
		// the model's; the file is read whole only to describe a
		// difference.
		sum, size, err := digestFile(v, name)
		if err != nil {
			return fmt.Errorf("%s: synced file: %w", name, err)
		}
		if size == int64(len(want)) && sum == xxhash.Sum64(want) {
			continue
		}
		got, err := readAll(v, name)
		if err != nil {
			return fmt.Errorf("%s: synced file: %w", name, err)
		}
		if !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			return fmt.Errorf("%s: contents differ (durable=%v): size %d want %d, first difference at byte %d", name, durable, len(got), len(want), i)
		}
		return fmt.Errorf("%s: digest %#x of %d bytes, model's %#x, yet a second read equals the model (durable=%v)", name, sum, size, xxhash.Sum64(want), durable)
	}
	for _, n := range slices.Sorted(maps.Keys(s.xattrs)) {
		if err := compareX(v, path.Join(w.dir, n), s.xattrs[n]); err != nil {
			return fmt.Errorf("durable=%v: %w", durable, err)
		}
	}
	return nil
}

// checkStale reads every regular file in the worker's directory: each
// whole block must be zero or a block some version of one of the worker's
// files had. Random contents make a stale block (another file's, an earlier
// round's) fail this.
func (w *worker) checkStale(v *ext4io.Volume) error {
	ents, err := v.DirEntries(w.dir)
	if err != nil {
		return fmt.Errorf("readdir %s: %w", w.dir, err)
	}
	for _, e := range ents {
		if e.Type != layout.FtRegFile {
			continue
		}
		name := path.Join(w.dir, e.Name)
		got, err := readAll(v, name)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		// A partial last block is not checked: the size may be an older
		// version's and the block a newer one's (an overwrite reached the
		// device, the size change did not), a legal mix no version had.
		for off := 0; off+w.bs <= len(got); off += w.bs {
			blk := got[off : off+w.bs]
			if allZero(blk) {
				continue
			}
			if !w.known(blk) {
				return fmt.Errorf("%s: block %d (byte %d) holds data no version of the worker's files had: stale data exposed%s", name, off/w.bs, off, w.explain(blk, off))
			}
		}
	}
	return nil
}

// known reports whether blk is a block some version had, with any of
// its bytes zeroed: truncate, punch and zero-range zero parts of a block in
// place, and a crash may keep that zeroing over an older version of the
// block's other bytes. Random contents make a stale block share almost no
// byte with any version. The scan runs only when the hash misses.
func (w *worker) known(blk []byte) bool {
	if _, ok := w.seen[maphash.Bytes(w.hseed, blk)]; ok {
		return true
	}
	for _, v := range w.seen {
		ok := true
		for i, c := range blk {
			if c != 0 && c != v[i] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// digestFile returns the xxhash digest and the size of file name's
// contents, read through a 64 KiB buffer.
func digestFile(v *ext4io.Volume, name string) (uint64, int64, error) {
	f, err := v.Open(name)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	h := xxhash.New()
	n, err := io.CopyBuffer(h, io.NewSectionReader(f, 0, f.Size()), make([]byte, 64<<10))
	if err != nil {
		return 0, 0, fmt.Errorf("read: %w", err)
	}
	return h.Sum64(), n, nil
}

func readAll(v *ext4io.Volume, name string) ([]byte, error) {
	f, err := v.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	got := make([]byte, f.Size())
	if _, err := f.ReadAt(got, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read: %w", err)
	}
	return got, nil
}

// runWorkers runs n ops on each worker concurrently, xattr and atomic steps not
// counted: they come on top, so that a round does as many data and
// namespace operations (and syncs) as before they were added.
func runWorkers(ws []*worker, n int, faults bool) error {
	var wg sync.WaitGroup
	errs := make([]error, len(ws))
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < n && !w.stopped; {
				x := w.xsteps + w.asteps
				if err := w.step(faults); err != nil {
					errs[i] = err
					return
				}
				if w.xsteps+w.asteps == x {
					j++
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
