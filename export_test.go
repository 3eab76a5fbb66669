package ext4io

// CheckTree runs the extent tree's full structural check (tests only).
func (f *File) CheckTree() error {
	if f.m == nil || f.m.tree == nil {
		return nil
	}
	f.n.mu.RLock()
	defer f.n.mu.RUnlock()
	return f.m.tree.Check()
}
