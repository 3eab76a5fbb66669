package ext4io

import (
	"sync"

	"github.com/ext4io/ext4io/blockdev"
)

// overlayDev is a copy-on-write view of a read-only device: writes land in
// memory, reads see them over the base. A read-only open of a volume whose
// journal needs recovery replays the journal into an overlay, as Linux
// replays even for a read-only mount, without changing the image.
//
// It is safe for concurrent use.
type overlayDev struct {
	blockdev.Device // the base; ReadAt/WriteAt/ZeroOut/Discard/Flush overridden
	mu              sync.RWMutex
	chunks          map[int64][]byte // chunk index -> overlayChunk bytes; guarded by mu
}

const overlayChunk = 4096

func newOverlay(base blockdev.Device) *overlayDev {
	return &overlayDev{Device: base, chunks: make(map[int64][]byte)}
}

func (o *overlayDev) ReadAt(p []byte, off int64) (int, error) {
	n, err := o.Device.ReadAt(p, off)
	o.mu.RLock()
	defer o.mu.RUnlock()
	for c := off / overlayChunk; c*overlayChunk < off+int64(n); c++ {
		b, ok := o.chunks[c]
		if !ok {
			continue
		}
		lo := max(c*overlayChunk, off)
		hi := min((c+1)*overlayChunk, off+int64(n))
		copy(p[lo-off:hi-off], b[lo-c*overlayChunk:hi-c*overlayChunk])
	}
	return n, err
}

func (o *overlayDev) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > o.Size() {
		return 0, blockdev.ErrInvalid
	}
	for c := off / overlayChunk; c*overlayChunk < off+int64(len(p)); c++ {
		o.mu.Lock()
		b, ok := o.chunks[c]
		if !ok {
			b = make([]byte, overlayChunk)
			o.mu.Unlock()
			n, _ := o.Device.ReadAt(b, c*overlayChunk) // short at the device end
			clear(b[n:])
			o.mu.Lock()
			if cur, ok := o.chunks[c]; ok {
				b = cur
			} else {
				o.chunks[c] = b
			}
		}
		lo := max(c*overlayChunk, off)
		hi := min((c+1)*overlayChunk, off+int64(len(p)))
		copy(b[lo-c*overlayChunk:hi-c*overlayChunk], p[lo-off:hi-off])
		o.mu.Unlock()
	}
	return len(p), nil
}

func (o *overlayDev) ZeroOut(off, n int64) error {
	_, err := o.WriteAt(make([]byte, n), off)
	return err
}

func (o *overlayDev) Discard(off, n int64) error { return nil }
func (o *overlayDev) Flush() error               { return nil }
