package ext4io

// Multiple mount protection (the mmp incompat feature), as Linux
// (fs/ext4/mmp.c) and e2fsprogs (lib/ext2fs/mmp.c) run it. The MMP block
// (layout.MMP) holds a sequence number that whoever writes the filesystem
// keeps changing; anyone who wants to write it first watches the number
// for longer than the holder's update interval.
//
// Open for writing (Options.Writable, or Options.Replay, which writes the
// journal into the device), before anything is written:
//
//  1. read the block; seq FSCK (e2fsck has it), or any other value above
//     MMPSeqMax but CLEAN, fails at once with ErrBusy (as e2fsprogs);
//  2. seq other than CLEAN: wait, re-read, fail with ErrBusy if it changed;
//  3. write a random seq (at most MMPSeqMax) with our node name, wait,
//     re-read, fail with ErrBusy if it changed (someone else raced us);
//  4. start the updater (the kernel's kmmpd): every s_mmp_update_interval
//     seconds it writes seq+1; when an update took longer than the check
//     interval it re-reads the block first and, if another node wrote it,
//     stops the volume's writes (ErrBusy, as the kernel's ext4_error) and
//     leaves the block and, at Close, the superblock alone.
//
// The wait is the kernel's: with c = max(s_mmp_update_interval, 5,
// the block's mmp_check_interval), min(2c+1, c+60) seconds (11 s by
// default). Linux skips the wait of step 3 when the block was CLEAN
// (its wait_time stays 0); e2fsprogs waits, and so does ext4io: without
// it two openers that both read CLEAN can both go on. A writable open of
// an mmp volume therefore takes at least 11 s. Close stops the updater
// and writes seq CLEAN after the superblock is marked clean.
//
// Read-only opens neither check nor write the block: Linux does not run
// MMP for read-only mounts either.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/layout"
)

// mmpBdevname is what ext4io writes in mmp_bdevname (the kernel writes
// the block device's name, e2fsprogs the path it opened).
const mmpBdevname = "ext4io"

// mmpTestWait, when positive, replaces the kernel's wait of the open
// protocol; mmpTestCheck, when positive, makes the updater re-read the
// block whenever an update is older than it, not only when an update
// came later than the check interval (tests only; see mmp_export_test.go).
var mmpTestWait, mmpTestCheck time.Duration

// mmpWait returns how long the open protocol waits, as
// ext4_multi_mount_protect computes it from the superblock's update
// interval and the block's check interval (both in seconds), with the
// interval at most MMPMaxCheckInterval: no holder updates the block less
// often (mke2fs and tune2fs refuse longer update intervals, kmmpd writes
// no longer check interval), and an image's 65535 s would hold Open for
// 18 hours.
func mmpWait(update, blockCheck uint16) time.Duration {
	c := min(uint32(max(update, layout.MMPMinCheckInterval, blockCheck)), layout.MMPMaxCheckInterval)
	return time.Duration(min(2*c+1, c+60)) * time.Second
}

// mmpHolder is the MMP block of a volume that holds the filesystem for
// writing and the updater goroutine that keeps it fresh. Its fields are
// owned by the updater once it runs; stop hands them back.
type mmpHolder struct {
	dev      blockdev.Device
	blk      uint64
	bs       int
	csum     bool
	seed     uint32
	interval time.Duration // s_mmp_update_interval
	recheck  time.Duration // mmpTestCheck at Open

	buf []byte      // the whole block as last written (the struct's tail kept)
	m   *layout.MMP // what we last wrote

	stopc chan struct{}
	done  chan struct{}
	// busy is set (once) when the updater found another node writing the
	// block, or could not read it back: the volume stops writing.
	busy    atomic.Pointer[error]
	stopped bool
}

