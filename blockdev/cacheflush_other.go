//go:build !amd64

package blockdev

// cacheFlush is nil where ext4io has no CPU cache write-back (only amd64
// has one, in cacheflush_amd64.s): MAP_SYNC mappings are msynced instead,
// and writable device DAX is refused.
var (
	cacheFlush     func([]byte)
	cacheFlushName string
)
