package ext4io_test

// Bad input: the corrupt images of e2fsprogs' test suite, a sweep of
// randomly damaged metadata blocks, and a fuzz target. Every image is
// opened and walked whole (every directory listed, every file read and
// mapped, every symlink read) in a goroutine with a deadline and recover:
// no panic, no hang, and every error wraps one of ext4io's sentinels.

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/blockdev/overlay"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/journal"
)

// sentinels are the errors every ext4io failure must wrap.
var sentinels = []struct {
	name string
	err  error
}{
	{"corrupt", ext4io.ErrCorrupt},
	{"unsupported", ext4io.ErrUnsupported},
	{"notfound", fs.ErrNotExist},
	{"invalid", ext4io.ErrInvalid},
	{"io", ext4io.ErrIO},
}

// sentinelOf names the first sentinel err wraps, or "" if none.
func sentinelOf(err error) string {
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return ""
}

// walkStats is what a whole-volume walk saw.
type walkStats struct {
	openErr          error
	entries          int
	files, dirs, lnk int
	bytes            int64
	errs             map[string]int // by sentinel name
	unwrapped        []string       // errors wrapping no sentinel
	bareCorrupt      []string       // ErrCorrupt errors with no *CorruptError inside
	firstCorrupt     error
	firstOther       error // first error that is not ErrCorrupt
	dirCycles        int
}

func (s *walkStats) note(op, path string, err error) {
	if s.errs == nil {
		s.errs = map[string]int{}
	}
	k := sentinelOf(err)
	if k == "" {
		s.unwrapped = append(s.unwrapped, fmt.Sprintf("%s %s: %v (%T)", op, path, err, err))
		k = "UNWRAPPED"
	}
	s.errs[k]++
	if k != "corrupt" && s.firstOther == nil {
		s.firstOther = fmt.Errorf("%s %s: %w", op, path, err)
	}
	if k == "corrupt" {
		if s.firstCorrupt == nil {
			s.firstCorrupt = err
		}
		var ce *ext4io.CorruptError
		if !errors.As(err, &ce) {
			s.bareCorrupt = append(s.bareCorrupt, fmt.Sprintf("%s %s: %v", op, path, err))
		}
	}
}

func (s *walkStats) corrupt() int { return s.errs["corrupt"] }

// walkLimits bound a walk of a damaged volume: corrupt sizes can claim
// terabytes, corrupt directories can form cycles.
const (
	walkMaxEntries   = 20000
	walkMaxFileBytes = 32 << 20
	walkChunk        = 1 << 20
)

// walkVolume lists, stats, reads, maps and readlinks everything in v.
// onFile, if set, gets the contents of each regular file read whole.
func walkVolume(v *ext4io.Volume, onFile func(path string, data []byte)) *walkStats {
	st := &walkStats{errs: map[string]int{}}
	fsys := v.FS()
	seen := map[uint32]bool{}
	buf := make([]byte, walkChunk)
	fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			st.note("walk", p, err)
			return nil
		}
		st.entries++
		if st.entries > walkMaxEntries {
			return fs.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			st.note("info", p, err)
			return nil
		}
		fi := info.(*ext4io.FileInfo)
		if _, err := v.Stat(p); err != nil {
			// A symlink may dangle; anything else must stat.
			if d.Type()&fs.ModeSymlink == 0 || !errors.Is(err, fs.ErrNotExist) {
				st.note("stat", p, err)
			}
		}
		switch {
		case d.IsDir():
			st.dirs++
			if seen[fi.Ino] {
				st.dirCycles++
				return fs.SkipDir
			}
			seen[fi.Ino] = true
			if _, err := v.ReadDir(p); err != nil {
				st.note("readdir", p, err)
			}
			if f, err := v.Open(p); err != nil {
				st.note("open", p, err)
			} else {
				if _, err := f.Extents(); err != nil {
					st.note("extents", p, err)
				}
				f.Close()
			}
		case d.Type()&fs.ModeSymlink != 0:
			st.lnk++
			if _, err := v.Readlink(p); err != nil {
				st.note("readlink", p, err)
			}
			if _, err := fsys.ReadLink(p); err != nil {
				st.note("fs.readlink", p, err)
			}
		case d.Type().IsRegular():
			st.files++
			f, err := v.Open(p)
			if err != nil {
				st.note("open", p, err)
				return nil
			}
			defer f.Close()
			if _, err := f.Extents(); err != nil {
				st.note("extents", p, err)
			}
			size := f.Size()
			var whole []byte
			if onFile != nil && size <= walkMaxFileBytes {
				whole = make([]byte, 0, size)
			}
			// Read up to the cap, then the last chunk.
			var off int64
			for off < size {
				if off >= walkMaxFileBytes {
					off = max(off, size-walkChunk)
				}
				n, err := f.ReadAt(buf, off)
				st.bytes += int64(n)
				if whole != nil {
					whole = append(whole, buf[:n]...)
				}
				if err != nil && err != io.EOF {
					st.note("read", p, err)
					return nil
				}
				if n == 0 {
					st.note("read", p, fmt.Errorf("ReadAt(%d) of a %d-byte file returned 0, nil", off, size))
					return nil
				}
				off += int64(n)
			}
			if whole != nil {
				onFile(p, whole)
			}
		}
		return nil
	})
	return st
}

// openAndWalk opens dev and walks it under guarded. It returns nil after
// a panic or a timeout (already reported).
func openAndWalk(t testing.TB, label string, deadline time.Duration, open func() (*ext4io.Volume, error), onFile func(string, []byte)) *walkStats {
	t.Helper()
	var st *walkStats
	ok := guarded(t, label, deadline, func() {
		v, err := open()
		if err != nil {
			st = &walkStats{openErr: err, errs: map[string]int{}}
			st.note("open volume", "", err)
			return
		}
		defer v.Close()
		st = walkVolume(v, onFile)
	})
	if !ok {
		return nil
	}
	for _, u := range st.unwrapped {
		t.Errorf("%s: error wraps no sentinel: %s", label, u)
	}
	for _, b := range st.bareCorrupt {
		t.Errorf("%s: ErrCorrupt without a *CorruptError (no context): %s", label, b)
	}
	return st
}

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

