package ext4io_test

// The corrupt images of e2fsprogs' test suite, opened and walked (walkVolume).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// mustDetect lists e2fsprogs cases whose damage lies in a structure every
// read of the damaged file goes through (extent tree blocks, the inode's
// extent header, the extent entries themselves): the walk must report
// ErrCorrupt there rather than read wrong data. With SkipChecksums the
// checksum-only cases must read cleanly instead.
var mustDetect = map[string]bool{
	"f_extent_bad_node":        true, // interior node invalid
	"f_extent_int_bad_csum":    true, // checksum only
	"f_extent_int_bad_extent":  true, // index -> pblk 4294967295
	"f_extent_int_bad_magic":   true,
	"f_extent_leaf_bad_csum":   true, // checksum only
	"f_extent_leaf_bad_extent": true, // leaf pblk 4294967295
	"f_extent_leaf_bad_magic":  true,
	"f_ext_zero_len":           true, // ee_len == 0
	"f_zeroed_ext_header":      true, // zero header with EXTENTS_FL
	"f_extent_too_deep":        true, // depth 7: Linux refuses it too
}

// validCases are images e2fsck -fn finds clean (MANIFEST "Valid cases"
// and the kernel-made kvalid image): every file must equal debugfs rdump.
var validCases = map[string]bool{
	"f_collapse_extent_tree": true, "f_compress_extent_tree_level": true,
	"f_uninit_ext_past_eof": true, "f_uninit_ext_past_eof2": true, "f_uninit_cat": true,
	"f_convert_bmap_and_extent": true, "r_move_inode_int_extent": true,
	"kvalid-mcsum64-1k.img.gz": true, // _extra_kernel_made
}

var csumOnly = map[string]bool{"f_extent_int_bad_csum": true, "f_extent_leaf_bad_csum": true}

// TestE2fsprogsImages opens and walks every image of e2fsprogs' test
// suite (and the two kernel-made ones). Images that e2fsck -fn finds
// clean are compared file by file with debugfs rdump.
func TestE2fsprogsImages(t *testing.T) {
	t.Parallel()
	root := findTestdata(t)
	var images []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		n := d.Name()
		if n == "image.gz" || n == "image.bz2" || n == "image.tar.bz2" || strings.HasSuffix(n, ".img.gz") {
			images = append(images, p)
		}
		return nil
	})
	sort.Strings(images)
	if len(images) == 0 {
		t.Skip("no images in " + root)
	}
	var mu sync.Mutex
	total := map[string]int{}
	var nimg, tried, opened, compared int
	t.Cleanup(func() {
		t.Logf("e2fsprogs images: %d images, %d open+walk attempts (Options{}, then NoRecovery and SkipChecksums where useful), %d opened, %d compared with debugfs rdump; errors by sentinel: %v",
			nimg, tried, opened, compared, total)
	})
	for _, img := range images {
		rel, _ := filepath.Rel(root, img)
		name := strings.ReplaceAll(rel, "/", "_")
		kase := strings.Split(rel, "/")[0]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if n := gzipSize(img); n > largeImage && os.Getenv("EXT4IO_LARGE_IMAGES") == "" {
				t.Skipf("%d MiB uncompressed (journal-replay case, nearly empty file system): set EXT4IO_LARGE_IMAGES=1 to include it", n>>20)
			}
			dir := t.TempDir()
			raw := filepath.Join(dir, "image")
			if err := unpackImage(img, raw); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			nimg++
			mu.Unlock()
			var results []*walkStats
			didCompare := false
			defer func() {
				key := kase
				if kase == "_extra_kernel_made" {
					key = filepath.Base(rel)
				}
				if validCases[key] && !didCompare && !t.Failed() {
					t.Errorf("%s is a valid image but was not compared with debugfs rdump", rel)
				}
			}()
			for i, opts := range []ext4io.Options{{}, {NoRecovery: true}, {SkipChecksums: true}} {
				if i > 0 && (results[0].corrupt() == 0 && !errors.Is(results[0].openErr, ext4io.ErrUnsupported)) {
					break // Options{} read it all: nothing more to learn
				}
				label := fmt.Sprintf("%s %+v", rel, opts)
				contents := map[string][]byte{}
				st := openAndWalk(t, label, 30*time.Second, func() (*ext4io.Volume, error) {
					return ext4io.OpenImage(raw, opts)
				}, func(p string, b []byte) { contents[p] = b })
				if st == nil {
					return
				}
				results = append(results, st)
				mu.Lock()
				tried++
				if st.openErr == nil {
					opened++
				}
				for k, n := range st.errs {
					total[k] += n
				}
				mu.Unlock()
				t.Logf("%s: files=%d dirs=%d links=%d bytes=%d errs=%v\n\tfirst corrupt: %v\n\tfirst other: %v",
					label, st.files, st.dirs, st.lnk, st.bytes, st.errs, st.firstCorrupt, st.firstOther)
				if opts.SkipChecksums && csumOnly[kase] && st.corrupt() > 0 {
					t.Errorf("SkipChecksums: checksum-only damage still reported: %v", st.firstCorrupt)
				}
				if opts == (ext4io.Options{}) && len(contents) > 0 && st.openErr == nil && st.corrupt() == 0 {
					if fsckClean(t, raw) && !slices.Contains([]string{"f_extent_too_deep"}, kase) {
						// ext4io replays a dirty journal (in memory) on open;
						// compare with debugfs on a copy e2fsck replayed.
						ref := replayedCopy(t, raw)
						compareRdump(t, ref, contents)
						didCompare = true
						t.Logf("%d files equal to debugfs rdump", len(contents))
						mu.Lock()
						compared++
						mu.Unlock()
					}
				}
			}
			if mustDetect[kase] && results[0].corrupt() == 0 && (len(results) < 2 || results[1].corrupt() == 0) {
				t.Errorf("%s: damaged extent tree read without an ErrCorrupt error", kase)
			}
		})
	}
}

// largeImage is the uncompressed size above which TestE2fsprogsImages
// skips an image unless EXT4IO_LARGE_IMAGES is set: the 256 and 512 MiB
// j_* images cost seconds of gunzip each and hold almost nothing to read.
const largeImage = 64 << 20

// gzipSize returns the uncompressed size a .gz file records in its
// trailer (ISIZE, modulo 2^32), or 0 for other files.
func gzipSize(path string) int64 {
	if !strings.HasSuffix(path, ".gz") {
		return 0
	}
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() < 4 {
		return 0
	}
	var b [4]byte
	if _, err := f.ReadAt(b[:], st.Size()-4); err != nil {
		return 0
	}
	return int64(binary.LittleEndian.Uint32(b[:]))
}

// fsckClean reports whether e2fsck -fn finds img clean (exit 0).
func fsckClean(t *testing.T, img string) bool {
	err := exec.Command(e2fs.Tool(t, "e2fsck"), "-fn", img).Run()
	return err == nil
}

// compareRdump checks every file ext4io read against debugfs rdump.
func compareRdump(t *testing.T, img string, contents map[string][]byte) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "rdump")
	os.Mkdir(out, 0o755)
	e2fs.Debugfs(t, img, false, "rdump / "+out)
	for p, got := range contents {
		want, err := os.ReadFile(filepath.Join(out, p))
		if err != nil {
			t.Errorf("%s: debugfs rdump has no copy: %v", p, err)
			continue
		}
		if i := firstDiff(got, want); i >= 0 {
			t.Errorf("%s: ext4io and debugfs differ at byte %d (%d vs %d bytes)", p, i, len(got), len(want))
		}
	}
}
