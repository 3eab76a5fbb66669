package journal

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// gateDev blocks the first write of a run starting at block blk until
// release is closed, after closing hit.
type gateDev struct {
	*memDev
	blk          uint64
	hit, release chan struct{}
	once         sync.Once
}

func (d *gateDev) WriteAt(p []byte, off int64) (int, error) {
	if off == int64(d.blk)*tBS {
		d.once.Do(func() {
			close(d.hit)
			<-d.release
		})
	}
	return d.memDev.WriteAt(p, off)
}

// TestMarkHome: a block whose committed copy the caller wrote home
// itself (MarkHome) is not written home by a later checkpoint, over what
// the caller wrote there since, nor returned by Lookup; and MarkHome
// waits for a checkpoint in progress that writes that transaction home,
// which may still write the copy, so that the caller's later writes come
// after it.
func TestMarkHome(t *testing.T) {
	mem := newTestDev(t)
	blk := uint64(tHome0)
	dev := &gateDev{memDev: mem, blk: blk, hit: make(chan struct{}), release: make(chan struct{})}
	j, err := Create(testConfig(mem), CreateOptions{CsumV3: true, Is64Bit: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(mem)
	cfg.FSDev = dev
	if j, err = Open(cfg); err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	logged := bytes.Repeat([]byte{0xA1}, tBS)
	commit := func() uint32 {
		h, err := j.Start(1)
		if err != nil {
			t.Fatal(err)
		}
		tid := h.TID()
		if err := h.GetWriteAccess(blk); err != nil {
			t.Fatal(err)
		}
		if err := h.Dirty(blk, logged); err != nil {
			t.Fatal(err)
		}
		if err := h.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := j.Commit(); err != nil {
			t.Fatal(err)
		}
		return tid
	}

	// A checkpoint in progress holding the transaction: MarkHome waits.
	tid := commit()
	cpDone := make(chan error, 1)
	go func() { cpDone <- j.Checkpoint() }()
	<-dev.hit
	marked := make(chan struct{})
	go func() {
		j.MarkHome(tid, []uint64{blk})
		close(marked)
	}()
	select {
	case <-marked:
		close(dev.release) // let the checkpoint end before Close waits for it
		<-cpDone
		t.Fatal("MarkHome returned while a checkpoint of its transaction was writing home")
	case <-time.After(50 * time.Millisecond):
	}
	close(dev.release)
	if err := <-cpDone; err != nil {
		t.Fatal(err)
	}
	<-marked

	// No checkpoint running: the mark keeps the next one off the block.
	tid = commit()
	j.MarkHome(tid, []uint64{blk})
	buf := make([]byte, tBS)
	if j.Lookup(blk, buf) {
		t.Fatal("Lookup returned a copy marked home")
	}
	newer := bytes.Repeat([]byte{0xB2}, tBS)
	if _, err := mem.WriteAt(newer, int64(blk)*tBS); err != nil {
		t.Fatal(err)
	}
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.ReadAt(buf, int64(blk)*tBS); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, newer) {
		t.Fatal("the checkpoint wrote the copy marked home over the newer contents")
	}
}

// TestMarkHomeNewer: a block whose copy in a committed transaction the
// caller wrote home is marked even when a newer transaction, not yet
// committed, holds or revokes the block: a checkpoint of the older
// transaction alone does not write that copy home over what the caller
// wrote there since, and MarkHome reports the copies free for reuse. A
// block the transaction does not hold is not reported so.
func TestMarkHomeNewer(t *testing.T) {
	for _, revoke := range []bool{false, true} {
		mem := newTestDev(t)
		j, err := Create(testConfig(mem), CreateOptions{CsumV3: true, Is64Bit: true})
		if err != nil {
			t.Fatal(err)
		}
		blk := uint64(tHome0)
		h, err := j.Start(1)
		if err != nil {
			t.Fatal(err)
		}
		tid := h.TID()
		if err := h.GetWriteAccess(blk); err != nil {
			t.Fatal(err)
		}
		if err := h.DirtyOwned(blk, bytes.Repeat([]byte{0xA1}, tBS)); err != nil {
			t.Fatal(err)
		}
		if err := h.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := j.Commit(); err != nil {
			t.Fatal(err)
		}
		// A newer transaction takes the block and stays running.
		if h, err = j.Start(1); err != nil {
			t.Fatal(err)
		}
		if revoke {
			err = h.Revoke(blk)
		} else if err = h.GetWriteAccess(blk); err == nil {
			err = h.Dirty(blk, bytes.Repeat([]byte{0xC3}, tBS))
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Stop(); err != nil {
			t.Fatal(err)
		}
		if !j.MarkHome(tid, []uint64{blk}) {
			t.Fatalf("revoke %v: MarkHome did not report the copy free", revoke)
		}
		if j.MarkHome(tid, []uint64{blk + 1}) {
			t.Fatalf("revoke %v: MarkHome reported a block the transaction does not hold", revoke)
		}
		newer := bytes.Repeat([]byte{0xB2}, tBS)
		if _, err := mem.WriteAt(newer, int64(blk)*tBS); err != nil {
			t.Fatal(err)
		}
		if err := j.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, tBS)
		if _, err := mem.ReadAt(buf, int64(blk)*tBS); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, newer) {
			t.Fatalf("revoke %v: the checkpoint wrote the older copy marked home over the newer contents", revoke)
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
