package ext4io_test

// The random damage sweep's base images: a pristine tree, its metadata
// regions, and the journaled base a crash leaves.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io/fs"
	"math/rand/v2"
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
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/journal"
)

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
