package ext4io

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// The os.File surface of File: a file position shared by Read, Write and
// Seek; O_APPEND and O_SYNC; io.ReaderFrom and io.WriterTo so that io.Copy
// moves data in large chunks (aligned ones on direct files).

var (
	_ io.Reader       = (*File)(nil)
	_ io.Writer       = (*File)(nil)
	_ io.StringWriter = (*File)(nil)
	_ io.ReaderAt     = (*File)(nil)
	_ io.WriterAt     = (*File)(nil)
	_ io.Seeker       = (*File)(nil)
	_ io.ReaderFrom   = (*File)(nil)
	_ io.WriterTo     = (*File)(nil)
	_ io.Closer       = (*File)(nil)
	_ fs.File         = (*File)(nil)
	_ fs.ReadDirFile  = (*File)(nil)
)

// accMode masks the access mode of os.OpenFile flags (O_ACCMODE).
const accMode = os.O_RDONLY | os.O_WRONLY | os.O_RDWR

// copyChunk is the buffer size of ReadFrom and WriteTo.
const copyChunk = 1 << 20

// errAppendWriteAt is returned, bare as os returns its own, for WriteAt on
// an O_APPEND file.
var errAppendWriteAt = errors.New("ext4io: invalid use of WriteAt on file opened with O_APPEND")

// checkWriteMode refuses writes through a File opened without write
// access: EBADF as write(2) reports it, EINVAL for ftruncate(2).
func (f *File) checkWriteMode(op string) error {
	if f.flag&accMode != os.O_RDONLY {
		return nil
	}
	if op == "truncate" {
		return &fs.PathError{Op: op, Path: f.name, Err: ErrInvalid}
	}
	return &fs.PathError{Op: op, Path: f.name, Err: ErrBadFile}
}

// Name returns the path the file was opened with, as given (os.File.Name).
func (f *File) Name() string { return f.name }

// WriteAt writes len(p) bytes at off, allocating blocks for holes and
// converting unwritten extents it covers; it does not move the file
// position. The file grows when the write ends past its size. Unaligned
// writes into new or unwritten blocks zero the rest of those blocks. As
// with os.File, a file opened with O_APPEND refuses WriteAt, and one opened
// with O_SYNC is synced (File.Sync) before WriteAt returns.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	if !f.isOpen() {
		return 0, f.openError("write") // os.File.WriteAt says "write" too
	}
	if f.flag&os.O_APPEND != 0 {
		return 0, errAppendWriteAt
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "writeat", Path: f.name, Err: fmt.Errorf("negative offset: %w", ErrInvalid)}
	}
	return f.writeSync(p, off)
}

// writeSync is pwrite, then Sync for O_SYNC files. Once the write is
// done, it makes the inode's read-ahead windows stale (readahead.go).
func (f *File) writeSync(p []byte, off int64) (int, error) {
	n, err := f.pwrite(p, off)
	f.n.dataChanged()
	if f.n.readAhead.Load() {
		f.n.dataGen.Add(1)
	}
	if err == nil && f.flag&os.O_SYNC != 0 {
		if err = f.Sync(); err != nil {
			err = &fs.PathError{Op: "sync", Path: f.name, Err: err}
		}
	}
	return n, err
}

// Write writes p at the file position and moves it past what was
// written; with O_APPEND it writes at the end of the file first. On a
// direct file (O_DIRECT) the whole aligned blocks of p go to the device
// directly and an unaligned head or tail through the page cache, so that
// streams of any length can be written (WriteAt stays strict).
func (f *File) Write(p []byte) (int, error) {
	if err := f.checkOpen("write"); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writeChunk(p)
}

// writePosLocked writes p at the position (the end with O_APPEND) and
// moves it; f.mu is held.
func (f *File) writePosLocked(p []byte) (int, error) {
	off := f.off
	if f.flag&os.O_APPEND != 0 {
		off = f.Size()
	}
	n, err := f.writeSync(p, off)
	if err == nil || n > 0 {
		f.off = off + int64(n) // a failed write leaves the position
	}
	return n, err
}

// WriteString is Write of the bytes of s.
func (f *File) WriteString(s string) (int, error) { return f.Write([]byte(s)) }

