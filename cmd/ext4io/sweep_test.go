//go:build unix

package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/layout"
)

var (
	craftedSeed   = flag.Uint64("crafted.seed", 0, "TestCraftedImages: seed (0: from the clock)")
	craftedBudget = flag.Duration("crafted.budget", 8*time.Second, "TestCraftedImages: time for rounds")
)

// sweepCmdTimeout bounds one command on a crafted image: longer is a hang
// (each takes milliseconds; the margin is for -race on a loaded machine).
const sweepCmdTimeout = 20 * time.Second

// TestCraftedImages edits a small mkfs.ext4 image at random, keeping its
// checksums valid (debugfs set_inode_field, directory entry edits with the
// block checksum fixed): names, sizes, modes, flags, extent words, link
// counts, entries' inode numbers and record lengths. Each round drives the
// read commands, get and the write commands through run and requires no
// panic, no command running longer than sweepCmdTimeout, a live heap under
// sweepHeapLimit, and nothing
// created outside get's destination. Failures log the seed and the edits;
// -crafted.seed replays a run.
func TestCraftedImages(t *testing.T) {
	seed := *craftedSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	budget := *craftedBudget
	if testing.Short() {
		budget = 2 * time.Second
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	dir := t.TempDir()

	// The base image: directories, small, large and sparse files, a fast
	// and a slow symlink.
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(src, "small"), []byte("small file\n"), 0o644)
	big := make([]byte, 300<<10)
	for i := range big {
		big[i] = byte(i * 7)
	}
	os.WriteFile(filepath.Join(src, "a", "big"), big, 0o600)
	sp, _ := os.Create(filepath.Join(src, "a", "b", "sparse"))
	sp.WriteAt([]byte("head"), 0)
	sp.WriteAt([]byte("tail"), 200<<10)
	sp.Close()
	// Ten data runs apart: more than i_block's four extents, so an
	// extent tree of depth 1 whose index the block[] edits hit.
	fr, _ := os.Create(filepath.Join(src, "a", "frag"))
	for i := range 10 {
		fr.WriteAt([]byte("run"), int64(i)*64<<10)
	}
	fr.Close()
	os.Symlink("a/b/sparse", filepath.Join(src, "fast"))
	os.Symlink(strings.Repeat("long/", 20)+"x", filepath.Join(src, "a", "slow"))
	// An htree directory (4 KiB blocks hold ~200 entries; 1 KiB, ~50).
	os.MkdirAll(filepath.Join(src, "a", "many"), 0o755)
	for i := range 150 {
		os.WriteFile(filepath.Join(src, "a", "many", fmt.Sprintf("entry-with-a-long-name-%03d", i)), nil, 0o644)
	}

	// Three bases: ext4 with metadata_csum, ext3-like block maps without
	// checksums, and ext4 with 4 KiB blocks.
	type entry struct{ dir, name string }
	type baseImage struct {
		name  string
		bytes []byte
		inos  []uint32 // inodes to edit
		ents  []entry  // entries to edit
		paths []string // paths to read
	}
	var bases []*baseImage
	for _, b := range []struct{ name, bs, features string }{
		{"ext4", "1024", "metadata_csum"}, {"blockmap", "1024", "^extent,^64bit,^metadata_csum"}, {"4k", "4096", "metadata_csum"},
	} {
		img := filepath.Join(dir, b.name+".img")
		e2fs.Mkfs(t, img, "4M", "-b", b.bs, "-N", "256", "-O", b.features, "-d", src)
		bi := &baseImage{name: b.name}
		var err error
		if bi.bytes, err = os.ReadFile(img); err != nil {
			t.Fatal(err)
		}
		v, err := ext4io.OpenImage(img, ext4io.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{"/", "/a", "/a/b", "/a/many"} {
			fi, _ := v.Lstat(d)
			bi.inos = append(bi.inos, fi.Ino)
			des, _ := v.DirEntries(d)
			for i, de := range des {
				if d == "/a/many" && i%10 != 0 {
					continue
				}
				bi.ents = append(bi.ents, entry{d, de.Name})
				bi.inos = append(bi.inos, de.Ino)
				bi.paths = append(bi.paths, strings.TrimPrefix(d+"/"+de.Name, "/"))
			}
		}
		v.Close()
		bases = append(bases, bi)
	}

	img := filepath.Join(dir, "img")
	sandbox := t.TempDir() // get's destination and bystanders
	os.MkdirAll(filepath.Join(sandbox, "outside"), 0o755)
	os.WriteFile(filepath.Join(sandbox, "outside", "keep"), []byte("keep"), 0o644)
	dest := filepath.Join(sandbox, "dest")
	before := snapshot(t, sandbox, dest)

	var edits []string
	defer func() {
		if t.Failed() {
			t.Logf("seed %d (-crafted.seed=%d); last round's edits:\n%s", seed, seed, strings.Join(edits, "\n"))
		}
	}()
	start := time.Now()
	rounds := 0
	for ; time.Since(start) < budget && !t.Failed(); rounds++ {
		base := bases[rng.IntN(len(bases))]
		inos, ents, paths := base.inos, base.ents, base.paths
		if err := os.WriteFile(img, base.bytes, 0o644); err != nil {
			t.Fatal(err)
		}
		edits = append(edits[:0], "base "+base.name)
		var script []string
		for range 1 + rng.IntN(3) {
			switch k := rng.IntN(10); {
			case k < 6:
				ino := inos[rng.IntN(len(inos))]
				if rng.IntN(8) == 0 {
					ino = uint32(1 + rng.IntN(70))
				}
				script = append(script, fmt.Sprintf("sif <%d> %s", ino, randomField(rng)))
			case k < 8:
				e := ents[rng.IntN(len(ents))]
				name := []byte(e.name)
				name[rng.IntN(len(name))] = "/\x00.A"[rng.IntN(4)]
				if len(name) <= 2 && rng.IntN(2) == 0 {
					name = []byte(".."[:len(name)])
				}
				err := tryEditEntry(img, e.dir, e.name, func(b []byte, de layout.DirEntry) { copy(de.Name, name) })
				edits = append(edits, fmt.Sprintf("rename %s to %q: %v", path.Join(e.dir, e.name), name, err))
			case k < 9:
				e := ents[rng.IntN(len(ents))]
				ino := []uint32{0, 1, 2, 7, 11, 65, 1 << 20, rng.Uint32()}[rng.IntN(8)]
				err := tryEditEntry(img, e.dir, e.name, func(b []byte, de layout.DirEntry) {
					binary.LittleEndian.PutUint32(b[de.Off:], ino)
				})
				edits = append(edits, fmt.Sprintf("point %s at inode %d: %v", path.Join(e.dir, e.name), ino, err))
			default:
				e := ents[rng.IntN(len(ents))]
				rl := uint16(rng.IntN(300)) &^ 3
				if rng.IntN(2) == 0 {
					rl |= uint16(rng.IntN(4))
				}
				err := tryEditEntry(img, e.dir, e.name, func(b []byte, de layout.DirEntry) {
					binary.LittleEndian.PutUint16(b[de.Off+4:], rl)
				})
				edits = append(edits, fmt.Sprintf("rec_len of %s = %d: %v", path.Join(e.dir, e.name), rl, err))
			}
		}
		if len(script) > 0 {
			edits = append(edits, script...)
			e2fs.DebugfsScript(t, img, true, script)
		}

		// Read commands, then get, then the write commands.
		var cmds [][]string
		cmds = append(cmds, []string{"info", img}, []string{"ls", "-li", img, "/"}, []string{"ls", "-l", img, "a"},
			[]string{"ls", img, "a/b"}, []string{"ls", img, "a/many"}, []string{"stat", img, "a/many/nonexistent"}, []string{"journal", img})
		for _, p := range paths {
			cmds = append(cmds, []string{"cat", img, p}, []string{"stat", img, p}, []string{"fiemap", img, p})
		}
		for _, args := range cmds {
			sweepRun(t, nil, args...)
		}
		os.RemoveAll(dest)
		sweepRun(t, nil, "get", img, "/", dest)
		os.RemoveAll(dest)
		sweepRun(t, nil, "get", "-p", img, "/a", dest)
		os.RemoveAll(dest)
		for _, args := range [][]string{
			{"write", img, "small", "--offset", "5"}, {"write", img, "a/new"}, {"mkdir", img, "a/b/dir"},
			{"rm", img, "a/big"}, {"mv", img, "small", "a/b/moved"}, {"truncate", img, "a/b/sparse", "1"},
			{"fallocate", img, "fast", "0", "8192"}, {"rm", img, "a/b"}, {"ls", "-l", img, "a/b"},
			{"mkdir", img, "a/many/new-directory"}, {"rm", img, "a/many/entry-with-a-long-name-077"},
		} {
			damage := fsckProblems(img)
			if code := sweepRun(t, []byte("written by the sweep\n"), args...); code == 0 {
				continue
			}
			// A refused write leaves no damage e2fsck did not see before.
			if added := newProblems(damage, fsckProblems(img)); len(added) > 0 {
				t.Fatalf("round %d: %q was refused and left new damage:\n%s", rounds, args, strings.Join(added, "\n"))
			}
		}
		if after := snapshot(t, sandbox, dest); after != before {
			t.Fatalf("round %d: something changed outside get's destination:\nbefore:\n%safter:\n%s", rounds, before, after)
		}
	}
	t.Logf("%d rounds in %v, seed %d", rounds, time.Since(start).Round(time.Millisecond), seed)
}

// randomField returns a debugfs set_inode_field "FIELD VALUE" that keeps
// the checksum valid but may make the inode nonsense.
func randomField(rng *rand.Rand) string {
	switch rng.IntN(6) {
	case 0:
		return "size " + fmt.Sprint([]uint64{0, 1, 1023, 1024, 1 << 20, 1 << 40, 1<<63 - 1, rng.Uint64() >> rng.IntN(64)}[rng.IntN(8)])
	case 1:
		return "links_count " + fmt.Sprint([]int{0, 1, 2, 65535}[rng.IntN(4)])
	case 2:
		return fmt.Sprintf("mode %#o", []int{0o100644, 0o040755, 0o120777, 0o020644, 0o010644, 0o140755, 0, 0o170777}[rng.IntN(8)]|rng.IntN(8)<<9)
	case 3:
		return fmt.Sprintf("flags %#x", []uint32{0, 0x80000, 0x10000000, 0x1000, 0x10080000, rng.Uint32()}[rng.IntN(6)])
	case 4:
		// i_block words: 0-2 the extent header, then extents of 3 words
		// (ee_block, ee_len|ee_start_hi<<16, ee_start_lo).
		v := []uint32{0, 1, 2, 3, 0xF30A, 0x8000, 32768 + 100, 1 << 16, 4095, 4096, rng.Uint32()}[rng.IntN(11)]
		return fmt.Sprintf("block[%d] %d", rng.IntN(15), v)
	default:
		return "blocks " + fmt.Sprint([]uint64{0, 2, 1 << 40}[rng.IntN(3)])
	}
}

// errOutputLimit stops a command that writes more than sweepOutputLimit
// (cat of a file whose size was set to 1 TiB).
var errOutputLimit = errors.New("output limit reached")

const sweepOutputLimit = 16 << 20

type limitWriter struct{ n int }

func (w *limitWriter) Write(p []byte) (int, error) {
	if w.n += len(p); w.n > sweepOutputLimit {
		return 0, errOutputLimit
	}
	return len(p), nil
}

// fsckProblems returns what e2fsck -fn reports wrong with img, one line
// per problem, with numbers blanked so that a count that merely moved is
// the same problem. Superblock times "in the future" are not damage (a
// writable open stamps its mount time) and are left out.
func fsckProblems(img string) map[string]bool {
	out, _ := exec.Command("e2fsck", "-fn", img).CombinedOutput()
	problems := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "Pass ") || strings.HasPrefix(l, "e2fsck ") || strings.HasPrefix(l, img) ||
			strings.HasPrefix(l, "Warning: skipping journal recovery") ||
			strings.Contains(l, "in the future") || strings.Contains(l, "hardware clock") {
			continue
		}
		problems[strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' {
				return '#'
			}
			return r
		}, l)] = true
	}
	return problems
}

