package ext4io

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestAdvInodeCacheReplayForgetsDemotedMappings: a fast-commit replay
// rewrites inodes and extent trees with raw writes and then drops the
// inode cache with forgetInodes, which must drop the extent-status cache
// of every inode it may have read: the replay reads directories (dirFile),
// and with a small inode cache they are demoted, held only weakly or
// already collected, when the replay frees or grows them. Mappings left
// cached under such a number would be found by the next inode read into
// it (a file created in the freed number would write into the old
// directory's freed block).
func TestAdvInodeCacheReplayForgetsDemotedMappings(t *testing.T) {
	for _, collect := range []bool{false, true} {
		t.Run(fmt.Sprintf("collected=%v", collect), func(t *testing.T) {
			dev := memdev.NewBlockSize(32<<20, 1024)
			if err := Format(dev, FormatOptions{BlockSize: 1024}); err != nil {
				t.Fatal(err)
			}
			v, err := Open(dev, Options{Writable: true, InodeCache: 1, WritebackAge: -1, CommitInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			if err := v.Mkdir("/d", 0o755); err != nil {
				t.Fatal(err)
			}
			fi, err := v.Stat("/d")
			if err != nil {
				t.Fatal(err)
			}
			ino := fi.Sys().(*FileInfo).Ino
			if err := v.Sync(); err != nil {
				t.Fatal(err)
			}
			escLen := func() int { return escLen(v.cache, ino) }
			func() {
				n, err := v.getInode(ino)
				if err != nil {
					t.Fatal(err)
				}
				n.mu.RLock()
				_, err = n.m.lookup(0) // as the replay's dirBlocks reads it
				n.mu.RUnlock()
				if err != nil {
					t.Fatal(err)
				}
				if escLen() == 0 {
					t.Fatal("reading the directory cached no mapping: the test proves nothing")
				}
				n.used.Store(false)
				if !v.demote(n) {
					t.Fatal("the directory was not demoted")
				}
			}()
			if collect {
				for i := 0; ; i++ {
					runtime.GC()
					v.inoMu.Lock()
					w, ok := v.inoWeak[ino]
					gone := !ok || w.Value() == nil
					v.inoMu.Unlock()
					if gone {
						break
					}
					if i == 100 {
						t.Fatal("the demoted directory was never collected")
					}
				}
			}
			v.forgetInodes()
			if n := escLen(); n != 0 {
				t.Fatalf("after forgetInodes, %d extent-status entries of the demoted directory %d remain cached", n, ino)
			}
		})
	}
}
