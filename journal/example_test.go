package journal_test

import (
	"bytes"
	"fmt"
	"log"

	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/journal"
)

// A transaction declares the blocks it changes, dirties them and stops;
// Commit makes it durable in the log. Home locations are written only at
// checkpoint, so readers consult Lookup first. Here the journal is the
// first 1024 blocks of a memdev and the "filesystem" is the rest.
func ExampleJournal_Commit() {
	dev := memdev.New(16 << 20)
	cfg := journal.Config{Dev: dev, Blocks: 1024, BlockSize: 4096, CommitInterval: -1}
	j, err := journal.Create(cfg, journal.CreateOptions{CsumV3: true, Is64Bit: true})
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()

	h, err := j.Start(2) // room for two blocks
	if err != nil {
		log.Fatal(err)
	}
	block := bytes.Repeat([]byte{0xAB}, 4096)
	for _, blk := range []uint64{2000, 2001} {
		if err := h.GetWriteAccess(blk); err != nil {
			log.Fatal(err)
		}
		if err := h.Dirty(blk, block); err != nil {
			log.Fatal(err)
		}
	}
	if err := h.Stop(); err != nil {
		log.Fatal(err)
	}
	if err := j.Commit(); err != nil {
		log.Fatal(err)
	}

	buf := make([]byte, 4096)
	fmt.Println("journalled copy of 2000:", j.Lookup(2000, buf), buf[0] == 0xAB)
	// Scan lists the log like debugfs's logdump.
	err = j.Scan(func(b journal.LogBlock) error {
		fmt.Printf("log block %d: type %d tid %d home %d\n", b.Block, b.Type, b.Sequence, b.Home)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// journalled copy of 2000: true true
	// log block 1: type 1 tid 1 home 0
	// log block 2: type 0 tid 1 home 2000
	// log block 3: type 0 tid 1 home 2001
	// log block 4: type 2 tid 1 home 0
}

// A committed transaction survives a power cut before its checkpoint:
// Recover replays it to the home locations, as e2fsck and Linux do.
// errordev.Crashable keeps what was flushed and builds the crash image.
func Example_crashRecovery() {
	c, err := errordev.NewCrashable(memdev.New(16 << 20))
	if err != nil {
		log.Fatal(err)
	}
	cfg := journal.Config{Dev: c, Blocks: 1024, BlockSize: 4096, CommitInterval: -1}
	j, err := journal.Create(cfg, journal.CreateOptions{CsumV3: true, Is64Bit: true})
	if err != nil {
		log.Fatal(err)
	}
	h, err := j.Start(1)
	if err != nil {
		log.Fatal(err)
	}
	if err := h.GetWriteAccess(3000); err != nil {
		log.Fatal(err)
	}
	if err := h.Dirty(3000, bytes.Repeat([]byte("metadata"), 512)); err != nil {
		log.Fatal(err)
	}
	if err := h.Stop(); err != nil {
		log.Fatal(err)
	}
	if err := j.Commit(); err != nil {
		log.Fatal(err)
	}

	img, err := c.Crash(errordev.CrashOptions{}) // only flushed writes survive
	if err != nil {
		log.Fatal(err)
	}
	j.Close()

	cfg.Dev = img
	j, err = journal.Open(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()
	fmt.Println("needs recovery:", j.NeedsRecovery())
	info, err := j.Recover()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("transactions", info.Transactions, "blocks replayed", info.Replayed)
	home := make([]byte, 8)
	if _, err := img.ReadAt(home, 3000*4096); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("block 3000: %q\n", home)
	// Output:
	// needs recovery: true
	// transactions 1 blocks replayed 1
	// block 3000: "metadata"
}

// Revoke records that a journalled block was freed: recovery then skips
// the older logged copies, so a block reused for data after the free is
// not overwritten with stale metadata.
func ExampleHandle_Revoke() {
	c, err := errordev.NewCrashable(memdev.New(16 << 20))
	if err != nil {
		log.Fatal(err)
	}
	cfg := journal.Config{Dev: c, Blocks: 1024, BlockSize: 4096, CommitInterval: -1}
	j, err := journal.Create(cfg, journal.CreateOptions{CsumV3: true, Is64Bit: true})
	if err != nil {
		log.Fatal(err)
	}
	// Transaction 1 logs blocks 2000 and 2001.
	h, err := j.Start(2)
	if err != nil {
		log.Fatal(err)
	}
	for _, blk := range []uint64{2000, 2001} {
		if err := h.GetWriteAccess(blk); err != nil {
			log.Fatal(err)
		}
		if err := h.Dirty(blk, bytes.Repeat([]byte{0xEE}, 4096)); err != nil {
			log.Fatal(err)
		}
	}
	h.Stop()
	if err := j.Commit(); err != nil {
		log.Fatal(err)
	}
	// Transaction 2 frees block 2001.
	h, err = j.Start(1)
	if err != nil {
		log.Fatal(err)
	}
	if err := h.Revoke(2001); err != nil {
		log.Fatal(err)
	}
	h.Stop()
	if err := j.Commit(); err != nil {
		log.Fatal(err)
	}

	img, err := c.Crash(errordev.CrashOptions{})
	if err != nil {
		log.Fatal(err)
	}
	j.Close()
	cfg.Dev = img
	j, err = journal.Open(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()
	info, err := j.Recover()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("transactions %d, replayed %d, revoked %d\n", info.Transactions, info.Replayed, info.Revoked)
	// Output:
	// transactions 2, replayed 1, revoked 1
}
