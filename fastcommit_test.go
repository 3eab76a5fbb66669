package ext4io_test

// Fast-commit replay on hand-made fast commits (no root, no mount): an
// image from mkfs.ext4 -O fast_commit -d gets an emptied-but-live journal
// (s_start set, no transaction) and a fast-commit area holding two
// commits with the tid the scan expects. ext4io must apply them read-only
// (in memory) and writable (e2fsck -fn clean afterwards).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/blockdev/overlay"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/journal"
	"github.com/ext4io/ext4io/layout"
)

// fcCommitBlock encodes one fast commit into one block: the records, then
// a TAIL padded to the block end with the crc of everything before it.
func fcCommitBlock(t testing.TB, bs int, tid uint32, tags ...layout.FCTag) []byte {
	t.Helper()
	var b []byte
	var crc uint32
	for _, tg := range tags {
		b = tg.Encode(b)
		crc = layout.FCRecordCrc(crc, tg)
	}
	n := bs - len(b) - layout.FCTagBaseLen
	if n < 8 {
		t.Fatalf("fast commit of %d bytes does not fit a block", len(b))
	}
	v := make([]byte, n)
	binary.LittleEndian.PutUint32(v, tid)
	binary.LittleEndian.PutUint32(v[4:], layout.FCTailCrc(crc, tid, n))
	return layout.FCTag{Tag: layout.FCTagTail, Value: v}.Encode(b)
}

// fcSpot says where makeSyntheticFC put things.
type fcSpot struct {
	bs          int
	tid         uint32
	area        int64 // device offset of the first fast-commit block
	old, sub    uint32
	ino         uint32 // the inode the fast commits create
	pblk        uint64 // its data
	fcInodeSize int
}

