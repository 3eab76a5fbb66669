package torture

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path"
	"slices"
	"strings"

	"github.com/ext4io/ext4io"
)

// xset is the model of a file's extended attributes: name -> value. A
// value of xset is never mutated once stored in the model (copy, then
// change).
type xset map[string][]byte

// testHookExpectX, if set, may alter the attribute sets the model accepts
// for a file (tests prove the harness can fail).
var testHookExpectX func(name string, cands []xset) []xset

// xattrNames is the pool of attribute names the workers set: several
// name indexes (user, trusted, security) so entries sort and share across
// them.
var xattrNames = []string{"user.a0", "user.a1", "user.a2", "user.a3", "user.long.attribute.name.a4", "trusted.t0", "security.s0"}

// maxCands bounds the durable-state candidates a file keeps between syncs;
// past it the file's attributes are not checked until the next sync.
const maxCands = 32

// sharedSets returns n attribute sets the workers of a round apply to
// their files whole, so that files (of one worker or several) end up with
// identical external blocks, which ext4io then shares (h_refcount > 1).
// Every value is too large for the inode, so the whole set lives in the
// block.
func sharedSets(rng *rand.Rand, n, bs int) []xset {
	sets := make([]xset, n)
	per := (bs - 200) / 3
	for i := range sets {
		s := xset{}
		for j := range 1 + rng.IntN(3) {
			v := make([]byte, 120+rng.IntN(max(1, per-120)))
			for k := range v {
				v[k] = byte(rng.Uint32())
			}
			s[fmt.Sprintf("user.shared%d", j)] = v
		}
		sets[i] = s
	}
	return sets
}

// xattrValueSize draws a value size: small ones fit in the inode, large
// ones (up to about 3000 bytes) only in the external block.
func (w *worker) xattrValueSize() int {
	switch k := w.rng.IntN(10); {
	case k < 4:
		return w.rng.IntN(41)
	case k < 7:
		return 41 + w.rng.IntN(460)
	default:
		hi := min(3000, w.bs*3/4)
		return 500 + w.rng.IntN(max(1, hi-500))
	}
}

// xattrStep runs one random xattr operation on m. It returns a non-nil
// error only for a harness failure.
func (w *worker) xattrStep(m *mfile, faults bool) error {
	k := w.rng.IntN(100)
	have := slices.Sorted(maps.Keys(m.xattrs))
	attr := xattrNames[w.rng.IntN(len(xattrNames))]
	_, exists := m.xattrs[attr]
	switch {
	case k < 30: // set
		flags := 0
		if w.rng.IntN(2) == 0 {
			flags = map[bool]int{true: ext4io.XATTR_REPLACE, false: ext4io.XATTR_CREATE}[exists]
		}
		_, err := w.setx(m, attr, w.randBytes(w.xattrValueSize()), flags, faults)
		return err
	case k < 37: // a flag that must fail, changing nothing
		if exists {
			return w.xmust(m, fmt.Sprintf("setxattr %s %s create (exists)", m.name, attr), ext4io.ErrExist, faults, func(name string) error {
				return w.v.Setxattr(name, attr, []byte("x"), ext4io.XATTR_CREATE)
			})
		}
		return w.xmust(m, fmt.Sprintf("setxattr %s %s replace (missing)", m.name, attr), ext4io.ErrNoAttr, faults, func(name string) error {
			return w.v.Setxattr(name, attr, []byte("x"), ext4io.XATTR_REPLACE)
		})
	case k < 50: // remove
		if len(have) > 0 && w.rng.IntN(4) != 0 {
			_, err := w.removex(m, have[w.rng.IntN(len(have))], faults)
			return err
		}
		if !exists {
			return w.xmust(m, fmt.Sprintf("removexattr %s %s (missing)", m.name, attr), ext4io.ErrNoAttr, faults, func(name string) error {
				return w.v.Removexattr(name, attr)
			})
		}
		_, err := w.removex(m, attr, faults)
		return err
	case k < 75: // make the set one of the shared sets
		if len(w.shared) == 0 {
			return nil
		}
		set := w.shared[w.rng.IntN(len(w.shared))]
		for _, a := range have {
			if _, ok := set[a]; !ok {
				if ok, err := w.removex(m, a, faults); !ok || err != nil {
					return err
				}
			}
		}
		for _, a := range slices.Sorted(maps.Keys(set)) {
			if ok, err := w.setx(m, a, set[a], 0, faults); !ok || err != nil {
				return err
			}
		}
		return nil
	case k < 88: // get
		w.xops++
		op := fmt.Sprintf("getxattr %s %s", m.name, attr)
		w.logf("%s", op)
		got, err := w.v.Getxattr(path.Join(w.dir, m.name), attr)
		want, ok := m.xattrs[attr]
		switch {
		case err == nil && !ok:
			return fmt.Errorf("%s in %s: got %d bytes, the model has no such attribute", op, w.dir, len(got))
		case err == nil && !bytes.Equal(got, want):
			return fmt.Errorf("%s in %s: value differs: %d bytes, want %d", op, w.dir, len(got), len(want))
		case errors.Is(err, ext4io.ErrNoAttr) && ok:
			return fmt.Errorf("%s in %s: %w, the model has %d bytes", op, w.dir, err, len(want))
		case err != nil && !errors.Is(err, ext4io.ErrNoAttr):
			return w.opError(op, err, faults)
		}
		return nil
	default: // list
		w.xops++
		op := "listxattr " + m.name
		w.logf("%s", op)
		got, err := w.v.Listxattr(path.Join(w.dir, m.name))
		if err != nil {
			return w.opError(op, err, faults)
		}
		slices.Sort(got)
		if !slices.Equal(got, have) {
			return fmt.Errorf("%s in %s: %q, the model has %q", op, w.dir, got, have)
		}
		return nil
	}
}

