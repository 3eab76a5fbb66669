package torture

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/journal"
	"github.com/ext4io/ext4io/layout"
)

// Stale fast-commit HEAD (docs/fastcommit.md, "Stale HEAD").
//
// When a full commit of tid T supersedes the fast commits of T, the
// fast-commit area still starts with a HEAD of tid T until something
// rewrites it: ext4io zeroes it once the commit is durable, Linux only at
// its next fast commit. jbd2 expects fast commits of the first tid not
// complete in the log (end_transaction, T+1 here). The kernel's
// ext4_fc_replay_scan stops at a HEAD of another tid and recovery goes on
// with the log alone; e2fsck 1.47.0's returns -EINVAL instead, its whole
// recovery fails ("Invalid argument while recovering journal") and it
// throws the log away: the files the log held are lost. Linux-made images
// hit this too. No write order avoids the window: the HEAD must stay
// until T's commit block is durable, and any write that changes it must
// come after that commit's flush and needs a flush of its own.
//
// A crash image whose e2fsck -fy recovery fails that way, and whose area
// starts with a HEAD of a tid older than end_transaction, is recovered by
// ext4io instead (and, as root, by Linux's mount) and checked against the
// model like any other; Summary.StaleHead counts them. Any other failure
// of e2fsck's journal recovery fails the round.

// e2fsckStaleHeadMsg is how e2fsck 1.47.0 reports the -EINVAL of its
// fast-commit scan (com_err of EINVAL, "while recovering journal of").
const e2fsckStaleHeadMsg = "Invalid argument while recovering journal"

// fcHead is what a crash image's journal says before recovery: the first
// record of its fast-commit area and the tid jbd2's recovery expects.
type fcHead struct {
	head bool   // the log needs recovery and the area's first record is a HEAD
	tid  uint32 // the HEAD's fc_tid
	end  uint32 // end_transaction: the first tid without a commit block in the log
}

// stale reports whether the HEAD is of a transaction the log holds
// complete: recovery expects a later tid.
func (h fcHead) stale() bool { return h.head && int32(h.end-h.tid) > 0 }

func (h fcHead) String() string {
	if !h.head {
		return "no fast-commit HEAD to replay"
	}
	return fmt.Sprintf("fast-commit HEAD tid %d, log complete up to tid %d", h.tid, h.end-1)
}

// readFCHead decodes dev's journal without recovering it (a read-only,
// NoRecovery open writes nothing): end_transaction by walking the log as
// jbd2's scan pass does (journal.Scan), and the first record of the
// fast-commit area.
func readFCHead(dev blockdev.Device) (fcHead, error) {
	v, err := ext4io.Open(dev, ext4io.Options{NoRecovery: true})
	if err != nil {
		return fcHead{}, err
	}
	defer v.Close()
	j, err := v.Journal()
	if err != nil {
		return fcHead{}, err
	}
	sb := j.Superblock()
	if sb.Start == 0 {
		return fcHead{}, nil // e2fsck does not recover an empty log
	}
	h := fcHead{end: sb.SeqTail}
	err = j.Scan(func(b journal.LogBlock) error {
		if b.Type == journal.BlockTypeCommit {
			h.end = b.Sequence + 1
		}
		return nil
	})
	if err != nil {
		return fcHead{}, err
	}
	blocks, err := j.FastCommitBlocks()
	if err != nil || len(blocks) == 0 {
		return fcHead{}, err
	}
	tags, _ := layout.DecodeFCBlock(blocks[0], 0)
	if len(tags) == 0 || tags[0].Tag != layout.FCTagHead {
		return h, nil
	}
	h.head, h.tid = true, tags[0].Head().Tid
	return h, nil
}

