package extent

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/internal/crc32c"
)

// img is a scratch ext4 image driven through e2fsprogs.
type img struct {
	t      *testing.T
	path   string
	bs     int
	csum   bool
	f      *os.File
	fsSeed uint32
	first  uint64
	count  uint64
}

func needTools(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "debugfs", "e2fsck"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
}

func mkimg(t *testing.T, bs int, csum bool, blocks int) *img {
	needTools(t)
	p := filepath.Join(t.TempDir(), "img")
	feat := "^has_journal"
	if !csum {
		feat += ",^metadata_csum"
	}
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-O", feat, "-b", strconv.Itoa(bs), p, strconv.Itoa(blocks)).CombinedOutput()
	if err != nil {
		t.Fatalf("mkfs: %v\n%s", err, out)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	im := &img{t: t, path: p, bs: bs, csum: csum, f: f}
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		t.Fatal(err)
	}
	im.count = uint64(binary.LittleEndian.Uint32(sb[0x4:]))
	if binary.LittleEndian.Uint32(sb[0x60:])&0x80 != 0 { // INCOMPAT_64BIT
		im.count |= uint64(binary.LittleEndian.Uint32(sb[0x150:])) << 32
	}
	im.first = uint64(binary.LittleEndian.Uint32(sb[0x14:]))
	if got := 1024 << binary.LittleEndian.Uint32(sb[0x18:]); got != bs {
		t.Fatalf("block size %d", got)
	}
	if hasCsum := binary.LittleEndian.Uint32(sb[0x64:])&0x400 != 0; hasCsum != csum {
		t.Fatalf("metadata_csum %v, want %v", hasCsum, csum)
	}
	im.fsSeed = crc32c.Kernel(^uint32(0), sb[0x68:0x78])
	if binary.LittleEndian.Uint32(sb[0x60:])&0x2000 != 0 { // INCOMPAT_CSUM_SEED
		im.fsSeed = binary.LittleEndian.Uint32(sb[0x270:])
	}
	return im
}

// debugfsW runs commands read-write through a script file.
func (im *img) debugfsW(cmds []string) {
	im.t.Helper()
	s := filepath.Join(filepath.Dir(im.path), "script")
	if err := os.WriteFile(s, []byte(strings.Join(cmds, "\n")+"\n"), 0o644); err != nil {
		im.t.Fatal(err)
	}
	var stderr bytes.Buffer
	c := exec.Command("debugfs", "-w", "-f", s, im.path)
	c.Stderr = &stderr
	if out, err := c.Output(); err != nil {
		im.t.Fatalf("debugfs: %v\n%s%s", err, out, stderr.Bytes())
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if !strings.HasPrefix(line, "debugfs ") {
			im.t.Fatalf("debugfs script error: %s", stderr.Bytes())
		}
	}
}

func (im *img) debugfsR(cmd string) string {
	im.t.Helper()
	var stderr bytes.Buffer
	c := exec.Command("debugfs", "-R", cmd, im.path)
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		im.t.Fatalf("debugfs -R %q: %v", cmd, err)
	}
	if e := strings.TrimSpace(stderr.String()); strings.Contains(e, "\n") || !strings.HasPrefix(e, "debugfs ") {
		im.t.Fatalf("debugfs -R %q: %s", cmd, e)
	}
	return string(out)
}

func (im *img) fsck() {
	im.t.Helper()
	out, err := exec.Command("e2fsck", "-fn", im.path).CombinedOutput()
	if err != nil {
		im.t.Fatalf("e2fsck -fn: %v\n%s", err, out)
	}
}

// inode returns the inode number and generation of path.
func (im *img) inode(path string) (uint32, uint32) {
	st := im.debugfsR("stat " + path)
	m := regexp.MustCompile(`Inode: (\d+)`).FindStringSubmatch(st)
	g := regexp.MustCompile(`Generation: (\d+)`).FindStringSubmatch(st)
	if m == nil || g == nil {
		im.t.Fatalf("stat %s: %s", path, st)
	}
	ino, _ := strconv.ParseUint(m[1], 10, 32)
	gen, _ := strconv.ParseUint(g[1], 10, 32)
	return uint32(ino), uint32(gen)
}