// setx sets attr of m to val and models it. ok is false when the attribute
// could not be set (no space, or a fault that ended the worker's round).
func (w *worker) setx(m *mfile, attr string, val []byte, flags int, faults bool) (ok bool, err error) {
	op := fmt.Sprintf("setxattr %s %s len=%d flags=%d", m.name, attr, len(val), flags)
	next := maps.Clone(m.xattrs)
	if next == nil {
		next = xset{}
	}
	next[attr] = val
	return w.xchange(m, op, next, func(name string) error { return w.v.Setxattr(name, attr, val, flags) }, faults)
}

// removex removes attr (which m has) and models it.
func (w *worker) removex(m *mfile, attr string, faults bool) (ok bool, err error) {
	op := fmt.Sprintf("removexattr %s %s", m.name, attr)
	next := maps.Clone(m.xattrs)
	delete(next, attr)
	return w.xchange(m, op, next, func(name string) error { return w.v.Removexattr(name, attr) }, faults)
}

// xchange runs call, which changes m's attributes to next (one journaled
// operation: after a crash, m has its attributes from before the call or
// next).
func (w *worker) xchange(m *mfile, op string, next xset, call func(name string) error, faults bool) (bool, error) {
	w.xops++
	w.logf("%s", op)
	if m.xcands != nil {
		m.xcands = append(m.xcands, next)
		if len(m.xcands) > maxCands {
			m.xcands = nil
		}
	}
	w.pre(op)
	err := call(path.Join(w.dir, m.name))
	if err == nil {
		m.xattrs = next
	}
	defer func() { w.hist = append(w.hist, w.snapshot(false, op)) }()
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ext4io.ErrNoSpace) || errors.Is(err, ext4io.ErrRange):
		// Nothing changed.
		w.logf("  -> %v", err)
		return false, nil
	}
	w.drop(m)
	return false, w.opError(op, err, faults)
}

// xmust runs call, which must fail with want and change nothing.
func (w *worker) xmust(m *mfile, op string, want error, faults bool, call func(name string) error) error {
	w.xops++
	w.logf("%s", op)
	err := call(path.Join(w.dir, m.name))
	switch {
	case errors.Is(err, want):
		return nil
	case err == nil:
		return fmt.Errorf("%s in %s: succeeded, want %v", op, w.dir, want)
	}
	return w.opError(op, err, faults)
}

// syncX records that m's attributes are durable as they are now.
func (m *mfile) syncX() {
	if m.xattrs == nil {
		m.xattrs = xset{}
	}
	m.xcands = []xset{m.xattrs}
}

// compareX checks the attributes of name: they must equal one of cands,
// the states the file went through since the last sync.
func compareX(v *ext4io.Volume, name string, cands []xset) error {
	if testHookExpectX != nil {
		cands = testHookExpectX(name, slices.Clone(cands))
	}
	list, err := v.Listxattr(name)
	if err != nil {
		return fmt.Errorf("%s: listxattr: %w", name, err)
	}
	got := xset{}
	for _, a := range list {
		if _, dup := got[a]; dup {
			return fmt.Errorf("%s: listxattr names %s twice: %q", name, a, list)
		}
		val, err := v.Getxattr(name, a)
		if err != nil {
			return fmt.Errorf("%s: getxattr %s (listed): %w", name, a, err)
		}
		got[a] = val
	}
	for _, c := range cands {
		if maps.EqualFunc(got, c, bytes.Equal) {
			return nil
		}
	}
	var b strings.Builder
	for i, c := range cands {
		fmt.Fprintf(&b, "\n  candidate %d: %s", i, describeX(c))
	}
	return fmt.Errorf("%s: extended attributes %s match none of the %d states since the last sync:%s", name, describeX(got), len(cands), b.String())
}

func describeX(s xset) string {
	var parts []string
	for _, a := range slices.Sorted(maps.Keys(s)) {
		parts = append(parts, fmt.Sprintf("%s(%d)", a, len(s[a])))
	}
	return "{" + strings.Join(parts, " ") + "}"
}
