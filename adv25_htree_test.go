package ext4io_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestAdv25HtreeCycle: an htree index node whose entries name the node
// itself or the root (a tree cycle; no checksum to catch it without
// metadata_csum). Linux's dx_probe refuses such a path as corrupt. A
// lookup through it read the index block as a leaf and reported
// ErrNotExist for names that exist, and a create inserted its entry into
// that block, writing dirents over the index (committed by the next Sync).
// Both are now ErrCorrupt and the index block is left as it was.
func TestAdv25HtreeCycle(t *testing.T) {
	for _, target := range []string{"self", "root"} {
		t.Run(target, func(t *testing.T) {
			dev := memdev.New(32 << 20)
			if err := ext4io.Format(dev, ext4io.FormatOptions{BlockSize: 1024, Features: "^metadata_csum"}); err != nil {
				t.Fatal(err)
			}
			v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Mkdir("h", 0o755); err != nil {
				t.Fatal(err)
			}
			const n = 3000
			name := func(i int) string { return fmt.Sprintf("h/a_name_long_enough_to_fill_blocks_%d", i) }
			if err := v.WriteFile("f", nil, 0o644); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if err := v.Link("f", name(i)); err != nil {
					t.Fatal(err)
				}
			}
			d, err := v.Open("h")
			if err != nil {
				t.Fatal(err)
			}
			exts, err := d.Extents()
			d.Close()
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			phys := func(l uint64) int64 {
				for _, x := range exts {
					if l >= x.Logical && l < x.Logical+x.Length {
						return int64(x.Physical+l-x.Logical) * 1024
					}
				}
				t.Fatalf("directory block %d not mapped", l)
				return 0
			}
			root := make([]byte, 1024)
			dev.ReadAt(root, phys(0))
			if root[0x1e] != 1 {
				t.Fatalf("htree of %d levels below the root, want 1", root[0x1e])
			}
			// The root's first index node: every entry of it now names
			// the node itself or the root.
			nodeL := uint64(binary.LittleEndian.Uint32(root[0x24:]))
			node := make([]byte, 1024)
			nodeOff := phys(nodeL)
			dev.ReadAt(node, nodeOff)
			count := int(binary.LittleEndian.Uint16(node[10:]))
			to := uint32(nodeL)
			if target == "root" {
				to = 0
			}
			for i := range count {
				binary.LittleEndian.PutUint32(node[12+8*i:], to)
			}
			dev.WriteAt(node, nodeOff)
			v, err = ext4io.Open(dev, ext4io.Options{Writable: true})
			if err != nil {
				t.Fatal(err)
			}
			// Names the node covered: the lowest hashes, which the walk
			// finds as failing lookups.
			var lost int
			var wrong error
			for i := range n {
				_, err := v.Lstat(name(i))
				switch {
				case err == nil:
				case errors.Is(err, ext4io.ErrCorrupt):
					lost++
				default:
					lost++
					wrong = err
				}
			}
			if lost == 0 {
				t.Fatal("no name behind the edited node")
			}
			if wrong != nil {
				t.Errorf("lstat behind the cycle: %v, want ErrCorrupt", wrong)
			}
			var corrupt int
			for i := range 200 {
				err := v.Link("f", fmt.Sprintf("h/new_%d", i))
				if err == nil {
					err = v.Sync()
				}
				if errors.Is(err, ext4io.ErrCorrupt) {
					corrupt++
					break
				} else if err != nil {
					t.Fatalf("create: %v", err)
				}
			}
			v.Close()
			if corrupt == 0 {
				t.Error("200 creates in the directory: none reported the cycle")
			}
			after := make([]byte, 1024)
			dev.ReadAt(after, nodeOff)
			if !bytes.Equal(after, node) {
				t.Error("the index node was written over")
			}
		})
	}
}