// newProblems returns the problems in after that before did not have.
func newProblems(before, after map[string]bool) []string {
	var added []string
	for p := range after {
		if !before[p] {
			added = append(added, p)
		}
	}
	sort.Strings(added)
	return added
}

// sweepRun runs one command with in as stdin and fails t if it panics or
// runs longer than sweepCmdTimeout. It returns the exit status.
func sweepRun(t *testing.T, in []byte, args ...string) int {
	t.Helper()
	type result struct {
		code  int
		stack string
	}
	done := make(chan result, 1)
	old := stdin
	stdin = bytes.NewReader(in)
	peak := watchHeap()
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- result{-1, fmt.Sprintf("%v\n%s", r, debug.Stack())}
			}
		}()
		code := run(args, &limitWriter{}, io.Discard)
		done <- result{code: code}
	}()
	select {
	case r := <-done:
		stdin = old
		if p := peak(); p > sweepHeapLimit {
			t.Fatalf("%q: the heap reached %d MiB (limit %d MiB)", args, p>>20, sweepHeapLimit>>20)
		}
		if r.stack != "" {
			t.Fatalf("%q panicked: %s", args, r.stack)
		}
		if r.code != 0 && r.code != 1 {
			t.Fatalf("%q: exit %d", args, r.code)
		}
		return r.code
	case <-time.After(sweepCmdTimeout):
		t.Fatalf("%q: still running after %v", args, sweepCmdTimeout)
	}
	return -1
}

