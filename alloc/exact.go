package alloc

// AllocExact allocates exactly blocks [start, start+n) when all of them
// are free, in one group and not held back (reserved, busy or in a
// preallocation window), and reports ok false, changing nothing,
// otherwise: for callers that want a run at one place or not at all, such
// as a copy-on-write page that returns next to its neighbours, without
// allocating elsewhere and freeing again when the place is taken. flags
// are Allocate's (Privileged, MustSucceed; not Delalloc).
func (a *Allocator) AllocExact(start, n uint64, flags Flags) (ok bool, err error) {
	if n == 0 || flags&Delalloc != 0 || start < a.firstData || start >= a.sb.BlocksCount || n > a.sb.BlocksCount-start {
		return false, nil
	}
	gi := a.groupOf(start)
	if start+n > a.groupEnd(gi) {
		return false, nil
	}
	g := a.g[gi]
	if g.freeBlocks.Load() < int64(n) {
		return false, nil
	}
	if _, ok := a.take(n, n, flags); !ok {
		return false, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := a.loadLocked(gi); err != nil {
		a.avail.Add(int64(n))
		return false, err
	}
	rel := uint32(start - a.sb.GroupFirstBlock(gi))
	var e ext
	found := false
	g.mu.byStart.DescendLessOrEqual(ext{start: rel}, func(x ext) bool {
		e, found = x, x.end() >= rel+uint32(n)
		return false
	})
	if !found {
		a.avail.Add(int64(n))
		return false, nil
	}
	a.removeFreeLocked(g, e, rel, uint32(n))
	if err := a.setUsedLocked(gi, rel, uint32(n)); err != nil {
		a.insertFreeLocked(gi, rel, uint32(n))
		a.avail.Add(int64(n))
		return false, err
	}
	return true, nil
}
