package blockdev

import (
	"errors"
	"io"

	"golang.org/x/sys/unix"
)

// pwritev2 is unix.Pwritev2; tests replace it to play an old kernel.
var pwritev2 = unix.Pwritev2

// errNoDsync is wrapped by pwriteDsync's error when the kernel refused
// RWF_DSYNC before writing anything.
var errNoDsync = errors.New("RWF_DSYNC refused")

// invalDsync is pwriteDsync's error for EINVAL before anything was
// written: an old kernel's refusal of the flag, or a request the plain
// write refuses as well, which writeSync then reports.
type invalDsync struct{}

func (invalDsync) Error() string        { return "RWF_DSYNC: invalid argument" }
func (invalDsync) Is(target error) bool { return target == errNoDsync }

// pwriteDsync writes p at off with pwritev2(RWF_DSYNC), going on after
// short writes and EINTR; each piece is durable when its call returns.
func (c *fileCore) pwriteDsync(p []byte, off int64) (int, error) {
	done := 0
	err := control(c.f, func(fd int) error {
		iov := [][]byte{nil}
		for done < len(p) {
			iov[0] = p[done:]
			n, err := pwritev2(fd, iov, off+int64(done), unix.RWF_DSYNC)
			switch {
			case err == unix.EINTR:
				continue
			case done == 0 && (err == unix.EOPNOTSUPP || err == unix.ENOSYS):
				return errNoDsync
			case done == 0 && err == unix.EINVAL:
				return invalDsync{}
			case err != nil:
				return err
			case n == 0:
				return io.ErrShortWrite
			}
			done += n
		}
		return nil
	})
	return done, err
}