// read reads the MMP block from the device, not from the host's cache
// (blockdev.Invalidator), and checks its magic and checksum.
func (h *mmpHolder) read() (*layout.MMP, []byte, error) {
	buf := make([]byte, h.bs)
	off := int64(h.blk) * int64(h.bs)
	if inv, ok := h.dev.(blockdev.Invalidator); ok {
		// Another host's writes to shared storage are not in our page
		// cache: read from the device (e2fsprogs reads with O_DIRECT).
		if err := inv.Invalidate(off, int64(h.bs)); err != nil {
			return nil, nil, fmt.Errorf("ext4io: MMP block %d: %w", h.blk, err)
		}
	}
	if _, err := readFull(h.dev, buf, off); err != nil {
		return nil, nil, fmt.Errorf("ext4io: reading MMP block %d: %w", h.blk, err)
	}
	m, err := layout.DecodeMMP(buf, h.blk)
	if err != nil {
		return nil, nil, err
	}
	if err := m.VerifyChecksum(h.csum, h.seed, h.blk); err != nil {
		return nil, nil, err
	}
	return m, buf, nil
}

// write stamps h.m with the time and writes it durably (blockdev.WriteAtSync:
// the block only, not earlier writes), as the kernel's REQ_SYNC write of
// the block.
func (h *mmpHolder) write() error {
	h.m.Time = uint64(time.Now().Unix())
	h.m.SetChecksum(h.csum, h.seed)
	copy(h.buf, h.m.Raw[:])
	if _, err := blockdev.WriteAtSync(h.dev, h.buf, int64(h.blk)*int64(h.bs)); err != nil {
		return fmt.Errorf("ext4io: writing MMP block %d: %w", h.blk, wrapIO(err))
	}
	return nil
}

func mmpBusy(blk uint64, m *layout.MMP, what string) error {
	return fmt.Errorf("ext4io: MMP block %d: %s (last update by node %q, device %q, at %s): %w",
		blk, what, m.NodenameString(), m.BdevnameString(), time.Unix(int64(m.Time), 0).UTC().Format(time.RFC3339), ErrBusy)
}

// startMMP runs the open protocol on a volume with the mmp feature that is
// about to be written, and starts the updater. It does nothing for other
// volumes.
func (v *Volume) startMMP(ctx context.Context) error {
	sb := v.sb
	if !sb.HasIncompat(layout.IncompatMMP) {
		return nil
	}
	if v.opts.Writable && (len(layout.UnsupportedIncompat(sb.FeatureIncompat, layout.IncompatSupportedWrite)) > 0 ||
		len(layout.UnsupportedRoCompat(sb.FeatureRoCompat, layout.RoCompatSupportedWrite)) > 0) {
		// openWritable refuses the features without writing anything:
		// do not make the caller wait 11 s for that.
		return nil
	}
	blk := sb.MmpBlock
	if blk < uint64(sb.FirstDataBlock) || blk >= sb.BlocksCount || blk == sb.SuperblockBlock() {
		return errs.Corruptf("superblock", 0, 0x168, "MMP block %d outside the filesystem's %d blocks", blk, sb.BlocksCount)
	}
	update := sb.MmpInterval
	if update == 0 {
		update = layout.MMPUpdateInterval
	}
	// Within the wait of mmpWait, which takes no longer interval.
	update = min(update, layout.MMPMaxUpdateInterval)
	h := &mmpHolder{dev: v.dev, blk: blk, bs: v.bs, csum: v.csum, seed: v.csumSeed,
		interval: time.Duration(update) * time.Second, recheck: mmpTestCheck}
	m, _, err := h.read()
	if err != nil {
		return err
	}
	wait := mmpWait(sb.MmpInterval, m.CheckInterval)
	if mmpTestWait > 0 {
		wait = mmpTestWait
	}
	if seq := m.Seq; seq != layout.MMPSeqClean {
		if seq == layout.MMPSeqFsck {
			return mmpBusy(blk, m, "e2fsck is running on the filesystem")
		}
		if seq > layout.MMPSeqMax {
			// ext4.h: any unknown code above SEQ_MAX is not safe either;
			// e2fsprogs refuses it (the kernel waits and re-reads).
			return mmpBusy(blk, m, fmt.Sprintf("unknown sequence %#x", seq))
		}
		if err := sleepContext(ctx, wait); err != nil {
			return fmt.Errorf("ext4io: multiple mount protection: %w", err)
		}
		if m, _, err = h.read(); err != nil {
			return err
		}
		if m.Seq != seq {
			return mmpBusy(blk, m, "the filesystem is in use on another node")
		}
	}
	// Claim it with a fresh sequence and see that nobody else does.
	m, h.buf, err = h.read()
	if err != nil {
		return err
	}
	prev := m.Seq
	seq := rand.Uint32N(layout.MMPSeqMax + 1)
	host, _ := os.Hostname()
	m.Seq = seq
	m.SetNames(host, mmpBdevname)
	h.m = m
	if err := h.write(); err != nil {
		return err
	}
	if err := sleepContext(ctx, wait); err != nil {
		// Give the block back as it was, unless someone else wrote it.
		if got, _, rerr := h.read(); rerr == nil && got.Seq == seq {
			h.m.Seq = prev
			_ = h.write()
		}
		return fmt.Errorf("ext4io: multiple mount protection: %w", err)
	}
	got, _, err := h.read()
	if err != nil {
		return err
	}
	if got.Seq != seq {
		return mmpBusy(blk, got, "the filesystem is in use on another node")
	}
	h.stopc, h.done = make(chan struct{}), make(chan struct{})
	v.mmp = h
	go h.run()
	return nil
}