// sweepHeapLimit bounds the live heap while one command runs on a crafted
// image (4 MiB images; the volume's caches are bounded by their budgets).
const sweepHeapLimit = 512 << 20

// watchHeap samples the heap's live objects every 5 ms until the returned
// function is called, which reports the largest sample.
func watchHeap() (peak func() uint64) {
	stop := make(chan struct{})
	res := make(chan uint64, 1)
	go func() {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var top uint64
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			top = max(top, sample[0].Value.Uint64())
			select {
			case <-stop:
				res <- top
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 { close(stop); return <-res }
}

// TestHugeDirectorySize: a directory whose i_size claims 2^63 bytes (the
// sweep's first hang) is listed, searched and added to without reading
// its 2^32 hole blocks one by one.
func TestHugeDirectorySize(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "a"), 0o755)
	os.WriteFile(filepath.Join(src, "a", "f"), []byte("f\n"), 0o644)
	for _, features := range []string{"extent", "^extent,^64bit"} { // extent tree, block map
		t.Run(features, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "img")
			e2fs.Mkfs(t, img, "4M", "-b", "1024", "-O", features, "-d", src)
			e2fs.Debugfs(t, img, true, "sif a size 9223372036854775807")
			for _, args := range [][]string{{"ls", img, "a"}, {"cat", img, "a/f"}, {"stat", img, "a/missing"}, {"mkdir", img, "a/d"}} {
				sweepRun(t, nil, args...)
			}
			// The library treats an i_size past the last mapped block as
			// corruption; either way ls answers at once.
			if out, errOut, code := runCmd(t, "ls", img, "a"); code == 0 && !strings.Contains(out, "f\n") || code != 0 && !strings.Contains(errOut, "corrupt") {
				t.Errorf("ls: exit %d: %q %q", code, out, errOut)
			}
		})
	}
}

