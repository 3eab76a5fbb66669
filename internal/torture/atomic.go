package torture

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/ext4io/ext4io"
)

// Untorn writes (File.WriteAtomic, File.WriteAtomicBatch) in the torture.
//
// An atomic step issues one to three units at once, each a WriteAtomic of
// 4 KiB to 1 MiB or a WriteAtomicBatch of 2 to 6 pages, block-aligned,
// over existing data, holes and the file's end; with several units, each
// runs in its own goroutine, on the same file (overlapping ranges
// included) or on different files of the worker. The units issued
// together form a record (atomicRec).
//
// What the model allows after a crash at log entry p, for a record begun
// by p and not invalidated by then: each block of each unit's ranges is
// labelled with the unit whose data it holds (the block equals that
// unit's bytes for it), or none (it holds no unit's bytes, or lies past
// the end of the file). There must be a subset S of the record's units
// that did not fail validation (ErrUnsupported: nothing may be written)
// and an order of S such that every block's label is the last unit of S
// in that order covering it, or none when no unit of S covers it: each
// unit (a whole batch) reads entirely new or entirely not new, and of
// overlapping concurrent units the one swapped last wins their whole
// overlap. A block that is neither (more than an eighth of its bytes,
// and more than 16, equal to a covering unit's, yet not all) is a torn
// block, also a failure. "Not new" is not checked further here: the old contents of
// an unsynced range are any of the versions since its last sync, and
// checkStale already requires every block to be some version's.
//
// Invalidation: a record is no longer checked at crash points at or after
// the pre stamp of the first later operation of the worker that may change
// a byte of one of its ranges: a plain write overlapping it, a truncate
// below a range's end, a punch, zero-range or write-zeroes fallocate
// overlapping it, a later atomic step overlapping it, a rename or unlink
// of (or a rename over) one of its files. Allocating fallocate modes,
// syncs and xattr operations keep bytes as they are and do not invalidate.
// After a failed operation the file is dropped and never touched again,
// so its records stay checked, including the record of an atomic write
// that failed with an I/O error: it too must be untorn.
//
// Durability: a sync (File.Sync, File.Datasync, Volume.Sync) that returned
// makes the file's whole contents exact in the model (mfile.synced), the
// atomic units before it included: they must read new.
//
// Live check: after several units on one file returned, their ranges are
// read back from the running volume; the labels must be those of all the
// successful units in some order (never a block of the loser inside an
// overlap won by another), and that order gives the model's new contents.

// testHookAtomic, if set, replaces the engine's WriteAtomicBatch in the
// atomic steps: tests make it non-atomic and expect the model to see it.
var testHookAtomic func(f *ext4io.File, ws []ext4io.AtomicWrite) (int, error)

// atomicUnit is one WriteAtomic or WriteAtomicBatch call.
type atomicUnit struct {
	file    string // the file's name in the worker's directory
	ranges  []ext4io.AtomicWrite
	refused bool // ErrUnsupported: nothing may be written
}

// atomicRec is the units of one atomic step.
type atomicRec struct {
	op    string
	begin int // pre stamp of the step
	end   int // pre stamp of the first operation that invalidates it; math.MaxInt: none
	units []*atomicUnit
}

func (u *atomicUnit) overlaps(name string, off, end int64) bool {
	if u.file != name {
		return false
	}
	for _, r := range u.ranges {
		if r.Off < end && off < r.Off+int64(len(r.Data)) {
			return true
		}
	}
	return false
}

// invalidate ends the checks of the records with a unit on file name
// overlapping [off, end): an operation that may change those bytes
// begins now.
func (w *worker) invalidate(name string, off, end int64) {
	now := w.now()
	for _, rec := range w.atomics {
		if rec.end != math.MaxInt {
			continue
		}
		for _, u := range rec.units {
			if u.overlaps(name, off, end) {
				rec.end = now
				break
			}
		}
	}
}

func (w *worker) invalidateFile(name string) { w.invalidate(name, 0, math.MaxInt64) }