// iblock reads i_block with inode_dump -b.
func (im *img) iblock(ino uint32) [RootSize]byte {
	out := im.debugfsR(fmt.Sprintf("inode_dump -b <%d>", ino))
	var b, prev []byte
	star := false
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "*" { // debugfs elides repeated lines
			star = true
			continue
		}
		parts := strings.SplitN(line, "  ", 3)
		if len(parts) < 2 || len(parts[0]) != 4 {
			continue
		}
		off, err := strconv.ParseUint(parts[0], 8, 32)
		if err != nil {
			im.t.Fatalf("inode_dump offset %q", parts[0])
		}
		for star && uint64(len(b)) < off {
			b = append(b, prev...)
		}
		star = false
		h, err := hex.DecodeString(strings.ReplaceAll(parts[1], " ", ""))
		if err != nil {
			im.t.Fatalf("inode_dump line %q: %v", line, err)
		}
		b = append(b, h...)
		prev = h
	}
	for star && len(b) < RootSize {
		b = append(b, prev...)
	}
	var r [RootSize]byte
	if len(b) != RootSize {
		im.t.Fatalf("inode_dump -b gave %d bytes:\n%s", len(b), out)
	}
	copy(r[:], b)
	return r
}

var exLine = regexp.MustCompile(`^\s*(\d+)/\s*(\d+)\s+(\d+)/\s*(\d+)\s+(\d+)\s*-\s*(\d+)\s+(\d+)(?:\s*-\s*(\d+))?\s+(\d+)\s*(Uninit)?\s*$`)

// ex parses debugfs "ex": the leaf extents and the index blocks.
func (im *img) ex(ino uint32) (leaves []Extent, index []uint64) {
	out := im.debugfsR(fmt.Sprintf("ex <%d>", ino))
	for _, line := range strings.Split(out, "\n") {
		m := exLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		lvl, _ := strconv.Atoi(m[1])
		depth, _ := strconv.Atoi(m[2])
		u := func(i int) uint64 { v, _ := strconv.ParseUint(m[i], 10, 64); return v }
		if lvl < depth {
			index = append(index, u(7))
			continue
		}
		leaves = append(leaves, Extent{Lblk: uint32(u(5)), Len: uint32(u(9)), Pblk: u(7), Unwritten: m[10] != ""})
	}
	return leaves, index
}

func (im *img) cfg(ino, gen uint32) Config {
	return Config{BlockSize: im.bs, Ino: ino, Seed: InodeSeed(im.fsSeed, ino, gen), Csum: im.csum,
		FirstDataBlock: im.first, BlocksCount: im.count, IO: fileIO{im.f, im.bs}}
}

type fileIO struct {
	f  *os.File
	bs int
}

func (w fileIO) ReadBlock(p uint64, b []byte) error {
	_, err := w.f.ReadAt(b, int64(p)*int64(w.bs))
	return err
}

func (w fileIO) WriteBlock(p uint64, b []byte) error {
	_, err := w.f.WriteAt(b, int64(p)*int64(w.bs))
	return err
}

// compare checks Walk and Blocks against debugfs "ex" and Check.
func (im *img) compare(tr *Tree, ino uint32) {
	im.t.Helper()
	leaves, index := im.ex(ino)
	var got []Extent
	if err := tr.Walk(func(e Extent) error { got = append(got, e); return nil }); err != nil {
		im.t.Fatalf("walk: %v", err)
	}
	var blocks []uint64
	if err := tr.Blocks(func(p uint64, _ int) error { blocks = append(blocks, p); return nil }); err != nil {
		im.t.Fatalf("blocks: %v", err)
	}
	if fmt.Sprint(got) != fmt.Sprint(leaves) {
		for i := range min(len(got), len(leaves)) {
			if got[i] != leaves[i] {
				im.t.Logf("first difference at %d: walk %+v ex %+v", i, got[i], leaves[i])
				break
			}
		}
		r := tr.Root()
		disk := im.iblock(ino)
		im.t.Logf("Root() %x\ndisk   %x", r, disk)
		if os.Getenv("EXTENT_KEEP") != "" {
			exec.Command("cp", im.path, os.Getenv("EXTENT_KEEP")).Run()
		}
		im.t.Fatalf("Walk differs from debugfs ex:\nwalk %d extents %v\nex   %d extents %v", len(got), trunc(got), len(leaves), trunc(leaves))
	}
	if fmt.Sprint(blocks) != fmt.Sprint(index) {
		im.t.Fatalf("Blocks %v, debugfs ex index blocks %v", blocks, index)
	}
	if err := tr.Check(); err != nil {
		im.t.Fatalf("Check: %v", err)
	}
}

func trunc(e []Extent) []Extent {
	if len(e) > 8 {
		return e[:8]
	}
	return e
}

