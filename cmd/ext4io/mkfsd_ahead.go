package main

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/ext4io/ext4io"
)

// The import reads the host tree ahead of the volume's writes, on a
// second goroutine (srcStream): the reader lists and lstats each
// directory, loads each entry (extended attributes, symlink target),
// opens each regular file and reads the small ones whole into one of a
// few fixed buffers, while the importer creates and writes the entries
// before them. Items come in the order the importer creates them, a
// directory's entries followed by an end-of-directory item. Memory is
// bounded by the buffers (aheadBuffers of aheadMax bytes) and the
// listings of the directories on the current path.

const (
	// aheadMax is the largest file read ahead whole; a larger one is
	// handed over open, for the importer to copy in chunks.
	aheadMax = 64 << 10
	// aheadBuffers is how many files may be read ahead at once.
	aheadBuffers = 32
)

// srcItem is one entry of the host tree, read ahead.
type srcItem struct {
	e   *srcEntry // loaded; nil for the end of the current directory
	err error     // loading e (or, at the end, listing the directory) failed
	// A regular file (not a further name of a hard-linked inode): its
	// size, and either its contents (data, a buffer of the stream's, to
	// give back) or the file open (in).
	size int64
	data []byte
	in   *srcFile
}

// srcStream reads a host tree ahead of the import (see above).
type srcStream struct {
	items    chan srcItem
	free     chan []byte
	done     chan struct{}
	stopped  sync.Once
	noXattrs bool
	links    map[fileID]struct{} // hard-linked inodes read once already; the reader's
}

// newSrcStream starts reading the directory top ahead (not top itself);
// noXattrs skips listing extended attributes. The caller stops it.
func newSrcStream(top *srcEntry, noXattrs bool) *srcStream {
	s := &srcStream{
		items:    make(chan srcItem, aheadBuffers),
		free:     make(chan []byte, aheadBuffers),
		done:     make(chan struct{}),
		noXattrs: noXattrs,
		links:    map[fileID]struct{}{},
	}
	for range aheadBuffers {
		s.free <- nil // allocated when first needed
	}
	go func() {
		defer close(s.items)
		s.dir(top)
	}()
	return s
}

// next returns the next item; false once the stream has ended (stopped).
func (s *srcStream) next() (srcItem, bool) {
	it, ok := <-s.items
	return it, ok
}

// release gives back what an item holds: its buffer and open file.
func (s *srcStream) release(it *srcItem) {
	if it.in != nil {
		it.in.Close()
		it.in = nil
	}
	if it.data != nil {
		s.free <- it.data[:cap(it.data)]
		it.data = nil
	}
}

// stop ends the reader and releases what it read but was not used.
func (s *srcStream) stop() {
	s.stopped.Do(func() { close(s.done) })
	for it := range s.items {
		s.release(&it)
	}
}

// send queues it; false once stopped (it is released then).
func (s *srcStream) send(it srcItem) bool {
	select {
	case s.items <- it:
		return true
	case <-s.done:
		s.release(&it)
		return false
	}
}

// dir sends the entries of directory e, each directory's own entries
// after it, then the end of e; false once stopped.
func (s *srcStream) dir(e *srcEntry) bool {
	var kids []*srcEntry
	lerr := readDirEntries(e, func(k *srcEntry) { kids = append(kids, k) })
	for _, k := range kids {
		it := s.item(k)
		failed := it.err != nil
		if !s.send(it) {
			return false
		}
		if k.fi.IsDir() && !failed && !s.dir(k) {
			return false
		}
	}
	return s.send(srcItem{err: lerr})
}

// item loads k and, for a regular file, opens it and reads it if small.
func (s *srcStream) item(k *srcEntry) srcItem {
	it := srcItem{e: k}
	if it.err = k.loadBut(!s.noXattrs); it.err != nil || !k.fi.Mode().IsRegular() {
		return it
	}
	if id, nlink, _, ok := hostID(k.fi); ok && nlink > 1 {
		if _, seen := s.links[id]; seen {
			return it // a further name: the importer links it
		}
		s.links[id] = struct{}{}
	}
	in, err := openSource(k.host)
	if err != nil {
		it.err = err
		return it
	}
	size, same, err := in.same(k.fi)
	if err == nil && !same {
		err = fmt.Errorf("changed since the walk: %w", ext4io.ErrInvalid)
	}
	if err != nil {
		in.Close()
		it.err = err
		return it
	}
	it.size = size
	if size > aheadMax {
		it.in = in
		return it
	}
	var buf []byte
	select {
	case buf = <-s.free:
	case <-s.done:
		in.Close()
		it.err = errors.New("stopped")
		return it
	}
	if buf == nil {
		buf = make([]byte, aheadMax)
	}
	it.data, it.err = readWhole(in, buf[:size])
	if cerr := in.Close(); it.err == nil {
		it.err = cerr
	}
	return it
}

// readWhole reads the file in (of len(b) bytes) into b: its data ranges
// (SEEK_DATA), zeroes elsewhere and past an end it shrank to meanwhile.
func readWhole(in *srcFile, b []byte) ([]byte, error) {
	ranges, err := dataRanges(in, int64(len(b)))
	if err != nil {
		return b, err
	}
	var at int64 // b[:at] is filled
	for _, r := range ranges {
		clear(b[at:r[0]])
		n, err := in.ReadAt(b[r[0]:r[1]], r[0])
		at = r[0] + int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return b, err
		}
	}
	clear(b[at:])
	return b, nil
}
