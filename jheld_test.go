package ext4io_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
)

// TestJournalHeldCopiesBounded: the journal keeps the metadata copies of
// committed transactions in memory until a checkpoint writes them home,
// and the background checkpoint used to start only once half the log was
// in use, so a volume with a large log (mkfs.ext4 gives 1 GiB from 128
// GiB on) held up to half of it whatever Options.MetaCacheBytes said.
// Here a 512 MiB log takes ~150 transactions of 256 distinct inode table
// blocks each (~150 MiB, under a third of the log): the checkpoint must
// run, and the live heap must stay well under what those copies weigh.
func TestJournalHeldCopiesBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes ~150 MiB to the log")
	}
	dir := t.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "jheld")
		if err == nil {
			dir = d
			t.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	img := filepath.Join(dir, "held.img")
	const logBlocks, perTxn, txns = 131072, 256, 150 // 512 MiB log, 4 KiB blocks
	dev, err := blockdev.CreateFile(img, 4<<30)
	if err != nil {
		t.Fatal(err)
	}
	if err := ext4io.Format(dev, ext4io.FormatOptions{JournalBlocks: logBlocks, NoDiscard: true}); err != nil {
		t.Fatal(err)
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	// 16 inodes of 256 bytes per inode table block: every 16th file's
	// inode is in a block of its own.
	for i := range perTxn * 16 {
		f, err := v.Create(fmt.Sprintf("f%05d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	live := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := live()
	cp0 := v.Counters().JournalCheckpoints
	peak := uint64(0)
	for r := range txns {
		mode := fs.FileMode(0o600)
		if r%2 == 1 {
			mode = 0o644
		}
		for k := range perTxn {
			if err := v.Chmod(fmt.Sprintf("f%05d", k*16), mode); err != nil {
				t.Fatal(err)
			}
		}
		if err := v.Sync(); err != nil {
			t.Fatal(err)
		}
		if r%10 == 9 || r == txns-1 {
			peak = max(peak, live())
		}
	}
	c := v.Counters()
	grew := int64(peak) - int64(base)
	t.Logf("live heap %d MiB before, peak %d MiB (+%d MiB); %d transactions, %d log blocks, %d checkpoints, %d space waits",
		base>>20, peak>>20, grew>>20, c.JournalTransactions, c.JournalLogBlocks, c.JournalCheckpoints-cp0, c.JournalSpaceWaits)
	if c.JournalLogBlocks*2 >= logBlocks {
		t.Fatalf("%d log blocks written: the log may have been half full, the test cannot tell", c.JournalLogBlocks)
	}
	if c.JournalCheckpoints == cp0 {
		t.Errorf("no checkpoint while the committed transactions held ~%d MiB of copies", txns*perTxn*4096>>20)
	}
	// The bound is 32 MiB (twice the default cache budget), Start
	// checkpoints at 64 MiB; without it the copies weigh ~150 MiB.
	if grew > 100<<20 {
		t.Errorf("live heap grew by %d MiB over %d transactions of %d blocks", grew>>20, txns, perTxn)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
}
