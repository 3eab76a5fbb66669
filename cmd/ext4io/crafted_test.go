package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/layout"
)

// Crafted images: edits to directory entries that e2fsprogs would not
// make, with the block checksum fixed so that only the edit is wrong.

// renameEntry rewrites, in the image img, the name of the entry old in
// directory dir to new (of the same length): a crafted image that
// e2fsprogs would not make.
func renameEntry(t *testing.T, img, dir, old, new string) {
	t.Helper()
	if len(old) != len(new) {
		t.Fatalf("renameEntry: %q and %q differ in length", old, new)
	}
	editEntry(t, img, dir, old, func(b []byte, de layout.DirEntry) { copy(de.Name, new) })
}

// editEntry calls edit on the directory block of img holding the entry
// name in directory dir, then fixes the block's checksum when it has one
// and writes it back.
func editEntry(t *testing.T, img, dir, name string, edit func(b []byte, de layout.DirEntry)) {
	t.Helper()
	if err := tryEditEntry(img, dir, name, edit); err != nil {
		t.Fatal(err)
	}
}

// tryEditEntry is editEntry returning its errors (the sweep's earlier
// edits may have made dir unreadable).
func tryEditEntry(img, dir, name string, edit func(b []byte, de layout.DirEntry)) error {
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		return err
	}
	fi, err := v.Lstat(dir)
	if err != nil {
		v.Close()
		return err
	}
	d, err := v.Open(dir)
	if err != nil {
		v.Close()
		return err
	}
	exts, err := d.Extents()
	sb := v.Superblock()
	seed := layout.InodeSeed(sb.CsumSeed(), fi.Ino, fi.Generation)
	bs := int64(v.BlockSize())
	v.Close()
	if err != nil {
		return err
	}

	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, bs)
	for _, e := range exts {
		for blk := e.Physical; blk < e.Physical+e.Length; blk++ {
			if _, err := f.ReadAt(b, int64(blk)*bs); err != nil {
				return err
			}
			tail := layout.HasDirTail(b)
			found := false
			dots := e.Logical == 0 && blk == e.Physical // block 0 starts with "." and ".."
			layout.DirBlock(b, blk, fi.Ino, tail, true, dots, func(de layout.DirEntry) error {
				if de.Inode != 0 && string(de.Name) == name && !found {
					edit(b, de)
					found = true
				}
				return nil
			})
			if !found {
				continue
			}
			if tail {
				layout.SetDirTail(seed, b)
			}
			_, err := f.WriteAt(b, int64(blk)*bs)
			return err
		}
	}
	return fmt.Errorf("editEntry: no entry %q in %s", name, dir)
}

// pointEntry sets the inode number of the entry name in the directory
// dir of img to ino (fixing the block checksum): a dangling entry.
func pointEntry(t *testing.T, img, dir, name string, ino uint32) {
	t.Helper()
	editEntry(t, img, dir, name, func(b []byte, de layout.DirEntry) {
		binary.LittleEndian.PutUint32(b[de.Off:], ino)
	})
}
