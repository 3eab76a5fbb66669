package esc

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// modelBlock is the per-block model: what the cache should say about one
// logical block.
type modelBlock struct {
	st   Status
	pblk uint64
}

type model map[uint32]modelBlock

func (m model) set(e Extent) {
	for i := uint32(0); i < e.Len; i++ {
		b := modelBlock{st: e.Status}
		if e.Status.mapped() {
			b.pblk = e.Pblk + uint64(i)
		}
		m[e.Lblk+i] = b
	}
}

// checkWindow compares every block of [base, base+n) against the model and
// the tree's invariants.
func checkWindow(t *testing.T, tr *Tree, m model, base, n uint32, step int, op string, seed uint64) {
	t.Helper()
	if err := tr.check(); err != nil {
		t.Fatalf("seed %d step %d (%s): invariant: %v", seed, step, op, err)
	}
	var delayed uint64
	for lb := base; lb < base+n; lb++ {
		want, ok := m[lb]
		got, hit := tr.Lookup(lb)
		if ok != hit {
			t.Fatalf("seed %d step %d (%s): block %d: cached=%v, model has=%v (%v)", seed, step, op, lb, hit, ok, got)
		}
		if !ok {
			continue
		}
		if !got.Contains(lb) {
			t.Fatalf("seed %d step %d (%s): lookup %d returned %v", seed, step, op, lb, got)
		}
		var gp uint64
		if got.Status.mapped() {
			gp = got.PblkOf(lb)
		}
		if got.Status != want.st || gp != want.pblk {
			t.Fatalf("seed %d step %d (%s): block %d: got %v pblk %d, want %v pblk %d",
				seed, step, op, lb, got.Status, gp, want.st, want.pblk)
		}
		if want.st == Delayed {
			delayed++
		}
	}
	// I3 independently of mergeable: the entry count must equal the number
	// of maximal runs in the model.
	runs := 0
	for lb := base; lb < base+n; lb++ {
		b, ok := m[lb]
		if !ok {
			continue
		}
		p, pok := m[lb-1]
		if lb == base || !pok || p.st != b.st || (b.st.mapped() && p.pblk+1 != b.pblk) {
			runs++
		}
	}
	if tr.Len() != runs {
		t.Fatalf("seed %d step %d (%s): %d entries, model has %d maximal runs", seed, step, op, tr.Len(), runs)
	}
	if d := tr.DelayedBlocks(); d != delayed {
		t.Fatalf("seed %d step %d (%s): DelayedBlocks %d, model %d", seed, step, op, d, delayed)
	}
	st := tr.c.Stats()
	if st.Entries != int64(tr.Len()) || st.DelayedBlocks != delayed {
		t.Fatalf("seed %d step %d (%s): stats %+v, tree len %d delayed %d", seed, step, op, st, tr.Len(), delayed)
	}
}

func TestModel(t *testing.T) {
	seeds := 40
	steps := 400
	if testing.Short() {
		seeds = 8
	}
	base := uint64(time.Now().UnixNano())
	for s := 0; s < seeds; s++ {
		seed := base + uint64(s)
		// Half the runs sit at the top of the logical range to exercise
		// the MaxBlocks edge.
		var win uint32 = 0
		if s%2 == 1 {
			win = MaxBlocks - 160
		}
		runModel(t, seed, win, 160, steps)
	}
}

