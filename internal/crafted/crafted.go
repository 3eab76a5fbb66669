// Package crafted builds damaged ext4 images for tests: images made by
// mkfs.ext4 and changed the way a hostile or broken writer would. Each
// builder skips the test when e2fsprogs is missing (ext4iotest.Tool).
package crafted

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/ext4iotest"
)

// LoopingLog returns the path of a new 16 MiB image (1 KiB blocks, a
// 1,024-block journal) in dir whose log needs recovery and holds, in every
// block from the first on, the same descriptor of the transaction at
// s_start (100 tags) and no commit block: a scan that follows it goes round
// the log for ever.
func LoopingLog(t testing.TB, dir string) string {
	t.Helper()
	img := filepath.Join(dir, "looping-log.img")
	ext4iotest.Mkfs(t, img, "16M", "-b", "1024")
	out := ext4iotest.Debugfs(t, img, false, "bmap <8> 0")
	jblk, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("bmap <8> 0: %q", out)
	}
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	jsb := b[jblk*1024:]
	if binary.BigEndian.Uint32(jsb) != 0xc03b3998 || binary.BigEndian.Uint32(jsb[0x10:]) != 1024 ||
		binary.BigEndian.Uint32(jsb[0x28:]) != 0 {
		t.Fatalf("journal superblock at block %d: want a 1024-block journal without incompat features", jblk)
	}
	const seq = 2
	binary.BigEndian.PutUint32(jsb[0x18:], seq) // s_sequence
	binary.BigEndian.PutUint32(jsb[0x1c:], 1)   // s_start
	desc := make([]byte, 1024)
	binary.BigEndian.PutUint32(desc[0:], 0xc03b3998)
	binary.BigEndian.PutUint32(desc[4:], 1) // descriptor
	binary.BigEndian.PutUint32(desc[8:], seq)
	const tags = 100
	for i, off := 0, 12; i < tags; i++ {
		flags := uint16(2) // same UUID
		if i == 0 {
			flags = 0
		}
		if i == tags-1 {
			flags |= 8 // last tag
		}
		binary.BigEndian.PutUint32(desc[off:], uint32(2000+i))
		binary.BigEndian.PutUint16(desc[off+6:], flags)
		off += 8
		if i == 0 {
			off += 16 // the UUID
		}
	}
	for blk := 1; blk < 1024; blk++ {
		copy(jsb[blk*1024:], desc)
	}
	if err := os.WriteFile(img, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ext4iotest.Debugfs(t, img, true, "feature needs_recovery")
	return img
}
