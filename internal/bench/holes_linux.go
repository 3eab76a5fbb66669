package bench

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// fileHoles returns the holes of the file at path within [off, end), as
// [start, end) byte ranges, from lseek's SEEK_HOLE and SEEK_DATA.
func fileHoles(path string, off, end int64) ([][2]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fd := int(f.Fd())
	var holes [][2]int64
	for off < end {
		h, err := unix.Seek(fd, off, unix.SEEK_HOLE)
		if err != nil {
			return nil, err
		}
		if h >= end {
			break
		}
		d, err := unix.Seek(fd, h, unix.SEEK_DATA)
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
