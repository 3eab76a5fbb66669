package extent

import (
	"fmt"
	"sync"
)

// memIO is an in-memory BlockIO; missing blocks read as zeroes.
type memIO struct {
	mu     sync.Mutex
	bs     int
	blocks map[uint64][]byte
	writes int
	reads  int
	failW  bool
}

func newMemIO(bs int) *memIO { return &memIO{bs: bs, blocks: make(map[uint64][]byte)} }

func (m *memIO) ReadBlock(p uint64, buf []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	if b, ok := m.blocks[p]; ok {
		copy(buf, b)
	} else {
		clear(buf)
	}
	return nil
}

func (m *memIO) WriteBlock(p uint64, buf []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failW {
		return fmt.Errorf("injected write failure: %w", ErrIO)
	}
	if len(buf) != m.bs {
		return fmt.Errorf("write of %d bytes: %w", len(buf), ErrInvalid)
	}
	m.writes++
	if b, ok := m.blocks[p]; ok && len(b) == len(buf) {
		copy(b, buf) // like a device: overwrite in place
	} else {
		m.blocks[p] = append([]byte(nil), buf...)
	}
	return nil
}

// memAlloc hands out tree blocks from [next, limit) and records frees.
type memAlloc struct {
	mu        sync.Mutex
	next      uint64
	free      []uint64 // recycled tree blocks
	inUse     map[uint64]bool
	failAfter int // fail the n-th next AllocTreeBlock (1 = the next); 0 never
	reserve   int // blocks only mustSucceed may take once free space is "exhausted"
	exhausted bool
	dataFreed map[uint64]bool
	errs      []error
}

func newMemAlloc(start uint64) *memAlloc {
	return &memAlloc{next: start, inUse: make(map[uint64]bool), dataFreed: make(map[uint64]bool)}
}

func (a *memAlloc) AllocTreeBlock(goal uint64, must bool) (uint64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failAfter > 0 {
		a.failAfter--
		if a.failAfter == 0 {
			return 0, fmt.Errorf("injected: %w", ErrNoSpace)
		}
	}
	if a.exhausted {
		if !must || a.reserve == 0 {
			return 0, fmt.Errorf("exhausted: %w", ErrNoSpace)
		}
		a.reserve--
	}
	var p uint64
	if n := len(a.free); n > 0 {
		p = a.free[n-1]
		a.free = a.free[:n-1]
	} else {
		p = a.next
		a.next++
	}
	a.inUse[p] = true
	return p, nil
}

func (a *memAlloc) FreeTreeBlock(p uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.inUse[p] {
		a.errs = append(a.errs, fmt.Errorf("free of tree block %d not in use", p))
	}
	delete(a.inUse, p)
	a.free = append(a.free, p)
	return nil
}

func (a *memAlloc) FreeData(p, n uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := uint64(0); i < n; i++ {
		if a.dataFreed[p+i] {
			a.errs = append(a.errs, fmt.Errorf("data block %d freed twice", p+i))
		}
		a.dataFreed[p+i] = true
	}
	return nil
}

// encodeLocked returns the on-disk bytes of n (60 for the root), encoded
// from scratch over its last-written bytes.
func (t *Tree) encodeLocked(n *node) []byte {
	b := make([]byte, t.cfg.BlockSize)
	if n.root {
		b = b[:RootSize]
	}
	copy(b, n.raw)
	t.encodeOver(n, b, 0, 0)
	return b
}
