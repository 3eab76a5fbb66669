package main

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/ext4io/ext4io"
)

// The import reads the host tree ahead of the volume's writes, on a
// second goroutine (srcStream): the reader lists each directory, stats
// and loads each entry (extended attributes, symlink target),
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

// aheadBatch is how many items the reader passes over at once: one
// channel operation, and at most one wake-up of either side, per batch.
const aheadBatch = 8

// srcStream reads a host tree ahead of the import (see above). The
// reader goroutine owns pending and links; the importer owns cur.
type srcStream struct {
	batches  chan []srcItem
	free     chan []byte
	done     chan struct{}
	stopped  sync.Once
	noXattrs bool

	pending []srcItem           // items not yet passed over
	links   map[fileID]struct{} // hard-linked inodes read once already

	cur []srcItem // the importer's batch, from its next item on
}

// newSrcStream starts reading the directory top ahead (not top itself);
// noXattrs skips listing extended attributes. The caller stops it.
func newSrcStream(top *srcEntry, noXattrs bool) *srcStream {
	s := &srcStream{
		batches:  make(chan []srcItem, 2),
		free:     make(chan []byte, aheadBuffers),
		done:     make(chan struct{}),
		noXattrs: noXattrs,
		links:    map[fileID]struct{}{},
	}
	for range aheadBuffers {
		s.free <- nil // allocated when first needed
	}
	go func() {
		defer close(s.batches)
		if s.dir(top) {
			s.flush()
		}
	}()
	return s
}

// next returns the next item; false once the stream has ended (stopped).
func (s *srcStream) next() (srcItem, bool) {
	for len(s.cur) == 0 {
		b, ok := <-s.batches
		if !ok {
			return srcItem{}, false
		}
		s.cur = b
	}
	it := s.cur[0]
	s.cur = s.cur[1:]
	return it, true
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
	for i := range s.cur {
		s.release(&s.cur[i])
	}
	s.cur = nil
	for b := range s.batches {
		for i := range b {
			s.release(&b[i])
		}
	}
}

// send queues it, passing a full batch over; false once stopped (it and
// the batch are released then).
func (s *srcStream) send(it srcItem) bool {
	s.pending = append(s.pending, it)
	if len(s.pending) < aheadBatch {
		return true
	}
	return s.flush()
}

// flush passes the pending items over; false once stopped.
func (s *srcStream) flush() bool {
	if len(s.pending) == 0 {
		return true
	}
	b := s.pending
	s.pending = make([]srcItem, 0, aheadBatch)
	select {
	case s.batches <- b:
		return true
	case <-s.done:
		for i := range b {
			s.release(&b[i])
		}
		return false
	}
}

// dir sends the entries of directory e, each directory's own entries
// after it, then the end of e; false once stopped.
func (s *srcStream) dir(e *srcEntry) bool {
	if !s.flush() { // the importer may wait for them while e is listed
		return false
	}
	ok := true
	lerr := readDirEntries(e, func(k *srcEntry) bool {
		it := s.item(k)
		failed := it.err != nil
		if ok = s.send(it); ok && k.fi.IsDir() && !failed {
			ok = s.dir(k)
		}
		return ok
	})
	return ok && s.send(srcItem{err: lerr})
}

// item loads k and, for a regular file, opens it (unless its listing
// did) and reads it if small.
func (s *srcStream) item(k *srcEntry) srcItem {
	it := srcItem{e: k}
	it.err = k.loadBut(!s.noXattrs) // through k.in, if open
	in := k.in
	k.in = nil
	if it.err != nil || !k.fi.Mode().IsRegular() {
		closeSrc(in)
		return it
	}
	if id, nlink, _, ok := hostID(k.fi); ok && nlink > 1 {
		if _, seen := s.links[id]; seen {
			closeSrc(in)
			return it // a further name: the importer links it
		}
		s.links[id] = struct{}{}
	}
	var size int64
	if in != nil {
		size = k.fi.Size() // fi is in's fstat
	} else {
		err := k.openErr
		if err == nil {
			in, err = openSource(k.host)
		}
		if err != nil {
			it.err = err
			return it
		}
		var same bool
		size, same, err = in.same(k.fi)
		if err == nil && !same {
			err = fmt.Errorf("changed since the walk: %w", ext4io.ErrInvalid)
		}
		if err != nil {
			in.Close()
			it.err = err
			return it
		}
	}
	it.size = size
	if size > aheadMax {
		it.in = in
		return it
	}
	var buf []byte
	select {
	case buf = <-s.free:
	default:
		// Every buffer is out: pass the pending items over (the
		// importer gives buffers back as it uses them), then wait.
		ok := s.flush()
		if ok {
			select {
			case buf = <-s.free:
			case <-s.done:
				ok = false
			}
		}
		if !ok {
			in.Close()
			it.err = errors.New("stopped")
			return it
		}
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

// closeSrc closes in if it is not nil.
func closeSrc(in *srcFile) {
	if in != nil {
		in.Close()
	}
}

// readWhole reads the file in (of len(b) bytes) into b, holes as the
// zeroes they read as: a small file costs no SEEK_DATA and SEEK_HOLE
// (the import leaves its blocks of zeroes as holes anyway). A file that
// ends before len(b) fails with errShrank.
func readWhole(in *srcFile, b []byte) ([]byte, error) {
	n, err := in.ReadAt(b, 0)
	if err == io.EOF || err == nil && n < len(b) {
		return b, errShrank
	}
	return b, err
}
