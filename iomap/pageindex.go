package iomap

// pageIndex maps the page indexes of one file to its cached pages. Pages
// sit in chunks of chunkPages consecutive indexes, found through a map,
// and the chunk used last is kept aside: sequential I/O and write-back
// touch the map once per chunk instead of once per page. A chunk is
// allocated with its first page and dropped with its last. It is guarded
// by the mu of the file's shard.
type pageIndex struct {
	chunks  map[int64]*pageChunk // by index >> chunkShift; nil until the first page
	n       int                  // pages indexed
	last    *pageChunk           // the chunk used last, or nil
	lastKey int64                // last's key
}

const (
	chunkShift = 6
	chunkPages = 1 << chunkShift
)

type pageChunk struct {
	n     int // pages in the chunk
	pages [chunkPages]*page
}

// chunk returns the chunk with key, or nil.
func (x *pageIndex) chunk(key int64) *pageChunk {
	if x.last != nil && x.lastKey == key {
		return x.last
	}
	ch := x.chunks[key]
	if ch != nil {
		x.last, x.lastKey = ch, key
	}
	return ch
}

// get returns the page with index idx, or nil.
func (x *pageIndex) get(idx int64) *page {
	ch := x.chunk(idx >> chunkShift)
	if ch == nil {
		return nil
	}
	return ch.pages[idx&(chunkPages-1)]
}

// set makes pg the page with index idx.
func (x *pageIndex) set(idx int64, pg *page) {
	key := idx >> chunkShift
	ch := x.chunk(key)
	if ch == nil {
		if x.chunks == nil {
			x.chunks = make(map[int64]*pageChunk)
		}
		ch = &pageChunk{}
		x.chunks[key] = ch
		x.last, x.lastKey = ch, key
	}
	slot := &ch.pages[idx&(chunkPages-1)]
	if *slot == nil {
		ch.n++
		x.n++
	}
	*slot = pg
}

// del removes the page with index idx, if any.
func (x *pageIndex) del(idx int64) {
	key := idx >> chunkShift
	ch := x.chunk(key)
	if ch == nil {
		return
	}
	slot := &ch.pages[idx&(chunkPages-1)]
	if *slot == nil {
		return
	}
	*slot = nil
	ch.n--
	x.n--
	if ch.n == 0 {
		delete(x.chunks, key)
		if x.last == ch {
			x.last = nil
		}
	}
}

// len returns the number of pages indexed.
func (x *pageIndex) len() int { return x.n }

// each calls fn for each page with index in [lo, hi), until fn returns
// false: in ascending order when the range spans fewer chunks than the
// file has (it looks them up), else chunk by chunk in map order (it
// visits the file's chunks), so small ranges of files with many pages
// and large ranges of small files both stay cheap.
func (x *pageIndex) each(lo, hi int64, fn func(pg *page) bool) {
	if lo >= hi || x.n == 0 {
		return
	}
	klo, khi := lo>>chunkShift, (hi-1)>>chunkShift
	visit := func(key int64, ch *pageChunk) bool {
		base := key << chunkShift
		from, to := max(lo, base)-base, min(hi-base, chunkPages)
		for i := from; i < to; i++ {
			if pg := ch.pages[i]; pg != nil && !fn(pg) {
				return false
			}
		}
		return true
	}
	if khi-klo < int64(len(x.chunks)) {
		for key := klo; key <= khi; key++ {
			if ch := x.chunk(key); ch != nil && !visit(key, ch) {
				return
			}
		}
		return
	}
	for key, ch := range x.chunks {
		if key >= klo && key <= khi && !visit(key, ch) {
			return
		}
	}
}