// makeSyntheticFC builds the image and returns it with a check of the
// replayed state.
func makeSyntheticFC(t testing.TB) (string, func(string, *ext4io.Volume), fcSpot) {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	old := bytes.Repeat([]byte("old file "), 2000)
	os.WriteFile(filepath.Join(src, "old"), old, 0o644)
	img := filepath.Join(dir, "img")
	mkfs := e2fs.Tool(t, "mkfs.ext4")
	if out, err := exec.Command(mkfs, "-q", "-F", "-O", "fast_commit", "-b", "1024", "-d", src, img, "32M").CombinedOutput(); err != nil {
		t.Skipf("mkfs.ext4 -O fast_commit -d fails here: %v: %s", err, out)
	}

	// Give old an xattr block, which its UNLINK must release.
	val := filepath.Join(dir, "val")
	os.WriteFile(val, bytes.Repeat([]byte("xattr value "), 50), 0o644)
	e2fs.Debugfs(t, img, true, "ea_set -f "+val+" old user.big")
	if st := e2fs.Debugfs(t, img, false, "stat old"); !strings.Contains(st, "File ACL: ") || strings.Contains(st, "File ACL: 0") {
		t.Fatalf("old got no xattr block:\n%s", st)
	}

	// Read what the surgery needs through ext4io.
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bs := v.BlockSize()
	jf, err := v.OpenIno(8)
	if err != nil {
		t.Fatal(err)
	}
	jext, err := jf.Extents()
	if err != nil {
		t.Fatal(err)
	}
	jmap := func(jb uint32) int64 {
		for _, e := range jext {
			if uint64(jb) >= e.Logical && uint64(jb) < e.Logical+e.Length {
				return int64(e.Physical+uint64(jb)-e.Logical) * int64(bs)
			}
		}
		t.Fatalf("journal block %d not mapped", jb)
		return 0
	}
	j, err := v.Journal()
	if err != nil {
		t.Fatal(err)
	}
	jsb := j.Superblock()
	oldInfo, err := v.Lstat("old")
	if err != nil {
		t.Fatal(err)
	}
	subInfo, err := v.Lstat("sub")
	if err != nil {
		t.Fatal(err)
	}
	sb := v.Superblock()
	g1, _ := v.Group(1)
	v.Close()
	if !sb.HasCompat(layout.CompatFastCommit) {
		t.Skip("mkfs.ext4 -O fast_commit did not set the feature")
	}

	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	write := func(b []byte, off int64) {
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	// The journal: live (s_start = s_first) but holding no transaction, so
	// fast commits must carry tid s_sequence.
	tid := jsb.SeqTail
	jsb.Start = jsb.First
	// mke2fs sizes the area (s_num_fc_blks); Linux sets the journal
	// feature at mount.
	jsb.FeatureIncompat |= journal.FeatureIncompatFastCommit
	jsb.SetChecksum()
	buf := make([]byte, bs)
	jsb.Encode(buf)
	write(buf, jmap(0))
	write(make([]byte, bs), jmap(jsb.First))
	// The file's data in free blocks of group 1, which mke2fs leaves
	// BLOCK_UNINIT.
	const ino = 20
	pblk := uint64(sb.FirstDataBlock) + uint64(sb.BlocksPerGroup) + 4000
	if g1.Flags&layout.BgBlockUninit == 0 {
		t.Logf("group 1 is not BLOCK_UNINIT (flags %#x)", g1.Flags)
	}
	data := bytes.Repeat([]byte("fast commit data "), 3*bs/17+1)[:3*bs]
	write(data, int64(pblk)*int64(bs))
	raw := func(links uint16) layout.FCInode {
		in := &layout.Inode{Mode: layout.ModeReg | 0o640, LinksCount: links, Size: uint64(len(data)),
			Flags: layout.InodeFlagExtents, ExtraIsize: 32, Block: extent.EmptyRoot()}
		return layout.FCInode{Ino: ino, Raw: in.Encode(sb.InodeSizeBytes())}
	}
	fc1 := fcCommitBlock(t, bs, tid,
		layout.EncodeFCHead(layout.FCHead{Tid: tid}),
		layout.EncodeFCInode(raw(1)),
		layout.EncodeFCRange(layout.FCRange{Ino: ino, Lblk: 0, Len: 3, Pblk: pblk}, true),
		layout.EncodeFCDentry(layout.FCTagCreat, layout.FCDentry{Parent: subInfo.Ino, Ino: ino, Name: []byte("synth")}),
		layout.EncodeFCInode(raw(1)))
	fc2 := fcCommitBlock(t, bs, tid,
		layout.EncodeFCDentry(layout.FCTagUnlink, layout.FCDentry{Parent: layout.RootIno, Ino: oldInfo.Ino, Name: []byte("old")}),
		layout.EncodeFCDentry(layout.FCTagLink, layout.FCDentry{Parent: layout.RootIno, Ino: ino, Name: []byte("synth-link")}),
		layout.EncodeFCInode(raw(2)))
	// A third commit with a stale tid must not be replayed.
	fc3 := fcCommitBlock(t, bs, tid-1,
		layout.EncodeFCDentry(layout.FCTagUnlink, layout.FCDentry{Parent: layout.RootIno, Ino: ino, Name: []byte("synth-link")}))
	fcFirst := jsb.MaxLen - jsb.NumFastCommitBlocks() + 1
	spot := fcSpot{bs: bs, tid: tid, area: jmap(fcFirst), old: oldInfo.Ino, sub: subInfo.Ino, ino: ino, pblk: pblk,
		fcInodeSize: sb.InodeSizeBytes()}
	write(fc1, jmap(fcFirst))
	write(fc2, jmap(fcFirst+1))
	write(fc3, jmap(fcFirst+2))
	// needs_recovery in the superblock.
	esb := make([]byte, layout.SuperblockSize)
	f.ReadAt(esb, layout.SuperblockOffset)
	s, err := layout.DecodeSuperblock(esb)
	if err != nil {
		t.Fatal(err)
	}
	s.FeatureIncompat |= layout.IncompatRecover
	write(s.Encode(), layout.SuperblockOffset)
	f.Close()

	check := func(what string, v *ext4io.Volume) {
		t.Helper()
		for _, name := range []string{"sub/synth", "synth-link"} {
			fi, err := v.Lstat(name)
			if err != nil {
				t.Errorf("%s: %s: %v", what, name, err)
				continue
			}
			if fi.Ino != ino || fi.Nlink != 2 || fi.IMode != layout.ModeReg|0o640 {
				t.Errorf("%s: %s: ino %d links %d mode %#o", what, name, fi.Ino, fi.Nlink, fi.IMode)
			}
			fl, err := v.Open(name)
			if err != nil {
				t.Errorf("%s: %v", what, err)
				continue
			}
			got := make([]byte, fl.Size())
			fl.ReadAt(got, 0)
			fl.Close()
			if !bytes.Equal(got, data) {
				t.Errorf("%s: %s holds %d bytes, not the %d written", what, name, len(got), len(data))
			}
		}
		if _, err := v.Lstat("old"); err == nil {
			t.Errorf("%s: old survived its UNLINK", what)
		}
	}

	return img, check, spot
}

func TestFastCommitReplaySynthetic(t *testing.T) {
	img, check, _ := makeSyntheticFC(t)
	before, _ := os.ReadFile(img)
	rv, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := rv.Recovery().FastCommitTags; got != 10 {
		t.Errorf("read-only open replayed %d fast-commit tags, want 10", got)
	}
	check("read-only", rv)
	rv.Close()
	if after, _ := os.ReadFile(img); !bytes.Equal(before, after) {
		t.Error("read-only open changed the image")
	}

	wv, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	check("writable", wv)
	if err := wv.Close(); err != nil {
		t.Fatal(err)
	}
	e2fs.Fsck(t, img)
	rv, err = ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	check("after the writable replay", rv)
	rv.Close()
}

// TestFastCommitReplayInterrupted fails each write of a writable replay in
// turn: the open fails, the journal still needs recovery, and a read-only
// open of what reached the device replays to the same state (the tags are
// idempotent); e2fsck -fy then repairs whatever the interrupted replay
// marked as in error.
func TestFastCommitReplayInterrupted(t *testing.T) {
	t.Parallel()
	img, check, _ := makeSyntheticFC(t)
	orig, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	load := func(b []byte) *memdev.Device {
		d := memdev.NewBlockSize(int64(len(b)), 512)
		if _, err := d.WriteAt(b, 0); err != nil {
			t.Fatal(err)
		}
		return d
	}
	if v, err := ext4io.Open(load(orig), ext4io.Options{}); err != nil || v.Recovery().FastCommitTags != 10 {
		t.Fatalf("read-only open of the memdev copy: %v %+v", err, v.Recovery())
	}
	// Each replay writes into an overlay of the pristine image, and each
	// read-only open reads an overlay of what reached it: no copies.
	pristine := load(orig)
	failed := 0
	for n := int64(0); ; n++ {
		base := overlay.New(pristine)
		v, err := ext4io.Open(errordev.New(base, errordev.OnIndex(errordev.Write, n)), ext4io.Options{Writable: true})
		if err == nil {
			v.Close()
			break
		}
		if !errors.Is(err, errordev.ErrInjected) {
			t.Fatalf("write %d failed with %v", n, err)
		}
		failed++
		rv, err := ext4io.Open(overlay.New(base), ext4io.Options{})
		if err != nil {
			t.Fatalf("read-only open after failing write %d: %v", n, err)
		}
		// Before the journal was emptied the fast commits replay again;
		// after, the replay is on the device already.
		if ri := rv.Recovery(); ri != nil && ri.FastCommitTags != 10 && ri.FastCommitTags != 0 {
			t.Errorf("after failing write %d: replayed %d tags", n, ri.FastCommitTags)
		}
		check(fmt.Sprintf("read-only after failing write %d", n), rv)
		rv.Close()
		if n%5 == 0 {
			p := filepath.Join(t.TempDir(), "after.img")
			saveDev(t, base, p)
			out, err := exec.Command(e2fs.Tool(t, "e2fsck"), "-fy", p).CombinedOutput()
			if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() > 2) {
				t.Errorf("e2fsck -fy after failing write %d: %v\n%s", n, err, out)
			}
			e2fs.Fsck(t, p)
			if v, err := ext4io.OpenImage(p, ext4io.Options{}); err != nil {
				t.Errorf("after e2fsck: %v", err)
			} else {
				check(fmt.Sprintf("e2fsck after failing write %d", n), v)
				v.Close()
			}
		}
	}
	if failed < 5 {
		t.Fatalf("only %d writes before the replay finished", failed)
	}
	t.Logf("%d write failures tried", failed)
}

