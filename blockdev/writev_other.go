//go:build !linux

package blockdev

// pwritev writes bufs at off with one pwrite each.
func (c *fileCore) pwritev(bufs [][]byte, off int64) (int, error) {
	done := 0
	for _, b := range bufs {
		n, err := c.f.WriteAt(b, off+int64(done))
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}
