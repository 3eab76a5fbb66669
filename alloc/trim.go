package alloc

import (
	"fmt"
	"sync"
)

// Trim: discarding free space (FITRIM).
//
// Trim walks the groups overlapping a block range and hands each free
// run of at least minLen blocks in it to a discard function, as
// ext4_trim_fs does. A run is taken out of the free trees under the group
// lock, discarded with no lock held, and put back: while it is discarded
// no allocation can get it (and so write it before its discard), and
// writers in the group wait at most for one tree update. An allocation
// that finds no space while runs are out waits for them and searches
// again (trimWait), so Trim never makes a request fail for space.
// Available does not change during a Trim.
//
// Blocks freed by a transaction that has not committed yet (FreeDeferred,
// not released) are not in the trees, so Trim never discards a block the
// committed metadata may still map. Like ext4's EXT4_GROUP_INFO_WAS_TRIMMED,
// a group trimmed as a whole is skipped by later Trims with the same or a
// larger minLen until blocks come back to its free space (in memory only:
// a new Allocator trims everything again).

// trimWait counts the runs Trim holds out of the trees; done is closed
// when the count drops to zero.
type trimWait struct {
	mu   sync.Mutex
	n    int           // guarded by mu
	done chan struct{} // guarded by mu; nil while n == 0
}

func (t *trimWait) begin() {
	t.mu.Lock()
	if t.n == 0 {
		t.done = make(chan struct{})
	}
	t.n++
	t.mu.Unlock()
}

func (t *trimWait) end() {
	t.mu.Lock()
	t.n--
	if t.n == 0 {
		close(t.done)
		t.done = nil
	}
	t.mu.Unlock()
}

// wait waits until no run is held out of the trees; it reports whether
// any was.
func (t *trimWait) wait() bool {
	t.mu.Lock()
	ch := t.done
	t.mu.Unlock()
	if ch == nil {
		return false
	}
	<-ch
	return true
}

// trimYield bounds the free extents Trim looks at in one hold of a group
// lock when none of them is long enough.
const trimYield = 1024

// Trim calls discard(start, n) for every free run of at least minLen
// blocks inside blocks [start, end), group by group, and returns the
// blocks discarded. minLen 0 means 1. It stops at the first error from
// discard (returned as is, with the blocks discarded before it) or from
// reading a bitmap. discard is called with no allocator lock held, one
// run at a time; the run stays unallocatable until it returns. Safe for
// concurrent use with allocations and frees.
func (a *Allocator) Trim(start, end, minLen uint64, discard func(start, n uint64) error) (uint64, error) {
	if minLen == 0 {
		minLen = 1
	}
	if minLen > a.bpg {
		return 0, fmt.Errorf("alloc: trim: minimum run of %d blocks exceeds a group of %d: %w", minLen, a.bpg, ErrInvalid)
	}
	start = max(start, a.firstData)
	end = min(end, a.sb.BlocksCount)
	var trimmed uint64
	for start < end {
		gi := a.groupOf(start)
		base := a.sb.GroupFirstBlock(gi)
		gend := min(end, a.groupEnd(gi))
		n, err := a.trimGroup(gi, uint32(start-base), uint32(gend-base), uint32(minLen), discard)
		trimmed += n
		if err != nil {
			return trimmed, err
		}
		start = gend
	}
	return trimmed, nil
}

// trimGroup trims group gi's free runs inside group-relative [lo, hi).
func (a *Allocator) trimGroup(gi uint64, lo, hi, minLen uint32, discard func(start, n uint64) error) (uint64, error) {
	g := a.g[gi]
	if g.freeBlocks.Load() < int64(minLen) {
		return 0, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := a.loadLocked(gi); err != nil {
		return 0, err
	}
	whole := lo == 0 && uint64(hi) == uint64(a.sb.GroupBlocks(gi))
	if whole && g.mu.trimmedMin != 0 && g.mu.trimmedMin <= minLen {
		return 0, nil
	}
	gen := g.mu.freeGen
	base := a.sb.GroupFirstBlock(gi)
	var trimmed uint64
	for cur := lo; cur < hi; {
		e, s, n, next, ok := a.nextTrimLocked(g, cur, hi, minLen)
		if !ok {
			if next >= hi {
				break
			}
			// Many short extents: let writers in before looking on.
			cur = next
			g.mu.Unlock()
			g.mu.Lock()
			continue
		}
		a.removeFreeLocked(g, e, s, n)
		a.trims.begin()
		g.mu.Unlock()
		err := discard(base+uint64(s), uint64(n))
		g.mu.Lock()
		a.putFreeLocked(gi, s, n)
		a.trims.end()
		if err != nil {
			return trimmed, err
		}
		trimmed += uint64(n)
		cur = s + n
	}
	if whole && g.mu.freeGen == gen {
		g.mu.trimmedMin = minLen
	}
	return trimmed, nil
}

// nextTrimLocked finds the first free run of at least minLen blocks in
// [cur, hi): the tree extent e holding it and the run [s, s+n). Without
// one it returns where to look on (hi when nothing is left), having
// looked at no more than trimYield extents.
func (a *Allocator) nextTrimLocked(g *group, cur, hi, minLen uint32) (e ext, s, n, next uint32, ok bool) {
	clip := func(x ext) (uint32, uint32) {
		s := max(x.start, cur)
		return s, min(x.end(), hi) - s
	}
	g.mu.byStart.DescendLessOrEqual(ext{start: cur}, func(x ext) bool {
		if x.end() > cur {
			if cs, cn := clip(x); cn >= minLen {
				e, s, n, ok = x, cs, cn, true
			}
		}
		return false
	})
	if ok {
		return e, s, n, 0, true
	}
	next = hi
	looked := 0
	g.mu.byStart.AscendGreaterOrEqual(ext{start: cur + 1}, func(x ext) bool {
		if x.start >= hi {
			return false
		}
		if cs, cn := clip(x); cn >= minLen {
			e, s, n, ok = x, cs, cn, true
			return false
		}
		looked++
		if looked >= trimYield {
			next = x.end()
			return false
		}
		return true
	})
	return e, s, n, next, ok
}
