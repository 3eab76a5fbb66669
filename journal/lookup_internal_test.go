package journal

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// lookupWalk is Lookup as it was before the newest index: a walk of the
// running, committing and checkpoint transactions, newest first, stopping
// at the first that holds blk or that a Forget hides.
func (j *Journal) lookupWalk(blk uint64, buf []byte) bool {
	ts := []*transaction{}
	if j.mu.running != nil {
		ts = append(ts, j.mu.running)
	}
	if j.mu.committing != nil {
		ts = append(ts, j.mu.committing)
	}
	for i := len(j.mu.checkpoint) - 1; i >= 0; i-- {
		ts = append(ts, j.mu.checkpoint[i])
	}
	evs := j.mu.forgotten[blk]
	for _, t := range ts {
		if len(evs) > 0 && tidGT(evs[len(evs)-1].from, t.tid) {
			return false
		}
		if d, ok := t.buffers[blk]; ok {
			copy(buf, d)
			return true
		}
		if _, ok := t.revokes[blk]; ok {
			return false
		}
	}
	return false
}

// TestLookupIndex checks Lookup's index against the walk after every step
// of random handles (dirtying, forgetting and revoking blocks, together
// and alone), commits
// and checkpoints, with the log small enough that commits wait for
// checkpoints too.
func TestLookupIndex(t *testing.T) {
	dev := newTestDev(t)
	j, err := Create(testConfig(dev), CreateOptions{CsumV3: true, Is64Bit: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	got, want := make([]byte, tBS), make([]byte, tBS)
	found := 0
	for step := range 4000 {
		switch r := rng.IntN(10); {
		case r < 6:
			h, err := j.Start(4)
			if err != nil {
				t.Fatal(err)
			}
			for range 1 + rng.IntN(3) {
				b := uint64(tHome0 + rng.IntN(tHomeN))
				switch rng.IntN(8) {
				case 0: // freed: forgotten and revoked, as ext4io frees metadata
					j.Forget(b)
					err = h.Revoke(b)
				case 1:
					err = h.Revoke(b)
				case 2:
					j.Forget(b)
				default:
					if err = h.GetWriteAccess(b); err != nil {
						break
					}
					err = h.Dirty(b, bytes.Repeat([]byte{byte(step), byte(b)}, tBS/2))
				}
				if err != nil {
					t.Fatalf("step %d, block %d: %v", step, b, err)
				}
			}
			if err := h.Stop(); err != nil {
				t.Fatal(err)
			}
		case r < 9:
			if err := j.Commit(); err != nil {
				t.Fatal(err)
			}
		default:
			if err := j.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
		j.mu.Lock()
		for b := uint64(tHome0); b < tHome0+tHomeN; b++ {
			clear(got)
			clear(want)
			g, w := j.lookupLocked(b, got), j.lookupWalk(b, want)
			if g != w || !bytes.Equal(got, want) {
				j.mu.Unlock()
				t.Fatalf("step %d, block %d: index %v, walk %v (contents equal %v)", step, b, g, w, bytes.Equal(got, want))
			}
			if g {
				found++
			}
		}
		j.mu.Unlock()
	}
	// The sequence must exercise both answers.
	if found == 0 || found == 4000*tHomeN {
		t.Fatalf("Lookup found a copy %d times of %d", found, 4000*tHomeN)
	}
}
