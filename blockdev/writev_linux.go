package blockdev

import (
	"io"

	"golang.org/x/sys/unix"
)

// iovMax is the most buffers one pwritev takes (IOV_MAX).
const iovMax = 1024

// pwritev writes bufs at off with pwritev, going on after short writes
// and EINTR until every byte is written or an error occurs.
func (c *fileCore) pwritev(bufs [][]byte, off int64) (int, error) {
	done := 0
	err := control(c.f, func(fd int) error {
		for len(bufs) > 0 {
			n, err := unix.Pwritev(fd, bufs[:min(len(bufs), iovMax)], off+int64(done))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			if n == 0 {
				return io.ErrShortWrite
			}
			done += n
			for n > 0 && len(bufs) > 0 {
				if n < len(bufs[0]) {
					bufs = append([][]byte{bufs[0][n:]}, bufs[1:]...)
					break
				}
				n -= len(bufs[0])
				bufs = bufs[1:]
			}
		}
		return nil
	})
	return done, err
}