// run is the updater (the kernel's kmmpd).
func (h *mmpHolder) run() {
	defer close(h.done)
	host, _ := os.Hostname()
	h.m.SetNames(host, mmpBdevname)
	update := uint64(h.interval / time.Second)
	check := max(layout.MMPCheckMult*update, layout.MMPMinCheckInterval)
	h.m.CheckInterval = uint16(min(check, 1<<16-1))
	var seq uint32
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		seq++
		if seq > layout.MMPSeqMax {
			seq = 1
		}
		h.m.Seq = seq
		last := time.Now()
		// A failed write is retried at the next update, as kmmpd does
		// (which only logs it).
		_ = h.write()
		timer.Reset(h.interval - time.Since(last))
		select {
		case <-h.stopc:
			return
		case <-timer.C:
		}
		diff := time.Since(last)
		if diff > time.Duration(check)*time.Second || h.recheck > 0 && diff > h.recheck {
			// Late: someone may have taken the block meanwhile.
			got, _, err := h.read()
			if err == nil && (got.Seq != h.m.Seq || got.Nodename != h.m.Nodename) {
				err = mmpBusy(h.blk, got, "the filesystem seems to have been multiply mounted")
			}
			if err != nil {
				h.busy.Store(&err)
				return
			}
		}
		check = min(max(layout.MMPCheckMult*uint64(diff/time.Second), layout.MMPMinCheckInterval), layout.MMPMaxCheckInterval)
		h.m.CheckInterval = uint16(check)
	}
}

// err returns the error that stopped the updater, or nil.
func (h *mmpHolder) err() error {
	if p := h.busy.Load(); p != nil {
		return *p
	}
	return nil
}

// stop stops the updater and, unless it found another node using the
// filesystem, writes seq CLEAN. It is safe to call more than once.
func (h *mmpHolder) stop() error {
	if h.stopped {
		return nil
	}
	h.stopped = true
	close(h.stopc)
	<-h.done
	if err := h.err(); err != nil {
		return err
	}
	h.m.Seq = layout.MMPSeqClean
	return h.write()
}

// mmpFailed returns the error that stopped the MMP updater, or nil. Once
// set, the volume's writes fail (Volume.failed) and Close leaves the
// superblock and the MMP block alone, as the kernel's ext4_error from
// kmmpd turns the filesystem read-only.
func (v *Volume) mmpFailed() error {
	if v.mmp == nil {
		return nil
	}
	return v.mmp.err()
}

// stopMMP stops the updater of a volume that holds its MMP block and
// marks the block clean.
func (v *Volume) stopMMP() error {
	if v.mmp == nil {
		return nil
	}
	return v.mmp.stop()
}

// sleepContext waits for d or until ctx is done, returning ctx.Err() then.
func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
