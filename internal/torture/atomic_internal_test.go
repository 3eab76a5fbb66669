package torture

import (
	"bytes"
	"fmt"
	"io/fs"
	"math"
	"sync"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeFiles is a file set for labelBlocks: name -> contents.
type fakeFiles map[string][]byte

func (ff fakeFiles) size(name string) (int64, error) {
	b, ok := ff[name]
	if !ok {
		return 0, fs.ErrNotExist
	}
	return int64(len(b)), nil
}

func (ff fakeFiles) readAt(name string, p []byte, off int64) (int, error) {
	return copy(p, ff[name][off:]), nil
}

// untorn runs the crash check of rec's units on ff.
func untorn(t *testing.T, ff fakeFiles, us []*atomicUnit, bs int) error {
	t.Helper()
	blocks, err := labelBlocks(us, bs, ff.size, ff.readAt)
	if err != nil {
		return err
	}
	if _, ok := findOrderAllowed(blocks, us); !ok {
		return fmt.Errorf("torn:%s", describe(blocks, us))
	}
	return nil
}

// TestAtomicModel: a unit (a whole batch) reads all new or all not new;
// overlapping units read as a serial order of a subset of them; a torn
// block, a refused unit's bytes and a range cut by the file's end fail.
func TestAtomicModel(t *testing.T) {
	const bs = 1024
	w := newWorker(nil, "/d", 7, bs)
	old := w.randBytes(16 * bs)
	a := &atomicUnit{file: "f", ranges: []ext4io.AtomicWrite{{Off: 2 * bs, Data: w.randBytes(4 * bs)}, {Off: 10 * bs, Data: w.randBytes(2 * bs)}}}
	b := &atomicUnit{file: "f", ranges: []ext4io.AtomicWrite{{Off: 4 * bs, Data: w.randBytes(4 * bs)}}}
	c := &atomicUnit{file: "g", ranges: []ext4io.AtomicWrite{{Off: 0, Data: w.randBytes(2 * bs)}}}
	us := []*atomicUnit{a, b, c}
	with := func(order ...*atomicUnit) fakeFiles {
		ff := fakeFiles{"f": old, "g": make([]byte, bs)}
		for _, u := range order {
			ff[u.file] = applyUnit(ff[u.file], u)
		}
		return ff
	}
	// Every subset, in every order, is allowed.
	for _, order := range [][]*atomicUnit{nil, {a}, {b}, {c}, {a, b}, {b, a}, {c, b, a}, {a, c, b}} {
		require.NoError(t, untorn(t, with(order...), us, bs))
	}
	require.NoError(t, untorn(t, fakeFiles{}, us, bs), "files not there")

	// One range of batch a new, the other old: torn.
	ff := with()
	ff["f"] = bytes.Clone(old)
	copy(ff["f"][2*bs:], a.ranges[0].Data)
	assert.ErrorContains(t, untorn(t, ff, us, bs), "torn")

	// Half of a single range new.
	ff = with()
	ff["f"] = bytes.Clone(old)
	copy(ff["f"][4*bs:], b.ranges[0].Data[:2*bs])
	assert.ErrorContains(t, untorn(t, ff, us, bs), "torn")

	// The overlap of a and b interleaved: a's block 4, b's block 5.
	ff = with(a, b)
	copy(ff["f"][4*bs:], a.ranges[0].Data[2*bs:3*bs])
	assert.ErrorContains(t, untorn(t, ff, us, bs), "torn")

	// A block half new (a torn device write).
	ff = with(b)
	copy(ff["f"][5*bs+bs/2:], old[5*bs+bs/2:6*bs])
	assert.ErrorContains(t, untorn(t, ff, us, bs), "torn")

	// A one-block unit torn inside its block: neither new nor old.
	d := &atomicUnit{file: "h", ranges: []ext4io.AtomicWrite{{Off: bs, Data: w.randBytes(bs)}}}
	h := append(make([]byte, bs), d.ranges[0].Data[:bs/2]...)
	h = append(h, make([]byte, bs/2)...)
	assert.ErrorContains(t, untorn(t, fakeFiles{"h": h}, []*atomicUnit{d}, bs), "torn")

	// A few bytes of the unit's block before the file's end, one of
	// them equal to the new bytes by chance: none, not torn.
	h = make([]byte, bs+6)
	h[bs] = d.ranges[0].Data[0]
	h[bs+1] = d.ranges[0].Data[1] + 1
	require.NoError(t, untorn(t, fakeFiles{"h": h}, []*atomicUnit{d}, bs))

	// The file's end cuts a new range: new blocks, then none.
	ff = with(b)
	ff["f"] = ff["f"][:6*bs]
	assert.ErrorContains(t, untorn(t, ff, us, bs), "torn")

	// A refused unit must not be there.
	b.refused = true
	assert.ErrorContains(t, untorn(t, with(b), us, bs), "torn")
	require.NoError(t, untorn(t, with(a), us, bs))
	b.refused = false

	// The live order: all units, the one applied last wins the overlap.
	blocks, err := labelBlocks([]*atomicUnit{a, b}, bs, with(b, a).size, with(b, a).readAt)
	require.NoError(t, err)
	order, ok := findOrder(blocks, 2, []bool{true, true})
	require.True(t, ok)
	assert.Equal(t, []int{1, 0}, order)
	blocks, err = labelBlocks([]*atomicUnit{a, b}, bs, with(b).size, with(b).readAt)
	require.NoError(t, err)
	_, ok = findOrder(blocks, 2, []bool{true, true})
	assert.False(t, ok, "a missing from the live volume")
}

// TestAtomicInvalidate: an operation that may change a range's bytes ends
// its record's checks at the operation's stamp; others do not.
func TestAtomicInvalidate(t *testing.T) {
	w := newWorker(nil, "/d", 1, 4096)
	clock := 10
	w.clock = func() int { return clock }
	rec := &atomicRec{begin: 5, end: math.MaxInt, units: []*atomicUnit{{file: "f", ranges: []ext4io.AtomicWrite{{Off: 8192, Data: make([]byte, 8192)}}}}}
	w.atomics = []*atomicRec{rec}
	w.invalidate("f", 0, 8192)
	w.invalidate("f", 16384, 20000)
	w.invalidate("g", 8192, 16384)
	assert.Equal(t, math.MaxInt, rec.end)
	w.invalidate("f", 16383, 16384)
	assert.Equal(t, 10, rec.end)
	clock = 20
	w.invalidateFile("f")
	assert.Equal(t, 10, rec.end, "the first invalidation counts")
}

// atomicTorture runs rounds with many atomic steps and hook as the
// atomic write; it returns Run's error.
func atomicTorture(t *testing.T, seed uint64, rounds int, hook func(f *ext4io.File, ws []ext4io.AtomicWrite) (int, error)) error {
	t.Helper()
	if !hasFsck() {
		t.Skip("e2fsck not installed")
	}
	testHookAtomic = hook
	defer func() { testHookAtomic = nil }()
	sum, err := Run(Config{AtomicPercent: 40, Seed: seed, MaxRounds: rounds, Goroutines: 2, DeviceSize: 32 << 20, CrashEvery: 100, CrashPoints: 6, Dir: t.TempDir()})
	t.Logf("summary: %v", sum)
	if err == nil {
		require.Positive(t, sum.AtomicChecks, "no atomic unit checked in a crash image")
	}
	return err
}

// TestAtomicClean: the engine's atomic writes pass the model.
func TestAtomicClean(t *testing.T) {
	require.NoError(t, atomicTorture(t, 11, 6, nil))
}

// TestAtomicMutantInPlace: atomic writes done as plain in-place writes
// tear, and the model reports it.
func TestAtomicMutantInPlace(t *testing.T) {
	if testing.Short() {
		t.Skip("runs up to 40 rounds")
	}
	// Whole units in the live volume, as in TestAtomicMutantTwoTransactions:
	// concurrent plain writes of overlapping units would also interleave
	// live, which the model reports as no serial order of them, by chance
	// before any crash point. The mutex leaves the tear to a crash, the
	// failure this test is about.
	var mu sync.Mutex
	err := atomicTorture(t, 12, 40, func(f *ext4io.File, ws []ext4io.AtomicWrite) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, w := range ws {
			k, err := f.WriteAt(w.Data, w.Off)
			n += k
			if err != nil {
				return n, err
			}
		}
		return n, nil
	})
	require.Error(t, err)
	t.Log(err)
	assert.Regexp(t, `crash point .*atomic .* torn`, err.Error())
}