// roundTrip re-encodes every node of the tree and compares bytes.
func (im *img) roundTrip(tr *Tree, root [RootSize]byte) {
	im.t.Helper()
	if r := tr.Root(); r != root {
		im.t.Fatalf("root re-encodes differently:\n%x\n%x", r, root)
	}
	err := tr.Blocks(func(p uint64, depth int) error {
		raw := make([]byte, im.bs)
		if _, err := im.f.ReadAt(raw, int64(p)*int64(im.bs)); err != nil {
			return err
		}
		n, err := tr.decodeNode(raw, p, false, depth, "test")
		if err != nil {
			return err
		}
		if enc := tr.encodeLocked(n); !bytes.Equal(enc, raw) {
			return fmt.Errorf("block %d re-encodes differently", p)
		}
		return nil
	})
	if err != nil {
		im.t.Fatal(err)
	}
}

// punchedFile makes /f with n one-block unwritten extents (fallocate, then
// punch every other block) plus /w with written data.
func punchedFile(im *img, n int) {
	cmds := []string{"write /dev/null f", fmt.Sprintf("fallocate /f 0 %d", 2*n-1)}
	for i := 1; i < 2*n; i += 2 {
		cmds = append(cmds, fmt.Sprintf("punch /f %d %d", i, i))
	}
	data := filepath.Join(filepath.Dir(im.path), "data")
	if err := os.WriteFile(data, bytes.Repeat([]byte("ext4io"), 5000), 0o644); err != nil {
		im.t.Fatal(err)
	}
	cmds = append(cmds, "write "+data+" w")
	im.debugfsW(cmds)
}

func TestDebugfsTreesDecode(t *testing.T) {
	for _, bs := range []int{1024, 4096} {
		for _, csum := range []bool{false, true} {
			t.Run(fmt.Sprintf("bs%d-csum%v", bs, csum), func(t *testing.T) {
				t.Parallel()
				im := mkimg(t, bs, csum, 16384)
				n := 500 // > 4*84: depth 2 at 1 KiB
				if bs == 4096 {
					n = 1500 // > 4*340: depth 2 at 4 KiB
				}
				punchedFile(im, n)
				for _, name := range []string{"/f", "/w"} {
					ino, gen := im.inode(name)
					root := im.iblock(ino)
					tr, err := Open(&root, im.cfg(ino, gen))
					if err != nil {
						t.Fatal(err)
					}
					im.compare(tr, ino)
					im.roundTrip(tr, root)
					if name == "/f" && tr.Depth() != 2 {
						t.Fatalf("depth %d, want 2", tr.Depth())
					}
					if e, found, _, err := tr.Lookup(2); name == "/f" && (err != nil || !found || e.Lblk != 2 || !e.Unwritten) {
						t.Fatalf("Lookup(2) = %+v %v %v", e, found, err)
					}
					if _, found, hole, err := tr.Lookup(1); name == "/f" && (err != nil || found || hole != 1) {
						t.Fatalf("Lookup(1) = %v hole %d %v", found, hole, err)
					}
				}
			})
		}
	}
}

// poolAlloc hands out blocks taken from the end of a pool file and keeps
// blocks freed by the tree under test, so that at a checkpoint every used
// block can be given an owner again without touching the bitmaps.
type poolAlloc struct {
	avail []uint64 // pool blocks in pool-logical order; taken from the end
	lblks []uint32 // pool logical block of each avail entry
	freed []uint64 // blocks released by the file, reused first
}

func (a *poolAlloc) take() (uint64, error) {
	if n := len(a.freed); n > 0 {
		p := a.freed[n-1]
		a.freed = a.freed[:n-1]
		return p, nil
	}
	if len(a.avail) == 0 {
		return 0, fmt.Errorf("pool empty: %w", ErrNoSpace)
	}
	p := a.avail[len(a.avail)-1]
	a.avail = a.avail[:len(a.avail)-1]
	a.lblks = a.lblks[:len(a.lblks)-1]
	return p, nil
}

func (a *poolAlloc) AllocTreeBlock(uint64, bool) (uint64, error) { return a.take() }
func (a *poolAlloc) FreeTreeBlock(p uint64) error                { a.freed = append(a.freed, p); return nil }
func (a *poolAlloc) FreeData(p, n uint64) error {
	for i := uint64(0); i < n; i++ {
		a.freed = append(a.freed, p+i)
	}
	return nil
}

