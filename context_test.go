package ext4io_test

// The context variants: OpenContext, SyncContext and FormatContext give
// up when their context ends and leave the image consistent.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/ext4io/ext4io/layout"
	"github.com/stretchr/testify/require"
)

// cancelOnWrite calls cancel before the device's n-th write from when it
// was armed.
type cancelOnWrite struct {
	blockdev.Device
	mu     sync.Mutex
	n      int
	cancel context.CancelFunc
	after  int64 // bytes written after the cancel
}

func (d *cancelOnWrite) arm(n int, cancel context.CancelFunc) {
	d.mu.Lock()
	d.n, d.cancel = n, cancel
	d.mu.Unlock()
}

func (d *cancelOnWrite) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	if d.n > 0 {
		if d.n--; d.n == 0 {
			d.cancel()
		}
	} else if d.cancel != nil {
		d.after += int64(len(p))
	}
	d.mu.Unlock()
	return d.Device.WriteAt(p, off)
}

func needsRecovery(t *testing.T, dev blockdev.Device) bool {
	t.Helper()
	buf := make([]byte, layout.SuperblockSize)
	_, err := dev.ReadAt(buf, layout.SuperblockOffset)
	require.NoError(t, err)
	sb, err := layout.DecodeSuperblock(buf)
	require.NoError(t, err)
	return sb.HasIncompat(layout.IncompatRecover)
}

// journaledImage returns an image whose journal holds six committed,
// unreplayed transactions (a file each), and the files' contents.
func journaledImage(t *testing.T) (*memdev.Device, map[string][]byte) {
	t.Helper()
	dev := memdev.NewBlockSize(64<<20, 4096)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, CommitInterval: -1, WritebackAge: -1})
	require.NoError(t, err)
	files := map[string][]byte{}
	for i := range 6 {
		name := fmt.Sprintf("f%d", i)
		data := bytes.Repeat([]byte{byte('a' + i)}, 10000*(i+1))
		require.NoError(t, v.WriteFile(name, data, 0o644))
		require.NoError(t, v.Sync())
		files[name] = data
	}
	img, err := dev.Clone()
	require.NoError(t, err)
	require.NoError(t, v.Close())
	require.True(t, needsRecovery(t, img), "the crash image needs no recovery")
	return img, files
}

func TestOpenContextCancelledReplay(t *testing.T) {
	img, files := journaledImage(t)
	for _, writes := range []int{1, 3} {
		ctx, cancel := context.WithCancel(context.Background())
		dev := &cancelOnWrite{Device: img}
		dev.arm(writes, cancel)
		v, err := ext4io.OpenContext(ctx, dev, ext4io.Options{Writable: true})
		cancel()
		if err == nil {
			v.Close()
			t.Fatalf("cancel at write %d: OpenContext succeeded", writes)
		}
		require.ErrorIs(t, err, context.Canceled)
		require.True(t, needsRecovery(t, img), "a cancelled replay cleared needs_recovery")
	}
	// The next open replays all of it.
	v, err := ext4io.Open(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	require.Equal(t, 6, v.Recovery().Transactions)
	for name, want := range files {
		got, err := v.ReadFile(name)
		require.NoError(t, err)
		require.True(t, bytes.Equal(got, want), "%s differs after the replay", name)
	}
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, img)
}

// TestOpenContextCancelledMMP: a context that ends during the MMP open
// protocol's wait (the test binary's ext4io.MMPTestWait) ends the wait.
func TestOpenContextCancelledMMP(t *testing.T) {
	t.Parallel()
	dev := memdev.NewBlockSize(64<<20, 4096)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{Features: "mmp"}))
	before := mmpSeq(t, dev)
	ctx, cancel := context.WithTimeout(context.Background(), ext4io.MMPTestWait/12)
	defer cancel()
	start := time.Now()
	_, err := ext4io.OpenContext(ctx, dev, ext4io.Options{Writable: true})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), ext4io.MMPTestWait, "OpenContext waited out the MMP interval")
	require.Equal(t, before, mmpSeq(t, dev), "the MMP block was not given back")

	_, err = ext4io.OpenContext(ctx, dev, ext4io.Options{Writable: true})
	require.ErrorIs(t, err, context.DeadlineExceeded, "an ended context opens")
}

func mmpSeq(t *testing.T, dev blockdev.Device) uint32 {
	t.Helper()
	buf := make([]byte, layout.SuperblockSize)
	_, err := dev.ReadAt(buf, layout.SuperblockOffset)
	require.NoError(t, err)
	sb, err := layout.DecodeSuperblock(buf)
	require.NoError(t, err)
	blk := make([]byte, sb.BlockSize())
	_, err = dev.ReadAt(blk, int64(sb.MmpBlock)*int64(sb.BlockSize()))
	require.NoError(t, err)
	m, err := layout.DecodeMMP(blk, sb.MmpBlock)
	require.NoError(t, err)
	return m.Seq
}