// TestAtomicMutantTwoTransactions: a unit swapped in two transactions
// (its first half committed before its second is written) tears.
func TestAtomicMutantTwoTransactions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs up to 40 rounds")
	}
	var mu sync.Mutex // whole units in the live volume: only a crash tears them
	err := atomicTorture(t, 13, 40, func(f *ext4io.File, ws []ext4io.AtomicWrite) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		first, second := ws[:len(ws)/2], ws[len(ws)/2:]
		if len(ws) == 1 {
			if len(ws[0].Data) < 2*4096 {
				return f.WriteAtomic(ws[0].Data, ws[0].Off)
			}
			h := len(ws[0].Data) / 2
			first = []ext4io.AtomicWrite{{Off: ws[0].Off, Data: ws[0].Data[:h]}}
			second = []ext4io.AtomicWrite{{Off: ws[0].Off + int64(h), Data: ws[0].Data[h:]}}
		}
		n, err := f.WriteAtomicBatch(first)
		if err != nil {
			return n, err
		}
		if err := f.Datasync(); err != nil {
			return n, err
		}
		k, err := f.WriteAtomicBatch(second)
		return n + k, err
	})
	require.Error(t, err)
	t.Log(err)
	assert.Regexp(t, `crash point .*atomic .* torn`, err.Error())
}
