package bench

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// seek is lseek(2) (a variable for the tests).
var seek = unix.Seek

// fileHoles returns the holes of the file at path within [off, end), as
// [start, end) byte ranges, from lseek's SEEK_HOLE and SEEK_DATA. A host
// filesystem that does not know SEEK_HOLE (EINVAL, EOPNOTSUPP) has no
// holes to report: none, as holes_other.go.
func fileHoles(path string, off, end int64) ([][2]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fd := int(f.Fd())
	var holes [][2]int64
	for off < end {
		h, err := seek(fd, off, unix.SEEK_HOLE)
		if len(holes) == 0 && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP)) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if h >= end {
			break
		}
		d, err := seek(fd, h, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // no data past h: a hole to the end of the file
			d = end
		} else if err != nil {
			return nil, err
		}
		d = min(d, end)
		holes = append(holes, [2]int64{h, d})
		off = d
	}
	return holes, nil
}