// atomicRangesFor draws the ranges of one unit for m.
func (w *worker) atomicRangesFor(m *mfile, info ext4io.AtomicWriteInfo) []ext4io.AtomicWrite {
	bs := int64(w.bs)
	align := func(x int64) int64 { return x - x%bs }
	// Offsets near the file's end half the time (extending it, or across
	// its last block), anywhere up to maxFile otherwise.
	offset := func(n int64) int64 {
		if w.rng.IntN(2) == 0 {
			return max(0, align(int64(len(m.data))-n/2+int64(w.rng.IntN(4))*bs-2*bs))
		}
		return align(int64(w.rng.IntN(maxFile)))
	}
	if w.rng.IntN(5) < 3 {
		n := min(int64(4096)<<w.rng.IntN(9), info.AtomicWriteUnitMax) // 4 KiB .. 1 MiB
		n = max(bs, align(n))
		return []ext4io.AtomicWrite{{Off: offset(n), Data: w.randBytes(int(n))}}
	}
	page := max(bs, int64(4096)<<w.rng.IntN(3)) // 4, 8 or 16 KiB
	k := 2 + w.rng.IntN(5)
	base := offset(int64(k) * page * 2)
	var ws []ext4io.AtomicWrite
	used := map[int64]bool{}
	for range k {
		slot := int64(w.rng.IntN(2 * k))
		if used[slot] {
			continue
		}
		used[slot] = true
		ws = append(ws, ext4io.AtomicWrite{Off: base + slot*page, Data: w.randBytes(int(page))})
	}
	return ws // in random order, as the API allows
}

// applyUnit returns b with u's ranges written over a copy.
func applyUnit(b []byte, u *atomicUnit) []byte {
	end := len(b)
	for _, r := range u.ranges {
		end = max(end, int(r.Off)+len(r.Data))
	}
	next := resize(bytes.Clone(b), end)
	for _, r := range u.ranges {
		copy(next[r.Off:], r.Data)
	}
	return next
}

// atomicStep runs one atomic step: one to three units, concurrently.
func (w *worker) atomicStep(m *mfile, faults bool) error {
	info := m.f.AtomicWriteInfo()
	if info.AtomicWriteUnitMin == 0 {
		return fmt.Errorf("%s/%s: AtomicWriteInfo reports no atomic writes on a journaled writable volume", w.dir, m.name)
	}
	n := 1
	if w.rng.IntN(10) < 3 {
		n = 2 + w.rng.IntN(2)
	}
	rec := &atomicRec{end: math.MaxInt}
	files := map[string]*mfile{}
	var descr []string
	for i := range n {
		f := m
		if i > 0 && w.rng.IntN(2) == 0 {
			f = w.pickFile()
		}
		u := &atomicUnit{file: f.name, ranges: w.atomicRangesFor(f, f.f.AtomicWriteInfo())}
		rec.units = append(rec.units, u)
		files[f.name] = f
		var rs []string
		for _, r := range u.ranges {
			rs = append(rs, fmt.Sprintf("%d+%d", r.Off, len(r.Data)))
		}
		kind := "atomic"
		if len(u.ranges) > 1 {
			kind = "batch"
		}
		descr = append(descr, fmt.Sprintf("%s %s [%s]", kind, f.name, strings.Join(rs, " ")))
	}
	rec.op = strings.Join(descr, " || ")
	w.logf("%s", rec.op)
	for _, u := range rec.units {
		for _, r := range u.ranges {
			w.invalidate(u.file, r.Off, r.Off+int64(len(r.Data)))
		}
		f := files[u.file]
		f.synced = nil
		w.addVersion(applyUnit(f.data, u))
	}
	w.pre(rec.op)
	rec.begin = w.hist[len(w.hist)-1].idx
	w.atomics = append(w.atomics, rec)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, u := range rec.units {
		f := files[u.file].f
		wg.Go(func() {
			if testHookAtomic != nil {
				_, errs[i] = testHookAtomic(f, u.ranges)
			} else if len(u.ranges) == 1 {
				_, errs[i] = f.WriteAtomic(u.ranges[0].Data, u.ranges[0].Off)
			} else {
				_, errs[i] = f.WriteAtomicBatch(u.ranges)
			}
		})
	}
	wg.Wait()
	w.aops += n
	defer func() { w.hist = append(w.hist, w.snapshot(false, rec.op)) }()
	var failed error
	dropped := map[string]bool{}
	for i, u := range rec.units {
		switch err := errs[i]; {
		case err == nil:
			if len(u.ranges) > 1 {
				w.abatches++
			}
		case errors.Is(err, ext4io.ErrUnsupported):
			u.refused = true
			w.arefused++
			w.logf("  -> unit %d refused: %v", i, err)
		default:
			if e := w.opError(rec.op, err, faults); e != nil && failed == nil {
				failed = e
			}
			dropped[u.file] = true
		}
	}
	// The model's new contents: units in the order the volume shows.
	for name, f := range files {
		if dropped[name] {
			continue
		}
		var us []*atomicUnit
		for i, u := range rec.units {
			if u.file == name && errs[i] == nil {
				us = append(us, u)
			}
		}
		if len(us) == 0 {
			continue
		}
		order := us
		if len(us) > 1 {
			var err error
			if order, err = liveOrder(f, us, w.bs); err != nil {
				return fmt.Errorf("%s: %s: %w", w.dir, rec.op, err)
			}
		}
		next := f.data
		for _, u := range order {
			next = applyUnit(next, u)
		}
		f.data = next
		w.addVersion(next)
	}
	for name := range dropped {
		if f := w.files[name]; f != nil {
			w.drop(f)
		}
	}
	return failed
}