// FuzzFastCommitReplay replays fuzzed fast commits (one commit of fuzzed
// records, with a valid HEAD and TAIL around them) on the synthetic image,
// read-only and writable: decoding and replay must not panic whatever the
// records say, and whatever a read-only open accepts must be readable.
func FuzzFastCommitReplay(f *testing.F) {
	img, _, spot := makeSyntheticFC(f)
	orig, err := os.ReadFile(img)
	if err != nil {
		f.Fatal(err)
	}
	in := &layout.Inode{Mode: layout.ModeReg | 0o640, LinksCount: 1, Size: 3000,
		Flags: layout.InodeFlagExtents, ExtraIsize: 32, Block: extent.EmptyRoot()}
	seed := func(tags ...layout.FCTag) []byte {
		var b []byte
		for _, t := range tags {
			b = t.Encode(b)
		}
		return b
	}
	f.Add(seed(layout.EncodeFCInode(layout.FCInode{Ino: spot.ino, Raw: in.Encode(spot.fcInodeSize)}),
		layout.EncodeFCRange(layout.FCRange{Ino: spot.ino, Len: 3, Pblk: spot.pblk}, true),
		layout.EncodeFCDentry(layout.FCTagCreat, layout.FCDentry{Parent: spot.sub, Ino: spot.ino, Name: []byte("n")})))
	f.Add(seed(layout.EncodeFCDentry(layout.FCTagUnlink, layout.FCDentry{Parent: layout.RootIno, Ino: spot.old, Name: []byte("old")}),
		layout.EncodeFCRange(layout.FCRange{Ino: spot.old, Lblk: 2, Len: 100}, false)))
	f.Add(seed(layout.EncodeFCDentry(layout.FCTagLink, layout.FCDentry{Parent: spot.sub, Ino: spot.sub, Name: []byte("loop")}),
		layout.EncodeFCRange(layout.FCRange{Ino: spot.old, Lblk: 7, Len: 32768, Pblk: 1}, true)))
	f.Fuzz(func(t *testing.T, recs []byte) {
		wd := time.AfterFunc(20*time.Second, func() { panic(fmt.Sprintf("slow input %x", recs)) })
		defer wd.Stop()
		tags, _ := layout.DecodeFCBlock(recs, 0)
		all := append([]layout.FCTag{layout.EncodeFCHead(layout.FCHead{Tid: spot.tid})}, tags...)
		size := 0
		for _, tg := range all {
			size += layout.FCTagBaseLen + len(tg.Value)
		}
		if size+layout.FCTagBaseLen+8 > spot.bs {
			return
		}
		blk := fcCommitBlock(t, spot.bs, spot.tid, all...)
		for _, writable := range []bool{false, true} {
			d := memdev.NewBlockSize(int64(len(orig)), 512)
			d.WriteAt(orig, 0)
			d.WriteAt(make([]byte, 3*spot.bs), spot.area)
			d.WriteAt(blk, spot.area)
			v, err := ext4io.Open(d, ext4io.Options{Writable: writable})
			if err != nil {
				continue
			}
			if !writable {
				n := 0
				fs.WalkDir(v.FS(), ".", func(path string, de fs.DirEntry, err error) error {
					if n++; n > 1000 || strings.Count(path, "/") > 10 {
						return fs.SkipAll // a cycle the replay let through
					}
					if err == nil && de.Type().IsRegular() {
						if fl, err := v.Open(path); err == nil {
							io.Copy(io.Discard, io.NewSectionReader(fl, 0, fl.Size()))
							fl.Close()
						}
					}
					return nil
				})
			}
			v.Close()
		}
	})
}
