package ext4io_test

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/layout"
)

// kcrashAfterReplay is EXPECTED.txt's "after replay" section for the image
// Linux left with a dirty journal (EXT4_IOC_SHUTDOWN with LOGFLUSH).
var kcrashAfterReplay = map[string]string{
	"base.bin":     "d8e846519a8803bff4906641d4e9df40",
	"fsynced.bin":  "dada77f79e7204a7c73ad835490cf930",
	"prealloc.bin": "a0b5ccfe32f1821bdaf97b743a3e16bb",
	"unsynced.bin": "d41d8cd98f00b204e9800998ecf8427e",
}

func fileMD5(t *testing.T, v *ext4io.Volume, name string) string {
	t.Helper()
	f, err := v.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	h := md5.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, f.Size())); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestRecoverKernelCrash replays the journal of an image Linux crashed on:
// read-only into memory (the image file stays as it was) and writable into
// the image, which then matches e2fsck's own replay block for block
// (outside superblocks and the journal) and passes e2fsck -fn.
func TestRecoverKernelCrash(t *testing.T) {
	t.Parallel()
	dir := findTestdata(t)
	src := filepath.Join(dir, "_extra_kernel_made", "kcrash-mcsum64-1k-needs_recovery.img.gz")
	img := filepath.Join(t.TempDir(), "kcrash.img")
	if err := unpackImage(src, img); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(img)

	// Without recovery the volume is still readable, with stale metadata.
	if v, err := ext4io.OpenImage(img, ext4io.Options{NoRecovery: true}); err != nil {
		t.Fatal(err)
	} else {
		if v.Recovery() != nil {
			t.Fatal("NoRecovery replayed the journal")
		}
		v.Close()
	}

	ro, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	info := ro.Recovery()
	if info == nil || info.Transactions != 5 {
		t.Fatalf("recovery info %+v, want 5 transactions (2..6 in the log)", info)
	}
	for name, want := range kcrashAfterReplay {
		if got := fileMD5(t, ro, name); got != want {
			t.Errorf("%s: md5 %s after read-only replay, want %s", name, got, want)
		}
	}
	checkPrealloc(t, ro)
	ro.Close()
	if after, _ := os.ReadFile(img); !bytes.Equal(before, after) {
		t.Fatal("a read-only open changed the image")
	}

	// Writable: replay into the image; compare with e2fsck's replay.
	ref := filepath.Join(t.TempDir(), "ref.img")
	os.WriteFile(ref, before, 0o644)
	if out, err := exec.Command(e2fs.Tool(t, "e2fsck"), "-E", "journal_only", "-y", ref).CombinedOutput(); exitCode(err) > 1 {
		t.Fatalf("e2fsck journal_only: %v\n%s", err, out)
	}
	rw, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range kcrashAfterReplay {
		if got := fileMD5(t, rw, name); got != want {
			t.Errorf("%s: md5 %s after replay, want %s", name, got, want)
		}
	}
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	compareReplays(t, img, ref)
	e2fs.Fsck(t, img)
}

func checkPrealloc(t *testing.T, v *ext4io.Volume) {
	t.Helper()
	f, err := v.Open("prealloc.bin")
	if err != nil {
		t.Fatal(err)
	}
	exts, err := f.Extents()
	if err != nil {
		t.Fatal(err)
	}
	want := []ext4io.FileExtent{{0, 8705, 64, true}, {64, 8769, 8, false}, {72, 8777, 184, true}}
	if len(exts) != len(want) {
		t.Fatalf("prealloc.bin extents %+v, want %+v", exts, want)
	}
	for i := range want {
		if exts[i] != want[i] {
			t.Fatalf("prealloc.bin extent %d: %+v, want %+v", i, exts[i], want[i])
		}
	}
}

// compareReplays checks that two replayed images agree block for block,
// except superblocks (primary and backups, which record mount state and
// counts differently) and the journal inode's blocks (see MANIFEST.md).
func compareReplays(t *testing.T, a, b string) {
	t.Helper()
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if len(ab) != len(bb) {
		t.Fatalf("image sizes %d != %d", len(ab), len(bb))
	}
	sb, err := layout.DecodeSuperblock(ab[layout.SuperblockOffset:])
	if err != nil {
		t.Fatal(err)
	}
	bs := sb.BlockSize()
	skip := map[int]bool{}
	for g := uint64(0); g < sb.GroupCount(); g++ {
		if sb.GroupHasSuper(g) {
			skip[int(sb.GroupFirstBlock(g))] = true
		}
	}
	skip[0] = true
	v, err := ext4io.OpenImage(a, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	jf, err := v.OpenIno(sb.JournalInum)
	if err != nil {
		t.Fatal(err)
	}
	exts, err := jf.Extents()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range exts {
		for i := uint64(0); i < e.Length; i++ {
			skip[int(e.Physical+i)] = true
		}
	}
	diffs := 0
	for blk := 0; blk < len(ab)/bs; blk++ {
		if skip[blk] {
			continue
		}
		if !bytes.Equal(ab[blk*bs:(blk+1)*bs], bb[blk*bs:(blk+1)*bs]) {
			if diffs < 5 {
				t.Errorf("block %d differs between ext4io's and e2fsck's replay", blk)
			}
			diffs++
		}
	}
	if diffs > 0 {
		t.Fatalf("%d blocks differ", diffs)
	}
}

// TestRecoverE2fsprogsJournals replays e2fsprogs' journal test images with
// ext4io (writable open) and with e2fsck -E journal_only, and requires the
// same blocks outside superblocks and the journal; corrupt logs are either
// replayed as e2fsck replays them or refused with ErrCorrupt.
func TestRecoverE2fsprogsJournals(t *testing.T) {
	t.Parallel()
	dir := findTestdata(t)
	for _, c := range []struct {
		name    string
		corrupt bool
	}{
		{"j_recover_csum2_32bit", false},
		{"j_recover_csum2_64bit", false},
		{"j_recover_csum3_64bit", false},
		{"j_corrupt_commit_csum", true},
		{"j_corrupt_commit_tid", true},
		{"j_corrupt_descr_csum", true},
		{"j_corrupt_revoke_csum", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := filepath.Join(dir, c.name, "image.gz")
			if _, err := os.Stat(src); err != nil {
				src = filepath.Join(dir, c.name, "image.bz2")
			}
			img := filepath.Join(t.TempDir(), "img")
			if err := unpackImage(src, img); err != nil {
				t.Fatal(err)
			}
			ref := img + ".ref"
			b, _ := os.ReadFile(img)
			os.WriteFile(ref, b, 0o644)
			exec.Command(e2fs.Tool(t, "e2fsck"), "-E", "journal_only", "-y", ref).Run()
			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
			if err != nil {
				switch {
				case c.corrupt && errors.Is(err, ext4io.ErrCorrupt):
					t.Logf("refused: %v", err)
					return
				case c.corrupt && errors.Is(err, ext4io.ErrReadOnly):
					// Replayed up to the bad commit, which marks the
					// filesystem as having errors: it opens read-only.
					t.Logf("replayed, then refused writing: %v", err)
					compareReplays(t, img, ref)
					ro, err := ext4io.OpenImage(img, ext4io.Options{})
					if err != nil {
						t.Fatal(err)
					}
					ro.Close()
					return
				}
				t.Fatal(err)
			}
			t.Logf("replayed: %+v", *v.Recovery())
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			compareReplays(t, img, ref)
		})
	}
}