// liveOrder reads the ranges of us, all successful units on file f, from
// the running volume and returns the order of us their labels show.
func liveOrder(f *mfile, us []*atomicUnit, bs int) ([]*atomicUnit, error) {
	size := func(string) (int64, error) { return f.f.Size(), nil }
	blocks, err := labelBlocks(us, bs, size, func(_ string, p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) })
	if err != nil {
		return nil, err
	}
	all := make([]bool, len(us))
	for i := range all {
		all[i] = true
	}
	order, ok := findOrder(blocks, len(us), all)
	if !ok {
		return nil, fmt.Errorf("after the units returned, their blocks on the live volume are no serial order of them: %s", describe(blocks, us))
	}
	out := make([]*atomicUnit, len(order))
	for i, k := range order {
		out[i] = us[k]
	}
	return out, nil
}

// ablock is one file-system block covered by units of a record.
type ablock struct {
	file  string
	off   int64
	cover []int // units covering it, by index
	label int   // the unit whose bytes it holds; -1: none
}

// labelBlocks labels every block of the units' ranges. size gives a
// file's size (fs.ErrNotExist: the file is not there; all its blocks are
// none); readAt reads it.
func labelBlocks(us []*atomicUnit, bs int, size func(name string) (int64, error), readAt func(name string, p []byte, off int64) (int, error)) ([]*ablock, error) {
	byKey := map[string]*ablock{}
	var blocks []*ablock
	for i, u := range us {
		for _, r := range u.ranges {
			for o := int64(0); o < int64(len(r.Data)); o += int64(bs) {
				k := fmt.Sprintf("%s@%d", u.file, r.Off+o)
				b := byKey[k]
				if b == nil {
					b = &ablock{file: u.file, off: r.Off + o, label: -1}
					byKey[k] = b
					blocks = append(blocks, b)
				}
				b.cover = append(b.cover, i)
			}
		}
	}
	sizes := map[string]int64{}
	buf := make([]byte, bs)
	for _, b := range blocks {
		sz, ok := sizes[b.file]
		if !ok {
			s, err := size(b.file)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				s = -1
			case err != nil:
				return nil, fmt.Errorf("%s: %w", b.file, err)
			}
			sizes[b.file], sz = s, s
		}
		n := int(min(int64(bs), max(0, sz-b.off)))
		if n == 0 {
			continue // past the end: none
		}
		if got, err := readAt(b.file, buf[:n], b.off); got < n {
			return nil, fmt.Errorf("%s: read %d bytes at %d: %d read: %w", b.file, n, b.off, got, err)
		}
		for _, i := range b.cover {
			want := unitBlock(us[i], b.off, bs)[:n]
			if bytes.Equal(buf[:n], want) {
				b.label = i
				break
			}
			same := 0
			for j := range n {
				if buf[j] == want[j] {
					same++
				}
			}
			// Random bytes match by chance one time in 256: a few
			// equal bytes of a short piece at the file's end are chance.
			if same > max(n/8, 16) {
				return nil, fmt.Errorf("%s: block at byte %d torn: %d of %d bytes equal to the atomic write's %d", b.file, b.off, same, n, i)
			}
		}
	}
	return blocks, nil
}