func TestSyncContext(t *testing.T) {
	t.Parallel()
	dev := memdev.NewBlockSize(256<<20, 4096)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	w := &cancelOnWrite{Device: dev}
	v, err := ext4io.Open(w, ext4io.Options{Writable: true, CommitInterval: -1, WritebackAge: -1,
		PageCacheBytes: 128 << 20})
	require.NoError(t, err)
	data := bytes.Repeat([]byte("sync"), 24<<20) // 96 MiB: two write-back chunks
	require.NoError(t, v.WriteFile("big", nil, 0o644))
	require.NoError(t, v.Sync())
	f, err := v.OpenFile("big", os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.Write(data)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	require.ErrorIs(t, v.SyncContext(canceled()), context.Canceled)

	// Cancelled once the first write-back run reached the device: the
	// sync stops at the next chunk and reports it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.arm(1, cancel)
	require.ErrorIs(t, v.SyncContext(ctx), context.Canceled)
	require.Less(t, w.after, int64(64<<20), "the sync went on writing back after the cancel")
	w.arm(0, nil)
	crash, err := dev.Clone()
	require.NoError(t, err)

	require.NoError(t, v.SyncContext(context.Background()))
	require.NoError(t, v.Close())
	v, err = ext4io.Open(dev, ext4io.Options{})
	require.NoError(t, err)
	got, err := v.ReadFile("big")
	require.NoError(t, err)
	require.True(t, bytes.Equal(got, data), "after Sync: %d bytes differ", len(got))
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev)

	// A crash right after the cancelled sync: consistent, and what the
	// file holds is a prefix of what was written.
	v, err = ext4io.Open(crash, ext4io.Options{Writable: true})
	require.NoError(t, err)
	got, err = v.ReadFile("big")
	require.NoError(t, err)
	require.Less(t, len(got), len(data), "the cancelled sync wrote everything back")
	require.True(t, bytes.Equal(got, data[:len(got)]), "the crash image's file is not a prefix")
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, crash)
}

func TestFormatContextCancelled(t *testing.T) {
	t.Parallel()
	dev := memdev.NewBlockSize(1<<30, 4096)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	for _, writes := range []int{1, 2, 5, 20} {
		ctx, cancel := context.WithCancel(context.Background())
		w := &cancelOnWrite{Device: dev}
		w.arm(writes, cancel)
		err := ext4io.FormatContext(ctx, w, ext4io.FormatOptions{BlockSize: 1024, NoDiscard: true})
		cancel()
		require.ErrorIs(t, err, context.Canceled, "cancel at write %d", writes)
		_, err = ext4io.Open(dev, ext4io.Options{})
		require.ErrorIs(t, err, ext4io.ErrNotExt4, "cancel at write %d: the device holds a filesystem", writes)
	}
	require.NoError(t, ext4io.FormatContext(context.Background(), dev, ext4io.FormatOptions{NoDiscard: true}))
	ext4iotest.FsckDev(t, dev)
	if err := ext4io.FormatContext(canceled(), dev, ext4io.FormatOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("FormatContext with an ended context: %v", err)
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestFormatCrash: a power cut anywhere in a Format over an existing
// filesystem leaves no filesystem (ErrNotExt4), the complete new one, or,
// before anything of the Format was flushed, the old one untouched; never
// the old superblock over half-written new metadata.
func TestFormatCrash(t *testing.T) {
	t.Parallel()
	start := memdev.NewBlockSize(64<<20, 4096)
	require.NoError(t, ext4io.Format(start, ext4io.FormatOptions{BlockSize: 1024}))
	workload := func(dev blockdev.Device) error {
		return ext4io.Format(dev, ext4io.FormatOptions{NoDiscard: true})
	}
	checked := ext4iotest.CrashSweep(t, start, workload, func(t *testing.T, dev *memdev.Device, rep errordev.CrashReport) {
		v, err := ext4io.Open(dev, ext4io.Options{})
		if errors.Is(err, ext4io.ErrNotExt4) {
			return
		}
		require.NoError(t, err, "after %v", rep)
		if v.BlockSize() != 4096 { // the old one: only while nothing of Format is durable
			require.Zero(t, rep.Durable, "the old filesystem survived %v", rep)
		}
		require.NoError(t, v.Close())
		ext4iotest.FsckDev(t, dev)
	}, ext4iotest.SweepOptions{EveryOp: true, MaxPoints: 40, CrashAt: errordev.CrashAtOptions{KeepProb: 0.5}})
	require.Greater(t, checked, 2)
}