// damageTarget is a metadata region the sweep may damage: [off, off+n) holds
// bytes the walk reads; detect says a change there must be reported when
// the image has metadata_csum. sub names the part of a "journal" region
// (journal superblock, descriptor, data, commit, revoke block, inode 8).
type damageTarget struct {
	kind   string
	sub    string
	off, n int64
	detect bool
}

// genDamageTree writes a small tree: a few dirs and files (some inline
// sized, some multi-block), fast and slow symlinks, a directory of 250
// entries (indexed later by e2fsck -D) and a 1.5 MiB file that the caller
// fragments with debugfs punches so its extent tree has depth >= 1.
func genDamageTree(t *testing.T, root string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 3))
	for i := 0; i < 4; i++ {
		os.MkdirAll(filepath.Join(root, fmt.Sprintf("d%d/sub", i)), 0o755)
	}
	for i := 0; i < 16; i++ {
		b := make([]byte, []int{0, 30, 900, 5000, 70000}[rng.IntN(5)])
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		os.WriteFile(filepath.Join(root, fmt.Sprintf("d%d/f%d", i%4, i)), b, 0o644)
	}
	os.Symlink("d0/f0", filepath.Join(root, "fast"))
	os.Symlink(strings.Repeat("slow-target/", 10)+"x", filepath.Join(root, "slow"))
	os.Mkdir(filepath.Join(root, "big"), 0o755)
	for i := 0; i < 250; i++ {
		os.WriteFile(filepath.Join(root, "big", fmt.Sprintf("name-%04d-%x", i, rng.Uint32())), nil, 0o644)
	}
	frag := make([]byte, 3<<19)
	for j := range frag {
		frag[j] = byte(j * 7)
	}
	os.WriteFile(filepath.Join(root, "frag"), frag, 0o644)
}

// sweepBase is a pristine image and the metadata regions of it.
type sweepBase struct {
	name    string
	img     []byte
	mem     *memdev.Device // img, under the copy-on-write overlays of every phase
	bs      int
	csum    bool
	journal bool     // the image's journal holds committed transactions to replay
	files   []string // regular files of the pristine tree: truncate/unlink targets
	byKind  map[string][]damageTarget
}

