package ext4io

import "github.com/ext4io/ext4io/internal/mutant"

// convertBeforeData is the ConvBeforeData mutant (internal/mutant), a
// deliberate ordering bug for the crash torture to find: a direct write
// first converts the unwritten blocks of its range to written and commits
// the conversion, and only then writes its data, so a crash in between
// exposes the blocks' stale contents. The default build never calls it
// (mutant.ConvBeforeData is a false constant).
func (f *File) convertBeforeData(off, n int64) error {
	if !mutant.ConvBeforeData || f.v.jm == nil || n <= 0 {
		return nil
	}
	bs := int64(f.v.bs)
	lblk, end := uint64(off/bs), uint64((off+n+bs-1)/bs)
	if err := f.v.beginOp(); err != nil {
		return err
	}
	f.n.mu.Lock()
	err := f.v.applyConversionsLocked(f.n)
	converted := false
	for b := lblk; err == nil && b < end; {
		m, lerr := f.m.lookup(b)
		if lerr != nil {
			err = lerr
			break
		}
		k := max(1, min(m.n, end-b))
		if m.kind == mapUnwritten {
			if err = f.convertExactLocked(b, k, m.pblk); err == nil {
				converted = true
			}
		}
		b += k
	}
	if converted {
		if werr := f.v.writeMappingLocked(f.n); err == nil {
			err = werr
		}
	}
	f.n.mu.Unlock()
	if err = f.v.endOpErr(err); err == nil && converted {
		err = f.v.jm.commit(true)
	}
	return err
}
