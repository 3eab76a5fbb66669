//go:build unix

package blockdev

// MmapDirtyPages returns the pages m would msync at the next Flush.
func MmapDirtyPages(m *Mmap) []int {
	var pages []int
	for w := range m.dirty.bits {
		x := m.dirty.bits[w].Load()
		if x != 0 && m.dirty.sum[w/64].Load()&(1<<(w%64)) == 0 {
			panic("blockdev: dirty word not named in sum")
		}
		for b := range 64 {
			if x&(1<<b) != 0 {
				pages = append(pages, w*64+b)
			}
		}
	}
	return pages
}

// MmapTakeDirty clears m's dirty pages and returns them as Flush would
// msync them, as [first, last+1) runs, without msyncing.
func MmapTakeDirty(m *Mmap) [][2]int { return m.takeDirty() }

// MmapForceCPUFlush makes m's Flush write back cache lines as on a
// MAP_SYNC mapping, to run that path without persistent memory. It
// reports false where there is no cache write-back.
func MmapForceCPUFlush(m *Mmap) bool {
	m.cpuFlush = cacheFlush
	return cacheFlush != nil
}
