package alloc

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/mkfs"
	"github.com/ext4io/ext4io/layout"
)

// img is a test image open for allocation.
type img struct {
	path string
	dev  *blockdev.File
	sb   *layout.Superblock
	a    *Allocator
}

// newImage formats a sparse image, with mkfs.Format or (when args is
// non-nil) with mkfs.ext4 args, and opens an Allocator on it.
func newImage(t testing.TB, size int64, o mkfs.Options, args []string) *img {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fs.img")
	if args != nil {
		mk, err := exec.LookPath("mkfs.ext4")
		if err != nil {
			t.Skipf("mkfs.ext4 not installed: %v", err)
		}
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(mk, append(append([]string{"-q", "-F"}, args...), path)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mkfs.ext4 %v: %v %s", args, err, out)
		}
	}
	dev, err := blockdev.CreateFile(path, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	if args == nil {
		if err := mkfs.Format(dev, o); err != nil {
			t.Fatal(err)
		}
	}
	m := &img{path: path, dev: dev}
	m.reopen(t, Options{})
	return m
}

func (m *img) reopen(t testing.TB, o Options) {
	t.Helper()
	buf := make([]byte, layout.SuperblockSize)
	if _, err := m.dev.ReadAt(buf, layout.SuperblockOffset); err != nil {
		t.Fatal(err)
	}
	sb, err := layout.DecodeSuperblock(buf)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(sb, NewDirectIO(m.dev, sb.BlockSize()), o)
	if err != nil {
		t.Fatal(err)
	}
	m.sb, m.a = sb, a
}

// sync writes the superblock counters.
func (m *img) sync(t testing.TB) {
	t.Helper()
	m.a.FillSuperblock(m.sb)
	if _, err := m.dev.WriteAt(m.sb.Encode(), layout.SuperblockOffset); err != nil {
		t.Fatal(err)
	}
}

// fsck runs e2fsck -fn and fails on any finding.
func fsck(t testing.TB, path string) {
	t.Helper()
	e2fsck, err := exec.LookPath("e2fsck")
	if err != nil {
		t.Skipf("e2fsck not installed: %v", err)
	}
	out, err := exec.Command(e2fsck, "-fn", path).CombinedOutput()
	var extra []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, "e2fsck ") || strings.HasPrefix(l, "Pass ") ||
			strings.Contains(l, " files (") && strings.HasSuffix(l, " blocks") {
			continue
		}
		extra = append(extra, l)
	}
	if err != nil || len(extra) > 0 {
		t.Fatalf("e2fsck -fn: %v\n%s", err, out)
	}
}

// readInode / writeInode access the inode table directly.
func (m *img) inodePos(t testing.TB, ino uint32) int64 {
	gi, idx := m.sb.InodeLocation(ino)
	d, err := m.a.GroupDesc(gi)
	if err != nil {
		t.Fatal(err)
	}
	isz := int64(m.sb.InodeSizeBytes())
	return int64(d.InodeTable)*int64(m.sb.BlockSize()) + int64(idx)*isz
}

func (m *img) readInode(t testing.TB, ino uint32) *layout.Inode {
	b := make([]byte, m.sb.InodeSizeBytes())
	if _, err := m.dev.ReadAt(b, m.inodePos(t, ino)); err != nil {
		t.Fatal(err)
	}
	in, err := layout.DecodeInode(b, len(b))
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func (m *img) writeInode(t testing.TB, ino uint32, in *layout.Inode) {
	in.Encode(m.sb.InodeSizeBytes())
	if m.sb.MetadataCsum() {
		in.SetChecksum(m.sb.CsumSeed(), ino)
	}
	if _, err := m.dev.WriteAt(in.Raw, m.inodePos(t, ino)); err != nil {
		t.Fatal(err)
	}
}

// attach makes runs visible to e2fsck: each group of up to four runs
// becomes a regular file (extent root in i_block) linked into lost+found.
// Runs that do not fit lost+found's first block are freed instead.
func (m *img) attach(t testing.TB, runs []run) {
	t.Helper()
	bs := m.sb.BlockSize()
	lpf := m.readInode(t, 11)
	if lpf.Flags&layout.InodeFlagExtents == 0 {
		t.Fatal("lost+found is not extent-mapped")
	}
	blk0 := uint64(binary.LittleEndian.Uint32(lpf.Block[20:])) | uint64(binary.LittleEndian.Uint16(lpf.Block[18:]))<<32
	tail := 0
	if m.sb.MetadataCsum() {
		tail = layout.DirTailLen
	}
	b := make([]byte, bs)
	layout.PutDirEntry(b, 0, 11, 12, layout.FtDir, []byte("."))
	off := 12
	dotdot := off
	layout.PutDirEntry(b, off, layout.RootIno, 12, layout.FtDir, []byte(".."))
	off += 12
	// Split runs to extent-sized pieces.
	var pieces []run
	for _, r := range runs {
		for r.n > 0 {
			k := min(r.n, 32768)
			pieces = append(pieces, run{r.start, k})
			r.start, r.n = r.start+k, r.n-k
		}
	}
	last := dotdot
	for k := 0; k < len(pieces); k += 4 {
		chunk := pieces[k:min(k+4, len(pieces))]
		name := []byte(fmt.Sprintf("t%d", k))
		if off+layout.DirRecLen(len(name)) > bs-tail {
			for _, r := range pieces[k:] {
				if err := m.a.Free(r.start, r.n); err != nil {
					t.Fatal(err)
				}
			}
			break
		}
		ino, err := m.a.AllocInode(11, false)
		if err != nil {
			t.Fatal(err)
		}
		in := &layout.Inode{Mode: layout.ModeReg | 0o644, LinksCount: 1, Flags: layout.InodeFlagExtents,
			Raw: make([]byte, m.sb.InodeSizeBytes())}
		if m.sb.InodeSizeBytes() > 128 {
			in.ExtraIsize = 32
		}
		le := binary.LittleEndian
		le.PutUint16(in.Block[0:], 0xF30A)
		le.PutUint16(in.Block[2:], uint16(len(chunk)))
		le.PutUint16(in.Block[4:], 4)
		lblk, total := uint64(0), uint64(0)
		for i, r := range chunk {
			e := in.Block[12+12*i:]
			le.PutUint32(e[0:], uint32(lblk))
			le.PutUint16(e[4:], uint16(r.n))
			le.PutUint16(e[6:], uint16(r.start>>32))
			le.PutUint32(e[8:], uint32(r.start))
			lblk += r.n
			total += r.n
		}
		in.Size = total * uint64(bs)
		if !in.SetBlocks(m.sb, total*uint64(bs)/512) {
			t.Fatal("i_blocks overflow")
		}
		m.writeInode(t, ino, in)
		layout.PutDirEntry(b, off, ino, layout.DirRecLen(len(name)), layout.FtRegFile, name)
		last = off
		off += layout.DirRecLen(len(name))
	}
	// The last entry takes the rest of the block.
	le := binary.LittleEndian
	lastLen := bs - tail - last
	le.PutUint16(b[last+4:], layout.EncodeRecLen(lastLen, bs))
	if tail > 0 {
		seed := layout.InodeSeed(m.sb.CsumSeed(), 11, lpf.Generation)
		layout.SetDirTail(seed, b)
	}
	if _, err := m.dev.WriteAt(b, int64(blk0)*int64(bs)); err != nil {
		t.Fatal(err)
	}
}