// unitBlock returns u's bytes for the block at off.
func unitBlock(u *atomicUnit, off int64, bs int) []byte {
	for _, r := range u.ranges {
		if off >= r.Off && off < r.Off+int64(len(r.Data)) {
			return r.Data[off-r.Off : off-r.Off+int64(bs)]
		}
	}
	panic("unitBlock: block not in unit") // callers pass covered blocks only
}

// findOrder returns an order of a subset S of the n units such that every
// block's label is the last unit of S covering it (-1 if none). allowed
// says which units may be in S; need, if set, that S must be all of them.
func findOrder(blocks []*ablock, n int, need []bool) ([]int, bool) {
	return searchOrder(blocks, n, need, nil)
}

func searchOrder(blocks []*ablock, n int, need []bool, seq []int) ([]int, bool) {
	if fits(blocks, seq) {
		full := true
		for i := range n {
			if need[i] && !slices.Contains(seq, i) {
				full = false
			}
		}
		if full {
			return seq, true
		}
	}
	for i := range n {
		if slices.Contains(seq, i) {
			continue
		}
		if got, ok := searchOrder(blocks, n, need, append(slices.Clip(seq), i)); ok {
			return got, true
		}
	}
	return nil, false
}

// fits reports whether the labels are those of applying seq in order.
func fits(blocks []*ablock, seq []int) bool {
	for _, b := range blocks {
		want, pos := -1, -1
		for _, i := range b.cover {
			if p := slices.Index(seq, i); p > pos {
				want, pos = i, p
			}
		}
		if b.label != want {
			return false
		}
	}
	return true
}

// describe summarizes the labels of each unit's blocks for a report.
func describe(blocks []*ablock, us []*atomicUnit) string {
	var b strings.Builder
	for i, u := range us {
		fmt.Fprintf(&b, "\n  unit %d (%s, %d ranges, refused=%v): ", i, u.file, len(u.ranges), u.refused)
		for _, blk := range blocks {
			if !slices.Contains(blk.cover, i) {
				continue
			}
			switch {
			case blk.label == i:
				b.WriteByte('N')
			case blk.label < 0:
				b.WriteByte('.')
			default:
				fmt.Fprintf(&b, "%d", blk.label)
			}
		}
	}
	b.WriteString("\n  (N: the unit's new bytes, .: none, digit: another unit's)")
	return b.String()
}

// checkAtomic checks the records a crash after log entry p must keep
// untorn; it returns how many units it checked.
func (w *worker) checkAtomic(v *ext4io.Volume, p int) (int, error) {
	checked := 0
	for _, rec := range w.atomics {
		if p < rec.begin || p >= rec.end {
			continue
		}
		size := func(name string) (int64, error) {
			st, err := v.Stat(path.Join(w.dir, name))
			if err != nil {
				return 0, err
			}
			return st.Size(), nil
		}
		readAt := func(name string, p []byte, off int64) (int, error) {
			f, err := v.Open(path.Join(w.dir, name))
			if err != nil {
				return 0, err
			}
			defer f.Close()
			return f.ReadAt(p, off)
		}
		blocks, err := labelBlocks(rec.units, w.bs, size, readAt)
		if err != nil {
			return checked, fmt.Errorf("atomic %q (begun at log %d): %w", rec.op, rec.begin, err)
		}
		if _, ok := findOrderAllowed(blocks, rec.units); !ok {
			return checked, fmt.Errorf("atomic %q (begun at log %d) torn: no unit reads all new or all not new in any order:%s", rec.op, rec.begin, describe(blocks, rec.units))
		}
		checked += len(rec.units)
	}
	return checked, nil
}

// findOrderAllowed is findOrder over the units not refused, none required.
func findOrderAllowed(blocks []*ablock, us []*atomicUnit) ([]int, bool) {
	var seqs func(seq []int) ([]int, bool)
	seqs = func(seq []int) ([]int, bool) {
		if fits(blocks, seq) {
			return seq, true
		}
		for i, u := range us {
			if u.refused || slices.Contains(seq, i) {
				continue
			}
			if got, ok := seqs(append(slices.Clip(seq), i)); ok {
				return got, true
			}
		}
		return nil, false
	}
	return seqs(nil)
}
