package ext4io

import (
	"sync"
	"sync/atomic"

	"github.com/ext4io/ext4io/alloc"
	"github.com/ext4io/ext4io/extent"
)

// Space for queued conversions.
//
// A queued conversion is applied after its write was acknowledged, and it
// may need new tree blocks (a run splits an unwritten extent in up to
// three). So that an acknowledged write never fails later for space, the
// blocks a conversion can need are reserved from the allocator when the
// write is submitted (alloc.Reserve, the reservation delayed allocation
// also uses), and the batch that applies it takes its tree blocks from
// that reservation. A write that cannot reserve converts at submission
// instead (the split of Options.Tuning.EagerConversions), which fails before any
// data is written when no block is left.
//
// The bound: a run adds at most two entries to a leaf, and a split leaves
// at least a quarter of a leaf free on each side, so runsPerBlock runs
// need at most one new leaf or index block between them (one block per
// leafEntries/5 runs, leaving room for the index blocks the leaf splits
// add). On top of that each inode with queued runs holds inodeResv blocks
// for the splits that reach the root and the tree's growth in depth.
// Runs are counted in credits drawn from reservations of resvChunk
// blocks; a commit, which runs with no write in flight, gives back what
// the remaining queue no longer needs.

// resvChunk is how many blocks a write that finds no credit reserves at a
// time.
const resvChunk = 16

// inodeResv is the reservation each inode with queued runs holds: a split
// chain up to the root and one new level (extent.MaxDepth + 1).
const inodeResv = extent.MaxDepth + 1

// convResv is the volume's reservation for queued conversions.
type convResv struct {
	// credit counts runs the reservation still covers; a write takes one
	// at submission. It goes negative while a write reserves more.
	credit atomic.Int64
	mu     sync.Mutex
	// blocks is how many blocks of alloc's reservation belong to queued
	// conversions: inodeResv for each inode holding one (holds) and
	// what the credits stand for. Guarded by mu.
	blocks, holds uint64
	// runsPerBlock is how many runs one reserved block covers; set at
	// open.
	runsPerBlock int64
}

func (r *convResv) init(bs int) {
	leafEntries := int64(bs-12) / 12
	r.runsPerBlock = max(leafEntries/5, 1)
}

// reserveRun reserves the tree blocks the conversion of one more queued
// run on n can need. False means the space is not there: the write
// converts at submission instead. The caller is inside an operation, so
// no commit runs until the run is queued.
func (v *Volume) reserveRun(n *inode) bool {
	r := &v.convResv
	if !n.conv.resvHeld.Load() {
		r.mu.Lock()
		if !n.conv.resvHeld.Load() {
			if v.alloc.Reserve(inodeResv) != nil {
				r.mu.Unlock()
				return false
			}
			r.blocks += inodeResv
			r.holds++
			n.conv.resvHeld.Store(true)
			// The commit that gives the hold back must see n even if
			// no run gets queued.
			v.convMu.Lock()
			v.convInodes[n] = struct{}{}
			v.convMu.Unlock()
		}
		r.mu.Unlock()
	}
	if r.credit.Add(-1) >= 0 {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if v.alloc.Reserve(resvChunk) != nil {
		r.credit.Add(1)
		return false
	}
	r.blocks += resvChunk
	r.credit.Add(resvChunk * r.runsPerBlock)
	return true
}

// takeConvBlock allocates one tree block for a conversion batch from the
// reservation; false when the reservation is used up (the batch then
// allocates as any must-succeed split does).
func (v *Volume) takeConvBlock(goal uint64) (uint64, bool) {
	r := &v.convResv
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.blocks == 0 {
		return 0, false
	}
	start, _, err := v.alloc.Allocate(alloc.Request{Goal: goal, Min: 1, Max: 1, Flags: alloc.Delalloc})
	if err != nil {
		return 0, false
	}
	r.blocks--
	return start, true
}

// trimConvResv sizes the reservation to the runs still queued after a
// commit's batches, giving back the rest (or reserving what the batches
// used beyond the bound, when there is space). inodes are those the
// commit went through. The caller holds txnGate exclusively: no write is
// between its reservation and its queueing.
func (v *Volume) trimConvResv(inodes []*inode) {
	r := &v.convResv
	r.mu.Lock()
	defer r.mu.Unlock()
	var runs int64
	for _, n := range inodes {
		if k := n.conv.size.Load(); k > 0 && !n.freed {
			runs += int64(k)
		} else if n.conv.resvHeld.Swap(false) {
			r.holds--
		}
	}
	want := r.holds*inodeResv + uint64((runs+r.runsPerBlock-1)/r.runsPerBlock)
	switch {
	case r.blocks > want:
		v.alloc.Unreserve(r.blocks - want) // alloc holds at least r.blocks
		r.blocks = want
	case r.blocks < want && v.alloc.Reserve(want-r.blocks) == nil:
		r.blocks = want
	}
	runBlocks := int64(r.blocks) - int64(r.holds*inodeResv)
	r.credit.Store(runBlocks*r.runsPerBlock - runs)
}
