package blockdev

// VectorWriter is implemented by devices that write several buffers to
// consecutive bytes in one request (pwritev), so a caller holding data in
// separate pages (a page cache's write-back) writes them without copying
// them into one buffer first.
type VectorWriter interface {
	// WriteVAt writes bufs, one after the other, at off: the bytes of
	// bufs[0] at off, those of bufs[1] right after them, and so on. It
	// returns the number of bytes written and, if that is short of their
	// total, an error, like WriteAt.
	WriteVAt(bufs [][]byte, off int64) (int, error)
}

// WriteVAt writes bufs one after the other at off of dev: in one request
// when dev is a VectorWriter, else with one WriteAt per buffer.
func WriteVAt(dev Device, bufs [][]byte, off int64) (int, error) {
	if vw, ok := dev.(VectorWriter); ok {
		return vw.WriteVAt(bufs, off)
	}
	done := 0
	for _, b := range bufs {
		n, err := dev.WriteAt(b, off+int64(done))
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

var _ VectorWriter = (*File)(nil)

// WriteVAt implements VectorWriter with pwritev.
func (d *File) WriteVAt(bufs [][]byte, off int64) (int, error) {
	total := int64(0)
	for _, b := range bufs {
		total += int64(len(b))
	}
	if err := d.checkWrite("write", off, total); err != nil {
		return 0, err
	}
	n, err := d.pwritev(bufs, off)
	if err != nil {
		return n, d.ioErr("pwritev", off+int64(n), err)
	}
	return n, nil
}
