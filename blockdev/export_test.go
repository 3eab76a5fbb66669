package blockdev

// ForceWriteZeroes makes f's ZeroOut skip fallocate and write zeroes, to
// test the last fallback.
func ForceWriteZeroes(f *File) { f.zeroMode.Store(zeroWrite) }

// MmapDirtyPages returns the pages m would msync at the next Flush.
func MmapDirtyPages(m *Mmap) []int {
	m.dirty.Lock()
	defer m.dirty.Unlock()
	var pages []int
	for w, x := range m.dirty.bits {
		for b := range 64 {
			if x&(1<<b) != 0 {
				pages = append(pages, w*64+b)
			}
		}
	}
	return pages
}