// TestHugeFileSize: a file whose i_size claims 1 TiB (the sweep's second
// hang, in a block-mapped image) is copied out by get by seeking over its
// holes, not by looking them up a block at a time.
func TestHugeFileSize(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(src, 0o755)
	os.WriteFile(filepath.Join(src, "f"), []byte("data\n"), 0o644)
	for _, features := range []string{"extent", "^extent,^64bit"} {
		t.Run(features, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "img")
			e2fs.Mkfs(t, img, "4M", "-b", "1024", "-O", features, "-d", src)
			e2fs.Debugfs(t, img, true, "sif f size 1099511627776")
			dest := filepath.Join(t.TempDir(), "f")
			sweepRun(t, nil, "get", img, "f", dest)
			if fi, err := os.Stat(dest); err != nil || fi.Size() != 1<<40 {
				t.Fatalf("get: %v, %v", fi, err)
			}
		})
	}
}

// TestRefusedTruncateLeavesNoDamage: on a volume without a journal, a
// truncate of a file whose i_blocks counts fewer blocks than its extents
// map (the sweep's finding) is refused before it frees anything, so
// e2fsck sees no damage it did not see before.
func TestRefusedTruncateLeavesNoDamage(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(src, 0o755)
	os.WriteFile(filepath.Join(src, "f"), bytes.Repeat([]byte("x"), 64<<10), 0o644)
	img := filepath.Join(dir, "img")
	e2fs.Mkfs(t, img, "4M", "-b", "4096", "-O", "^has_journal", "-d", src)
	e2fs.Debugfs(t, img, true, "sif f blocks 0")
	before := fsckProblems(img)
	if _, errOut, code := runCmd(t, "truncate", img, "f", "1"); code != 1 || !strings.Contains(errOut, "corrupt") {
		t.Fatalf("truncate: exit %d: %s", code, errOut)
	}
	if added := newProblems(before, fsckProblems(img)); len(added) > 0 {
		t.Fatalf("the refused truncate left new damage:\n%s", strings.Join(added, "\n"))
	}
}
