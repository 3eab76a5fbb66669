package blockdev

// ForceWriteZeroes makes f's ZeroOut skip fallocate and write zeroes, to
// test the last fallback.
func ForceWriteZeroes(f *File) { f.zeroMode.Store(zeroWrite) }