func runModel(t *testing.T, seed uint64, win, n uint32, steps int) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	c := New(Options{})
	tr := c.Inode(7)
	m := model{}
	// Few physical bases, so neighbours are often physically contiguous.
	bases := []uint64{1000 - uint64(win), 5000 - uint64(win)}
	randExt := func() Extent {
		lb := win + uint32(r.IntN(int(n)))
		ln := 1 + uint32(r.IntN(24))
		if uint64(lb)+uint64(ln) > uint64(win)+uint64(n) {
			ln = win + n - lb
		}
		st := Status(1 + r.IntN(4))
		e := Extent{Lblk: lb, Len: ln, Status: st}
		if st.mapped() {
			e.Pblk = bases[r.IntN(len(bases))] + uint64(lb)
		}
		return e
	}
	for step := 0; step < steps; step++ {
		var op string
		switch k := r.IntN(10); {
		case k < 4:
			e := randExt()
			op = "insert " + e.String()
			if err := tr.Insert(e); err != nil {
				t.Fatalf("seed %d: %s: %v", seed, op, err)
			}
			m.set(e)
		case k < 6:
			e := randExt()
			if e.Status == Delayed {
				e.Status = Hole
			}
			op = "cache " + e.String()
			if err := tr.Cache(e); err != nil {
				t.Fatalf("seed %d: %s: %v", seed, op, err)
			}
			for i := uint32(0); i < e.Len; i++ {
				if _, ok := m[e.Lblk+i]; !ok {
					m.set(Extent{Lblk: e.Lblk + i, Len: 1, Pblk: e.Pblk + uint64(i), Status: e.Status})
				}
			}
		case k < 8:
			e := randExt()
			op = fmt.Sprintf("remove %d+%d", e.Lblk, e.Len)
			var want uint64
			for i := uint32(0); i < e.Len; i++ {
				if m[e.Lblk+i].st == Delayed {
					want++
				}
				delete(m, e.Lblk+i)
			}
			got, err := tr.Remove(e.Lblk, e.Len)
			if err != nil || got != want {
				t.Fatalf("seed %d: %s: delayed %d, %v; want %d", seed, op, got, err, want)
			}
		default:
			e := randExt()
			from, to := Unwritten, Written
			if r.IntN(3) == 0 {
				from, to = to, from
			}
			op = fmt.Sprintf("setstatus %d+%d %v->%v", e.Lblk, e.Len, from, to)
			var want uint32
			for i := uint32(0); i < e.Len; i++ {
				if b, ok := m[e.Lblk+i]; ok && b.st == from {
					b.st = to
					m[e.Lblk+i] = b
					want++
				}
			}
			got, err := tr.SetStatus(e.Lblk, e.Len, from, to)
			if err != nil || got != want {
				t.Fatalf("seed %d: %s: changed %d, %v; want %d", seed, op, got, err, want)
			}
		}
		checkWindow(t, tr, m, win, n, step, op, seed)
	}
}

// TestScripts runs testdata/*.txt: each case is a list of operations and a
// "want" line listing every cached range, written lblk+len:status[@pblk].
func TestScripts(t *testing.T) {
	f, err := os.Open("testdata/ops.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := New(Options{})
	tr := c.Inode(1)
	sc := bufio.NewScanner(f)
	line := 0
	cases := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fs := strings.Fields(text)
		num := func(i int) uint32 {
			v, err := strconv.ParseUint(fs[i], 0, 32)
			if err != nil {
				t.Fatalf("line %d: %v", line, err)
			}
			return uint32(v)
		}
		fail := func(err error) {
			if err != nil {
				t.Fatalf("line %d: %s: %v", line, text, err)
			}
		}
		switch fs[0] {
		case "reset":
			c.Forget(1)
			tr = c.Inode(1)
		case "insert", "cache":
			e := Extent{Lblk: num(1), Len: num(2), Status: parseStatus(t, fs[3])}
			if len(fs) > 4 {
				e.Pblk = uint64(num(4))
			}
			if fs[0] == "insert" {
				fail(tr.Insert(e))
			} else {
				fail(tr.Cache(e))
			}
		case "remove":
			_, err := tr.Remove(num(1), num(2))
			fail(err)
		case "setstatus":
			_, err := tr.SetStatus(num(1), num(2), parseStatus(t, fs[3]), parseStatus(t, fs[4]))
			fail(err)
		case "want":
			var got []string
			tr.Range(0, MaxBlocks, func(e Extent) bool {
				s := fmt.Sprintf("%d+%d:%v", e.Lblk, e.Len, e.Status)
				if e.Status.mapped() {
					s += fmt.Sprintf("@%d", e.Pblk)
				}
				got = append(got, s)
				return true
			})
			if g, w := strings.Join(got, " "), strings.Join(fs[1:], " "); g != w {
				t.Errorf("line %d: got  %s\n              want %s", line, g, w)
			}
			fail(tr.check())
			cases++
		default:
			t.Fatalf("line %d: unknown op %q", line, fs[0])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cases == 0 {
		t.Fatal("no cases")
	}
}

func parseStatus(t *testing.T, s string) Status {
	for st := Written; st <= Hole; st++ {
		if st.String() == s {
			return st
		}
	}
	t.Fatalf("bad status %q", s)
	return 0
}

// FuzzModel drives the model test from fuzzed seeds and lengths.
func FuzzModel(f *testing.F) {
	f.Add(uint64(1), uint8(50), false)
	f.Add(uint64(99), uint8(200), true)
	f.Fuzz(func(t *testing.T, seed uint64, steps uint8, top bool) {
		var win uint32
		if top {
			win = MaxBlocks - 160
		}
		runModel(t, seed, win, 160, int(steps))
	})
}
