package iomap

// Has reports whether the page holding byte off of file key is in the
// cache. A caller that reads around the cache (a read-ahead of its own)
// asks it to keep copying from pages that are there.
func (c *PageCache) Has(key Key, off int64) bool {
	s := c.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.mu.files[key]
	return f != nil && f.pages.get(off>>c.shift) != nil
}