// mutEnv is a file tree under mutation plus the pool that backs it.
type mutEnv struct {
	im   *img
	fIno uint32
	fCfg Config
	f    *Tree
	pIno uint32
	pCfg Config
	pool *Tree
	al   *poolAlloc
}

// funcAlloc records frees and counts allocations (it has no blocks).
type funcAlloc struct {
	allocs    int
	treeFreed []uint64
}

func (a *funcAlloc) AllocTreeBlock(uint64, bool) (uint64, error) {
	a.allocs++
	return 0, ErrNoSpace
}
func (a *funcAlloc) FreeTreeBlock(p uint64) error { a.treeFreed = append(a.treeFreed, p); return nil }
func (a *funcAlloc) FreeData(p, n uint64) error   { return nil }

func (env *mutEnv) loadPool() {
	env.al.avail, env.al.lblks = nil, nil
	if err := env.pool.Walk(func(e Extent) error {
		for i := uint32(0); i < e.Len; i++ {
			env.al.avail = append(env.al.avail, e.Pblk+uint64(i))
			env.al.lblks = append(env.al.lblks, e.Lblk+i)
		}
		return nil
	}); err != nil {
		env.im.t.Fatal(err)
	}
}

func treeBlocks(t *testing.T, tr *Tree) (data, meta uint64, last uint64) {
	if err := tr.Walk(func(e Extent) error { data += uint64(e.Len); last = e.End(); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := tr.Blocks(func(uint64, int) error { meta++; return nil }); err != nil {
		t.Fatal(err)
	}
	return
}

// checkpoint gives every block an owner again, writes both inodes through
// debugfs, and compares with debugfs ex and e2fsck -fn.
func (env *mutEnv) checkpoint(what string) {
	t := env.im.t
	t.Helper()
	al := env.al
	// 1. Cut the taken tail off the pool (trimming only: never allocates).
	cut := uint32(EndLblk - 1)
	if len(al.lblks) > 0 {
		cut = al.lblks[len(al.lblks)-1] + 1
	} else {
		cut = 0
	}
	cutAl := &funcAlloc{}
	env.pool.cfg.Alloc = cutAl
	if err := env.pool.Remove(cut, EndLblk-1); err != nil {
		t.Fatalf("%s: pool cut: %v", what, err)
	}
	if cutAl.allocs > 0 {
		t.Fatalf("%s: cutting the pool's tail allocated", what)
	}
	// Data cut off the pool is owned by the file or in al.freed already; the
	// pool's freed tree blocks and the file's freed blocks need an owner.
	orphans := append(cutAl.treeFreed, al.freed...)
	al.freed = nil
	// 2. Give orphans to the pool as unwritten one-block extents past the
	// cut; new pool tree blocks come from the orphans themselves.
	sort.Slice(orphans, func(i, j int) bool { return orphans[i] > orphans[j] })
	insAl := &poolAlloc{freed: orphans}
	env.pool.cfg.Alloc = insAl
	next := cut
	for len(insAl.freed) > 0 {
		p := insAl.freed[len(insAl.freed)-1]
		insAl.freed = insAl.freed[:len(insAl.freed)-1]
		if err := env.pool.Insert(Extent{Lblk: next, Len: 1, Pblk: p, Unwritten: true}); err != nil {
			t.Fatalf("%s: pool insert: %v", what, err)
		}
		next++
	}
	// 3. Store roots, i_blocks and sizes.
	var cmds []string
	for _, x := range []struct {
		ino  uint32
		tr   *Tree
		size bool
	}{{env.fIno, env.f, true}, {env.pIno, env.pool, false}} {
		root := x.tr.Root()
		for i := 0; i < 15; i++ {
			name := strconv.Itoa(i)
			if i >= NDirect {
				name = []string{"IND", "DIND", "TIND"}[i-NDirect]
			}
			cmds = append(cmds, fmt.Sprintf("sif <%d> block[%s] %d", x.ino, name, binary.LittleEndian.Uint32(root[4*i:])))
		}
		data, meta, last := treeBlocks(t, x.tr)
		cmds = append(cmds, fmt.Sprintf("sif <%d> blocks %d", x.ino, (data+meta)*uint64(env.im.bs/512)))
		if x.size {
			cmds = append(cmds, fmt.Sprintf("sif <%d> size %d", x.ino, last*uint64(env.im.bs)))
		}
	}
	env.im.debugfsW(cmds)
	env.im.compare(env.f, env.fIno)
	env.im.compare(env.pool, env.pIno)
	env.im.fsck()
	env.loadPool()
	t.Logf("%s: depth %d, ok (debugfs ex matches, e2fsck -fn clean)", what, env.f.Depth())
}

// insertNew maps up to k blocks from the pool at the hole at l.
func (env *mutEnv) insertNew(l uint32, k int, unw bool) {
	t := env.im.t
	_, found, hole, err := env.f.Lookup(l)
	if err != nil {
		t.Fatal(err)
	}
	if found {
		return
	}
	k = int(min(uint64(k), hole))
	ps := make([]uint64, 0, k)
	for i := 0; i < k; i++ {
		p, err := env.al.take()
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	for i := 0; i < len(ps); {
		j := i + 1
		for j < len(ps) && ps[j] == ps[j-1]+1 {
			j++
		}
		if err := env.f.Insert(Extent{Lblk: l + uint32(i), Len: uint32(j - i), Pblk: ps[i], Unwritten: unw}); err != nil {
			t.Fatalf("insert: %v", err)
		}
		i = j
	}
}

func TestDebugfsTreesMutate(t *testing.T) {
	for _, bs := range []int{1024, 4096} {
		for _, csum := range []bool{false, true} {
			t.Run(fmt.Sprintf("bs%d-csum%v", bs, csum), func(t *testing.T) {
				t.Parallel()
				blocks, n, poolN := 131072, 500, 40000
				if bs == 4096 {
					blocks, n, poolN = 32768, 1500, 8000
				}
				im := mkimg(t, bs, csum, blocks)
				punchedFile(im, n)
				im.debugfsW([]string{"write /dev/null pool", fmt.Sprintf("fallocate /pool 0 %d", poolN-1)})
				env := &mutEnv{im: im, al: &poolAlloc{}}
				var gen uint32
				env.fIno, gen = im.inode("/f")
				env.fCfg = im.cfg(env.fIno, gen)
				env.fCfg.Alloc = env.al
				env.fCfg.ZeroOutMax = 4
				env.fCfg.ZeroOut = func(p, n uint64) error {
					_, err := im.f.WriteAt(make([]byte, n*uint64(bs)), int64(p)*int64(bs))
					return err
				}
				env.pIno, gen = im.inode("/pool")
				env.pCfg = im.cfg(env.pIno, gen)
				root := im.iblock(env.fIno)
				var err error
				if env.f, err = Open(&root, env.fCfg); err != nil {
					t.Fatal(err)
				}
				root = im.iblock(env.pIno)
				if env.pool, err = Open(&root, env.pCfg); err != nil {
					t.Fatal(err)
				}
				env.loadPool()
				seed := testSeed(t)
				t.Logf("seed %d", seed)
				rng := rand.New(rand.NewPCG(seed, 1))
				space := uint32(3 * n)
				// A: random operations on the debugfs-made depth-2 tree.
				for i := 0; i < 300; i++ {
					l := uint32(rng.IntN(int(space)))
					switch rng.IntN(4) {
					case 0:
						env.insertNew(l, 1+rng.IntN(6), rng.IntN(2) == 0)
					case 1:
						if err := env.f.Remove(l, l+uint32(rng.IntN(5))); err != nil {
							t.Fatal(err)
						}
					case 2:
						if err := env.f.MarkWritten(l, 1+uint32(rng.IntN(8)), false); err != nil {
							t.Fatal(err)
						}
					case 3:
						if err := env.f.SplitAt(l, false); err != nil {
							t.Fatal(err)
						}
					}
				}
				env.checkpoint("random ops")
				if bs == 1024 {
					// B: grow to depth 3 (more than 4*84*84 extents).
					for k := uint32(0); env.f.Depth() < 3; k++ {
						env.insertNew(space+2*k, 1, k%2 == 0)
					}
					env.checkpoint("grown")
					for i := 0; i < 200; i++ {
						l := space + uint32(rng.IntN(60000))
						if err := env.f.Remove(l, l+uint32(rng.IntN(300))); err != nil {
							t.Fatal(err)
						}
					}
					env.checkpoint("punched")
				}
				if err := env.f.Remove(space/2, EndLblk-1); err != nil {
					t.Fatal(err)
				}
				env.checkpoint("truncated")
				if err := env.f.Remove(0, EndLblk-1); err != nil {
					t.Fatal(err)
				}
				env.insertNew(7, 1, true)
				env.insertNew(20, 1, false)
				env.checkpoint("depth 0")
				if env.f.Depth() != 0 {
					t.Fatalf("depth %d after truncation, want 0", env.f.Depth())
				}
			})
		}
	}
}
