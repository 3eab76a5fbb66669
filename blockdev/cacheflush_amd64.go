package blockdev

// CPU cache write-back for persistent memory mapped MAP_SYNC (mmap.go).
// The assembly is in cacheflush_amd64.s: each function writes back every
// 64-byte cache line b touches, then fences (SFENCE), as PMDK's
// pmem_flush + pmem_drain do.

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
func clwbLines(b []byte)
func clflushoptLines(b []byte)
func clflushLines(b []byte)

// cacheFlush writes back b's cache lines with the best instruction the
// CPU has: CLWB (keeps the lines cached), CLFLUSHOPT, or CLFLUSH, which
// every amd64 CPU has. cacheFlushName names it.
var cacheFlush, cacheFlushName = pickCacheFlush()

func pickCacheFlush() (func([]byte), string) {
	if max, _, _, _ := cpuid(0, 0); max >= 7 {
		_, ebx, _, _ := cpuid(7, 0) // structured extended features
		switch {
		case ebx&(1<<24) != 0:
			return clwbLines, "clwb"
		case ebx&(1<<23) != 0:
			return clflushoptLines, "clflushopt"
		}
	}
	return clflushLines, "clflush"
}
