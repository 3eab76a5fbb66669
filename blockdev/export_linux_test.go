package blockdev

// SetPwritev2 replaces the pwritev2 WriteAtSync calls until restore.
func SetPwritev2(f func(fd int, iovs [][]byte, off int64, flags int) (int, error)) (restore func()) {
	old := pwritev2
	pwritev2 = f
	return func() { pwritev2 = old }
}
