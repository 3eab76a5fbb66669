package ext4io_test

import (
	"compress/gzip"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/internal/e2fs"
)

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