// ReadFrom copies r into the file from the file position until r reports
// io.EOF (io.ReaderFrom, used by io.Copy), moving the position past what
// was written. A direct file is written as Write writes it: whole aligned
// blocks directly, an unaligned head and the last partial block through
// the page cache, as O_DIRECT programs do.
//
// r is read without holding the position, so it may read from f itself
// (io.CopyN(f, f, n)); each chunk goes at the position of its time, as
// each write(2) of a copy on an os.File does.
func (f *File) ReadFrom(r io.Reader) (int64, error) {
	if err := f.checkOpen("write"); err != nil {
		return 0, err
	}
	buf := make([]byte, copyChunk)
	var done int64
	for {
		k, rerr := io.ReadFull(r, buf)
		if k > 0 {
			f.mu.Lock()
			n, err := f.writeChunk(buf[:k])
			f.mu.Unlock()
			done += int64(n)
			if err != nil {
				return done, err
			}
		}
		switch {
		case rerr == io.EOF || rerr == io.ErrUnexpectedEOF:
			return done, nil
		case rerr != nil:
			return done, rerr
		}
	}
}

// writeChunk writes p at the position (f.mu held): on a direct file the
// whole aligned blocks directly and the rest through a buffered twin.
func (f *File) writeChunk(p []byte) (int, error) {
	if !f.direct || f.flag&os.O_APPEND != 0 {
		return f.writePosLocked(p)
	}
	a := f.v.lbs
	done := 0
	for done < len(p) {
		q := p[done:]
		var n int
		var err error
		if head := f.off % a; head != 0 || int64(len(q)) < a {
			n, err = f.bufferedTwin().writeAtPos(f, q[:min(int64(len(q)), a-head)])
		} else {
			n, err = f.writePosLocked(q[:int64(len(q))/a*a])
		}
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// readPos reads at the position for Read (f.mu held): on a direct file an
// unaligned read goes through the page cache, as Write's pieces do.
func (f *File) readPos(p []byte) (int, error) {
	if f.direct && (f.off%f.v.lbs != 0 || int64(len(p))%f.v.lbs != 0) {
		return f.bufferedTwin().ReadAt(p, f.off)
	}
	return f.ReadAt(p, f.off)
}

// bufferedTwin returns a File of f's inode without direct I/O, for the
// unaligned pieces of ReadFrom and WriteTo on a direct file. Its name and
// flags are f's.
func (f *File) bufferedTwin() *File {
	g := newFile(f.v, f.n, f.ino, f.name)
	g.flag = f.flag
	return g
}

// writeAtPos writes p through f at pos's position and moves it.
func (f *File) writeAtPos(pos *File, p []byte) (int, error) {
	n, err := f.writeSync(p, pos.off)
	pos.off += int64(n)
	return n, err
}

// WriteTo copies the file from the file position to its end into w
// (io.WriterTo, used by io.Copy), moving the position to the end. A
// direct file is read in aligned chunks; a head up to alignment and the
// last partial block are read through the page cache. w is written
// without holding the position, so it may write to f itself.
func (f *File) WriteTo(w io.Writer) (int64, error) {
	if err := f.checkOpen("read"); err != nil {
		return 0, err
	}
	buf := make([]byte, copyChunk)
	var done int64
	for {
		f.mu.Lock()
		p, rerr := f.readChunk(buf)
		f.mu.Unlock()
		k := len(p)
		if k > 0 {
			m, err := w.Write(p)
			done += int64(m)
			if err != nil {
				return done, err
			}
			if m < k {
				return done, io.ErrShortWrite
			}
		}
		if rerr == io.EOF {
			return done, nil
		}
		if rerr != nil {
			return done, rerr
		}
	}
}

// readChunk reads the next piece of WriteTo into buf at the position and
// moves it (f.mu held): on a direct file an aligned run, or an unaligned
// head or tail through the page cache.
func (f *File) readChunk(buf []byte) ([]byte, error) {
	g, p := f, buf
	if f.direct {
		a := f.v.lbs
		size := f.Size()
		switch {
		case f.off%a != 0:
			g, p = f.bufferedTwin(), buf[:a-f.off%a]
		case size-f.off < int64(len(buf)):
			if whole := (size - f.off) / a * a; whole > 0 {
				p = buf[:whole]
			} else {
				g = f.bufferedTwin()
			}
		}
	}
	k, err := g.ReadAt(p, f.off)
	f.off += int64(k)
	return p[:k], err
}