// clone returns a copy-on-write overlay of the base image with data
// written at off, behind a boundsDev.
func (b *sweepBase) clone(t *testing.T, off int64, data []byte) *boundsDev {
	t.Helper()
	c := overlay.New(b.mem)
	if len(data) > 0 {
		if _, err := c.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	return &boundsDev{Device: c}
}

// buildSweepBase makes a 16 MiB image of genDamageTree with mkfs.ext4
// (args added) and lists its metadata regions. Without journal the image
// has none (-O ^has_journal). With journal, ext4io does some metadata work
// on it, syncs, and the image is taken as a crash would leave it then
// (crashWithJournal): needs_recovery set, committed transactions in the
// journal. Its regions are located on a copy e2fsck replayed, and none is
// marked detect (a replay may overwrite a damaged block), and the journal's
// own blocks are added as kind "journal".
func buildSweepBase(t *testing.T, name string, seed uint64, journal bool, args ...string) *sweepBase {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.Mkdir(src, 0o755)
	genDamageTree(t, src, seed)
	img := filepath.Join(dir, "img")
	mk := []string{"-d", src}
	if !journal {
		mk = append(mk, "-O", "^has_journal")
	}
	e2fs.Mkfs(t, img, "16M", append(mk, args...)...)
	cmds := []string{}
	for b := 1; b < 1536*1024/1024; b += 3 { // every third KiB-block: > 4 extents
		cmds = append(cmds, fmt.Sprintf("punch /frag %d %d", b, b))
	}
	e2fs.DebugfsScript(t, img, true, cmds)
	out, err := exec.Command(e2fs.Tool(t, "e2fsck"), "-fyD", img).CombinedOutput()
	if exitCode(err) > 1 {
		t.Fatalf("e2fsck -fyD: %v\n%s", err, out)
	}
	e2fs.Fsck(t, img)
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	parse := img // the image whose layout is read (a replayed copy with journal)
	if journal {
		raw = crashWithJournal(t, raw)
		if err := os.WriteFile(img, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		parse = replayedCopy(t, img)
		if parse == img {
			t.Fatal("the crashed image does not need recovery")
		}
	}
	praw, err := os.ReadFile(parse)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ext4io.OpenImage(parse, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	sb := v.Superblock()
	b := &sweepBase{name: name, img: raw, bs: v.BlockSize(), csum: sb.MetadataCsum(), journal: journal, byKind: map[string][]damageTarget{}}
	b.mem = memdev.New(int64(len(raw)))
	if _, err := b.mem.WriteAt(raw, 0); err != nil {
		t.Fatal(err)
	}
	bs := int64(b.bs)
	add := func(kind string, off, n int64, detect bool) {
		b.byKind[kind] = append(b.byKind[kind], damageTarget{kind: kind, off: off, n: n, detect: detect && !journal})
	}
	add("superblock", 1024, 1024, true)
	ds := int64(sb.DescriptorSize())
	for g := uint64(0); g < sb.GroupCount(); g++ {
		blk, off := sb.DescriptorLocation(g)
		add("group descriptor", int64(blk)*bs+int64(off), ds, true)
		gd, err := v.Group(int(g))
		if err != nil {
			t.Fatal(err)
		}
		if g < 2 {
			// ext4io does not read bitmaps: damage must only be harmless.
			add("block bitmap", int64(gd.BlockBitmap)*bs, bs, false)
			add("inode bitmap", int64(gd.InodeBitmap)*bs, bs, false)
		}
	}
	// Live inodes: every inode the tree references (the walk reads each).
	isz := int64(sb.InodeSizeBytes())
	inos := map[uint32]string{2: "/"}
	fs.WalkDir(v.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatalf("pristine walk: %v", err)
		}
		fi, err := d.Info()
		if err != nil {
			t.Fatalf("pristine walk: %v", err)
		}
		if d.Type().IsRegular() {
			b.files = append(b.files, p)
		}
		ino := fi.Sys().(*ext4io.FileInfo).Ino
		if _, ok := inos[ino]; !ok && (len(inos) < 40 || !strings.HasPrefix(p, "big/")) {
			inos[ino] = p
		}
		return nil
	})
	for ino := range inos {
		g, idx := sb.InodeLocation(ino)
		gd, _ := v.Group(int(g))
		add("inode", int64(gd.InodeTable)*bs+int64(idx)*isz, isz, true)
	}
	// Extent tree blocks of the fragmented file.
	rows, depth := e2fs.Leaves(t, parse, "frag")
	if depth < 1 {
		t.Fatalf("frag has depth %d (%d extents)", depth, len(rows))
	}
	tree := e2fs.TreeBlocks(t, parse, "frag")
	if len(tree) == 0 {
		t.Fatal("no extent tree blocks found for frag")
	}
	for _, blk := range tree {
		add("extent block", int64(blk)*bs, bs, true)
	}
	// Directory blocks: leaves of small directories, the htree root and
	// leaves of big/. In dx blocks only the bytes up to the last used
	// entry are checksummed, so only they are targeted.
	for _, d := range []string{"d0", "d1", "big"} {
		f, err := v.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		exts, err := f.Extents()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range exts {
			for i := uint64(0); i < e.Length; i++ {
				off := int64(e.Physical+i) * bs
				blk := praw[off : off+bs]
				le := binary.LittleEndian
				switch {
				case d == "big" && e.Logical+i == 0:
					count := int64(le.Uint16(blk[0x22:]))
					add("htree root", off, 0x20+count*8, true)
				case d == "big" && le.Uint32(blk) == 0 && int64(le.Uint16(blk[4:])) == bs:
					count := int64(le.Uint16(blk[0xA:]))
					add("htree node", off, 8+count*8, true)
				default:
					add("dir leaf", off, bs, true)
				}
			}
		}
		f.Close()
	}
	if !strings.Contains(e2fs.Debugfs(t, parse, false, "htree big"), "Root node dump") {
		t.Fatal("big/ is not indexed")
	}
	if journal {
		addJournalTargets(t, b)
	}
	return b
}

// crashWithJournal opens the journaled image raw writable through a
// Crashable device, does some metadata work in three transactions (creates,
// mkdirs, renames, an htree insert, unlinks, an rmdir of a directory the
// first one logged, a truncate), syncing after each, and returns the image a
// crash right then leaves: everything written survives (KeepProb 1), the
// volume is never closed, so needs_recovery is set and the journal holds
// the committed transactions.
func crashWithJournal(t *testing.T, raw []byte) []byte {
	t.Helper()
	mem := memdev.New(int64(len(raw)))
	if _, err := mem.WriteAt(raw, 0); err != nil {
		t.Fatal(err)
	}
	cdev, err := errordev.NewCrashable(mem)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ext4io.Open(cdev, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	if err != nil {
		t.Fatalf("writable open of the journaled base: %v", err)
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("journaled base: %s: %v", what, err)
		}
	}
	create := func(name string, n int) {
		f, err := v.Create(name)
		must("create "+name, err)
		_, err = f.WriteAt(bytes.Repeat([]byte(name[len(name)-1:]), n), 0)
		must("write "+name, err)
		must("close "+name, f.Close())
	}
	for i := 0; i < 6; i++ {
		create(fmt.Sprintf("jw%d", i), 3000*(i+1))
	}
	must("mkdir", v.Mkdir("jdir", 0o755))
	must("rename", v.Rename("jw0", "jdir/jw0"))
	must("rename", v.Rename("d0/f4", "d3/jmoved"))
	create("big/jw-htree", 100)
	create("d1/jw-leaf", 10)
	must("mkdir", v.Mkdir("jgone", 0o755))
	create("jgone/a", 5000)
	must("sync", v.Sync())
	// A second transaction frees metadata blocks the first logged (jgone's
	// directory block): revoke records.
	must("unlink", v.Unlink("jgone/a"))
	must("rmdir", v.Rmdir("jgone"))
	must("unlink", v.Unlink("d2/f6"))
	must("sync", v.Sync())
	f, err := v.OpenFile("jw5", os.O_RDWR, 0)
	must("open jw5", err)
	must("truncate", f.Truncate(5000))
	must("close", f.Close())
	create("d3/jw-last", 7000)
	must("sync", v.Sync())
	img, err := cdev.Crash(errordev.CrashOptions{Seed: 1, KeepProb: 1})
	must("crash", err)
	v.Close()
	out := make([]byte, img.Size())
	if _, err := img.ReadAt(out, 0); err != nil {
		t.Fatal(err)
	}
	// The crashed image, read through ext4io: the replay must find
	// committed transactions and give a clean tree.
	st := openAndWalk(t, "pristine crashed image", 20*time.Second, func() (*ext4io.Volume, error) {
		v, err := ext4io.Open(img, ext4io.Options{})
		if err == nil && (v.Recovery() == nil || v.Recovery().Transactions == 0) {
			v.Close()
			return nil, fmt.Errorf("the crashed image has nothing to replay (%+v): %w", v.Recovery(), ext4io.ErrInvalid)
		}
		return v, err
	}, nil)
	if st == nil || st.openErr != nil || len(st.errs) > 0 {
		t.Fatalf("crashed journaled base: %+v", st)
	}
	return out
}

// addJournalTargets adds kind "journal": the journal superblock, every
// block of the log (descriptor, data, revoke and commit blocks, as Scan
// walks them) and the journal inode.
func addJournalTargets(t *testing.T, b *sweepBase) {
	t.Helper()
	v, err := ext4io.Open(overlay.New(b.mem), ext4io.Options{NoRecovery: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	sb := v.Superblock()
	jf, err := v.OpenIno(sb.JournalInum)
	if err != nil {
		t.Fatal(err)
	}
	exts, err := jf.Extents()
	jf.Close()
	if err != nil {
		t.Fatal(err)
	}
	bs := int64(b.bs)
	pos := func(jblk uint32) int64 {
		for _, e := range exts {
			if uint64(jblk) >= e.Logical && uint64(jblk) < e.Logical+e.Length {
				return int64(e.Physical+uint64(jblk)-e.Logical) * bs
			}
		}
		t.Fatalf("journal block %d is not mapped", jblk)
		return 0
	}
	add := func(sub string, off, n int64) {
		b.byKind["journal"] = append(b.byKind["journal"], damageTarget{kind: "journal", sub: sub, off: off, n: n})
	}
	add("journal superblock", pos(0), 1024)
	g, idx := sb.InodeLocation(sb.JournalInum)
	gd, _ := v.Group(int(g))
	isz := int64(sb.InodeSizeBytes())
	add("journal inode", int64(gd.InodeTable)*bs+int64(idx)*isz, isz)
	j, err := v.Journal()
	if err != nil {
		t.Fatal(err)
	}
	if !j.NeedsRecovery() {
		t.Fatal("the journal of the crashed base needs no recovery")
	}
	subs := map[string]int{}
	err = j.Scan(func(lb journal.LogBlock) error {
		sub := map[uint32]string{journal.BlockTypeDescriptor: "descriptor", journal.BlockTypeCommit: "commit",
			journal.BlockTypeRevoke: "revoke", 0: "data"}[lb.Type]
		if sub == "" {
			sub = fmt.Sprintf("log block type %d", lb.Type)
		}
		subs[sub]++
		add(sub, pos(lb.Block), bs)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if subs["commit"] < 2 || subs["data"] == 0 || subs["revoke"] == 0 {
		t.Fatalf("journal log of the crashed base: %v", subs)
	}
	t.Logf("%s: journal log blocks %v", b.name, subs)
}

// boundsDev passes everything to a Device and records every WriteAt,
// ZeroOut or Discard outside [0, Size), and, when readOnly, every one at
// all: ext4io must refuse out-of-bounds writes itself and must not write
// through a read-only open.
type boundsDev struct {
	blockdev.Device
	readOnly bool

	mu     sync.Mutex
	writes int      // WriteAt, ZeroOut and Discard calls
	nbad   int      // of them out of bounds (or on a read-only open)
	bad    []string // the first few
}

func (d *boundsDev) note(op string, off, n int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writes++
	size := d.Device.Size()
	if d.readOnly || off < 0 || n < 0 || off > size || n > size-off {
		d.nbad++
		if len(d.bad) < 4 {
			what := "out of bounds"
			if d.readOnly {
				what = "on a read-only open"
			}
			d.bad = append(d.bad, fmt.Sprintf("%s [%d, +%d) of a %d-byte device: %s\n%s", op, off, n, size, what, debug.Stack()))
		}
	}
}

func (d *boundsDev) WriteAt(p []byte, off int64) (int, error) {
	d.note("WriteAt", off, int64(len(p)))
	return d.Device.WriteAt(p, off)
}

func (d *boundsDev) ZeroOut(off, n int64) error {
	d.note("ZeroOut", off, n)
	return d.Device.ZeroOut(off, n)
}

func (d *boundsDev) Discard(off, n int64) error {
	d.note("Discard", off, n)
	return d.Device.Discard(off, n)
}

// check fails t for every bad write seen, and reports whether there was none.
func (d *boundsDev) check(t *testing.T, label string) bool {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range d.bad {
		t.Errorf("%s: device %s", label, b)
	}
	if d.nbad > len(d.bad) {
		t.Errorf("%s: %d more bad device writes", label, d.nbad-len(d.bad))
	}
	return d.nbad == 0
}

var _ blockdev.Device = (*boundsDev)(nil)

// writeSentinels are the errors every failed write-side operation must wrap.
var writeSentinels = []struct {
	name string
	err  error
}{
	{"corrupt", ext4io.ErrCorrupt},
	{"nospace", ext4io.ErrNoSpace},
	{"readonly", ext4io.ErrReadOnly},
	{"unsupported", ext4io.ErrUnsupported},
	{"io", ext4io.ErrIO},
	{"invalid", ext4io.ErrInvalid},
	{"notfound", ext4io.ErrNotFound},
	{"exist", ext4io.ErrExist},
	{"closed", ext4io.ErrClosed},
}

// writeCounts are the outcomes of the phases that open damaged images
// writable (or with Replay), summed over a sweep.
type writeCounts struct {
	tried, opened, replayed int
	refused                 map[string]int // writable open failed, by sentinel
	opsOK                   int
	opsFailed               map[string]int // by sentinel
	devWrites               int            // device writes seen by boundsDev
	oob                     int            // out-of-bounds device writes (must be 0)
	walkErrs                map[string]int // errors of the walk right after the writable open
	rewalked                int            // reopened read-only and walked after Close
	bareCorrupt             int            // ErrCorrupt without a *CorruptError
	firstBare               string
	// Replay opens (journaled bases only).
	replayTried, replayOpened int
	replayRefused             map[string]int
}

func newWriteCounts() *writeCounts {
	return &writeCounts{refused: map[string]int{}, walkErrs: map[string]int{}, opsFailed: map[string]int{}, replayRefused: map[string]int{}}
}

// classify names the sentinel err wraps; an error wrapping none fails t.
func (wc *writeCounts) classify(t *testing.T, label, op string, err error) string {
	t.Helper()
	for _, s := range writeSentinels {
		if errors.Is(err, s.err) {
			if s.err == ext4io.ErrCorrupt {
				var ce *ext4io.CorruptError
				if !errors.As(err, &ce) {
					wc.bareCorrupt++
					if wc.firstBare == "" {
						wc.firstBare = fmt.Sprintf("%s: %s: %v", label, op, err)
					}
				}
			}
			return s.name
		}
	}
	t.Errorf("%s: %s: error wraps no ext4io sentinel: %v (%T)", label, op, err, err)
	return "UNWRAPPED"
}

// damageVerbose (EXT4IO_DAMAGE_VERBOSE=1) logs every failed write-side
// operation of TestRandomDamage.
var damageVerbose = os.Getenv("EXT4IO_DAMAGE_VERBOSE") != ""

// writeOpDeadline bounds each operation of the write phase: far more than
// any of them needs, even under -race.
const writeOpDeadline = 10 * time.Second

// wop runs fn in a goroutine; a panic or no result within writeOpDeadline
// ends the test, naming label (seed and region) and op.
func wop(t *testing.T, label, op string, fn func() error) error {
	t.Helper()
	type result struct {
		err   error
		panic string
	}
	ch := make(chan result, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				ch <- result{panic: fmt.Sprintf("%v\n%s", r, debug.Stack())}
			}
		}()
		ch <- result{err: fn()}
	}()
	select {
	case r := <-ch:
		if r.panic != "" {
			t.Fatalf("%s: %s panicked: %s", label, op, r.panic)
		}
		return r.err
	case <-time.After(writeOpDeadline):
		t.Fatalf("%s: %s: no result after %v (hang?)", label, op, writeOpDeadline)
		return nil
	}
}

// damageWrite opens dev writable and, if that works, runs a fixed sequence
// of writes: create, a buffered 20 KiB write, fsync, mkdir, a create and a
// rename into an existing directory, an htree insert into big/, unlink of
// an open file, truncate and fallocate of an existing file, a hole punch
// and a truncate of frag (its extent tree), an unlink of an existing file,
// sync and close. Each operation runs under wop; every error must wrap a
// sentinel. The writable volume is walked before the writes, and reopened
// read-only and walked after Close. dev must see
// no out-of-bounds write. It returns the number of failed operations and
// the first failure.
func damageWrite(t *testing.T, label string, dev *boundsDev, base *sweepBase, seed uint64, wc *writeCounts) (failed int, first error) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	wc.tried++
	defer func() {
		dev.mu.Lock()
		wc.devWrites += dev.writes
		wc.oob += dev.nbad
		dev.mu.Unlock()
		dev.check(t, label)
	}()
	var v *ext4io.Volume
	err := wop(t, label, "open writable", func() (err error) {
		v, err = ext4io.Open(dev, ext4io.Options{Writable: true})
		return err
	})
	if err != nil {
		wc.refused[wc.classify(t, label, "open writable", err)]++
		if damageVerbose {
			t.Logf("%s: open writable: %v", label, err)
		}
		return 1, fmt.Errorf("open writable: %w", err)
	}
	wc.opened++
	if v.Recovery() != nil {
		wc.replayed++
	}
	// Reads through the writable volume's metadata layer first.
	var st *walkStats
	wop(t, label, "walk", func() error { st = walkVolume(v, nil); return nil })
	for _, u := range st.unwrapped {
		t.Errorf("%s: walk of the writable volume: error wraps no sentinel: %s", label, u)
	}
	for _, b := range st.bareCorrupt {
		t.Errorf("%s: walk of the writable volume: ErrCorrupt without a *CorruptError (no context): %s", label, b)
	}
	for k, n := range st.errs {
		wc.walkErrs[k] += n
	}
	do := func(op string, fn func() error) bool {
		t.Helper()
		err := wop(t, label, op, fn)
		if err == nil {
			wc.opsOK++
			return true
		}
		wc.opsFailed[wc.classify(t, label, op, err)]++
		if damageVerbose {
			t.Logf("%s: %s: %v", label, op, err)
		}
		failed++
		if first == nil {
			first = fmt.Errorf("%s: %w", op, err)
		}
		return false
	}
	withFile := func(name string, fn func(f *ext4io.File) error) func() error {
		return func() error {
			f, err := v.OpenFile(name, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			err = fn(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}
	}
	var f *ext4io.File
	if do("create dmg-new", func() (err error) { f, err = v.Create("dmg-new"); return err }) {
		data := make([]byte, 20<<10)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		do("write 20 KiB", func() error { _, err := f.WriteAt(data, 100); return err })
		do("fsync", f.Sync)
	}
	do("mkdir dmg-dir", func() error { return v.Mkdir("dmg-dir", 0o755) })
	do("create dmg-dir/inner", func() error {
		g, err := v.Create("dmg-dir/inner")
		if err != nil {
			return err
		}
		_, err = g.WriteAt([]byte("inner"), 0)
		if cerr := g.Close(); err == nil {
			err = cerr
		}
		return err
	})
	do("rename into d1", func() error { return v.Rename("dmg-dir/inner", "d1/dmg-moved") })
	do("create big/dmg-htree", func() error {
		g, err := v.Create("big/dmg-htree")
		if err == nil {
			err = g.Close()
		}
		return err
	})
	do("unlink open dmg-new", func() error { return v.Unlink("dmg-new") })
	if f != nil {
		do("close unlinked dmg-new", f.Close)
	}
	victim := base.files[rng.IntN(len(base.files))]
	do("truncate "+victim, withFile(victim, func(f *ext4io.File) error { return f.Truncate(f.Size() / 2) }))
	do("fallocate "+victim, withFile(victim, func(f *ext4io.File) error {
		return f.Fallocate(ext4io.FallocKeepSize, 0, 64<<10)
	}))
	do("punch frag", withFile("frag", func(f *ext4io.File) error {
		return f.Fallocate(ext4io.FallocPunchHole, rng.Int64N(1<<20), 40<<10)
	}))
	do("truncate frag", withFile("frag", func(f *ext4io.File) error { return f.Truncate(rng.Int64N(3 << 19)) }))
	other := base.files[rng.IntN(len(base.files))]
	do("unlink "+other, func() error { return v.Unlink(other) })
	do("sync", v.Sync)
	do("close", v.Close)
	// What the writes left must read without panic, hang or stray error,
	// and without a device write: the reopen is read-only.
	dev.mu.Lock()
	dev.readOnly = true
	dev.mu.Unlock()
	st = openAndWalk(t, label+" [after writes]", 20*time.Second, func() (*ext4io.Volume, error) {
		return ext4io.Open(dev, ext4io.Options{})
	}, nil)
	if st != nil && st.openErr == nil {
		wc.rewalked++
	}
	return failed, first
}

// TestRandomDamage damages one metadata region of small images per seed
// (random byte changes, or zeroing) and walks the result: no panic, no
// hang, every error wraps a sentinel, and with metadata_csum every change
// to a checksummed region the walk reads is reported as ErrCorrupt. The
// walk goes through a device that fails the test on any write.
//
// Every other damaged image (every one with a journal) is also opened
// writable on a copy and written (damageWrite): no panic, no hang, no
// device write outside the device, every error wraps a sentinel. The
// *-journal bases hold committed transactions needing recovery; their
// damage includes kind "journal" (the journal's superblock, inode and log
// blocks), and each damaged image is also opened with Replay and walked.
// The read sweep and the write phase have time budgets of their own (8 s
// and 5 s per base image), which only bind under -race or a loaded machine.
// EXT4IO_DAMAGE_SEEDS sets the seeds per image kind (default 80);
// EXT4IO_DAMAGE_VERBOSE=1 logs every write-side failure.
func TestRandomDamage(t *testing.T) {
	seeds := 80
	if s := os.Getenv("EXT4IO_DAMAGE_SEEDS"); s != "" {
		fmt.Sscan(s, &seeds)
	} else if testing.Short() {
		seeds = 20
	}
	configs := []struct {
		name    string
		journal bool
		args    []string
	}{
		{"1k-csum", false, []string{"-b", "1024"}},
		{"1k-nocsum", false, []string{"-b", "1024", "-O", "^metadata_csum"}},
		{"4k-csum", false, []string{"-b", "4096"}},
		{"4k-nocsum", false, []string{"-b", "4096", "-O", "^metadata_csum"}},
		{"1k-journal", true, []string{"-b", "1024"}},
		{"4k-journal-nocsum", true, []string{"-b", "4096", "-O", "^metadata_csum"}},
	}
	for ci, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			base := buildSweepBase(t, c.name, uint64(ci+1), c.journal, c.args...)
			// The write sequence must run cleanly on the pristine image
			// (replaying the journal first on a journaled base) and leave
			// it clean for e2fsck.
			wc := newWriteCounts()
			pdev := base.clone(t, 0, nil)
			if n, err := damageWrite(t, c.name+" pristine", pdev, base, 0, wc); n > 0 {
				t.Fatalf("%s: write sequence on the pristine image: %d failures, first %v", c.name, n, err)
			}
			written := filepath.Join(t.TempDir(), "written.img")
			saveDev(t, pdev.Device, written)
			e2fs.Fsck(t, written)
			wc = newWriteCounts()
			counts := map[string]int{}
			kinds := map[string]int{}
			jsubs := map[string]int{}
			tried, undetected := 0, 0
			// Damaged images for the write phase: every other one, every
			// one on a journaled base.
			type damaged struct {
				label string
				seed  uint64
				tg    damageTarget
				data  []byte
			}
			var writeList []damaged
			start := time.Now()
			for s := 0; s < seeds; s++ {
				if time.Since(start) > 8*time.Second {
					t.Logf("time budget reached after %d seeds", s)
					break
				}
				seed := uint64(ci)<<32 | uint64(s)
				rng := rand.New(rand.NewPCG(seed, 99))
				// A kind first (uniformly; "journal" half the time on a
				// journaled base), then a region of that kind.
				kindNames := slices.Sorted(maps.Keys(base.byKind))
				kind := ""
				if base.journal && rng.IntN(2) == 0 {
					kind = "journal"
				} else {
					kind = kindNames[rng.IntN(len(kindNames))]
				}
				ofKind := base.byKind[kind]
				if kind == "journal" {
					// A part (superblock, inode, descriptor, data, commit,
					// revoke) uniformly, then a block of it.
					bySub := map[string][]damageTarget{}
					for _, tg := range ofKind {
						bySub[tg.sub] = append(bySub[tg.sub], tg)
					}
					subs := slices.Sorted(maps.Keys(bySub))
					ofKind = bySub[subs[rng.IntN(len(subs))]]
				}
				tg := ofKind[rng.IntN(len(ofKind))]
				data := append([]byte(nil), base.img[tg.off:tg.off+tg.n]...)
				mode := "zero"
				if rng.IntN(4) != 0 {
					mode = "flip"
					for k := 1 + rng.IntN(4); k > 0; k-- {
						data[rng.Int64N(tg.n)] ^= byte(1 + rng.IntN(255))
					}
				} else {
					clear(data)
				}
				if bytes.Equal(data, base.img[tg.off:tg.off+tg.n]) {
					continue // zeroing an all-zero region changes nothing
				}
				what := tg.kind
				if tg.sub != "" {
					what += " (" + tg.sub + ")"
				}
				label := fmt.Sprintf("%s seed %d: %s %s at byte %d (+%d)", c.name, seed, mode, what, tg.off, tg.n)
				ro := base.clone(t, tg.off, data)
				ro.readOnly = true
				st := openAndWalk(t, label, 20*time.Second, func() (*ext4io.Volume, error) {
					return ext4io.Open(ro, ext4io.Options{})
				}, nil)
				ro.check(t, label)
				if st == nil {
					continue
				}
				tried++
				kinds[tg.kind]++
				if tg.sub != "" {
					jsubs[tg.sub]++
				}
				for k, n := range st.errs {
					counts[k] += n
				}
				if base.csum && tg.detect && st.corrupt() == 0 {
					undetected++
					t.Errorf("%s: checksummed metadata damaged, walk saw no ErrCorrupt (errors %v, %d files read)", label, st.errs, st.files)
				}
				if base.journal || s%2 == 0 {
					writeList = append(writeList, damaged{label, seed, tg, data})
				}
			}
			readTime := time.Since(start)
			// The write phase, with its own time budget so that it does
			// not cut the read sweep short (under -race).
			wstart := time.Now()
			for i, d := range writeList {
				if time.Since(wstart) > 5*time.Second {
					t.Logf("write-phase time budget reached after %d of %d images", i, len(writeList))
					break
				}
				if base.journal {
					// Replay into (a copy of) the device, then walk. With
					// the damage outside the journal the walk would read
					// what the read-only open's in-memory replay read: skip
					// it.
					dev := base.clone(t, d.tg.off, d.data)
					rlabel := d.label + " [Replay]"
					var openErr error
					if d.tg.kind == "journal" {
						rst := openAndWalk(t, rlabel, 20*time.Second, func() (*ext4io.Volume, error) {
							return ext4io.Open(dev, ext4io.Options{Replay: true})
						}, nil)
						if rst == nil {
							continue // panic or hang, reported
						}
						openErr = rst.openErr
					} else {
						openErr = wop(t, rlabel, "open", func() error {
							v, err := ext4io.Open(dev, ext4io.Options{Replay: true})
							if err == nil {
								err = v.Close()
							}
							return err
						})
					}
					dev.check(t, rlabel)
					wc.replayTried++
					if openErr == nil {
						wc.replayOpened++
					} else {
						wc.replayRefused[wc.classify(t, rlabel, "open", openErr)]++
					}
				}
				damageWrite(t, d.label+" [Writable]", base.clone(t, d.tg.off, d.data), base, d.seed, wc)
			}
			writeTime := time.Since(wstart)
			t.Logf("%s: %d damaged images walked in %v; by region %v; errors by sentinel %v; undetected %d; panics 0",
				c.name, tried, readTime.Round(time.Millisecond), kinds, counts, undetected)
			if len(jsubs) > 0 {
				t.Logf("%s: journal damage by part %v; Replay opens: %d tried, %d opened, refused by sentinel %v",
					c.name, jsubs, wc.replayTried, wc.replayOpened, wc.replayRefused)
			}
			t.Logf("%s: writable (%v): %d damaged images tried, %d opened (%d replayed a journal), refused by sentinel %v; walk errors %v; ops ok %d, failed by sentinel %v; %d reopened and walked after Close; device writes %d, out of bounds %d; panics 0, hangs 0",
				c.name, writeTime.Round(time.Millisecond), wc.tried, wc.opened, wc.replayed, wc.refused, wc.walkErrs, wc.opsOK, wc.opsFailed, wc.rewalked, wc.devWrites, wc.oob)
			if wc.bareCorrupt > 0 {
				t.Logf("%s: %d write-side ErrCorrupt errors carry no *CorruptError; first: %s", c.name, wc.bareCorrupt, wc.firstBare)
			}
		})
	}
}

// fuzzBase is the pristine image under FuzzOpenImage: a 256 KiB, 1 KiB
// block, metadata_csum image with a few files, a symlink, a directory and
// a fragmented file whose extent tree has depth 1. Made with:
//
//	mkfs.ext4 -q -F -b 1024 -N 32 -O ^has_journal -d tree img 256K
//	debugfs -w -R "punch /frag 1 1" ... (every other block of /frag)
//	gzip -9 < img > internal/e2fs/testdata/fuzz-base.img.gz
//
// (see TestFuzzBase, which checks it is still clean and readable).
var fuzzBase = sync.OnceValues(func() ([]byte, error) {
	f, err := os.Open(filepath.Join("internal", "e2fs", "testdata", "fuzz-base.img.gz"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
})

// applyFuzz XORs the fuzz input onto img: records of a 4-byte
// little-endian offset (modulo the image size), a length byte and that
// many bytes.
func applyFuzz(img, in []byte) {
	for len(in) >= 5 {
		off := int(binary.LittleEndian.Uint32(in)) % len(img)
		n := min(int(in[4]), len(in)-5)
		for i := 0; i < n && off+i < len(img); i++ {
			img[off+i] ^= in[5+i]
		}
		in = in[5+n:]
	}
}

func fuzzRecord(off uint32, xor ...byte) []byte {
	r := binary.LittleEndian.AppendUint32(nil, off)
	r = append(r, byte(len(xor)))
	return append(r, xor...)
}

// FuzzOpenImage opens and walks the fuzz base image with the input XORed
// onto it. Decoding must not panic and must finish in bounded time; every
// error must wrap a sentinel.
func FuzzOpenImage(f *testing.F) {
	f.Add([]byte{})
	f.Add(fuzzRecord(1024+0x38, 0xff))              // superblock magic
	f.Add(fuzzRecord(1024+0x18, 0x07))              // s_log_block_size
	f.Add(fuzzRecord(1024+0x58, 0x01, 0x01))        // s_inode_size
	f.Add(fuzzRecord(2048, 0x10, 0x00, 0x00, 0x00)) // group descriptor: block bitmap
	f.Add(fuzzRecord(2048+8, 0x01))                 // inode table location
	f.Add(fuzzRecord(1024+0x60, 0x80))              // incompat feature bits
	if img, err := fuzzBase(); err == nil {
		// Seeds aimed at the root inode, a directory block and the
		// extent block, located in the pristine image.
		if dev := memdev.New(int64(len(img))); dev != nil {
			dev.WriteAt(img, 0)
			if v, err := ext4io.Open(dev, ext4io.Options{}); err == nil {
				sb := v.Superblock()
				g, idx := sb.InodeLocation(2)
				gd, _ := v.Group(int(g))
				rootOff := uint32(int(gd.InodeTable)*v.BlockSize() + int(idx)*sb.InodeSizeBytes())
				f.Add(fuzzRecord(rootOff+0x28, 0xff)) // root i_block: extent header
				f.Add(fuzzRecord(rootOff+0x04, 0x80)) // root i_size
				f.Add(fuzzRecord(rootOff+0x20, 0x10)) // root i_flags
				if fr, err := v.Open("frag"); err == nil {
					// frag's index entry -> the leaf block.
					if ex, err := fr.Extents(); err == nil && len(ex) > 0 {
						fi, _ := v.Lstat("frag")
						g, idx := sb.InodeLocation(fi.Ino)
						gd, _ := v.Group(int(g))
						off := uint32(int(gd.InodeTable)*v.BlockSize() + int(idx)*sb.InodeSizeBytes())
						f.Add(fuzzRecord(off+0x28+12+4, 0x01)) // index ei_leaf
						f.Add(fuzzRecord(off+0x28+6, 0x05))    // eh_depth
					}
				}
				if d, err := v.Open("dir"); err == nil {
					if ex, err := d.Extents(); err == nil && len(ex) > 0 {
						boff := uint32(ex[0].Physical) * uint32(v.BlockSize())
						f.Add(fuzzRecord(boff+4, 0x0c))    // rec_len of "."
						f.Add(fuzzRecord(boff+12+6, 0x40)) // name_len of ".."
					}
				}
				v.Close()
			}
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		base, err := fuzzBase()
		if err != nil {
			t.Skip("fuzz base image missing: ", err)
		}
		img := append([]byte(nil), base...)
		applyFuzz(img, in)
		dev := memdev.New(int64(len(img)))
		if _, err := dev.WriteAt(img, 0); err != nil {
			t.Fatal(err)
		}
		openAndWalk(t, "fuzzed image", 10*time.Second, func() (*ext4io.Volume, error) {
			return ext4io.Open(dev, ext4io.Options{})
		}, nil)
	})
}

// TestFuzzBase checks the fuzz base image: e2fsck finds it clean, its
// extent tree has depth 1, and a walk reads everything without error.
func TestFuzzBase(t *testing.T) {
	img, err := fuzzBase()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "img")
	os.WriteFile(p, img, 0o644)
	e2fs.Fsck(t, p)
	if _, depth := e2fs.Leaves(t, p, "frag"); depth != 1 {
		t.Fatalf("frag depth %d, want 1", depth)
	}
	contents := map[string][]byte{}
	st := openAndWalk(t, "fuzz base", 10*time.Second, func() (*ext4io.Volume, error) {
		return ext4io.OpenImage(p, ext4io.Options{})
	}, func(p string, b []byte) { contents[p] = b })
	if st == nil {
		return
	}
	if len(st.errs) > 0 || st.files < 3 || st.lnk < 1 {
		t.Fatalf("walk of the pristine base: %+v", st)
	}
	compareRdump(t, p, contents)
}

// TestUnusedInodeReferenced: a directory entry naming an inode that is
// unused (links count 0, mode 0: zeroed, or cleared by debugfs clri) is
// corruption, as Linux's ext4_lookup reports it ("deleted inode
// referenced", EFSCORRUPTED): it must not read as an empty regular file.
// An all-zero inode passes the checksum test (it is how unused inodes
// look), so the check must come from the inode's contents.
func TestUnusedInodeReferenced(t *testing.T) {
	for _, how := range []string{"zeroed", "clri"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "src")
			os.MkdirAll(filepath.Join(src, "sub"), 0o755)
			os.WriteFile(filepath.Join(src, "sub", "victim"), []byte("some bytes"), 0o644)
			img := filepath.Join(dir, "img")
			e2fs.Mkfs(t, img, "8M", "-d", src, "-O", "^has_journal", "-b", "1024")
			v, err := ext4io.OpenImage(img, ext4io.Options{})
			if err != nil {
				t.Fatal(err)
			}
			fi, err := v.Lstat("sub/victim")
			if err != nil {
				t.Fatal(err)
			}
			sb := v.Superblock()
			g, idx := sb.InodeLocation(fi.Ino)
			gd, _ := v.Group(int(g))
			off := int64(gd.InodeTable)*int64(v.BlockSize()) + int64(idx)*int64(sb.InodeSizeBytes())
			isz := sb.InodeSizeBytes()
			v.Close()
			if how == "zeroed" {
				f, err := os.OpenFile(img, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				f.WriteAt(make([]byte, isz), off)
				f.Close()
			} else {
				e2fs.Debugfs(t, img, true, fmt.Sprintf("clri <%d>", fi.Ino))
			}
			v, err = ext4io.OpenImage(img, ext4io.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			if fi, err := v.Stat("sub/victim"); !errors.Is(err, ext4io.ErrCorrupt) {
				t.Errorf("Stat of a name whose inode is unused: %v, %v; want ErrCorrupt (Linux: deleted inode referenced)", fi, err)
			}
			if _, err := v.Open("sub/victim"); !errors.Is(err, ext4io.ErrCorrupt) {
				t.Errorf("Open: %v; want ErrCorrupt", err)
			}
			if _, err := fs.ReadDir(v.FS(), "sub"); !errors.Is(err, ext4io.ErrCorrupt) {
				t.Errorf("FS.ReadDir of its directory: %v; want ErrCorrupt (entry infos read the inode)", err)
			}
		})
	}
}

// TestRootNotDirectory: a root inode that is not a directory is
// corruption (Linux refuses to mount: "root inode is not a directory"),
// not "file does not exist".
func TestRootNotDirectory(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	e2fs.Mkfs(t, img, "8M", "-O", "^has_journal")
	e2fs.Debugfs(t, img, true, "sif <2> mode 0100644")
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		if !errors.Is(err, ext4io.ErrCorrupt) {
			t.Fatalf("Open: %v; want ErrCorrupt or success", err)
		}
		return
	}
	defer v.Close()
	for _, op := range []struct {
		name string
		fn   func() error
	}{
		{"FS.Stat(.)", func() error { _, err := fs.Stat(v.FS(), "."); return err }},
		{"FS.ReadDir(.)", func() error { _, err := fs.ReadDir(v.FS(), "."); return err }},
		{"Stat(lost+found)", func() error { _, err := v.Stat("lost+found"); return err }},
	} {
		if err := op.fn(); !errors.Is(err, ext4io.ErrCorrupt) {
			t.Errorf("%s with a regular-file root: %v; want ErrCorrupt", op.name, err)
		}
	}
}

// replayedCopy returns img itself if its journal needs no recovery, else a
// copy whose journal e2fsck -E journal_only replayed.
func replayedCopy(t *testing.T, img string) string {
	t.Helper()
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2048 || b[1024+0x60]&0x4 == 0 {
		return img
	}
	ref := img + ".replayed"
	if err := os.WriteFile(ref, b, 0o644); err != nil {
		t.Fatal(err)
	}
	exec.Command(e2fs.Tool(t, "e2fsck"), "-E", "journal_only", "-y", ref).Run()
	return ref
}