// recoverByE2fsck recovers img in place with e2fsck -fy. If e2fsck's
// journal recovery fails on a stale HEAD, img is recovered by ext4io
// instead (after Linux's mount checked a copy, when r.linux); how says
// which. check is the model's check of a recovered volume.
func (r *runner) recoverByE2fsck(img *memdev.Device, check func(*ext4io.Volume) error) (how string, err error) {
	pre, err := img.Clone()
	if err != nil {
		return "", err
	}
	out, code, err := r.e2fsck(img, "-fy", true)
	if err != nil {
		return "", err
	}
	if !strings.Contains(out, "while recovering journal") {
		if code > 1 {
			return "", fmt.Errorf("e2fsck -fy exit %d:\n%s", code, out)
		}
		return "e2fsck -fy", nil
	}
	h, herr := readFCHead(pre)
	if herr != nil || !strings.Contains(out, e2fsckStaleHeadMsg) || !h.stale() {
		return "", fmt.Errorf("e2fsck -fy failed its journal recovery (exit %d; not a stale fast-commit HEAD: %v, decode error %v):\n%s", code, h, herr, out)
	}
	// e2fsck threw the log away: check the oracles that replay it.
	r.sum.StaleHead++
	how = fmt.Sprintf("ext4io Open(Writable), as e2fsck -fy stopped at a stale %v", h)
	if r.linux {
		if err := r.linuxCheck(pre, check); err != nil {
			return "", fmt.Errorf("stale %v, e2fsck failed; after recovery by Linux: %w", h, err)
		}
		r.sum.StaleHeadLinux++
		how += " (Linux's recovery checked too)"
	}
	if err := copyDev(img, pre); err != nil {
		return "", err
	}
	v, err := ext4io.Open(img, ext4io.Options{Writable: true})
	if err != nil {
		return "", fmt.Errorf("stale %v, e2fsck failed; recovery by ext4io: %w", h, err)
	}
	if err := v.Close(); err != nil {
		return "", fmt.Errorf("stale %v, e2fsck failed; close after recovery by ext4io: %w", h, err)
	}
	return how, nil
}

// linuxAvailable reports whether Linux can mount images here: root, mount
// and loop devices.
func linuxAvailable() bool {
	if os.Geteuid() != 0 {
		return false
	}
	if _, err := exec.LookPath("mount"); err != nil {
		return false
	}
	_, err := os.Stat("/dev/loop-control")
	return err == nil
}

// linuxCheck recovers a copy of img by mounting it with Linux (mount -o
// loop replays the log and, where valid, the fast commits), unmounts it,
// and checks the result: e2fsck -fn clean and the model's check.
func (r *runner) linuxCheck(img *memdev.Device, check func(*ext4io.Volume) error) error {
	dir, err := os.MkdirTemp("", "torture-linux-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	name, mnt := filepath.Join(dir, "img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return err
	}
	if err := saveImage(img, name); err != nil {
		return err
	}
	if out, err := exec.Command("mount", "-t", "ext4", "-o", "loop", name, mnt).CombinedOutput(); err != nil {
		return fmt.Errorf("mount -o loop: %v: %s", err, out)
	}
	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		// Leave nothing mounted behind: retry lazily, then report.
		exec.Command("umount", "-l", mnt).Run()
		return fmt.Errorf("umount: %v: %s", err, out)
	}
	got := memdev.NewBlockSize(img.Size(), img.LogicalBlockSize())
	if err := loadImage(got, name); err != nil {
		return err
	}
	if err := r.fsckN(got); err != nil {
		return err
	}
	v, err := ext4io.Open(got, ext4io.Options{})
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer v.Close()
	return check(v)
}

// copyDev makes dst's contents those of src (same size).
func copyDev(dst, src *memdev.Device) error {
	if dst.Size() != src.Size() {
		return errors.New("torture: copyDev: sizes differ")
	}
	buf := make([]byte, chunk)
	for off := int64(0); off < src.Size(); off += chunk {
		n := min(chunk, src.Size()-off)
		if _, err := src.ReadAt(buf[:n], off); err != nil {
			return err
		}
		if _, err := dst.WriteAt(buf[:n], off); err != nil {
			return err
		}
	}
	return nil
}
